// Package batch decodes the Kafka record batches (magic 2) a client sends
// in a Produce request, and encodes the batches a Fetch answers with.
//
// It is pure: no I/O, no logging, no goroutines. The bytes it decodes come
// from untrusted clients, so every length, count and codec is checked
// against Limits before anything proportional to it is allocated, and a
// compressed batch is never inflated past its bound. Wire structures are
// franz-go's kmsg and kbin; nothing here hand-encodes what they have.
package batch
