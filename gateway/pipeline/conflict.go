package pipeline

import (
	"bytes"
	"context"

	abci "github.com/cometbft/cometbft/abci/types"
	"google.golang.org/protobuf/proto"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/chain"
)

// A batch can be in two bundles at once: an SDK's failover sends it through
// a second gateway, or anyone re-wraps a signed batch into a bundle of their
// own. When the other bundle commits, this gateway's bundle can never
// commit: the validators' mempools drop it at the next block, and nothing
// tells the gateway. Waiting out commit_timeout for every such bundle let one
// client who re-wraps batches cut honest throughput to a fifth (issue 13's
// double-bundle attack). So the gateway reads each confirmed block for
// batches of its pending bundles that another transaction committed, and
// settles those bundles at once: the batch committed there gets that
// commit's receipt (if it is byte for byte the same batch), and the rest go
// out again in a new bundle.

// conflictHit is a pending request whose sequence block h committed in
// another transaction.
type conflictHit struct {
	txIndex uint32
	batch   uint32 // the batch's index in the committed tx
	result  *byzlogv1.BatchResult
	same    bool // the committed batch is this request's batch, byte for byte
}

// settleConflicts finds and settles the pending bundles that the
// transactions of block h (whose results f+1 nodes confirmed) made
// impossible.
func (g *Gateway) settleConflicts(ctx context.Context, d *chain.Block) {
	txs, results := d.Block.Txs, d.Results
	hits := map[*request]conflictHit{}
	for i, tx := range txs {
		if i >= len(results) {
			break
		}
		batches, outcome, ok := committedBatches(tx, results[i])
		if !ok {
			continue
		}
		g.prodMu.Lock()
		for j, sb := range batches {
			br := outcome[j]
			st := g.seqs[seqKeyOf(sb.ProducerKey, br.Topic, br.Partition, br.Kafka)]
			if st == nil {
				continue
			}
			if r := st.pending[br.Sequence]; r != nil {
				hits[r] = conflictHit{txIndex: uint32(i), batch: uint32(j), result: br,
					same: bytes.Equal(r.batch.Body, sb.Body) && bytes.Equal(r.batch.Signature, sb.Signature)}
			}
		}
		g.prodMu.Unlock()
	}
	if len(hits) == 0 {
		return
	}
	g.mu.Lock()
	doomed := g.txs.holding(hits)
	g.mu.Unlock()
	for _, p := range doomed {
		if g.untrack(p) {
			g.metrics.conflicts.Inc()
			g.settleTx(ctx, p, func(q *pendingTx) settlement { return conflictSettlement(q, d, hits) })
		}
	}
}

// committedBatches decodes a committed produce bundle and its outcome: the
// batches and, one each, where they landed. ok is false for anything else
// (another kind, a rejected bundle, bytes that do not decode).
func committedBatches(tx []byte, res *abci.ExecTxResult) (batches []*byzlogv1.SignedBatch, outcome []*byzlogv1.BatchResult, ok bool) {
	if res.Code != 0 {
		return nil, nil, false
	}
	var env byzlogv1.Tx
	if err := proto.Unmarshal(tx, &env); err != nil {
		return nil, nil, false
	}
	pb := env.GetProduceBundle()
	if pb == nil {
		return nil, nil, false
	}
	var out byzlogv1.TxOutcome
	if err := proto.Unmarshal(res.Data, &out); err != nil || len(out.Batches) != len(pb.Batches) {
		return nil, nil, false
	}
	return pb.Batches, out.Batches, true
}
