// Package gateway will own byzlog's produce path: the gRPC and HTTP produce
// API, bundling of producers' signed batches into CometBFT transactions,
// submission with failover, and receipts taken from committed blocks; its
// client subpackage will be the producer SDK. It must never hold state a
// restart would lose, nor be trusted with anything a producer did not sign.
// The module is part of the workspace now so the layout is fixed; its code
// lands with the gateway issue.
package gateway
