package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The Kafka load (Config.Kafka): franz-go producers through a gateway's
// Kafka face in place of the SDK, each idempotent (franz-go's default)
// with acks=all, so an acknowledgement means committed in a block, as the
// SDK's does. The consumer, when there is one, still reads through NATS.
//
// With Config.TxnRecords the producers are transactional (a transactional
// id each) and commit transactions one after another: BeginTransaction,
// TxnRecords records over TxnPartitions partitions, Flush, EndTransaction.
// A record counts once its transaction commits; its produce→ack latency is
// the receipt, BeginTransaction→EndTransaction the commit latency.

// runKafka is run with franz-go producers.
func (r *runner) runKafka(ctx context.Context, progress func(Progress)) (Result, error) {
	res := Result{Config: r.cfg, Started: time.Now()}
	clients := make([]*kgo.Client, r.cfg.Producers)
	for i := range clients {
		opts := append(slices.Clip(r.cfg.Kafka), kgo.DefaultProduceTopic(r.cfg.Topic), kgo.RequiredAcks(kgo.AllISRAcks()),
			kgo.MaxBufferedRecords(r.cfg.InFlight))
		if r.cfg.TxnRecords > 0 {
			opts = append(opts, kgo.TransactionalID(fmt.Sprintf("bench-%s-%d", r.cfg.Topic, i)), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		}
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			for _, c := range clients[:i] {
				c.Close()
			}
			return res, fmt.Errorf("kafka producer %d: %w", i, err)
		}
		clients[i] = cl
	}
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	// The first record makes the producers' connections and producer ids.
	if err := firstKafkaRecord(ctx, clients[0], r.cfg.TxnRecords > 0); err != nil {
		return res, fmt.Errorf("first record through the kafka face: %w", err)
	}
	start := time.Now()
	r.measureFrom = start.Add(r.cfg.Warmup)
	r.end = r.measureFrom.Add(r.cfg.Duration)
	produce := func(i int) { r.produceKafka(ctx, i, clients[i]) }
	if r.cfg.TxnRecords > 0 {
		produce = func(i int) { r.produceKafkaTxns(ctx, i, clients[i]) }
	}
	r.drive(start, len(clients), produce, progress)
	r.summarize(&res)
	return res, ctx.Err()
}

// produceKafka is produce with a franz-go client.
func (r *runner) produceKafka(ctx context.Context, i int, cl *kgo.Client) {
	r.paced(ctx, i, func(_ uint64, value, key []byte, release func()) {
		sent := time.Now()
		cl.Produce(ctx, &kgo.Record{Key: key, Value: value}, func(_ *kgo.Record, err error) {
			defer release()
			r.record(sent, time.Now(), "", err)
		})
	})
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	_ = cl.Flush(fctx)
}

// firstKafkaRecord produces one record with cl, in a transaction of its
// own when txn.
func firstKafkaRecord(ctx context.Context, cl *kgo.Client, txn bool) error {
	if !txn {
		return cl.ProduceSync(ctx, &kgo.Record{Value: []byte("bench-start")}).FirstErr()
	}
	if err := cl.BeginTransaction(); err != nil {
		return err
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("bench-start")}).FirstErr(); err != nil {
		return errors.Join(err, cl.EndTransaction(ctx, kgo.TryAbort))
	}
	return cl.EndTransaction(ctx, kgo.TryCommit)
}

// produceKafkaTxns commits producer i's transactions one after another
// until the end of the run. A transaction begun before the end may finish
// after it (and count for nothing), but no later than answerGrace after.
func (r *runner) produceKafkaTxns(ctx context.Context, i int, cl *kgo.Client) {
	ctx, cancel := context.WithDeadline(ctx, r.end.Add(answerGrace))
	defer cancel()
	var seq uint64
	for k := 0; time.Now().Before(r.end) && ctx.Err() == nil; k++ {
		parts := txnPartitions(i, k, r.cfg.Producers, r.cfg.TxnPartitions, r.cfg.Partitions)
		began := time.Now()
		acks, err := r.kafkaTxn(ctx, cl, i, &seq, parts)
		r.recordTxn(began, time.Now(), acks, r.cfg.TxnRecords, err)
		if err != nil && !abortKafkaTxn(ctx, cl) {
			return // the client's state is unknown: this producer is done
		}
	}
}

// kafkaTxn runs one transaction of producer i: TxnRecords records spread
// evenly over parts, then a commit. It returns the records' produce→ack
// latencies, and the first error (the transaction is then still open).
func (r *runner) kafkaTxn(ctx context.Context, cl *kgo.Client, i int, seq *uint64, parts []int32) ([]time.Duration, error) {
	if err := cl.BeginTransaction(); err != nil {
		return nil, err
	}
	var (
		mu       sync.Mutex
		acks     = make([]time.Duration, 0, r.cfg.TxnRecords)
		firstErr error
	)
	for j := range r.cfg.TxnRecords {
		rec := &kgo.Record{Value: r.value(i, *seq), Partition: parts[j%len(parts)]}
		*seq++
		sent := time.Now()
		cl.Produce(ctx, rec, func(_ *kgo.Record, err error) {
			now := time.Now()
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = err
			}
			acks = append(acks, now.Sub(sent))
		})
	}
	// Every record's callback has run when Flush returns.
	if err := cl.Flush(ctx); err != nil {
		return nil, err
	}
	if firstErr != nil {
		return nil, firstErr
	}
	return acks, cl.EndTransaction(ctx, kgo.TryCommit)
}

// abortKafkaTxn ends a failed transaction with an abort, as franz-go asks
// after a failed produce or commit, and reports whether the client can go
// on.
func abortKafkaTxn(ctx context.Context, cl *kgo.Client) bool {
	if err := cl.AbortBufferedRecords(ctx); err != nil {
		return false
	}
	return cl.EndTransaction(ctx, kgo.TryAbort) == nil
}

// txnPartitions are the partitions of producer i's transaction k: n
// consecutive ones of the topic's partitions, the producers' current
// transactions side by side, moving on with each round so every
// partition takes its share.
func txnPartitions(i, k, producers, n, partitions int) []int32 {
	first := (k*producers + i) * n
	parts := make([]int32, n)
	for j := range parts {
		parts[j] = int32((first + j) % partitions)
	}
	return parts
}

// recordTxn notes a transaction that began at began and ended at now:
// with err nil its records count as committed, acks are their produce→ack
// latencies and began→now its commit latency; otherwise each of its
// records counts as an error of err's code.
func (r *runner) recordTxn(began, now time.Time, acks []time.Duration, records int, err error) {
	measured := inWindow(now, r.measureFrom, r.end)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.failed(err, int64(records), measured)
		return
	}
	r.ackedAll.Add(int64(records))
	for _, d := range acks {
		r.window.Add(d)
	}
	if !measured {
		return
	}
	r.acked.Add(int64(records))
	r.commits.Add(now.Sub(began))
	w := r.windowAt(now)
	for _, d := range acks {
		r.receipts.Add(d)
		if w != nil {
			w.receipts.Add(d)
		}
	}
}

// kafkaCode names a franz-go error by its Kafka error, if it has one.
func kafkaCode(err error) (string, bool) {
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Message, true
	}
	return "", false
}
