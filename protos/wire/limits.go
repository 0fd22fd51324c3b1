package wire

import byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"

// MaxTxBytes is the largest transaction the chain accepts. It is a chain rule,
// not a node setting: a proposal holding a larger transaction is rejected by
// every correct validator.
const MaxTxBytes = 2 << 20

// MaxLookahead bounds how far past the next sequence (or nonce) CheckTx lets
// a transaction wait in the mempool for the ones before it.
const MaxLookahead = 64

// MaxCompressionRatio bounds a zstd batch's declared uncompressed size by
// its compressed size (with a 64 KiB floor), so that the memory a validator
// sets aside for decompression is proportional to the bytes it was sent,
// not to what a frame header claims.
const MaxCompressionRatio = 256

// InflateAllowance is the most a zstd batch of compressed bytes may
// declare uncompressed: MaxCompressionRatio times its size, or 64 KiB
// (a chain rule).
func InflateAllowance(compressed int) int { return max(64<<10, MaxCompressionRatio*compressed) }

// DefaultBundleBytes is a gateway's default max_bundle_bytes: a producer
// batch up to this size fits a bundle of any gateway left at its defaults.
const DefaultBundleBytes = 1 << 20

// MaxReaders bounds a topic's reader list: each reader is a NATS user
// with permissions for the topic, which every server reload re-reads.
const MaxReaders = 256

// MaxCreateTopics bounds the topics of one CreateTopics admin request
// (rules version 7 on): 1,000 names of at most 249 bytes and their configs
// stay far under a transaction's bytes.
const MaxCreateTopics = 1000

// Bounds of Kafka transactions (rules version 8 on), each refused past it
// with CodeTxnLimit, or CodeBadTxnTimeout for the timeout.
const (
	// MaxTxnTimeoutMs is Kafka's transaction.max.timeout.ms default.
	MaxTxnTimeoutMs = 900_000
	// MaxTxnPartitions bounds the partitions one transaction writes.
	MaxTxnPartitions = 1000
	// MaxTxnOffsets bounds the offsets one transaction commits.
	MaxTxnOffsets = 1024
	// MaxOpenTxns bounds the transactions open in one partition at once:
	// each holds back its last stable offset.
	MaxOpenTxns = 256
	// MaxTxnIDs bounds the transactional ids one key holds.
	MaxTxnIDs = 1000
	// MaxTxnID bounds a transactional id's bytes (as a group name's).
	MaxTxnID = 255
)

// StateRootLag is how many blocks after a snapshot height h the root of
// the state after h is committed: validators hash the state in the
// background meanwhile, and block h+StateRootLag waits for it.
const StateRootLag = 8

// StateChunkBytes bounds a state chunk of a snapshot: a chunk ends before
// the entry that would take it past this, so only a single larger entry
// (a record of up to MaxSnapshotRecordBytes) makes a larger chunk. A chunk
// travels in one LoadSnapshotChunk answer, and a node's gRPC ABCI client
// takes no message over 4 MiB: a 4 MiB chunk was never delivered, and
// state sync timed out on a chain whose state passed 4 MiB.
const StateChunkBytes = 2 << 20

// MaxSnapshotRecordBytes is the largest max_record_bytes of a chain that
// hashes its state (snapshot_interval set): a stored record is one entry
// of a state chunk, and a chunk must stay under the 4 MiB a node's gRPC
// ABCI client takes (the rest of the stored record, its topic, producer
// key, offsets and framing, is far under the 1 MiB left).
const MaxSnapshotRecordBytes = 3 << 20

// DefaultLimits are the chain's bounds when genesis does not set them.
func DefaultLimits() *byzlogv1.Limits {
	return &byzlogv1.Limits{
		MaxRecordBytes:   1 << 20,
		MaxBatchRecords:  10000,
		MaxBatchBytes:    4 << 20,
		MaxHeaders:       10_000,
		MaxBundleBatches: 4096,
		MaxPartitions:    1024,
		MaxCommitOffsets: 1024,

		MaxTxRecords:              100_000,
		MaxTxUncompressedBytes:    16 << 20,
		MaxBlockRecords:           250_000,
		MaxBlockUncompressedBytes: 64 << 20,
	}
}

// MinUpgradeLead is how many blocks after the block that schedules it an
// upgrade may take effect at the soonest: time for every validator to see
// it and to replace its byzlog-app.
const MinUpgradeLead = 20
