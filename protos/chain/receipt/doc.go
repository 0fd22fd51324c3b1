// Package receipt checks what a gateway says about a byzlog chain, for the
// producer, admin and consumer SDKs: headers verified from a root of trust
// the client configures (CometBFT's light client rules, verifyHeader, over
// the gateways' light blocks), and transactions and their results against
// those headers by Merkle proofs (Verifier). It trusts no gateway: whoever
// relays the data, the checks are signatures and hashes. The gateway builds
// the proofs with Results.
//
// It is linked into every SDK user's program, so it stays lean: it never
// imports CometBFT's light client (cometbft/light, whose providers pull in
// the RPC client, the node configuration and a database), CometBFT's RPC or
// node packages, or any storage engine; CometBFT's types and its light
// provider interface are all it takes. TestSDKsStayLean holds it, and the
// SDKs, to that. The indexer, which runs CometBFT's light client itself,
// has package lightclient.
package receipt
