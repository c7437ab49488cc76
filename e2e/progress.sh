#!/usr/bin/env bash
# Runs a long command with a line of progress every 20 s on stderr, so a first run has no
# silent minutes:   e2e/progress.sh "pip install" .venv/bin/pip install ...
# The command runs in the foreground (Ctrl-C reaches it as usual); its exit status is ours.
set -uo pipefail
what="$1"; shift
started=$(date +%s)
main=$$
printf '[%s] ...\n' "$what" >&2
# The heartbeat ends its own sleep when stopped, so nothing of it outlives the command (a
# leftover sleep would hold the terminal's pipe, or a lock of the caller, for 20 s).
( trap 'kill "$nap" 2>/dev/null; exit 0' TERM
  while :; do
    sleep 20 & nap=$!
    wait "$nap"
    kill -0 "$main" 2>/dev/null || exit 0
    printf '[%s] ... still running (%ss)\n' "$what" "$(( $(date +%s) - started ))" >&2 || exit 0
  done ) &
beat=$!
trap 'kill "$beat" 2>/dev/null' EXIT
"$@"
rc=$?
if (( rc == 0 )); then
  printf '[%s] done in %ss\n' "$what" "$(( $(date +%s) - started ))" >&2
else
  printf '[%s] FAILED (exit %s) after %ss\n' "$what" "$rc" "$(( $(date +%s) - started ))" >&2
fi
exit "$rc"
