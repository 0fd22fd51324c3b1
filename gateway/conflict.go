package gateway

import (
	"bytes"
	"context"

	abci "github.com/cometbft/cometbft/abci/types"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/indexer/chain"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
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
			st := g.seqs[seqKey{string(sb.ProducerKey), br.Topic, br.Partition}]
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
	var doomed []*pendingTx
	g.mu.Lock()
	for _, p := range g.pending {
		for _, r := range p.reqs {
			if _, ok := hits[r]; ok {
				doomed = append(doomed, p)
				break
			}
		}
	}
	g.mu.Unlock()
	for _, p := range doomed {
		if g.untrack(p) {
			g.metrics.conflicts.Inc()
			g.settleConflict(ctx, p, d, hits)
		}
	}
}

// settleConflict answers the requests of p that block h committed
// elsewhere and sends the rest again.
func (g *Gateway) settleConflict(ctx context.Context, p *pendingTx, d *chain.Block, hits map[*request]conflictHit) {
	for _, t := range g.takeTwins(p) {
		g.settleConflict(ctx, t, d, hits)
	}
	h := d.Block.Height
	var again []*request
	for _, r := range p.reqs {
		hit, ok := hits[r]
		switch {
		case !ok:
			again = append(again, r)
		case hit.same:
			br := hit.result
			r.finish(&byzlogv1.Receipt{Ack: byzlogv1.Ack_ACK_COMMIT, Height: h, TxIndex: hit.txIndex, Topic: br.Topic, Partition: br.Partition,
				BaseOffset: br.BaseOffset, RecordCount: br.RecordCount, Duplicate: true, Proof: d.Prove(int(hit.txIndex), hit.batch, false)}, nil)
		default:
			r.finish(nil, status.Errorf(codes.FailedPrecondition,
				"sequence %d of %s/%d was committed at height %d by a different batch signed with this producer's key; this batch was not written: use a new sequence",
				r.body.Sequence, r.body.Topic, r.body.Partition, h))
		}
	}
	if len(again) == 0 || ctx.Err() != nil {
		for _, r := range again {
			r.finish(nil, status.Error(codes.Unavailable, "the gateway is stopping; retry with the same sequence"))
		}
		p.release()
		return
	}
	g.submit(ctx, again, p.release, p.deadline)
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
