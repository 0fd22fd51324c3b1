package core

import (
	"crypto/ed25519"
	"fmt"

	"google.golang.org/protobuf/proto"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

// ValidateTx checks what can be checked of a transaction without state: that
// it decodes, is within size, and that every signature verifies over exactly
// the body bytes it carries. CheckTx, ProcessProposal and FinalizeBlock all
// call it, so a transaction one of them accepts the others accept too.
func ValidateTx(tx []byte) Result {
	if len(tx) > MaxTxBytes {
		return reject(CodeTxTooLarge, "transaction is %d bytes, the chain accepts at most %d", len(tx), MaxTxBytes)
	}
	var env byzlogv1.Tx
	if err := proto.Unmarshal(tx, &env); err != nil {
		return reject(CodeMalformedTx, "transaction is not a byzlog.v1.Tx: %v", err)
	}
	switch k := env.Kind.(type) {
	case *byzlogv1.Tx_ProduceBundle:
		if len(k.ProduceBundle.GetBatches()) == 0 {
			return reject(CodeEmptyBundle, "produce bundle holds no batch")
		}
		for i, b := range k.ProduceBundle.Batches {
			if r := checkSigned(fmt.Sprintf("batch %d", i), b.GetBody(), b.GetProducerKey(), b.GetSignature()); !r.OK() {
				return r
			}
		}
	case *byzlogv1.Tx_CreateTopic:
		c := k.CreateTopic
		return checkSigned("create topic", c.GetBody(), c.GetAdminKey(), c.GetSignature())
	case *byzlogv1.Tx_CommitOffsets:
		c := k.CommitOffsets
		return checkSigned("commit offsets", c.GetBody(), c.GetConsumerKey(), c.GetSignature())
	default:
		return reject(CodeUnknownTxKind, "transaction has no kind this version knows (empty envelope or a newer client)")
	}
	return Result{Code: CodeOK}
}

func checkSigned(what string, body, key, sig []byte) Result {
	if len(body) == 0 {
		return reject(CodeEmptyBody, "%s: body is empty", what)
	}
	if len(key) != ed25519.PublicKeySize {
		return reject(CodeBadPublicKey, "%s: signer key is %d bytes, an ed25519 public key is %d", what, len(key), ed25519.PublicKeySize)
	}
	if len(sig) != ed25519.SignatureSize || !ed25519.Verify(ed25519.PublicKey(key), body, sig) {
		return reject(CodeBadSignature, "%s: signature does not verify over the body with the given key", what)
	}
	return Result{Code: CodeOK}
}

func reject(c Code, format string, args ...any) Result {
	return Result{Code: c, Log: fmt.Sprintf(format, args...)}
}
