package core

// Code is the result code of one transaction, as CometBFT reports it in
// CheckTx and in the block results. Zero is success; every other code means
// the transaction changed nothing. Codes are part of the wire contract: never
// renumber one.
type Code uint32

// Codespace names byzlog's result codes in CometBFT responses.
const Codespace = "byzlog"

const (
	// CodeOK: the transaction was accepted.
	CodeOK Code = 0
	// CodeMalformedTx: the bytes are not a protobuf byzlog.v1.Tx.
	CodeMalformedTx Code = 1
	// CodeUnknownTxKind: the Tx envelope carries no kind this version knows.
	CodeUnknownTxKind Code = 2
	// CodeTxTooLarge: the transaction is larger than the chain accepts.
	CodeTxTooLarge Code = 3
	// CodeEmptyBundle: a ProduceBundle holds no batch.
	CodeEmptyBundle Code = 4
	// CodeBadPublicKey: a signer's key is not a 32-byte ed25519 public key.
	CodeBadPublicKey Code = 5
	// CodeBadSignature: a signature does not verify over the body bytes.
	CodeBadSignature Code = 6
	// CodeEmptyBody: a signed body is empty.
	CodeEmptyBody Code = 7
	// CodeUnknownQuery: the query path is not one the app answers.
	CodeUnknownQuery Code = 8
)

// String names the code for logs and messages.
func (c Code) String() string {
	switch c {
	case CodeOK:
		return "ok"
	case CodeMalformedTx:
		return "malformed_tx"
	case CodeUnknownTxKind:
		return "unknown_tx_kind"
	case CodeTxTooLarge:
		return "tx_too_large"
	case CodeEmptyBundle:
		return "empty_bundle"
	case CodeBadPublicKey:
		return "bad_public_key"
	case CodeBadSignature:
		return "bad_signature"
	case CodeEmptyBody:
		return "empty_body"
	case CodeUnknownQuery:
		return "unknown_query"
	}
	return "unknown_code"
}
