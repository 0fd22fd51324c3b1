#!/usr/bin/env bash
# Generates the Go code of protos/ (mode "gen"), or checks that the committed
# code is exactly what generation produces (mode "verify"), with the pinned
# protoc plugins in $BIN.
set -euo pipefail

mode=${1:?usage: proto.sh gen|verify}
: "${BIN:?}"
cd "$(dirname "$0")/../protos"
export PATH="$BIN:$PATH"
mapfile -t sources < <(find . -name '*.proto' | sed 's|^\./||' | LC_ALL=C sort)

generate() { # outdir
  protoc -I . --go_out="$1" --go_opt=paths=source_relative \
    --go-grpc_out="$1" --go-grpc_opt=paths=source_relative "${sources[@]}"
}

case $mode in
gen)
  find . -name '*.pb.go' -delete
  generate .
  ;;
verify)
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  generate "$tmp"
  diff <(cd "$tmp" && find . -name '*.pb.go' | LC_ALL=C sort) <(find . -name '*.pb.go' | LC_ALL=C sort) >/dev/null || {
    echo "verify-proto: the set of generated files differs from protos/; run 'make proto' and commit" >&2
    exit 1
  }
  status=0
  while read -r f; do
    if ! cmp -s "$tmp/$f" "$f"; then
      echo "verify-proto: protos/${f#./} is not what its .proto generates; run 'make proto' and commit" >&2
      status=1
    fi
  done < <(cd "$tmp" && find . -name '*.pb.go')
  exit $status
  ;;
*)
  echo "usage: proto.sh gen|verify" >&2
  exit 2
  ;;
esac
