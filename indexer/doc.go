// Package indexer is byzlog's read path, and this package its follower: it
// follows committed blocks by height, verified (package verify: headers by
// CometBFT's light client from a root of trust, each block's transactions,
// results and app-hash digest checked against them, its records rebuilt
// with the state machine's own code), hands them to the publisher (package
// publish: NATS JetStream, as package layout describes), and keeps the
// cursor: the last height JetStream acknowledged in full, with each
// partition's end (package reconcile), in a JetStream key-value bucket next
// to the streams it describes, so the two cannot disagree. Before it
// resumes it reconciles the cursor with what the streams hold. It never
// publishes a record from data it could not verify; a node serving
// mismatching data is skipped and counted.
package indexer
