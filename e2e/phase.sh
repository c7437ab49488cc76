#!/usr/bin/env bash
# Runs one phase of `make run` and appends its name and seconds to a file, for the table
# e2e/run.py prints before READY:   e2e/phase.sh FILE "what" command args...
set -uo pipefail
file="$1"; what="$2"; shift 2
started=$(date +%s%3N)
"$@"
rc=$?
ms=$(( $(date +%s%3N) - started ))
printf '%s\t%d.%d\n' "$what" $(( ms / 1000 )) $(( ms % 1000 / 100 )) >>"$file"
exit "$rc"
