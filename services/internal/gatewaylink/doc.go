// Package gatewaylink holds the flags a command takes to reach a gateway:
// its TLS (checked against a CA, mutual, or plaintext with --insecure), the
// client's root of trust (a genesis or a checked header; never learned from
// a gateway), dialing, and --acks. The byzlog and byzlog-lab commands share
// it; it never talks to a gateway on its own.
package gatewaylink
