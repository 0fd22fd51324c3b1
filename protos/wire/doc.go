// Package wire is the contract every byzlog party must agree on, beside the
// protobuf messages it sits next to: how bodies are signed and checked
// (sign.go), the result codes a transaction can get (codes.go), the chain's
// bounds (limits.go), the rules for topic and group names (names.go), the
// ABCI query paths (paths.go) and how a committed transaction shows that a
// key used a nonce (nonce.go).
//
// The state machine (abciapp/core) enforces the contract; the gateway, the
// indexer and both SDKs depend on this package and never on the state
// machine, so a client builds without RocksDB or CometBFT's state code.
// Everything here is part of the wire: never renumber a code, rename a path
// or tighten a rule without a chain upgrade.
package wire
