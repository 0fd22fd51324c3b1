package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	abci "github.com/cometbft/cometbft/abci/types"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/chain/receipt"
	"github.com/byzlog/byzlog/protos/wire"
)

// Atomic writes across partitions: WriteAtomically is one Kafka
// transaction (rules version 8 on), the chain its coordinator. The first
// write under a transactional id makes the id the producer key's (TxnInit:
// a producer id and epoch from the chain, fencing any earlier producer of
// the id); each write sends its records as transactional batches, one
// partition after another, each committed and its receipt checked, then
// commits the transaction (TxnEnd), whose markers the chain writes in
// every partition in one block. Readers of committed data (the Kafka face
// at read_committed, NATS, the consumer SDK) see all of the records or
// none. A write that fails before its commit is aborted.

// TxnTimeout is how long a transaction of WriteAtomically may stay open
// before the chain aborts it (its transaction.timeout.ms).
const TxnTimeout = time.Minute

// txnProducer is the producer id and epoch the chain gave a transactional
// id, and each partition's next sequence under them.
type txnProducer struct {
	pid   int64
	epoch int32
	seqs  map[string]int32 // "topic/partition" -> next base sequence
}

// WriteAtomically writes records, to any topics and partitions, as one
// transaction under transactional id id: a reader of committed data sees
// all of them or none. It returns each record's receipt, in the order
// given, once the transaction is committed. Writes of one producer run
// one at a time. On an error before the commit the transaction is
// aborted (or, failing that, left to the chain's timeout, TxnTimeout); a
// commit whose answer is lost is sent again, and if its outcome stays
// unknown the error says so. The next write under the id starts a new
// epoch.
func (p *Producer) WriteAtomically(ctx context.Context, id string, records []*Record) ([]Receipt, error) {
	if len(records) == 0 {
		return nil, nil
	}
	p.txnMu.Lock()
	defer p.txnMu.Unlock()
	t := p.txns[id]
	if t == nil {
		var err error
		if t, err = p.initTxn(ctx, id); err != nil {
			return nil, err
		}
		p.txns[id] = t
	}
	receipts, err := p.writeTxn(ctx, t, records)
	// Ending goes on after ctx ends: a transaction left open holds its
	// partitions' readers of committed data back until it times out.
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*p.o.requestTimeout)
	defer cancel()
	end := func(commit bool) error {
		_, err := p.txnStep(ectx, id, &byzlogv1.TxnEnd{ProducerId: t.pid, Epoch: t.epoch, Commit: commit})
		return err
	}
	if err == nil {
		cerr := end(true)
		if cerr != nil && ctx.Err() == nil && (retriable(cerr) || ectx.Err() != nil) {
			// Its outcome may be unknown: a commit sent again is answered
			// as the first was if that one committed.
			cerr = end(true)
		}
		switch {
		case cerr == nil:
			return receipts, nil
		case retriable(cerr) || ectx.Err() != nil:
			err = fmt.Errorf("commit transaction %q: its outcome is unknown (%w): read the records back before writing them again (a transaction not committed is aborted by the chain after %s)", id, cerr, TxnTimeout)
		default:
			err = fmt.Errorf("commit transaction %q: not committed: %w", id, cerr)
		}
	} else if aerr := end(false); aerr != nil {
		err = fmt.Errorf("%w (and its abort: %v; the chain aborts it after %s)", err, aerr, TxnTimeout)
	}
	delete(p.txns, id) // the next write bumps the epoch: no sequence of this one is reused
	return nil, err
}

// initTxn makes id the producer key's, with a new epoch.
func (p *Producer) initTxn(ctx context.Context, id string) (*txnProducer, error) {
	out, err := p.txnStep(ctx, id, &byzlogv1.TxnInit{TimeoutMs: uint32(TxnTimeout / time.Millisecond), ProducerId: -1, Epoch: -1})
	if err != nil {
		return nil, fmt.Errorf("init transactional id %q: %w", id, err)
	}
	return &txnProducer{pid: out.ProducerId, epoch: out.Epoch, seqs: map[string]int32{}}, nil
}

// writeTxn sends records as transactional batches of t, each partition's
// in order and cut at the producer's batch size, and checks each receipt.
func (p *Producer) writeTxn(ctx context.Context, t *txnProducer, records []*Record) ([]Receipt, error) {
	type part struct {
		topic string
		num   uint32
		idx   []int // records' places in the write
	}
	var parts []*part
	byKey := map[string]*part{}
	now := time.Now().UnixNano()
	recs := make([]*byzlogv1.Record, len(records))
	for i, r := range records {
		num, err := p.partitionFor(ctx, r)
		if err != nil {
			return nil, err
		}
		k := fmt.Sprintf("%s/%d", r.Topic, num)
		pt := byKey[k]
		if pt == nil {
			pt = &part{topic: r.Topic, num: num}
			byKey[k] = pt
			parts = append(parts, pt)
		}
		pt.idx = append(pt.idx, i)
		recs[i] = &byzlogv1.Record{Key: r.Key, Value: r.Value, Headers: r.Headers, CreateTimeUnixNano: now}
	}
	receipts := make([]Receipt, len(records))
	for _, pt := range parts {
		k := fmt.Sprintf("%s/%d", pt.topic, pt.num)
		for rest := pt.idx; len(rest) > 0; {
			n, size := 0, 0
			for n < len(rest) && n < p.o.batchRecords && (n == 0 || size+len(recs[rest[n]].Key)+len(recs[rest[n]].Value)+16 <= p.o.batchBytes) {
				size += len(recs[rest[n]].Key) + len(recs[rest[n]].Value) + 16
				n++
			}
			batch := make([]*byzlogv1.Record, n)
			for j, i := range rest[:n] {
				batch[j] = recs[i]
			}
			signed, err := p.signer.TransactionalBatch(pt.topic, pt.num, t.pid, t.epoch, t.seqs[k], p.o.codec, 0, batch)
			if err != nil {
				return nil, err
			}
			rc, err := p.sendTxnBatch(ctx, signed, n)
			if err != nil {
				return nil, fmt.Errorf("transactional batch of %s: %w", k, err)
			}
			t.seqs[k] += int32(n)
			for j, i := range rest[:n] {
				receipts[i] = rc
				receipts[i].Offset += uint64(j)
			}
			rest = rest[n:]
		}
	}
	return receipts, nil
}

// sendTxnBatch sends one transactional batch of n records until it is
// committed or refused, retrying the same bytes on retriable errors (the
// chain answers a repeat as a duplicate with the first offsets), and
// checks its receipt. It returns the receipt of the batch's first record.
func (p *Producer) sendTxnBatch(ctx context.Context, signed *byzlogv1.SignedBatch, n int) (Receipt, error) {
	var body byzlogv1.BatchBody
	if err := proto.Unmarshal(signed.Body, &body); err != nil {
		return Receipt{}, err
	}
	var rc *byzlogv1.Receipt
	err := p.retry(ctx, func(gw byzlogv1.GatewayClient, ctx context.Context) error {
		resp, err := gw.Produce(ctx, &byzlogv1.ProduceRequest{Batch: signed, Ack: byzlogv1.Ack_ACK_COMMIT})
		rc = resp.GetReceipt()
		return err
	})
	if err != nil {
		return Receipt{}, err
	}
	if p.verify == nil { // on the gateway's word
		return Receipt{Topic: rc.GetTopic(), Partition: rc.GetPartition(), Offset: rc.GetBaseOffset(), Height: rc.GetHeight(), TxIndex: rc.GetTxIndex(),
			Duplicate: rc.GetDuplicate()}, nil
	}
	vctx, cancel := context.WithTimeout(ctx, max(2*p.o.requestTimeout, time.Minute))
	defer cancel()
	br, err := checkBatch(vctx, p.verify, signed, &body, n, rc)
	if err != nil {
		return Receipt{}, err
	}
	return Receipt{Topic: br.Topic, Partition: br.Partition, Offset: br.BaseOffset, Height: rc.GetHeight(), TxIndex: rc.GetTxIndex(),
		Duplicate: br.Duplicate, Verified: true}, nil
}

// txnStep signs op for transactional id with the key's next nonce (valid
// for receipt.ExpiryBlocks), submits it, and returns the chain's outcome
// from the verified result. A stale or raced nonce is read again, up to
// five times.
func (p *Producer) txnStep(ctx context.Context, id string, op proto.Message) (*byzlogv1.TxnOutcome, error) {
	for attempt := 0; ; attempt++ {
		out, err := p.txnStepOnce(ctx, id, op)
		if status.Code(err) != codes.FailedPrecondition || attempt == 5 {
			return out, err
		}
		select {
		case <-time.After(300 * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (p *Producer) txnStepOnce(ctx context.Context, id string, op proto.Message) (*byzlogv1.TxnOutcome, error) {
	gw := p.gws[p.next.Load()%uint64(len(p.gws))]
	expiry, err := receipt.Expiry(ctx, gw, p.verify, p.chainID)
	if err != nil {
		return nil, err
	}
	n, err := gw.GetNonce(ctx, &byzlogv1.NonceRequest{Key: p.PublicKey()})
	if err != nil {
		return nil, fmt.Errorf("read the producer key's nonce: %w", err)
	}
	if p.verify != nil {
		if err := p.verify.Nonce(ctx, p.PublicKey(), n); err != nil {
			return nil, fmt.Errorf("the gateway's nonce for the producer key: %w", err)
		}
	}
	req, err := p.signer.TxnUntil(n.NextNonce, expiry, id, op)
	if err != nil {
		return nil, err
	}
	tx, err := wire.TxnTx(req)
	if err != nil {
		return nil, err
	}
	var resp *byzlogv1.TxnResponse
	// The same signed bytes go again on a retriable error: the nonce lets
	// the chain take them once.
	if err := p.retry(ctx, func(gw byzlogv1.GatewayClient, ctx context.Context) error {
		resp, err = gw.Txn(ctx, req)
		return err
	}); err != nil {
		return nil, err
	}
	var data []byte
	if p.verify == nil { // on the gateway's word
		var res abci.ExecTxResult
		if err := res.Unmarshal(resp.GetProof().GetTxResult()); err != nil {
			return nil, fmt.Errorf("the transaction step's result: %w", err)
		}
		data = res.Data
	} else {
		if err := p.verify.Tx(ctx, tx, resp.GetHeight(), resp.GetTxIndex(), resp.GetProof()); err != nil {
			return nil, err
		}
		if data, _, err = p.verify.Result(ctx, resp.GetHeight(), resp.GetTxIndex(), resp.GetProof()); err != nil {
			return nil, err
		}
	}
	var out byzlogv1.TxnOutcome
	if err := proto.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("%w: the proven result is not a transaction outcome: %v", ErrUnverified, err)
	}
	return &out, nil
}

// retry calls send with each gateway in turn, from the current one, until
// it returns nil or an error that is not retriable, or ctx or the
// producer ends; waits back off between rounds.
func (p *Producer) retry(ctx context.Context, send func(byzlogv1.GatewayClient, context.Context) error) error {
	backoff := p.o.backoff
	start := p.next.Load()
	for attempt := uint64(0); ; attempt++ {
		at := (start + attempt) % uint64(len(p.gws))
		actx, cancel := context.WithTimeout(ctx, p.o.requestTimeout)
		err := send(p.gws[at], actx)
		cancel()
		switch {
		case err == nil:
			return nil
		case !retriable(err):
			return err
		case ctx.Err() != nil:
			return ctx.Err()
		case p.ctx.Err() != nil:
			return errors.Join(ErrClosed, err)
		}
		p.next.Store(start + attempt + 1)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return ctx.Err()
		case <-p.ctx.Done():
			return errors.Join(ErrClosed, err)
		}
		backoff = min(2*backoff, p.o.maxBackoff)
	}
}
