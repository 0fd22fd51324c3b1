package wire

import (
	"google.golang.org/protobuf/proto"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

// NonceUse returns the signing key and nonce of a signed admin request,
// offset commit or Kafka transaction step, the kinds that use a key's
// nonce; ok is false for
// anything else, or a transaction whose signature does not verify. A
// client shown the transaction that used its nonce checks with it that the
// nonce is used, given a proof that the transaction was committed.
func NonceUse(tx []byte) (key []byte, nonce uint64, ok bool) {
	if len(tx) > MaxTxBytes {
		return nil, 0, false
	}
	var env byzlogv1.Tx
	if proto.Unmarshal(tx, &env) != nil {
		return nil, 0, false
	}
	switch k := env.Kind.(type) {
	case *byzlogv1.Tx_Admin:
		var body byzlogv1.AdminBody
		if !Verify(k.Admin.GetAdminKey(), k.Admin.GetBody(), k.Admin.GetSignature()) || proto.Unmarshal(k.Admin.GetBody(), &body) != nil {
			return nil, 0, false
		}
		return k.Admin.GetAdminKey(), body.Nonce, true
	case *byzlogv1.Tx_CommitOffsets:
		var body byzlogv1.CommitOffsetsBody
		if !Verify(k.CommitOffsets.GetConsumerKey(), k.CommitOffsets.GetBody(), k.CommitOffsets.GetSignature()) || proto.Unmarshal(k.CommitOffsets.GetBody(), &body) != nil {
			return nil, 0, false
		}
		return k.CommitOffsets.GetConsumerKey(), body.Nonce, true
	case *byzlogv1.Tx_Txn:
		var body byzlogv1.TxnBody
		if !Verify(k.Txn.GetProducerKey(), k.Txn.GetBody(), k.Txn.GetSignature()) || proto.Unmarshal(k.Txn.GetBody(), &body) != nil {
			return nil, 0, false
		}
		return k.Txn.GetProducerKey(), body.Nonce, true
	}
	return nil, 0, false
}
