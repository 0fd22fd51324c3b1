#!/usr/bin/env bash
# Installs everything byzlog's build and tests need, skipping what is present:
# Debian packages (RocksDB headers, protoc, kcat and librdkafka's Python client, a C compiler for cgo,
# Node.js and npm when absent), the JavaScript Kafka client of scripts/kafka-clients (npm) and the pinned
# Go tools, built into $BIN. Versions come from the Makefile (one place);
# a tool is rebuilt only when its pinned version changes.
set -euo pipefail

: "${BIN:?set BIN to the folder for tools}"
: "${COMETBFT_VERSION:?}" "${NATS_SERVER_VERSION:?}" "${NATSCLI_VERSION:?}"
: "${PROTOC_GEN_GO_VERSION:?}" "${PROTOC_GEN_GO_GRPC_VERSION:?}" "${GRPCURL_VERSION:?}"

say() { printf 'deps: %s\n' "$*" >&2; }

if ! command -v go >/dev/null 2>&1; then
  say "Go is not on PATH; install Go 1.26 or newer (byzlog needs nothing else by hand)"
  exit 1
fi

# Debian packages.
missing=()
for pkg in librocksdb-dev protobuf-compiler jq tcpdump kcat python3-confluent-kafka; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed' || missing+=("$pkg")
done
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
command -v gcc >/dev/null 2>&1 || missing+=(gcc)
command -v g++ >/dev/null 2>&1 || missing+=(g++)
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  say "installing ${missing[*]} with apt-get"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "$(dirname "$0")/progress.sh" "deps: apt-get install" $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The npm Kafka clients the e2e tests run (scripts/kafka-clients), as its
# lock file pins them.
clients="$(dirname "$0")/kafka-clients"
if ! cmp -s "$clients/package-lock.json" "$clients/node_modules/.package-lock.json.installed" 2>/dev/null; then
  say "installing the npm Kafka clients of $clients"
  (cd "$clients" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  cp "$clients/package-lock.json" "$clients/node_modules/.package-lock.json.installed"
fi

# The FUSE device, for the power-loss file system (services/lab/powerfs):
# a container may have the kernel's FUSE without the device node.
if [ ! -e /dev/fuse ] && [ "$(id -u)" = 0 ]; then
  modprobe fuse 2>/dev/null || true
  [ -e /dev/fuse ] || mknod -m 0666 /dev/fuse c 10 229 2>/dev/null || say "no /dev/fuse and it cannot be made: the powerfs tests will fail"
fi

# Go tools, each pinned; a stamp file records what was installed.
mkdir -p "$BIN"
install_tool() { # name package version
  local name=$1 pkg=$2 version=$3 stamp="$BIN/.$1.version"
  if [ -x "$BIN/$name" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$pkg@$version" ]; then
    return
  fi
  say "building $name ($pkg@$version); the first build takes a few minutes"
  local start=$SECONDS
  GOBIN="$BIN" GOWORK=off GOFLAGS= "$(dirname "$0")/progress.sh" "deps: building $name" go install "$pkg@$version"
  echo "$pkg@$version" >"$stamp"
  say "built $name in $((SECONDS - start))s"
}
install_tool cometbft github.com/cometbft/cometbft/cmd/cometbft "$COMETBFT_VERSION"
install_tool nats-server github.com/nats-io/nats-server/v2 "$NATS_SERVER_VERSION"
install_tool nats github.com/nats-io/natscli/nats "$NATSCLI_VERSION"
install_tool protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go "$PROTOC_GEN_GO_VERSION"
install_tool protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc "$PROTOC_GEN_GO_GRPC_VERSION"
install_tool grpcurl github.com/fullstorydev/grpcurl/cmd/grpcurl "$GRPCURL_VERSION"
