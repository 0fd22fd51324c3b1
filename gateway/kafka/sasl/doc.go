// Package sasl authenticates the Kafka face's clients: SASL PLAIN
// (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802, 7677) against a users file,
// and maps each user to the ed25519 key the gateway signs its batches with.
//
// The users file holds no password: only SCRAM's salted credentials, from
// which PLAIN is checked too. A wrong user and a wrong password fail alike,
// at about the same cost, and every client message is bounded before it
// is parsed. It never logs or returns a password or a private key.
package sasl
