#!/usr/bin/env bash
# bootstrap.sh OUT generates the validators of deployments/k8s into OUT with
# init-cluster.sh: the network (genesis, keys, configs) whose peers are the
# StatefulSet's pods, validator-<i>.validator:26656, and from it, in OUT/k8s/:
#   validator-config.yaml  ConfigMap: genesis.json, config-<i>.toml, rpc-ca.pem
#   validator-keys.yaml    Secret: node_key-<i>.json, priv_validator_key-<i>.json,
#                          rpc-<i>.pem, rpc-key-<i>.pem (node i's RPC certificate,
#                          valid for validator-<i>.validator, localhost, 127.0.0.1)
#   gateway-tls.yaml       Secret: the gateways' certificate, valid for the gateway
#                          Service's names, and the CA (ca.pem, also OUT/tls/ca.pem)
#   nats-tls.yaml          Secret: NATS's certificate, valid for the Service nats,
#                          the servers' route names (*.nats-headless) and loopback
#                          (the indexer beside each server dials 127.0.0.1)
#   indexer-nats.yaml      Secret: the CA and user indexer's NATS password
#   nats-authz.yaml        Secret: authz.json, the indexers' --nats-authz (the
#                          accounts file /etc/nats-accounts/accounts.conf and
#                          every NATS user's password), and accounts.conf, that
#                          file as indexer/natsauth renders it for no topic, which
#                          each NATS server pod starts from (nats-values.yaml)
# OUT/consumer/ holds user consumer's password and the CA, for readers.
# Extra flags go to init-cluster.sh, e.g. --admin-pubkey HEX. Keep OUT
# private: it holds every validator's key and the CA's (OUT/ca).
set -euo pipefail
out=${1:?usage: bootstrap.sh OUT [init-cluster.sh flags]}
shift
accounts_dir=/etc/nats-accounts # where nats-values.yaml mounts the accounts file
"$(dirname "$0")/../init-cluster.sh" --out "$out" --validators 4 --chain-id byzlog \
  --hostname-prefix validator- --hostname-suffix .validator --p2p-port 26656 --abci-port 26658 --k8s \
  --tls-hosts gateway,gateway.byzlog,gateway.byzlog.svc,gateway.byzlog.svc.cluster.local,localhost,127.0.0.1 \
  --rpc-tls-hosts localhost,127.0.0.1 \
  --nats-tls-hosts 'nats,nats.byzlog,nats.byzlog.svc,nats.byzlog.svc.cluster.local,*.nats-headless,*.nats-headless.byzlog.svc.cluster.local,localhost,127.0.0.1' \
  --nats-accounts-dir "$accounts_dir" \
  "$@"

[ -f "$out/genesis/genesis.json" ] || exit 0 # --help

# The NATS servers take their users from the accounts file their indexer
# keeps, not from the environment: a nats-users Secret an older
# init-cluster.sh wrote (for static accounts) is not used here.
rm -f "$out/k8s/nats-users.yaml"
conf=$(jq -r .conf "$out/indexer/authz.json")
if [ "$conf" != "$accounts_dir/accounts.conf" ]; then
  echo "bootstrap.sh: $out/indexer/authz.json names the accounts file $conf, but the NATS pods mount it at $accounts_dir/accounts.conf (was --nats-accounts-dir given?)" >&2
  exit 1
fi
umask 077
{
  printf 'apiVersion: v1\nkind: Secret\nmetadata:\n  name: nats-authz\n'
  printf '  labels:\n    app.kubernetes.io/name: byzlog\n    app.kubernetes.io/component: nats\n'
  printf 'type: Opaque\ndata:\n'
  printf '  authz.json: %s\n' "$(base64 -w0 "$out/indexer/authz.json")"
  printf '  accounts.conf: %s\n' "$(base64 -w0 "$out/nats-accounts/accounts.conf")"
} >"$out/k8s/nats-authz.yaml.new"
mv "$out/k8s/nats-authz.yaml.new" "$out/k8s/nats-authz.yaml"
echo "bootstrap.sh: wrote $out/k8s/nats-authz.yaml (the NATS servers' accounts, kept by the indexer beside each)" >&2
