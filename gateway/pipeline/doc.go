// Package pipeline is byzlog's stateless produce pipeline, under the
// gateway's faces: the gRPC face (grpcface), the HTTP/JSON face (httpface)
// and the Kafka face (kafka) sit beside each other over it, each through
// small interfaces of its own, and speak no chain themselves. The pipeline
// admits only batches that can commit, within per-producer and global bounds
// (admission.go, with topic metadata from topics.go). It bundles them for a
// linger into CometBFT transactions and submits each to a healthy node,
// failing over to another (the node pool is gateway/nodes). It uses a
// block, its results or a transaction lookup only once f+1 nodes report the
// same (confirm.go), and answers each batch with a receipt and proofs from
// the block's results, so a client checks it against headers instead of
// trusting the gateway. A batch that is in two bundles at once (conflict.go)
// and a node's word that a batch is a duplicate (duplicate.go) are settled
// from committed blocks, never from one node's answer. Queries are answered
// as f+1 nodes agree (query.go). It relays light blocks for clients' light
// clients (lightblock.go).
//
// The produce path is built as small stages, after etcd raft's
// RawNode/Ready: the bundler (bundler.go: requests in, bundles out, by
// size and linger) and the tracker (tracker.go: pending transactions plus
// confirmed block data in, settlements out: receipts, errors,
// resubmissions, splits and give-ups) do no I/O, start no goroutine and
// read no clock. The driver (driver.go) owns the goroutines, the timers
// and the node calls, and carries their decisions out.
//
// It holds nothing a restart would lose and signs nothing: a batch is the
// producer's, an admin request the admin's.
package pipeline
