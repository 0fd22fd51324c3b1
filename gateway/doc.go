// Package gateway holds no code: it names the rooms of byzlog's gateway.
//
//   - pipeline: the produce pipeline every face writes through (admission,
//     bundling, submission with failover, commit tracking, receipts with
//     proofs) and the reads it answers as f+1 nodes agree (queries, light
//     blocks). Its faces' tests run on its in-memory test chain, in its
//     folder (pipeline_test).
//   - grpcface, httpface, kafka: the faces, beside each other over the
//     pipeline, each through small interfaces it owns. Kafka transactions
//     and admin APIs belong in kafka (and what they must decide on the
//     chain, in abciapp/core). A web console: a face of its own beside the
//     others (reading through pipeline and protos/chain), wired by a main
//     in services/.
//   - nodes: the pool of CometBFT nodes a gateway submits to and reads from.
//   - client: the producer and admin SDK.
package gateway
