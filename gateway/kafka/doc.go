// Package kafka is the gateway's Kafka face: it speaks Kafka's wire
// protocol, so Kafka's own clients (kcat and librdkafka, franz-go, the Java
// client) produce to and read from byzlog unchanged.
//
// It owns the protocol and nothing of the log. Every request becomes a call
// on the gateway (Backend): a Produce becomes batches signed with the
// authenticated principal's ed25519 key and submitted like any SDK batch, a
// Fetch reads committed records as f+1 nodes agree on them, and Metadata
// lists the gateways as the brokers. It keeps no state a restart loses
// beyond open connections; everything durable is on the chain.
//
// Kafka clients do not sign. The gateway holds each principal's key and
// signs for it, so a gateway that serves this face could forge records
// under the keys it holds; the SDK path stays signed end to end.
//
// The face bounds every cost before it pays it: bytes a connection may send
// before it authenticates, the size of one request, the bytes of requests
// in progress server-wide, connections, requests in flight per connection,
// and the CPU spent decoding and signing at once. It must never trust a
// client's length, count or codec before checking it against a bound.
//
// Wire encoding is franz-go's kmsg; nothing here hand-encodes what kmsg
// has.
package kafka
