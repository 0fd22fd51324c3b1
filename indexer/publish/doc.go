// Package publish writes verified blocks to NATS JetStream, exactly once
// per record: each record (or run of a block's consecutive records of a
// partition) on its partition's subject in its topic's stream, each block's
// BlockInfo in the blocks stream, every message expecting the stream's
// last sequence so that nothing is stored twice whoever publishes again.
// Streams follow the topics' configs (retention.go) and NATS's read
// permissions their readers (access.go); the cursor bucket keeps the
// cursor, the configs and the access. It verifies nothing: blocks come
// from verify, and which block to publish next is the indexer's.
package publish
