package pipeline

import (
	"bytes"
	"context"
	"fmt"
	"sync"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/chain"
)

// A node's CheckTx answer is one node's word. When it says a batch is a
// duplicate, with the height and offsets of the original write, a lying
// node would turn a batch that was never written into an acknowledgement
// (issue 14). So the gateway acknowledges a duplicate only from the block
// the answer names, once f+1 nodes agree on that block and its results,
// and only if that block holds the batch byte for byte; the receipt's
// offsets are the block's, not the node's.

// dupBlocks caches confirmed blocks for duplicate answers: a failover makes
// many retries of batches from the same few blocks.
type dupBlocks struct {
	mu     sync.Mutex
	blocks map[int64]*chain.Block
}

const maxDupBlocks = 16

func (c *dupBlocks) get(ctx context.Context, g *Gateway, h int64) (*chain.Block, error) {
	c.mu.Lock()
	d := c.blocks[h]
	c.mu.Unlock()
	if d != nil {
		return d, nil
	}
	d, err := g.confirmedBlock(ctx, g.pool.Pick(), h)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.blocks == nil || len(c.blocks) >= maxDupBlocks {
		c.blocks = map[int64]*chain.Block{}
	}
	c.blocks[h] = d
	return d, nil
}

// confirmDuplicate answers r, which a node called a duplicate of the batch
// committed at br.Height: with that write's receipt if f+1 nodes' block
// holds r's batch, else with UNAVAILABLE (the producer retries the same
// batch, and a truthful node or the block settles it).
func (g *Gateway) confirmDuplicate(ctx context.Context, r *request, br *byzlogv1.BatchResult) {
	rc, err := g.duplicateReceipt(ctx, r, br.Height)
	if err != nil {
		g.metrics.unconfirmedDuplicates.Inc()
		g.log.Warn().Err(err).Str("topic", r.body.Topic).Uint32("partition", r.body.Partition).Uint64("sequence", r.body.Sequence).
			Msg("a node answered duplicate, and the block it named does not confirm it")
		r.finish(nil, errorf(ErrUnavailable, "a node answered that sequence %d was committed at height %d, which the gateway could not confirm (%v); retry with the same sequence",
			r.body.Sequence, br.Height, err))
		return
	}
	r.finish(rc, nil)
}

func (g *Gateway) duplicateReceipt(ctx context.Context, r *request, h int64) (*byzlogv1.Receipt, error) {
	// Both heights are f+1 nodes' word: the pool's agreed height (its
	// health checks lag a fresh block) and the last block the gateway
	// matched, which it read confirmed.
	if top := max(g.pool.Height(), g.seenHeight()); h <= 0 || h > top+1 {
		return nil, fmt.Errorf("height %d is not one f+1 nodes have reached (%d)", h, top)
	}
	d, err := g.dups.get(ctx, g, h)
	if err != nil {
		return nil, err
	}
	for i, tx := range d.Block.Txs {
		batches, outcome, ok := committedBatches(tx, d.Results[i])
		if !ok {
			continue
		}
		for j, sb := range batches {
			if bytes.Equal(sb.ProducerKey, r.batch.ProducerKey) && bytes.Equal(sb.Body, r.batch.Body) {
				br := outcome[j]
				return &byzlogv1.Receipt{Ack: byzlogv1.Ack_ACK_COMMIT, Height: h, TxIndex: uint32(i), Topic: br.Topic, Partition: br.Partition,
					BaseOffset: br.BaseOffset, RecordCount: br.RecordCount, Duplicate: true, Proof: d.Prove(i, uint32(j), false)}, nil
			}
		}
	}
	return nil, fmt.Errorf("block %d, as f+1 nodes report it, does not hold this batch", h)
}
