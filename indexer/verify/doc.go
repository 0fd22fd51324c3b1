// Package verify hands out committed blocks the indexer may trust: headers
// verified with CometBFT's light client from a root of trust (every node a
// primary in turn, the others its witnesses), block data read round-robin
// from the nodes and checked against those headers, skipping a node whose
// data does not match. Headers checks single records against the app hash
// for the consumer SDK's verify mode. It trusts no node's word alone and
// publishes nothing: following and publishing are the indexer's.
package verify
