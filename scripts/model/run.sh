#!/usr/bin/env bash
# Model-checks scripts/model/byzlog.pml (and kafkaface.pml, the Kafka face's
# order on a connection, and txn.pml, Kafka transactions decided by the
# chain) with spin: every property check must
# pass and every sanity mutation must give a counterexample (so the model
# can't silently become vacuous). Prints one table; exits non-zero on any
# unexpected result. Run by `make model` (and so by `make test`).
#
# Everything spin and the C compiler write (pan, pan.c, *.trail, ...) goes to
# a temporary directory that is removed on exit; nothing is left in the repo.
# Every run is bounded: memory (MEMLIM, MiB), search depth (-m) and state
# vector size; none uses BITSTATE, so a "pass" is an exhaustive search.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
model="$here/byzlog.pml" # a check names another model in its sixth field
MEMLIM_MB="${MODEL_MEMLIM_MB:-1024}"   # per pan run
DEPTH="${MODEL_DEPTH:-20000}"          # the deepest check reaches ~1,300

for tool in spin gcc; do
  command -v "$tool" >/dev/null 2>&1 || {
    echo "model: $tool is not installed: run \`make model\` (it installs spin) or apt-get install -y spin gcc" >&2
    exit 2
  }
done
[[ -f "$model" ]] || { echo "model: $model is missing" >&2; exit 2; }

work="$(mktemp -d "${TMPDIR:-/tmp}/byzlog-model.XXXXXX")"
cleanup() { rm -rf "$work"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

# name | expected (pass or cex) | spin -D defines | LTL claim ("-" = safety:
# assertions and invalid end states) | what it checks [| model file, default
# byzlog.pml]
checks=(
  "safety/byzantine-replica|pass|-DFAULT_BYZ -DTLS|-|consistency, sequentiality, authenticity, integrity, replay-freedom, non-omission, confidentiality, no deadlock"
  "safety/crash-restart|pass|-DFAULT_CRASH -DTLS|-|fault tolerance (acked records survive crash+replay), consistency, no deadlock"
  "safety/malicious-gateway|pass|-DFAULT_BYZ -DGW_BYZ -DTLS -DSMALL|-|log safety with a gateway that drops, alters, reorders, replays, lies"
  "ltl/live (byzantine)|pass|-DFAULT_BYZ -DTLS -DLIVE|live|every submitted batch committed or rejected (weak fairness)"
  "ltl/parallel (byzantine)|pass|-DFAULT_BYZ -DTLS -DLIVE|parallel|producers on different partitions both progress"
  "ltl/live (crash)|pass|-DFAULT_CRASH -DTLS -DLIVE|live|liveness with a crashing replica"
  "mutation/f=2 byzantine|cex|-DMUT_F2 -DTLS|-|2 of 4 Byzantine: fork, app hashes differ"
  "mutation/no ProcessProposal|cex|-DFAULT_BYZ -DTLS -DMUT_NOPP|-|a forged batch gets into a decided block"
  "mutation/no fsync-before-ack|cex|-DFAULT_CRASH -DTLS -DMUT_NOFSYNC|-|height acked before the data is durable: records lost"
  "mutation/TLS off|cex|-DFAULT_BYZ|-|the intruder reads a payload"
  "mutation/gateway drops (live)|cex|-DFAULT_BYZ -DGW_BYZ -DTLS -DLIVE|live|liveness needs a correct gateway"
  "design/refs byzantine|pass|-DFAULT_BYZ -DTLS -DREFS|-|blocks of references: a withholding proposer; every decided block executable, and the safety above"
  "design/refs crash-restart|pass|-DFAULT_CRASH -DTLS -DREFS|-|blocks of references: a replica restarting fetches what it lacks"
  "design/refs live (byzantine)|pass|-DFAULT_BYZ -DTLS -DLIVE -DREFS|live|blocks of references: every batch still committed or rejected"
  "mutation/refs vote without data|cex|-DFAULT_BYZ -DTLS -DREFS -DMUT_NODA|-|ProcessProposal accepts without the bundles: a decided block nobody correct holds"
  "kafka-face/order|pass|-|-|a connection's acknowledged writes stored in the order sent, any refusals|kafkaface.pml"
  "mutation/kafka-face race|cex|-DMUT_RACE|-|requests started on goroutines race for sequences: reordered|kafkaface.pml"
  "mutation/kafka-face reread|cex|-DMUT_REREAD|-|the next sequence read while later batches are in flight: reordered|kafkaface.pml"
  "txn/atomic fenced timed out|pass|-|-|read_committed sees whole committed transactions only; zombies fenced; timeouts abort by block time|txn.pml"
  "mutation/txn marker race|cex|-DMUT_MARKER_RACE|-|markers written partition by partition: half a transaction read, or torn|txn.pml"
  "mutation/txn no fence|cex|-DMUT_NO_FENCE|-|the epoch not checked: a zombie commits half of an aborted transaction|txn.pml"
  "mutation/txn no timeout|cex|-DMUT_NO_TIMEOUT|-|no deadline: a transaction commits after its timeout|txn.pml"
  "mutation/txn no expiry|cex|-DMUT_NO_EXPIRE|-|never expired: a stalled producer's transaction holds the LSO forever|txn.pml"
  "mutation/txn no LSO|cex|-DMUT_NO_LSO|-|read_committed past the LSO: records of an open transaction read|txn.pml"
)

# run_check DEFINES CLAIM EXPECT MODEL: prints "errors|states|seconds|first error line"
run_check() {
  local defines="$1" claim="$2" expect="$3" file="$4" dir
  [[ "$defines" == "-" ]] && defines=""
  dir="$(mktemp -d "$work/run.XXXXXX")"
  cp "$file" "$dir/model.pml"
  (
    cd "$dir"
    # shellcheck disable=SC2086 # defines are separate words on purpose
    spin -a $defines model.pml >spin.log 2>&1 || { echo "spin -a $defines failed:" >&2; cat spin.log >&2; exit 1; }
    # A mutation stops at its first counterexample: compiling fast beats
    # running fast there. A property check explores everything: optimise.
    local opt=-O2
    [[ "$expect" == "cex" ]] && opt=-O0
    local cflags=("$opt" -w "-DMEMLIM=$MEMLIM_MB" -DVECTORSZ=1024)
    local panargs=("-m$DEPTH")
    if [[ "$claim" == "-" ]]; then
      cflags+=(-DNOCLAIM -DSAFETY)
    else
      cflags+=(-DNFAIR=3)
      panargs+=(-a -f "-N$claim")
    fi
    gcc "${cflags[@]}" -o pan pan.c 2>gcc.log || { echo "gcc pan.c failed:" >&2; cat gcc.log >&2; exit 1; }
    ./pan "${panargs[@]}" >pan.log 2>&1 || true
    if grep -qE 'max search depth too small|out of memory|error: VECTORSZ' pan.log; then
      echo "pan ran out of a bound (depth $DEPTH, ${MEMLIM_MB} MiB, VECTORSZ): raise MODEL_DEPTH / MODEL_MEMLIM_MB or shrink the model" >&2
      grep -E 'max search depth|out of memory|VECTORSZ' pan.log >&2
      exit 1
    fi
    errors="$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' pan.log | tail -1)"
    states="$(awk '/states, stored/ { print $1; exit }' pan.log)"
    secs="$(sed -n 's/^pan: elapsed time \([0-9.e+]*\).*/\1/p' pan.log | tail -1)"
    first="$(grep -m1 -E '^pan:1: ' pan.log | sed -e 's/^pan:1: //' -e 's/ (at depth.*//' | sed -e 's/assertion violated */assert /' | cut -c1-42 || true)"
    [[ -n "$errors" && -n "$states" ]] || { echo "could not read pan's output:" >&2; cat pan.log >&2; exit 1; }
    echo "${errors}|${states}|${secs:-0}|${first}"
  )
}

start=$SECONDS
unexpected=0
rows=()
for c in "${checks[@]}"; do
  IFS='|' read -r name expect defines claim what file <<<"$c"
  file="$here/${file:-byzlog.pml}"
  [[ -f "$file" ]] || { echo "model: $file is missing" >&2; exit 2; }
  t0=$SECONDS
  if ! res="$(run_check "$defines" "$claim" "$expect" "$file")"; then
    rows+=("$name|$expect|ERROR (see above)|-|-|$what")
    unexpected=$((unexpected + 1))
    continue
  fi
  IFS='|' read -r errors states secs first <<<"$res"
  wall=$((SECONDS - t0))
  if [[ "$errors" == "0" ]]; then result="pass"; else result="counterexample: $first"; fi
  case "$expect:$errors" in
    pass:0) ;;
    cex:0) result="UNEXPECTED pass: mutation unnoticed, model vacuous"; unexpected=$((unexpected + 1)) ;;
    pass:*) result="UNEXPECTED $result"; unexpected=$((unexpected + 1)) ;;
    cex:*) ;;
  esac
  [[ "$expect" == "cex" ]] && expect="counterexample"
  rows+=("$name|$expect|$result|$states|${wall}s|$what")
  printf '  %-32s %s\n' "$name" "${result%%:*}" >&2
done

echo
printf '| %-32s | %-14s | %-58s | %9s | %5s |\n' "check" "expected" "result" "states" "time"
printf '|%s|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..34})" "$(printf -- '-%.0s' {1..16})" "$(printf -- '-%.0s' {1..60})" "$(printf -- '-%.0s' {1..11})" "$(printf -- '-%.0s' {1..7})"
for r in "${rows[@]}"; do
  IFS='|' read -r name expect result states wall what <<<"$r"
  printf '| %-32s | %-14s | %-58s | %9s | %5s |\n' "$name" "$expect" "${result:0:58}" "$states" "$wall"
done
echo
echo "model: ${#checks[@]} checks in $((SECONDS - start))s, $unexpected unexpected"
if ((unexpected > 0)); then
  echo "model: FAILED — a property check found a counterexample or a sanity mutation found none; reproduce one with: spin -a <defines> scripts/model/byzlog.pml && gcc -DSAFETY -DNOCLAIM -o pan pan.c && ./pan && spin -t -p <defines> byzlog.pml (in a scratch directory)" >&2
  exit 1
fi
