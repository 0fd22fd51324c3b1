package receipt

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"

	abci "github.com/cometbft/cometbft/abci/types"
	"github.com/cometbft/cometbft/crypto/merkle"
	cmttypes "github.com/cometbft/cometbft/types"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

// ErrProof means a proof does not lead to the verified header: whoever
// served it, the claim it was sent with is not what the chain committed.
var ErrProof = errors.New("proof does not match the verified header")

// maxAunts bounds a Merkle path: 2^64 leaves need 64, so more is a lie, and
// checking it would cost hashing the liar pays nothing for.
const maxAunts = 64

// Results is one block's transaction results and, computed on first use
// and then shared, the Merkle proof of each. Safe for concurrent use.
type Results struct {
	txs     cmttypes.Txs
	results []*abci.ExecTxResult
	once    sync.Once
	leaves  [][]byte
	proofs  []*merkle.Proof
	txRoot  []byte
	txProof []*merkle.Proof
}

// NewResults wraps block txs and their results (one each).
func NewResults(txs cmttypes.Txs, results []*abci.ExecTxResult) *Results {
	return &Results{txs: txs, results: results}
}

// Hash is the block's results hash: the next header's LastResultsHash.
func (r *Results) Hash() []byte { return cmttypes.NewResults(r.results).Hash() }

func (r *Results) build() {
	r.once.Do(func() {
		det := cmttypes.NewResults(r.results)
		r.leaves = make([][]byte, len(det))
		for i, d := range det {
			b, err := d.Marshal()
			if err != nil {
				panic(fmt.Sprintf("marshal a decoded ExecTxResult: %v", err)) // cannot happen
			}
			r.leaves[i] = b
		}
		_, r.proofs = merkle.ProofsFromByteSlices(r.leaves)
		hashes := make([][]byte, len(r.txs))
		for i, tx := range r.txs {
			hashes[i] = tx.Hash()
		}
		r.txRoot, r.txProof = merkle.ProofsFromByteSlices(hashes)
	})
}

// Prove returns the proof of transaction i's result, naming batch as the
// receipt's batch in it. withTx adds the transaction's inclusion path (for
// a client that knows its transaction's bytes: admin and offset commits).
func (r *Results) Prove(i int, batch uint32, withTx bool) *byzlogv1.ResultProof {
	r.build()
	p := r.proofs[i]
	rp := &byzlogv1.ResultProof{TxResult: r.leaves[i], Total: p.Total, Index: p.Index, Aunts: p.Aunts, BatchIndex: batch}
	if withTx && i < len(r.txProof) {
		rp.TxTotal, rp.TxAunts = r.txProof[i].Total, r.txProof[i].Aunts
	}
	return rp
}

// CheckResult checks that p's result is transaction index's result in the
// block whose results next (the verified header one above it) hashes, and
// returns it decoded.
func CheckResult(next *cmttypes.Header, index uint32, p *byzlogv1.ResultProof) (*abci.ExecTxResult, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: no proof", ErrProof)
	}
	if p.Index != int64(index) {
		return nil, fmt.Errorf("%w: the proof is of tx %d, the receipt names tx %d", ErrProof, p.Index, index)
	}
	if err := verifyPath(next.LastResultsHash, p.Total, p.Index, p.Aunts, p.TxResult); err != nil {
		return nil, fmt.Errorf("%w: result of tx %d at height %d: %v", ErrProof, index, next.Height-1, err)
	}
	var res abci.ExecTxResult
	if err := res.Unmarshal(p.TxResult); err != nil {
		return nil, fmt.Errorf("%w: the proven result does not decode: %v", ErrProof, err)
	}
	return &res, nil
}

// CheckTx checks that tx is transaction index of the block whose verified
// header is hdr (by its data hash), with p's tx path.
func CheckTx(hdr *cmttypes.Header, index uint32, tx []byte, p *byzlogv1.ResultProof) error {
	if p == nil {
		return fmt.Errorf("%w: no proof", ErrProof)
	}
	h := sha256.Sum256(tx)
	if err := verifyPath(hdr.DataHash, p.TxTotal, int64(index), p.TxAunts, h[:]); err != nil {
		return fmt.Errorf("%w: tx %d at height %d is not this transaction: %v", ErrProof, index, hdr.Height, err)
	}
	return nil
}

func verifyPath(root []byte, total, index int64, aunts [][]byte, leaf []byte) error {
	if len(aunts) > maxAunts || total <= 0 || index < 0 || index >= total {
		return fmt.Errorf("malformed path (total %d, index %d, %d aunts)", total, index, len(aunts))
	}
	lh := sha256.Sum256(append([]byte{0}, leaf...)) // RFC 6962 leaf hash, as merkle does
	pr := merkle.Proof{Total: total, Index: index, LeafHash: lh[:], Aunts: aunts}
	return pr.Verify(root, leaf)
}
