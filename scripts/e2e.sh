#!/usr/bin/env bash
# e2e.sh: byzlog's end-to-end tests (go test -tags e2e ./services/lab/e2e), in
# less wall time than one after another. Most of them wait on blocks and
# leave the cores half idle, so they run as two shards side by side, each
# test of a shard in turn, each shard on its own port range
# (BYZLOG_E2E_BASE_PORT: 16656 for the first, 5000 for the second; a test
# uses its base port plus at most ~10,600, below the ephemeral range). The
# benchmark smoke saturates both cores, so it runs alone afterwards.
#
# Environment: BYZLOG_BIN (the binaries), E2E_TIMEOUT (each go test's
# timeout, default 25m), E2E_RUN (a -run regexp: one shard, no split).
# The second shard's output is printed when it ends; the exit status is
# non-zero if any shard failed.
set -uo pipefail
cd "$(dirname "$0")/.."
: "${BYZLOG_BIN:?BYZLOG_BIN must name the directory of the built binaries}"
timeout=${E2E_TIMEOUT:-25m}
pkg=github.com/byzlog/byzlog/services/lab/e2e
gotest=(go test -tags e2e -count=1 -timeout "$timeout" -v "$pkg")

if [ -n "${E2E_RUN:-}" ]; then
  exec "${gotest[@]}" -run "$E2E_RUN"
fi

# The second shard: tests that mostly wait on blocks and restarts.
second='^(TestPruning|TestRollingUpgrade|TestLocalnetCrashAndCatchUp|TestStateSyncJoin|TestIndexerExactlyOnce|TestRunWholeSystem|TestValidatorSetChanges)$'
alone='^TestBenchSuiteSmoke$'

out=$(mktemp)
trap 'rm -f "$out"; [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null' EXIT
BYZLOG_E2E_BASE_PORT=5000 "${gotest[@]}" -run "$second" >"$out" 2>&1 &
pid=$!
"${gotest[@]}" -skip "$second|$alone"
first=$?
wait "$pid"
other=$?
pid=
echo "--- the second shard ($second) ---"
cat "$out"
"${gotest[@]}" -run "$alone"
bench=$?
if [ "$first" -ne 0 ] || [ "$other" -ne 0 ] || [ "$bench" -ne 0 ]; then
  echo "e2e: failed (first shard $first, second shard $other, benchmark smoke $bench)" >&2
  exit 1
fi
