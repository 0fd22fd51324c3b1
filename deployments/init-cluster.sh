#!/usr/bin/env bash
# init-cluster.sh generates a byzlog validator network for real machines: what
# `byzlog localnet` does for loopback, as files you copy to the validators.
# docker-compose.yml runs it as its one-shot `init` service; deployments/k8s
# runs it through k8s/bootstrap.sh. See deployments/README.md.
set -euo pipefail

usage() {
  cat <<'EOF'
init-cluster.sh generates what a byzlog cluster needs before its first start:
each validator's CometBFT home (node key, validator key, config.toml), one
genesis shared by all, with the admin's public key in app_state.admins, and the
admin key itself unless you bring your own public key, and a local CA with the
gateways' TLS certificate and a client certificate. It runs `cometbft
testnet`, then sets what byzlog needs, as `byzlog localnet` does: abci = "grpc",
proxy_app = "127.0.0.1:ABCI_PORT" (host:port, no tcp:// with gRPC),
[mempool] recheck = false, type = "app", reap_interval = 25ms, timeout_propose = 10s, persistent peers with PEX
off, p2p rates of 100 MiB/s, and genesis block.max_bytes under the 4 MiB cap of
CometBFT's gRPC ABCI client. On an output that is already complete it does
nothing; it never overwrites a validator key.

Output in DIR:
  node<i>/                CometBFT home of validator i (config/, data/)
  genesis/genesis.json    the genesis (nodes, indexers and light clients)
  admin/admin.key, .pub   the admin key, when generated here (keep it offline)
  tls/ca.pem              the CA clients check the gateways against (--tls-ca)
  tls/gateway.pem, -key   the gateways' certificate and key (--tls-cert, --tls-key)
  tls/client.pem, -key    a client certificate, for gateways that require mutual TLS
  tls/ca-key.pem          the CA's key (`byzlog certs --dir tls NAME` issues more)
  k8s/*.yaml              with --k8s: ConfigMap validator-config and Secrets
                          validator-keys and gateway-tls for deployments/k8s

Usage:
  init-cluster.sh --out DIR [flags]

Flags:
      --abci-port int            port byzlog-app listens on next to each node (default 26658)
      --admin-pubkey string      hex ed25519 public key of the admin; else $BYZLOG_ADMIN_PUBKEY; else a new admin/admin.key
      --block-max-bytes int      genesis block.max_bytes, below 4 MiB - 64 KiB (default 3145728)
      --chain-id string          chain id (default "byzlog")
  -h, --help                     help for init-cluster.sh
      --hostname-prefix string   validator i is reached at PREFIX<i>SUFFIX (default "node")
      --hostname-suffix string   see --hostname-prefix, e.g. ".validator" for a headless Service
      --k8s                      also write k8s/validator-config.yaml and k8s/validator-keys.yaml
      --out string               output directory (required)
      --p2p-port int             every validator's p2p port (default 26656)
      --rpc-laddr string         every node's RPC listen address (default "tcp://0.0.0.0:26657")
      --timeout-commit string    consensus timeout_commit: the floor of the block interval (default "300ms")
      --tls-hosts string         comma-separated names and IPs the gateways' certificate is valid for (default "localhost,127.0.0.1")
      --validators int           number of validators; 3f+1 tolerate f faults (default 4)
EOF
}

say() { printf 'init-cluster: %s\n' "$*" >&2; }
die() {
  say "$*"
  exit 1
}

out="" validators=4 chain_id=byzlog prefix=node suffix="" p2p_port=26656 abci_port=26658
rpc_laddr="tcp://0.0.0.0:26657" admin_pub=${BYZLOG_ADMIN_PUBKEY:-} block_max_bytes=$((3 << 20))
timeout_commit=300ms k8s=false tls_hosts=localhost,127.0.0.1

while (($#)); do
  arg=$1
  shift
  case $arg in
  --*=*)
    set -- "${arg%%=*}" "${arg#*=}" "$@"
    continue
    ;;
  -h | --help)
    usage
    exit 0
    ;;
  --k8s)
    k8s=true
    continue
    ;;
  --*) (($#)) || die "$arg needs a value (see --help)" ;;
  *) die "unexpected argument $arg (see --help)" ;;
  esac
  value=$1
  shift
  case $arg in
  --abci-port) abci_port=$value ;;
  --admin-pubkey) admin_pub=$value ;;
  --block-max-bytes) block_max_bytes=$value ;;
  --chain-id) chain_id=$value ;;
  --hostname-prefix) prefix=$value ;;
  --hostname-suffix) suffix=$value ;;
  --out) out=$value ;;
  --p2p-port) p2p_port=$value ;;
  --rpc-laddr) rpc_laddr=$value ;;
  --timeout-commit) timeout_commit=$value ;;
  --tls-hosts) tls_hosts=$value ;;
  --validators) validators=$value ;;
  *) die "unknown flag $arg (see --help)" ;;
  esac
done

[ -n "$out" ] || die "--out: an output directory is required"
[[ $validators =~ ^[0-9]+$ ]] && ((validators >= 1 && validators <= 50)) ||
  die "--validators ($validators): must be between 1 and 50 (3f+1 tolerate f faults)"
for p in "p2p-port:$p2p_port" "abci-port:$abci_port"; do
  [[ ${p#*:} =~ ^[0-9]+$ ]] && ((${p#*:} >= 1 && ${p#*:} <= 65535)) || die "--${p%%:*} (${p#*:}): must be a port number"
done
# CometBFT's gRPC ABCI client keeps gRPC's 4 MiB message cap: a larger block
# halts the chain (DESIGN.md, known traps).
[[ $block_max_bytes =~ ^[0-9]+$ ]] && ((block_max_bytes >= 1 << 16 && block_max_bytes < (4 << 20) - (64 << 10))) ||
  die "--block-max-bytes ($block_max_bytes): must be at least 64 KiB and below 4 MiB - 64 KiB ($(((4 << 20) - (64 << 10)))), or the chain halts on a large block"
[ -n "$chain_id" ] || die "--chain-id: must not be empty"
[ -z "$admin_pub" ] || [[ $admin_pub =~ ^[0-9a-fA-F]{64}$ ]] ||
  die "--admin-pubkey: want the 64 hex digits \`byzlog keygen\` prints, got \"$admin_pub\""
[[ $timeout_commit =~ ^[0-9]+(ms|s|m)$ ]] || die "--timeout-commit ($timeout_commit): want a duration such as 300ms or 1s"
[[ $rpc_laddr == tcp://*:* ]] || die "--rpc-laddr ($rpc_laddr): want tcp://HOST:PORT"
[[ $tls_hosts =~ ^[A-Za-z0-9.:*-]+(,[A-Za-z0-9.:*-]+)*$ ]] || die "--tls-hosts ($tls_hosts): want comma-separated host names or IP addresses"

need=(cometbft jq byzlog)
for tool in "${need[@]}"; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is not on PATH (make build puts cometbft and byzlog in ./bin; jq comes from apt)"
done

if [ -f "$out/genesis/genesis.json" ]; then
  say "$out/genesis/genesis.json exists: the cluster is initialised, nothing to do"
  exit 0
fi
for ((i = 0; i < validators; i++)); do
  if [ -e "$out/node$i/config/priv_validator_key.json" ]; then
    die "$out/node$i holds a validator key but $out/genesis/genesis.json is missing: refusing to overwrite a key; empty $out to start over"
  fi
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/init-cluster.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
umask 077

host() { printf '%s%d%s' "$prefix" "$1" "$suffix"; }

# set_toml FILE SECTION KEY VALUE replaces KEY's line in [SECTION] ("" is the
# top level) and fails when it is not there, so a changed template is caught.
set_toml() {
  awk -v section="$2" -v key="$3" -v value="$4" '
    /^\[/ { current = $0; gsub(/^\[+|\]+$/, "", current) }
    current == section && $1 == key && $2 == "=" && !done { print key " = " value; done = 1; next }
    { print }
    END { if (!done) exit 3 }
  ' "$1" >"$1.new" || die "$1: no key $3 in [$2]; has the cometbft config template changed?"
  mv "$1.new" "$1"
}

say "generating $validators validators with cometbft testnet"
cometbft testnet --home "$tmp/cometbft-home" --v "$validators" --o "$tmp/net" \
  --populate-persistent-peers=false >"$tmp/testnet.log" 2>&1 || {
  cat "$tmp/testnet.log" >&2
  die "cometbft testnet failed"
}

ids=()
for ((i = 0; i < validators; i++)); do
  ids+=("$(cometbft show-node-id --home "$tmp/net/node$i")")
done

if [ -z "$admin_pub" ]; then
  mkdir -p "$tmp/admin"
  admin_pub=$(byzlog keygen "$tmp/admin/admin.key" | tail -n 1)
  [[ $admin_pub =~ ^[0-9a-f]{64}$ ]] || die "byzlog keygen printed \"$admin_pub\", not a public key"
  echo "$admin_pub" >"$tmp/admin/admin.pub"
  say "generated the admin key: admin/admin.key (public key $admin_pub)"
fi

# The gateways serve TLS (DESIGN.md: every hop encrypted); `byzlog certs`
# makes the CA and the certificates.
byzlog certs --dir "$tmp/tls" --hosts "$tls_hosts" gateway client >"$tmp/certs.log" 2>&1 || {
  cat "$tmp/certs.log" >&2
  die "byzlog certs failed"
}

jq --arg chain "$chain_id" --arg max "$block_max_bytes" --arg admin "$admin_pub" '
  .chain_id = $chain
  | .consensus_params.block.max_bytes = $max
  | .app_state = {admins: [$admin]}
' "$tmp/net/node0/config/genesis.json" >"$tmp/genesis.json"

for ((i = 0; i < validators; i++)); do
  home=$tmp/net/node$i
  cfg=$home/config/config.toml
  peers=()
  for ((j = 0; j < validators; j++)); do
    ((j == i)) || peers+=("${ids[j]}@$(host "$j"):$p2p_port")
  done
  set_toml "$cfg" "" moniker "\"$(host "$i")\""
  set_toml "$cfg" "" abci '"grpc"'
  set_toml "$cfg" "" proxy_app "\"127.0.0.1:$abci_port\"" # no tcp:// with gRPC
  set_toml "$cfg" rpc laddr "\"$rpc_laddr\""
  set_toml "$cfg" p2p laddr "\"tcp://0.0.0.0:$p2p_port\""
  set_toml "$cfg" p2p persistent_peers "\"$(
    IFS=,
    echo "${peers[*]}"
  )\""
  set_toml "$cfg" p2p pex false # the peers are persistent
  set_toml "$cfg" p2p addr_book_strict false
  set_toml "$cfg" p2p send_rate $((100 << 20)) # the 5 MB/s default throttles large blocks
  set_toml "$cfg" p2p recv_rate $((100 << 20))
  set_toml "$cfg" mempool recheck false # races with the gRPC ABCI client under load
  set_toml "$cfg" mempool type '"app"' # byzlog-app keeps the mempool and builds blocks from it
  set_toml "$cfg" mempool reap_interval '"25ms"' # the 500 ms default delays gossip to the proposer
  set_toml "$cfg" rpc max_body_bytes $((4 << 20)) # the 1 MB default refuses bundles over ~730 KiB
  set_toml "$cfg" consensus timeout_propose '"10s"' # 3 s causes extra rounds with large blocks
  set_toml "$cfg" consensus timeout_commit "\"$timeout_commit\""
  cp "$tmp/genesis.json" "$home/config/genesis.json"
done

if $k8s; then
  mkdir -p "$tmp/k8s"
  {
    printf 'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: validator-config\n'
    printf '  labels:\n    app.kubernetes.io/name: byzlog\n    app.kubernetes.io/component: validator\n'
    printf 'binaryData:\n'
    printf '  genesis.json: %s\n' "$(base64 -w0 "$tmp/genesis.json")"
    for ((i = 0; i < validators; i++)); do
      printf '  config-%d.toml: %s\n' "$i" "$(base64 -w0 "$tmp/net/node$i/config/config.toml")"
    done
  } >"$tmp/k8s/validator-config.yaml"
  {
    printf 'apiVersion: v1\nkind: Secret\nmetadata:\n  name: validator-keys\n'
    printf '  labels:\n    app.kubernetes.io/name: byzlog\n    app.kubernetes.io/component: validator\n'
    printf 'type: Opaque\ndata:\n'
    for ((i = 0; i < validators; i++)); do
      printf '  node_key-%d.json: %s\n' "$i" "$(base64 -w0 "$tmp/net/node$i/config/node_key.json")"
      printf '  priv_validator_key-%d.json: %s\n' "$i" "$(base64 -w0 "$tmp/net/node$i/config/priv_validator_key.json")"
    done
  } >"$tmp/k8s/validator-keys.yaml"
  {
    printf 'apiVersion: v1\nkind: Secret\nmetadata:\n  name: gateway-tls\n'
    printf '  labels:\n    app.kubernetes.io/name: byzlog\n    app.kubernetes.io/component: gateway\n'
    printf 'type: Opaque\ndata:\n'
    for f in ca.pem gateway.pem gateway-key.pem; do
      printf '  %s: %s\n' "$f" "$(base64 -w0 "$tmp/tls/$f")"
    done
  } >"$tmp/k8s/gateway-tls.yaml"
fi

# Install into DIR. The directories may be mount points (compose volumes), so
# copy into them; genesis/genesis.json goes last and marks the output complete.
for ((i = 0; i < validators; i++)); do
  mkdir -p "$out/node$i"
  cp -R --preserve=mode "$tmp/net/node$i/." "$out/node$i/"
done
if [ -d "$tmp/admin" ]; then
  mkdir -p "$out/admin"
  cp --preserve=mode "$tmp/admin/admin.key" "$tmp/admin/admin.pub" "$out/admin/"
  chmod 644 "$out/admin/admin.pub"
fi
mkdir -p "$out/tls"
cp --preserve=mode "$tmp/tls/"*.pem "$out/tls/"
chmod 644 "$out/tls/ca.pem" "$out/tls/gateway.pem" "$out/tls/client.pem"
if $k8s; then
  mkdir -p "$out/k8s"
  cp --preserve=mode "$tmp/k8s/"*.yaml "$out/k8s/"
fi
umask 022
mkdir -p "$out/genesis"
cp "$tmp/genesis.json" "$out/genesis/genesis.json.new"
chmod 644 "$out/genesis/genesis.json.new"
mv "$out/genesis/genesis.json.new" "$out/genesis/genesis.json"

say "wrote $validators validators of chain $chain_id to $out (peers $(host 0):$p2p_port ...; admin $admin_pub)"
