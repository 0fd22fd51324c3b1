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
// import the pure core (no I/O, no RocksDB) where they must compute or know
// exactly what the chain does, so they never keep a second copy of a rule
// that could drift from the chain's:
//   - the gateway: its stateless check of a transaction (core.ValidateTx),
//     and in the Kafka face the rules versions from which the chain reads
//     an operation (core.CreateTopicsRulesVersion,
//     core.KafkaTopicsRulesVersion);
//   - the indexer: the records a block appends and their digests
//     (core.BlockRecords with core.TxResult, core.CheckDigest, giving
//     core.Appended and core.AppendedPartition) under the newest rules
//     (core.MaxRulesVersion) and, when the digest differs, under the rules
//     before core.TxnRulesVersion, core.KafkaTopicsRulesVersion and
//     core.KafkaRulesVersion; a record's proof against an app hash
//     (core.VerifyRecord); the topics a block creates, updates or deletes
//     (core.TopicChange), with genesis's topics read by its main
//     (core.ParseGenesis, in services/byzlog-indexer).
//
// Everything here is part of the wire: never renumber a code, rename a path
// or tighten a rule without a chain upgrade.
package wire
