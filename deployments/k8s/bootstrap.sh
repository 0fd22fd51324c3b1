#!/usr/bin/env bash
# bootstrap.sh OUT generates the validators of deployments/k8s into OUT with
# init-cluster.sh: the network (genesis, keys, configs) whose peers are the
# StatefulSet's pods, validator-<i>.validator:26656, and from it
# OUT/k8s/validator-config.yaml (ConfigMap: genesis.json, config-<i>.toml) and
# OUT/k8s/validator-keys.yaml (Secret: node_key-<i>.json,
# priv_validator_key-<i>.json) and OUT/k8s/gateway-tls.yaml (Secret: the
# gateways' TLS certificate, valid for the gateway Service's names, and the
# CA clients check it with, OUT/tls/ca.pem). Extra flags go to init-cluster.sh, e.g.
# --admin-pubkey HEX. Keep OUT private: it holds every validator's key.
set -euo pipefail
out=${1:?usage: bootstrap.sh OUT [init-cluster.sh flags]}
shift
exec "$(dirname "$0")/../init-cluster.sh" --out "$out" --validators 4 --chain-id byzlog \
  --hostname-prefix validator- --hostname-suffix .validator --p2p-port 26656 --abci-port 26658 --k8s \
  --tls-hosts gateway,gateway.byzlog,gateway.byzlog.svc,gateway.byzlog.svc.cluster.local,localhost,127.0.0.1 "$@"
