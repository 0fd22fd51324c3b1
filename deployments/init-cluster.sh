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
genesis shared by all, with the admin's public key in app_state.admins and
app_state.rules_version 10 (the newest: blocks reference large bundles, which
each byzlog-app fetches from the other nodes' RPC when it lacks one, the
apps store a batch's records in runs, many a key, keep empty keys and
values apart from null ones, keep a Kafka batch's codec and a topic's
timestamp settings, create many topics in one transaction, keep Kafka
transactions, compact topics whose cleanup policy says so, and keep the key
tree that proves single state entries), and the
admin key itself unless you bring your own public key; a local CA and, from it,
every TLS certificate (each node's RPC, the gateways', NATS's, a client's); and
NATS's configuration, accounts and users' passwords. It runs `cometbft
testnet`, then sets what byzlog needs, as `byzlog localnet` does: abci = "grpc",
proxy_app = "127.0.0.1:ABCI_PORT" (host:port, no tcp:// with gRPC),
[mempool] recheck = false, type = "app", reap_interval = 25ms, [tx_index] indexer = "null"
(byzlog-app answers gateways' lookups itself), timeout_propose = 10s,
peer_gossip_sleep_duration = 10ms, persistent peers with PEX
off, p2p rates of 100 MiB/s, RPC over TLS (rpc.tls_cert_file), and genesis
block.max_bytes under the 4 MiB cap of CometBFT's gRPC ABCI client. On an output
that is already complete it does nothing; it never overwrites a validator key.

No link is plaintext beyond loopback: node RPC, the gateways' faces and NATS
all serve TLS with certificates of one CA, and NATS asks for a password.

Output in DIR, one directory per audience (copy each only where it is needed):
  node<i>/                CometBFT home of validator i (config/, data/); config/rpc.pem,
                          rpc-key.pem: its RPC certificate, valid for its host name and
                          --rpc-tls-hosts; config/rpc-ca.pem: the CA, for its health check
  genesis/genesis.json    the genesis (nodes, indexers and light clients)
  app/ca.pem              the CA, for every byzlog-app: it checks the other nodes' RPC
                          certificates with it when it fetches bundles (--peer-tls-ca)
  admin/admin.key, .pub   the admin key, when generated here (keep it offline)
  tls/ca.pem              the CA every certificate here chains to (--tls-ca, --node-tls-ca)
  tls/gateway.pem, -key   the gateways' certificate and key (--tls-cert, --tls-key)
  tls/client.pem, -key    a client certificate, for gateways that require mutual TLS
  nats/nats.conf          the NATS server's configuration (in --nats-dir): TLS, JetStream,
                          monitoring on loopback, and the accounts file it includes
  nats/nats.pem, -key     the NATS server's certificate, valid for --nats-tls-hosts
  nats-accounts/accounts.conf  NATS's accounts and users, with their passwords (in
                          --nats-accounts-dir): byzlog-indexer rewrites it as topics'
                          readers change (--nats-authz), so the server and the indexer
                          both mount it; here as it is for no topic yet
  indexer/nats.password   the NATS password of user indexer (--nats-password-file),
  indexer/authz.json      the accounts file's path and users (--nats-authz),
  indexer/ca.pem          and the CA (--node-tls-ca, --nats-tls-ca)
  consumer/nats.password  the NATS password of user consumer, which may read open topics,
  consumer/ca.pem         and the CA
  ca/ca.pem, ca-key.pem   the CA and its key, with every certificate issued: keep it
                          offline (`byzlog certs --dir ca NAME` issues more)
  k8s/*.yaml              with --k8s: ConfigMap validator-config and Secrets
                          validator-keys, gateway-tls, nats-tls and indexer-nats
                          for deployments/k8s (bootstrap.sh adds nats-authz)

Usage:
  init-cluster.sh --out DIR [flags]

Flags:
      --abci-port int             port byzlog-app listens on next to each node (default 26658)
      --admin-pubkey string       hex ed25519 public key of the admin; else $BYZLOG_ADMIN_PUBKEY; else a new admin/admin.key
      --block-max-bytes int       genesis block.max_bytes, below 4 MiB - 64 KiB (default 3145728)
      --chain-id string           chain id (default "byzlog")
  -h, --help                      help for init-cluster.sh
      --hostname-prefix string    validator i is reached at PREFIX<i>SUFFIX (default "node")
      --hostname-suffix string    see --hostname-prefix, e.g. ".validator" for a headless Service
      --k8s                       also write the ConfigMap and Secrets of deployments/k8s into k8s/
      --nats-accounts-dir string  where nats-accounts/ is, on the NATS server and the indexer alike (default "/etc/nats-accounts")
      --nats-dir string           where nats/ is on the NATS server: nats.conf names its certificate there (default "/etc/nats")
      --nats-store-dir string     the NATS server's JetStream directory (default "/data")
      --nats-tls-hosts string     comma-separated names and IPs the NATS server's certificate is valid for (default "nats,localhost,127.0.0.1")
      --out string                output directory (required)
      --p2p-port int              every validator's p2p port (default 26656)
      --rpc-laddr string          every node's RPC listen address (default "tcp://0.0.0.0:26657")
      --rpc-tls-hosts string      comma-separated names and IPs every node's RPC certificate is valid for, besides its own host name (default "localhost,127.0.0.1")
      --timeout-commit string     consensus timeout_commit: the floor of the block interval (default "300ms")
      --tls-hosts string          comma-separated names and IPs the gateways' certificate is valid for (default "localhost,127.0.0.1")
      --validators int            number of validators; 3f+1 tolerate f faults (default 4)
EOF
}

say() { printf 'init-cluster: %s\n' "$*" >&2; }
die() {
  say "$*"
  exit 1
}

out="" validators=4 chain_id=byzlog prefix=node suffix="" p2p_port=26656 abci_port=26658
rpc_laddr="tcp://0.0.0.0:26657" admin_pub=${BYZLOG_ADMIN_PUBKEY:-} block_max_bytes=$((3 << 20))
timeout_commit=300ms k8s=false tls_hosts=localhost,127.0.0.1 rpc_tls_hosts=localhost,127.0.0.1
nats_tls_hosts=nats,localhost,127.0.0.1 nats_dir=/etc/nats nats_store_dir=/data nats_accounts_dir=/etc/nats-accounts

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
  --nats-accounts-dir) nats_accounts_dir=$value ;;
  --nats-dir) nats_dir=$value ;;
  --nats-store-dir) nats_store_dir=$value ;;
  --nats-tls-hosts) nats_tls_hosts=$value ;;
  --out) out=$value ;;
  --p2p-port) p2p_port=$value ;;
  --rpc-laddr) rpc_laddr=$value ;;
  --rpc-tls-hosts) rpc_tls_hosts=$value ;;
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
for h in "tls-hosts:$tls_hosts" "rpc-tls-hosts:$rpc_tls_hosts" "nats-tls-hosts:$nats_tls_hosts"; do
  [[ ${h#*:} =~ ^[A-Za-z0-9.:*-]+(,[A-Za-z0-9.:*-]+)*$ ]] || die "--${h%%:*} (${h#*:}): want comma-separated host names or IP addresses"
done
for d in "nats-dir:$nats_dir" "nats-store-dir:$nats_store_dir" "nats-accounts-dir:$nats_accounts_dir"; do
  [[ ${d#*:} == /* && ${d#*:} != *'"'* ]] || die "--${d%%:*} (${d#*:}): want an absolute path (nats.conf names it as the server sees it)"
done

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

# TLS everywhere beyond loopback (DESIGN.md: every hop encrypted): one CA in
# ca/ signs every certificate; `byzlog certs` keeps what exists, so each call
# adds names. Node i's RPC certificate holds its own host name only, so one
# node's key cannot pose as another.
certs() {
  local hosts=$1
  shift
  byzlog certs --dir "$tmp/ca" --hosts "$hosts" "$@" >>"$tmp/certs.log" 2>&1 || {
    cat "$tmp/certs.log" >&2
    die "byzlog certs $* failed"
  }
}
certs "$tls_hosts" gateway client
certs "$nats_tls_hosts" nats
for ((i = 0; i < validators; i++)); do
  certs "$(host "$i"),$rpc_tls_hosts" "node$i-rpc"
done

# password prints 24 random bytes in hex, as the localnet makes its NATS
# passwords; never digits alone: NATS reads an unquoted $VAR (k8s hands the
# passwords over so) of digits as a number.
password() {
  local pw=""
  until [[ $pw =~ [a-f] ]]; do
    pw=$(od -An -tx1 -N24 /dev/urandom | tr -d ' \n')
  done
  printf '%s\n' "$pw"
}
mkdir -p "$tmp/nats" "$tmp/nats-accounts" "$tmp/indexer" "$tmp/consumer" "$tmp/app"
password >"$tmp/indexer/nats.password"
password >"$tmp/consumer/nats.password"
reloader_pw=$(password)
indexer_pw=$(cat "$tmp/indexer/nats.password")
consumer_pw=$(cat "$tmp/consumer/nats.password")
cp "$tmp/ca/ca.pem" "$tmp/indexer/ca.pem"
cp "$tmp/ca/ca.pem" "$tmp/consumer/ca.pem"
cp "$tmp/ca/ca.pem" "$tmp/app/ca.pem"
cp "$tmp/ca/nats.pem" "$tmp/ca/nats-key.pem" "$tmp/nats/"

# NATS's accounts are the localnet's: byzlog-indexer renders them from the
# chain's topic configs (indexer/natsauth: --nats-authz) into
# nats-accounts/accounts.conf, which nats.conf includes, and has the server
# reload them. The indexer may do anything; user consumer may read the open
# topics and the blocks stream; each reader key a topic lists is a user of
# its own; user reloader, of the system account, may only ask for a reload.
# Here, before the indexer first runs, the file is what natsauth.Render
# writes for no topic yet (TestDeployments compares them: they MUST stay
# the same, as indexer/natsauth/natsauth.go changes).
jq -n --arg conf "$nats_accounts_dir/accounts.conf" --arg ipw "$indexer_pw" --arg cpw "$consumer_pw" --arg rpw "$reloader_pw" '{
  conf: $conf, account: "BYZLOG",
  indexer: {user: "indexer", password: $ipw},
  consumer: {user: "consumer", password: $cpw},
  reloader: {user: "reloader", password: $rpw}
}' >"$tmp/indexer/authz.json"
blocks_reads() { # natsauth's streamReads of the blocks stream, quoted
  local s=byzlog-blocks
  printf '"$JS.API.STREAM.MSG.GET.%s", "$JS.API.DIRECT.GET.%s", "$JS.API.DIRECT.GET.%s.>", ' "$s" "$s" "$s"
  printf '"$JS.API.CONSUMER.CREATE.%s", "$JS.API.CONSUMER.CREATE.%s.>", "$JS.API.CONSUMER.DURABLE.CREATE.%s.*", ' "$s" "$s" "$s"
  printf '"$JS.API.CONSUMER.INFO.%s.*", "$JS.API.CONSUMER.MSG.NEXT.%s.*", "$JS.ACK.%s.>"' "$s" "$s" "$s"
}
{
  echo "# Written by byzlog-indexer from the chain's topic configs: do not edit."
  echo 'system_account: "SYS"'
  echo 'accounts {'
  echo '  "SYS" {'
  echo "    users: [{user: \"reloader\", password: \"$reloader_pw\", permissions: {publish: [\"\$SYS.REQ.SERVER.*.RELOAD\"], subscribe: [\"_INBOX.>\"]}}]"
  echo '  }'
  echo '  "BYZLOG" {'
  echo '    jetstream: enabled'
  echo '    users: ['
  echo "      {user: \"indexer\", password: \"$indexer_pw\", permissions: {publish: \">\", subscribe: \">\"}}"
  echo "      {user: \"consumer\", password: \"$consumer_pw\", permissions: {publish: {allow: [\"\$JS.API.INFO\", \"\$JS.API.STREAM.NAMES\", \"\$JS.API.STREAM.INFO.*\", $(blocks_reads)], deny: [\"\$JS.API.STREAM.INFO.KV_byzlog-indexer\"]}, subscribe: {allow: [\"_INBOX.>\", \"byzlog.\$blocks\"]}}}"
  echo '    ]'
  echo '  }'
  echo '}'
} >"$tmp/nats-accounts/accounts.conf"

# The NATS server: clients over TLS only, monitoring on loopback only (its
# health check runs beside it), JetStream, and the accounts the indexer
# keeps (an include is relative to this file).
cat >"$tmp/nats/nats.conf" <<EOF
# Written by init-cluster.sh.
server_name: "byzlog-nats"
listen: "0.0.0.0:4222"
http: "127.0.0.1:8222"
# sync_interval 1s: JetStream acknowledges a message once written, so a power
# loss drops what was written since the last sync (with the default, 2
# minutes, whole streams too); the indexer then publishes it again from the
# chain. "always" would fsync every message on this single server (R1), which
# held the indexer to ~280 records/s on 2 cores.
jetstream { store_dir: "$nats_store_dir", sync_interval: 1s }
tls { cert_file: "$nats_dir/nats.pem", key_file: "$nats_dir/nats-key.pem", timeout: 5 }
include "$(realpath -m --relative-to="$nats_dir" "$nats_accounts_dir")/accounts.conf"
EOF

# A new chain starts at the newest rules version (abciapp/core
# MaxRulesVersion): from 3 on, blocks carry references to large bundles, and
# each byzlog-app needs --peer-rpc to fetch one it lacks.
jq --arg chain "$chain_id" --arg max "$block_max_bytes" --arg admin "$admin_pub" '
  .chain_id = $chain
  | .consensus_params.block.max_bytes = $max
  | .app_state = {admins: [$admin], rules_version: 10}
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
  set_toml "$cfg" rpc tls_cert_file '"rpc.pem"' # relative to config/: the RPC serves https only
  set_toml "$cfg" rpc tls_key_file '"rpc-key.pem"'
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
  set_toml "$cfg" tx_index indexer '"null"' # byzlog-app answers /tx itself; the kv index cost a second copy of every bundle
  set_toml "$cfg" rpc max_body_bytes $((4 << 20)) # the 1 MB default refuses bundles over ~730 KiB
  set_toml "$cfg" consensus timeout_propose '"10s"' # 3 s causes extra rounds with large blocks
  set_toml "$cfg" consensus timeout_commit "\"$timeout_commit\""
  set_toml "$cfg" consensus peer_gossip_sleep_duration '"10ms"' # the 100 ms default delays every vote: 500 ms empty blocks, not 340
  cp "$tmp/genesis.json" "$home/config/genesis.json"
  cp "$tmp/ca/node$i-rpc.pem" "$home/config/rpc.pem"
  cp "$tmp/ca/node$i-rpc-key.pem" "$home/config/rpc-key.pem"
  cp "$tmp/ca/ca.pem" "$home/config/rpc-ca.pem" # what its health check trusts
done

if $k8s; then
  mkdir -p "$tmp/k8s"
  # manifest KIND NAME COMPONENT KEY=FILE...: a ConfigMap (binaryData) or
  # Secret holding each FILE under KEY, base64 as both want it.
  manifest() {
    local kind=$1 name=$2 component=$3 kv
    shift 3
    printf 'apiVersion: v1\nkind: %s\nmetadata:\n  name: %s\n' "$kind" "$name"
    printf '  labels:\n    app.kubernetes.io/name: byzlog\n    app.kubernetes.io/component: %s\n' "$component"
    if [ "$kind" = Secret ]; then
      printf 'type: Opaque\ndata:\n'
    else
      printf 'binaryData:\n'
    fi
    for kv in "$@"; do
      printf '  %s: %s\n' "${kv%%=*}" "$(base64 -w0 "${kv#*=}")"
    done
  }
  config=("genesis.json=$tmp/genesis.json" "rpc-ca.pem=$tmp/ca/ca.pem")
  keys=()
  for ((i = 0; i < validators; i++)); do
    config+=("config-$i.toml=$tmp/net/node$i/config/config.toml")
    keys+=("node_key-$i.json=$tmp/net/node$i/config/node_key.json"
      "priv_validator_key-$i.json=$tmp/net/node$i/config/priv_validator_key.json"
      "rpc-$i.pem=$tmp/ca/node$i-rpc.pem" "rpc-key-$i.pem=$tmp/ca/node$i-rpc-key.pem")
  done
  manifest ConfigMap validator-config validator "${config[@]}" >"$tmp/k8s/validator-config.yaml"
  manifest Secret validator-keys validator "${keys[@]}" >"$tmp/k8s/validator-keys.yaml"
  manifest Secret gateway-tls gateway "ca.pem=$tmp/ca/ca.pem" "gateway.pem=$tmp/ca/gateway.pem" \
    "gateway-key.pem=$tmp/ca/gateway-key.pem" >"$tmp/k8s/gateway-tls.yaml"
  # The NATS Helm release (nats-values.yaml) serves clients and routes with
  # nats-tls; its accounts come from the indexer beside each server, starting
  # from the nats-authz Secret bootstrap.sh writes (deployments/README.md,
  # Kubernetes).
  manifest Secret nats-tls nats "ca.pem=$tmp/ca/ca.pem" "nats.pem=$tmp/ca/nats.pem" \
    "nats-key.pem=$tmp/ca/nats-key.pem" >"$tmp/k8s/nats-tls.yaml"
  manifest Secret indexer-nats indexer "ca.pem=$tmp/ca/ca.pem" \
    "nats.password=$tmp/indexer/nats.password" >"$tmp/k8s/indexer-nats.yaml"
fi

# Install into DIR. The directories may be mount points (compose volumes), so
# copy into them; genesis/genesis.json goes last and marks the output complete.
for ((i = 0; i < validators; i++)); do
  mkdir -p "$out/node$i"
  cp -R --preserve=mode "$tmp/net/node$i/." "$out/node$i/"
  chmod 644 "$out/node$i/config/rpc.pem" "$out/node$i/config/rpc-ca.pem"
done
if [ -d "$tmp/admin" ]; then
  mkdir -p "$out/admin"
  cp --preserve=mode "$tmp/admin/admin.key" "$tmp/admin/admin.pub" "$out/admin/"
  chmod 644 "$out/admin/admin.pub"
fi
mkdir -p "$out/tls" "$out/ca" "$out/nats" "$out/nats-accounts" "$out/indexer" "$out/consumer" "$out/app"
for f in ca.pem gateway.pem gateway-key.pem client.pem client-key.pem; do
  cp --preserve=mode "$tmp/ca/$f" "$out/tls/"
done
chmod 644 "$out/tls/ca.pem" "$out/tls/gateway.pem" "$out/tls/client.pem"
cp --preserve=mode "$tmp/ca/"*.pem "$out/ca/"
cp --preserve=mode "$tmp/nats/"* "$out/nats/"
chmod 644 "$out/nats/nats.pem"
cp --preserve=mode "$tmp/nats-accounts/accounts.conf" "$out/nats-accounts/"
for d in indexer consumer app; do
  cp --preserve=mode "$tmp/$d/"* "$out/$d/"
  chmod 644 "$out/$d/ca.pem"
done
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
