// Package byzlogv1 holds byzlog's wire types, generated from the .proto files
// beside it: the transaction envelope that validators order and execute, and
// the gateway's gRPC API. It imports nothing of byzlog's; edit the .proto
// files and run `make proto`, never the generated code.
package byzlogv1
