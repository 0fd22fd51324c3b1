package pipeline

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/byzlog/byzlog/gateway/nodes"
	"github.com/byzlog/byzlog/protos/chain"
	"github.com/byzlog/byzlog/protos/wire"
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
	first, err := g.readBlock(ctx, n, h)
	others := g.pool.Others(n)
	for err != nil && len(others) > 0 {
		n, others = others[0], others[1:]
		first, err = g.readBlock(ctx, n, h)
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
			if b, err = g.readBlock(ctx, m, h); err == nil {
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
			if b, err = g.readBlock(ctx, m, h); err != nil || b.Digest() != digest {
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

// readBlock reads block h and its results from n (chain.ReadBlockLocal),
// its bundles that are transactions this gateway has pending taken from
// them, not from n.
func (g *Gateway) readBlock(ctx context.Context, n *nodes.Node, h int64) (*chain.Block, error) {
	b, _, err := chain.ReadBlockLocal(ctx, n.Client, h, g.pendingBytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", n.Addr, err)
	}
	return b, nil
}

// pendingBytes is the pending transaction whose hash is sum, or nil: the
// tracker keeps each transaction by the hash of its bytes.
func (g *Gateway) pendingBytes(sum [sha256.Size]byte) []byte {
	g.mu.Lock()
	defer g.mu.Unlock()
	if p := g.txs.pending[hex.EncodeToString(sum[:])]; p != nil {
		return p.tx
	}
	return nil
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

// committedTx finds where the transaction with hash committed, for a
// node that answered it "already seen" (it may have committed before this
// gateway was watching). byzlog's nodes run without CometBFT's transaction
// index: each app answers wire.PathTx for the blocks it committed since it
// started. One node's answer is only a claim: it is used once a block f+1
// nodes confirm (dupBlocks) holds the transaction at that index, so a
// liar costs a block read, never a wrong receipt. n is asked first, then
// the others; none that knows: still pending, and a block will tell.
func (g *Gateway) committedTx(ctx context.Context, n *nodes.Node, hash []byte) (txAt, bool) {
	for _, m := range append([]*nodes.Node{n}, g.pool.Others(n)...) {
		res, err := m.Client.ABCIQuery(ctx, wire.PathTx, hash)
		if err != nil || res.Response.Code != 0 || res.Response.Height < 1 || res.Response.Index < 0 {
			continue
		}
		h, i := res.Response.Height, res.Response.Index
		d, err := g.dups.get(ctx, g, h)
		if err != nil || i >= int64(len(d.Block.Txs)) || !bytes.Equal(d.Block.Txs[i].Hash(), hash) {
			g.log.Debug().Err(err).Str("node", m.Addr).Int64("height", h).Int64("index", i).Msg("a node placed a transaction where no confirmed block has it")
			continue
		}
		return txAt{d, uint32(i)}, true
	}
	return txAt{}, false
}
