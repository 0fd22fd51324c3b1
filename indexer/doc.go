// Package indexer will own byzlog's read path: following committed blocks,
// verifying every header with CometBFT's light client, and publishing the
// records to NATS JetStream exactly once; its consumer subpackage will be the
// consumer SDK. It must never publish a record from a block it has not
// verified. The module is part of the workspace now so the layout is fixed;
// its code lands with the indexer issue.
package indexer
