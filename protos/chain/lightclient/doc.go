// Package lightclient verifies headers with CometBFT's own light client
// (cometbft/light) from a root of trust, for the indexer: every header in
// turn (Config.Sequential), every node a primary in turn and the others
// its witnesses (Config.CrossCheck), the verified headers in an in-memory
// light store.
//
// CometBFT's light package brings its RPC client, the node configuration
// and a database (cometbft-db, goleveldb) with it: no SDK may import this
// package. The SDKs verify headers with package receipt, by the same rules
// on CometBFT's types alone.
package lightclient
