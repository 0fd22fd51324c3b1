package gateway

import (
	"context"
	"fmt"

	abci "github.com/cometbft/cometbft/abci/types"
	ctypes "github.com/cometbft/cometbft/rpc/core/types"
	cmttypes "github.com/cometbft/cometbft/types"

	"github.com/byzlog/byzlog/gateway/nodes"
	"github.com/byzlog/byzlog/indexer/chain"
)

// A receipt's offsets come from a committed block's results, and one node
// can lie about those. So the gateway uses a block, its results or a
// transaction lookup only once f+1 of its nodes (f = (nodes-1)/3, the
// faults 3f+1 validators tolerate) report the same hashes: at least one of
// them is honest. A gateway given a single node trusts it.

// quorum is how many of n nodes must agree: f+1.
func quorum(n int) int { return (n-1)/3 + 1 }

// quorum is how many of the gateway's nodes must agree.
func (g *Gateway) quorum() int { return quorum(g.pool.Len()) }

// confirmedBlock returns block h and its results as n reports them once
// quorum nodes agree (chain.Block's Digest: block hash and results hash),
// or what quorum other nodes agree on if n is alone. Every account is read
// and checked by chain.ReadBlock, the reader the indexer uses too. A node
// that cannot serve h (one that joined by state sync or prunes has no old
// blocks, or it is down) is passed over for the next.
func (g *Gateway) confirmedBlock(ctx context.Context, n *nodes.Node, h int64) (*chain.Block, error) {
	first, err := readBlock(ctx, n, h)
	others := g.pool.Others(n)
	for err != nil && len(others) > 0 {
		n, others = others[0], others[1:]
		first, err = readBlock(ctx, n, h)
	}
	if err != nil {
		return nil, fmt.Errorf("no node serves block %d (the last asked: %w)", h, err)
	}
	need := g.quorum()
	if need <= 1 {
		return first, nil
	}
	votes := map[string]int{first.Digest(): 1}
	full := map[string]*chain.Block{first.Digest(): first}
	for _, m := range others {
		var digest string
		if len(votes) == 1 {
			digest, err = headerDigest(ctx, m, h) // all agree so far: a header and results do
		} else {
			var b *chain.Block
			if b, err = readBlock(ctx, m, h); err == nil {
				digest = b.Digest()
				if full[digest] == nil {
					full[digest] = b
				}
			}
		}
		if err != nil {
			continue
		}
		votes[digest]++
		if votes[digest] < need {
			continue
		}
		b := full[digest]
		if b == nil { // agreed on by headers only: take the block from m
			if b, err = readBlock(ctx, m, h); err != nil || b.Digest() != digest {
				continue
			}
		}
		if digest != first.Digest() {
			g.log.Warn().Str("node", n.Addr).Int64("height", h).Msg("a node's block or results differ from what the others agree on; using theirs")
			g.metrics.disagreements.Inc()
		}
		return b, nil
	}
	return nil, fmt.Errorf("block %d: fewer than %d nodes agree on its hash and results (%d accounts)", h, need, len(votes))
}

// readBlock reads block h and its results from n (chain.ReadBlock).
func readBlock(ctx context.Context, n *nodes.Node, h int64) (*chain.Block, error) {
	b, _, err := chain.ReadBlock(ctx, n.Client, h)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", n.Addr, err)
	}
	return b, nil
}

// headerDigest is block h's chain.Digest from m's header and results:
// enough to compare with a Block, not to use.
func headerDigest(ctx context.Context, m *nodes.Node, h int64) (string, error) {
	hdr, err := m.Client.Header(ctx, &h)
	if err != nil || hdr.Header == nil {
		return "", fmt.Errorf("header %d from %s: %v", h, m.Addr, err)
	}
	res, err := m.Client.BlockResults(ctx, &h)
	if err != nil {
		return "", fmt.Errorf("block results %d from %s: %w", h, m.Addr, err)
	}
	return chain.Digest(hdr.Header.Hash(), res.TxsResults), nil
}

// confirmedTx returns what n's transaction index says about hash once
// quorum nodes say the same (height, index, result); nil when fewer do
// (not committed as far as the gateway can tell: still pending). A node
// that does not know hash (one that joined by state sync has no index of
// older transactions) is passed over for the next.
func (g *Gateway) confirmedTx(ctx context.Context, n *nodes.Node, hash []byte) *ctypes.ResultTx {
	first, err := n.Client.Tx(ctx, hash, false)
	others := g.pool.Others(n)
	for err != nil && len(others) > 0 {
		first, err = others[0].Client.Tx(ctx, hash, false)
		others = others[1:]
	}
	if err != nil {
		return nil
	}
	need := g.quorum()
	key := func(r *ctypes.ResultTx) string {
		return fmt.Sprintf("%d/%d/%x", r.Height, r.Index, cmttypes.NewResults([]*abci.ExecTxResult{&r.TxResult}).Hash())
	}
	votes := map[string]int{key(first): 1}
	for _, m := range others {
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
