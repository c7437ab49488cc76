#!/bin/sh
# Writes deploy/durable.env from deploy/durable.env.example with a fresh random
# value for every empty variable of its "required" section (the secrets).
# Refuses to overwrite an existing file: the encryption key and the database
# passwords must outlive the stack's volumes.
#   deploy/make-env.sh [OUTPUT]        (default: deploy/durable.env)
set -eu

here="$(cd "$(dirname "$0")" && pwd)"
example="$here/durable.env.example"
out="${1:-$here/durable.env}"

if [ -e "$out" ]; then
  echo "make-env: $out exists; not overwritten (delete it first to start over with new secrets)" >&2
  exit 1
fi

secret() {
  # 32 random bytes as 64 hex digits: safe in URLs, token lists and JSON.
  od -An -tx1 -N32 /dev/urandom | tr -d ' \n'
}

umask 077
tmp="$out.tmp.$$"
trap 'rm -f "$tmp"' EXIT
section=""
while IFS= read -r line || [ -n "$line" ]; do
  case "$line" in
    "# --- required"*) section=required ;;
    "# --- "*) section="" ;;
  esac
  case "$section:$line" in
    required:[A-Z]*=) echo "$line$(secret)" ;;
    *) echo "$line" ;;
  esac
done <"$example" >"$tmp"
mv "$tmp" "$out"
echo "make-env: wrote $out (mode 600) with new secrets; keep a copy of N8N_ENCRYPTION_KEY"
