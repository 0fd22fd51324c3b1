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
#   nats-users.yaml        Secret: the NATS users' passwords (indexer-password,
#                          consumer-password), which the NATS servers read
#   indexer-nats.yaml      Secret: the CA and user indexer's NATS password
# OUT/consumer/ holds user consumer's password and the CA, for readers.
# Extra flags go to init-cluster.sh, e.g. --admin-pubkey HEX. Keep OUT
# private: it holds every validator's key and the CA's (OUT/ca).
set -euo pipefail
out=${1:?usage: bootstrap.sh OUT [init-cluster.sh flags]}
shift
exec "$(dirname "$0")/../init-cluster.sh" --out "$out" --validators 4 --chain-id byzlog \
  --hostname-prefix validator- --hostname-suffix .validator --p2p-port 26656 --abci-port 26658 --k8s \
  --tls-hosts gateway,gateway.byzlog,gateway.byzlog.svc,gateway.byzlog.svc.cluster.local,localhost,127.0.0.1 \
  --rpc-tls-hosts localhost,127.0.0.1 \
  --nats-tls-hosts 'nats,nats.byzlog,nats.byzlog.svc,nats.byzlog.svc.cluster.local,*.nats-headless,*.nats-headless.byzlog.svc.cluster.local,localhost,127.0.0.1' \
  "$@"
