// Package wire is the contract every byzlog party must agree on, beside the
// protobuf messages it sits next to: how bodies are signed and checked
// (sign.go), the result codes a transaction can get (codes.go), the chain's
// bounds (limits.go), the rules for topic and group names (names.go), the
// ABCI query paths (paths.go) and how a committed transaction shows that a
// key used a nonce (nonce.go).
//
// The state machine (abciapp/core) enforces the contract. Both SDKs depend
// on this package and never on the state machine, so a client builds
// without RocksDB or CometBFT's state code. The gateway and the indexer do
// import the pure core (no I/O, no RocksDB) where they must compute exactly
// what the chain computes: the gateway its stateless check of a transaction
// (core.ValidateTx), the indexer the records a block appends and their
// digests (core.BlockRecords, core.CheckDigest), so they never keep a second
// copy of a rule that could drift from the chain's.
// Everything here is part of the wire: never renumber a code, rename a path
// or tighten a rule without a chain upgrade.
package wire
