// Package indexer is byzlog's read path: it follows committed blocks by
// height from several CometBFT nodes, verifies every header with CometBFT's
// light client (sequential verification from a root of trust taken from
// genesis or configured), checks each block's transactions, results and
// app-hash digest against the verified headers, rebuilds the block's
// records with the state machine's own code (core.BlockRecords), and
// publishes them to NATS JetStream as package layout describes. It never
// publishes a record from data it could not verify; a node serving
// mismatching data is skipped and counted. Its cursor (the last height
// JetStream acknowledged in full) lives in a JetStream key-value bucket
// next to the streams it describes, so the two cannot disagree.
package indexer
