#!/bin/sh
# One-shot set-up of n8n, run by the n8n-import service of docker-compose.yml
# (same image, same database and encryption key as n8n) before n8n starts:
#   1. installs our node package as the community package n8n-nodes-durable
#      (node types n8n-nodes-durable.*) into n8n's volume, from node-package/
#      (built by `make node-build`), on every start, so a rebuilt package is
#      picked up by `docker compose up`;
#   2. writes the credential "Durable Sidecar" (id durableSidecarE2E, the id
#      the example workflows use) from the token in deploy/durable.env, on every
#      start, so the credential follows the token;
#   3. imports examples/*.json once (a marker in n8n's folder remembers it, so
#      edits made in n8n survive restarts), published when asked.
#
# Inputs (environment): DURABLE_SIDECAR_TOKEN (required), DURABLE_SIDECAR_HOST
# (sidecar), DURABLE_SIDECAR_PORT (50051), DURABLE_IMPORT_EXAMPLES (true),
# DURABLE_PUBLISH_EXAMPLES (false), DURABLE_IMPORT_DIR (/opt/durable: holds
# n8n-nodes-durable/{package.json,dist} and examples/), N8N_USER_FOLDER ($HOME).
set -eu

src="${DURABLE_IMPORT_DIR:-/opt/durable}"
n8n_dir="${N8N_USER_FOLDER:-$HOME}/.n8n"
host="${DURABLE_SIDECAR_HOST:-sidecar}"
port="${DURABLE_SIDECAR_PORT:-50051}"
token="${DURABLE_SIDECAR_TOKEN:-}"
credential_id=durableSidecarE2E
marker="$n8n_dir/.durable-examples-imported"

fail() {
  echo "n8n-import: $*" >&2
  exit 1
}

is_true() {
  case "$1" in 1 | true | TRUE | True | yes | on) return 0 ;; *) return 1 ;; esac
}

# The token goes into JSON unescaped: allow only characters that need no escaping.
case "$token" in
  "") fail "DURABLE_SIDECAR_TOKEN is empty: set it in deploy/durable.env" ;;
  *[!A-Za-z0-9._~-]*) fail "DURABLE_SIDECAR_TOKEN may hold only letters, digits, '.', '_', '~' and '-'" ;;
esac
[ "${#token}" -ge 8 ] || fail "DURABLE_SIDECAR_TOKEN must be at least 8 characters (the sidecar refuses shorter ones)"
case "$port" in "" | *[!0-9]*) fail "DURABLE_SIDECAR_PORT must be a number, not '$port'" ;; esac
case "$host" in "" | *[!A-Za-z0-9.:_-]*) fail "DURABLE_SIDECAR_HOST is not a host name: '$host'" ;; esac

# --- 1. the node package ----------------------------------------------------
pkg="$src/n8n-nodes-durable"
if [ ! -f "$pkg/package.json" ] || [ ! -d "$pkg/dist/nodes" ]; then
  fail "the node package is not built ($pkg/dist/nodes is missing): run 'make node-build' in the repository, then 'docker compose up' again"
fi
nodes="$n8n_dir/nodes/node_modules"
target="$nodes/n8n-nodes-durable"
mkdir -p "$nodes"
if [ -d "$target" ] && diff -r "$pkg/package.json" "$target/package.json" >/dev/null 2>&1 \
   && diff -r "$pkg/dist" "$target/dist" >/dev/null 2>&1; then
  echo "n8n-import: n8n-nodes-durable is up to date"
else
  # Copy beside the target, then swap: a running n8n never sees a half-copied package.
  rm -rf "$target.new" "$target.old"
  mkdir "$target.new"
  cp "$pkg/package.json" "$target.new/"
  cp -R "$pkg/dist" "$target.new/"
  if [ -d "$target" ]; then mv "$target" "$target.old"; fi
  mv "$target.new" "$target"
  rm -rf "$target.old"
  echo "n8n-import: installed n8n-nodes-durable into $target"
fi

# --- 2. the credential --------------------------------------------------------
umask 077
cred_file="$(mktemp "${TMPDIR:-/tmp}/durable-credential.XXXXXX")"
trap 'rm -f "$cred_file"' EXIT
trap 'rm -f "$cred_file"; exit 1' INT TERM
cat >"$cred_file" <<JSON
[{"id": "$credential_id", "name": "Durable Sidecar", "type": "durableSidecarApi",
  "data": {"host": "$host", "port": $port, "tls": false, "token": "$token", "deadlineSeconds": 30}}]
JSON
n8n import:credentials --input="$cred_file"
rm -f "$cred_file"
echo "n8n-import: credential 'Durable Sidecar' ($credential_id) points at $host:$port"

# --- 3. the example workflows, once --------------------------------------------
if ! is_true "${DURABLE_IMPORT_EXAMPLES:-true}"; then
  echo "n8n-import: DURABLE_IMPORT_EXAMPLES is off; no examples imported"
elif [ -f "$marker" ]; then
  echo "n8n-import: examples were imported before ($marker); left as they are"
else
  imported=""
  for workflow in "$src"/examples/*.json; do
    [ -f "$workflow" ] || fail "no example workflows in $src/examples"
    # The files come from examples/generate.py: the workflow id is the one top-level "id".
    id="$(sed -n 's/^  "id": "\([^"]*\)",$/\1/p' "$workflow")"
    [ -n "$id" ] || fail "no top-level id in $workflow"
    n8n import:workflow --input="$workflow"
    if is_true "${DURABLE_PUBLISH_EXAMPLES:-false}"; then
      n8n publish:workflow --id="$id"
    fi
    imported="$imported $id"
  done
  echo "imported:$imported" >"$marker"
  echo "n8n-import: imported examples:$imported"
fi
