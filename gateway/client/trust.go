package client

import (
	"context"
	"crypto/sha256"
	"fmt"

	"google.golang.org/protobuf/proto"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/chain/receipt"
	"github.com/byzlog/byzlog/protos/wire"
)

// Trust is what a client believes about the chain without asking a
// gateway (receipt.Trust): the chain it signs for and, unless it is
// TrustGateway, the root of trust its receipts are checked from.
type Trust = receipt.Trust

// TrustGenesis trusts the chain of a genesis file: receipts are checked
// against headers verified from the first header its validators signed.
func TrustGenesis(path string) (Trust, error) { return receipt.TrustGenesis(path) }

// TrustHeader trusts the chain from a header the operator checked: its
// height and hash (hex, as CometBFT's RPC prints it).
func TrustHeader(chainID string, height int64, hash string) (Trust, error) {
	return receipt.TrustHeader(chainID, height, hash)
}

// TrustGateway signs for chainID and takes receipts on the gateway's word
// (see receipt.TrustGateway): use it only with a gateway you run yourself.
func TrustGateway(chainID string) Trust { return receipt.TrustGateway(chainID) }

// ErrUnverified means a gateway's receipt did not check against the chain;
// the records may or may not have been written, and are not acknowledged.
var ErrUnverified = receipt.ErrUnverified

// checkBatch checks a produce receipt for the signed batch of n records and
// returns where the chain says it landed.
func checkBatch(ctx context.Context, v *receipt.Verifier, sb *byzlogv1.SignedBatch, body *byzlogv1.BatchBody, n int, rc *byzlogv1.Receipt) (*byzlogv1.BatchResult, error) {
	data, code, err := v.Result(ctx, rc.GetHeight(), rc.GetTxIndex(), rc.GetProof())
	if err != nil {
		return nil, err
	}
	var out byzlogv1.TxOutcome
	if err := proto.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("%w: the proven result is not a produce outcome: %v", ErrUnverified, err)
	}
	j := rc.GetProof().GetBatchIndex()
	if int(j) >= len(out.Batches) {
		return nil, fmt.Errorf("%w: the proven transaction has %d batches, the receipt names batch %d", ErrUnverified, len(out.Batches), j)
	}
	br := out.Batches[j]
	digest := sha256.Sum256(sb.Body)
	switch {
	case string(br.Producer) != string(sb.ProducerKey) || string(br.BodySha256) != string(digest[:]):
		return nil, fmt.Errorf("%w: the proven result at height %d is another batch's (producer %x, body digest %x)", ErrUnverified, rc.GetHeight(), br.Producer, br.BodySha256)
	case br.Topic != body.Topic || br.Partition != body.Partition || br.Sequence != body.Sequence:
		return nil, fmt.Errorf("%w: the proven result is of %s/%d sequence %d", ErrUnverified, br.Topic, br.Partition, br.Sequence)
	case !(code == 0 && br.Code == 0) && !(br.Duplicate && br.Code == uint32(wire.CodeDuplicate)):
		return nil, fmt.Errorf("%w: the chain did not write this batch at height %d (code %d)", ErrUnverified, rc.GetHeight(), br.Code)
	case int(br.RecordCount) != n:
		return nil, fmt.Errorf("%w: the chain wrote %d records of this batch, it has %d", ErrUnverified, br.RecordCount, n)
	case br.BaseOffset != rc.GetBaseOffset():
		return nil, fmt.Errorf("%w: the receipt says offset %d, the chain %d", ErrUnverified, rc.GetBaseOffset(), br.BaseOffset)
	}
	// A gateway answering a retry as a duplicate proves it with the
	// original write's result: written there, a duplicate here.
	if rc.GetDuplicate() && !br.Duplicate {
		br = proto.Clone(br).(*byzlogv1.BatchResult)
		br.Duplicate = true
	}
	return br, nil
}
