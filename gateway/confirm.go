package gateway

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"

	abci "github.com/cometbft/cometbft/abci/types"
	ctypes "github.com/cometbft/cometbft/rpc/core/types"
	cmttypes "github.com/cometbft/cometbft/types"

	"github.com/byzlog/byzlog/gateway/nodes"
	"github.com/byzlog/byzlog/indexer/chain"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

// A receipt's offsets come from a committed block's results, and one node
// can lie about those. So the gateway uses a block, its results or a
// transaction lookup only once f+1 of its nodes (f = (nodes-1)/3, the
// faults 3f+1 validators tolerate) report the same hashes: at least one of
// them is honest. A gateway given a single node trusts it.

// quorum is how many nodes must agree: f+1.
func (g *Gateway) quorum() int { return (g.pool.Len()-1)/3 + 1 }

// blockData is one node's account of a block: the block, its results, and
// the hashes they are compared by.
type blockData struct {
	block   *ctypes.ResultBlock
	results *ctypes.ResultBlockResults
	digest  string // block hash + results hash, hex
	proofs  *chain.Results
}

// prove returns the proof of tx i's result (batch names the receipt's batch
// in it); withTx adds the tx's inclusion path.
func (d *blockData) prove(i, batch uint32, withTx bool) *byzlogv1.ResultProof {
	return d.proofs.Prove(int(i), batch, withTx)
}

// fetchBlock reads block h and its results from n and hashes them itself:
// the block hash from the header (whose data hash must cover the txs), the
// results as CometBFT's LastResultsHash does.
func fetchBlock(ctx context.Context, n *nodes.Node, h int64) (*blockData, error) {
	blk, err := n.Client.Block(ctx, &h)
	if err != nil {
		return nil, fmt.Errorf("block %d from %s: %w", h, n.Addr, err)
	}
	res, err := n.Client.BlockResults(ctx, &h)
	if err != nil {
		return nil, fmt.Errorf("block results %d from %s: %w", h, n.Addr, err)
	}
	if len(res.TxsResults) != len(blk.Block.Txs) {
		return nil, fmt.Errorf("block %d from %s: %d txs but %d results", h, n.Addr, len(blk.Block.Txs), len(res.TxsResults))
	}
	if !bytes.Equal(blk.Block.Data.Hash(), blk.Block.DataHash) {
		return nil, fmt.Errorf("block %d from %s: its txs do not match its header's data hash", h, n.Addr)
	}
	proofs := chain.NewResults(blk.Block.Txs, res.TxsResults)
	return &blockData{block: blk, results: res, digest: blockDigest(blk.Block.Hash(), proofs.Hash()), proofs: proofs}, nil
}

func blockDigest(blockHash, resultsHash []byte) string {
	return hex.EncodeToString(blockHash) + "/" + hex.EncodeToString(resultsHash)
}

// confirmedBlock returns block h and its results as n reports them once
// quorum nodes agree, or what quorum other nodes agree on if n is alone.
func (g *Gateway) confirmedBlock(ctx context.Context, n *nodes.Node, h int64) (*blockData, error) {
	first, err := fetchBlock(ctx, n, h)
	if err != nil {
		return nil, err
	}
	need := g.quorum()
	if need <= 1 {
		return first, nil
	}
	votes := map[string]int{first.digest: 1}
	full := map[string]*blockData{first.digest: first}
	for _, m := range g.pool.Others(n) {
		var d *blockData
		if len(votes) == 1 {
			d, err = confirmHeader(ctx, m, h) // all agree so far: a header and results do
		} else {
			d, err = fetchBlock(ctx, m, h)
		}
		if err != nil {
			continue
		}
		votes[d.digest]++
		if d.block != nil && full[d.digest] == nil {
			full[d.digest] = d
		}
		if votes[d.digest] < need {
			continue
		}
		b := full[d.digest]
		if b == nil { // agreed on by headers only: take the block from m
			if b, err = fetchBlock(ctx, m, h); err != nil || b.digest != d.digest {
				continue
			}
		}
		if b.digest != first.digest {
			g.log.Warn().Str("node", n.Addr).Int64("height", h).Msg("a node's block or results differ from what the others agree on; using theirs")
			g.metrics.disagreements.Inc()
		}
		return b, nil
	}
	return nil, fmt.Errorf("block %d: fewer than %d nodes agree on its hash and results (%d accounts)", h, need, len(votes))
}

// confirmHeader reads block h's header and results from m: enough to
// compare, not to use (block is nil).
func confirmHeader(ctx context.Context, m *nodes.Node, h int64) (*blockData, error) {
	hdr, err := m.Client.Header(ctx, &h)
	if err != nil || hdr.Header == nil {
		return nil, fmt.Errorf("header %d from %s: %v", h, m.Addr, err)
	}
	res, err := m.Client.BlockResults(ctx, &h)
	if err != nil {
		return nil, fmt.Errorf("block results %d from %s: %w", h, m.Addr, err)
	}
	return &blockData{results: res, digest: blockDigest(hdr.Header.Hash(), cmttypes.NewResults(res.TxsResults).Hash())}, nil
}

// confirmedTx returns what n's transaction index says about hash once
// quorum nodes say the same (height, index, result); nil when fewer do
// (not committed as far as the gateway can tell: still pending).
func (g *Gateway) confirmedTx(ctx context.Context, n *nodes.Node, hash []byte) *ctypes.ResultTx {
	first, err := n.Client.Tx(ctx, hash, false)
	if err != nil {
		return nil
	}
	need := g.quorum()
	key := func(r *ctypes.ResultTx) string {
		return fmt.Sprintf("%d/%d/%x", r.Height, r.Index, cmttypes.NewResults([]*abci.ExecTxResult{&r.TxResult}).Hash())
	}
	votes := map[string]int{key(first): 1}
	for _, m := range g.pool.Others(n) {
		if votes[key(first)] >= need {
			break
		}
		r, err := m.Client.Tx(ctx, hash, false)
		if err != nil {
			continue
		}
		votes[key(r)]++
	}
	if votes[key(first)] < need {
		return nil
	}
	return first
}
