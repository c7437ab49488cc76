#!/usr/bin/env bash
# Builds n8n's sqlite3 native module for Node 24 from its bundled sources, so
# n8n can keep its own state in SQLite (`make run` on a machine without
# PostgreSQL). install-n8n.sh skips it (PostgreSQL needs none): prebuilt
# binaries cannot be downloaded here, and the build takes a few minutes once.
#
# Usage: e2e/build-n8n-sqlite.sh     (after e2e/install-n8n.sh; idempotent)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=e2e/n8n-env.sh
source "$here/n8n-env.sh" >/dev/null
app="$N8N_E2E_APP_DIR"
log() { printf '[build-n8n-sqlite] %s\n' "$*" >&2; }
if (cd "$app" && node -e "require('sqlite3')" >/dev/null 2>&1); then
  log "sqlite3 already loads on $(node --version)"
  exit 0
fi
gyp="$app/node_modules/node-gyp/bin/node-gyp.js"
[[ -f "$gyp" ]] || { log "ERROR: node-gyp not found in $app"; exit 1; }
command -v cc >/dev/null 2>&1 && command -v c++ >/dev/null 2>&1 && command -v make >/dev/null 2>&1 \
  || { log "ERROR: a C/C++ compiler and make are needed to build sqlite3 (Debian: apt-get install build-essential)"; exit 1; }
log "building sqlite3 for Node $(node --version) from source (65 s on 2 cores, once; log: $N8N_E2E_HOME/sqlite3-build.log)"
started=$(date +%s)
# The compiler's output goes to the log; progress.sh's heartbeat to the terminal.
(cd "$app/node_modules/sqlite3" && JOBS=2 "$here/progress.sh" "build-n8n-sqlite: compiling sqlite3" \
  sh -c 'exec node "$0" rebuild --release --nodedir="$1" >"$2" 2>&1' \
  "$gyp" "$N8N_E2E_NODE_DIR" "$N8N_E2E_HOME/sqlite3-build.log") \
  || { tail -n 30 "$N8N_E2E_HOME/sqlite3-build.log" >&2; log "ERROR: the sqlite3 build failed"; exit 1; }
(cd "$app" && node -e "require('sqlite3')") || { log "ERROR: sqlite3 still does not load"; exit 1; }
log "sqlite3 built in $(( $(date +%s) - started ))s"
