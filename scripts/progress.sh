#!/usr/bin/env bash
# progress.sh LABEL CMD [ARGS...]: runs CMD and, while it runs, says every
# 10 s that it still does, so a long build or install is never silent. Exits
# with CMD's status.
set -uo pipefail
label=$1
shift
start=$SECONDS
"$@" &
pid=$!
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; exit 130' INT TERM
while kill -0 "$pid" 2>/dev/null; do
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    sleep 1
    kill -0 "$pid" 2>/dev/null || break 2
  done
  printf '%s: still running (%ds)\n' "$label" "$((SECONDS - start))" >&2
done
wait "$pid"
