package chaos

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The transactional workload (Workload.TxnProcessors): consume, transform,
// produce, exactly once, with franz-go's GroupTransactSession through the
// gateways' Kafka faces. The phase's topic is the input, written by the
// Kafka producers; the processors, members of one consumer group, read it
// at read_committed and, in one transaction per poll, write one record per
// input record to the output topic (txnOutPartitions partitions, each
// input record's output on a partition of its own offset, so a
// transaction of two records or more spans partitions) and commit the
// input offsets they read with it (TxnOffsetCommit). Every
// txnAbortEvery-th transaction, from the second, a processor aborts on
// purpose, and the
// session rewinds to the committed offsets, so that input is processed
// again. A processor whose transaction ends in an error (of unknown
// outcome) closes its session and opens another (InitProducerId fences
// the old producer and aborts what it left open).
//
// Verifiers read the output from its start during the run, one at
// read_committed ("rc") and one at read_uncommitted ("ru"); after the
// pipeline drained (the group's committed offsets at the input's end) and
// the processors stopped, both read the whole output again ("rc-final",
// "ru-final"), and the group's committed offsets are read once more.
// checktxn.go judges it.

// txnOutPartitions is how many partitions the output topic has.
const txnOutPartitions = 3

// txnAbortEvery: a processor aborts every txnAbortEvery-th transaction on
// purpose, from its second (a short row's processor may end only a few).
const txnAbortEvery = 4

// txnEndTimeout bounds a transaction's end (flush, offset commit, EndTxn):
// past it the outcome is unknown.
const txnEndTimeout = 2 * time.Minute

// txnOutputTopic is the phase's output topic.
func txnOutputTopic(w Workload) string { return w.Topic + "-out" }

// txnGroupName is the processors' consumer group.
func txnGroupName(w Workload) string { return "txn-" + w.Topic }

// txnPipeline is what the processors and verifiers share: counts for the
// row's note.
type txnPipeline struct {
	mu                          sync.Mutex
	committed, aborted, unknown int
	onPurpose                   int            // aborted on purpose, whatever the outcome
	processed                   int            // records in committed transactions
	sessions                    int            // sessions opened
	failures                    map[string]int // by kind
	drained                     time.Duration  // load end to the group's offsets at the input's end
}

func (tp *txnPipeline) fail(kind string) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	tp.failures[errorKind(kind)]++
}

// startTxns starts w.TxnProcessors processors and the two verifiers,
// which run until ctx ends; they are done when wg is.
func startTxns(ctx context.Context, c *Cluster, w Workload, rec *recorder, wg *sync.WaitGroup) *txnPipeline {
	tp := &txnPipeline{failures: map[string]int{}}
	for i := 0; i < w.TxnProcessors; i++ {
		name := fmt.Sprintf("proc%d", i)
		rec.h.TxnProcessors = append(rec.h.TxnProcessors, name)
		wg.Add(1)
		go func() {
			defer wg.Done()
			tp.process(ctx, c, w, name, rec)
		}()
	}
	for _, committed := range []bool{true, false} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := readOutput(ctx, c, w, committed, false, rec); err != nil {
				rec.consumerError(err)
			}
		}()
	}
	return tp
}

// process runs one processor until ctx ends, a session after another.
func (tp *txnPipeline) process(ctx context.Context, c *Cluster, w Workload, name string, rec *recorder) {
	seq := 0
	for ctx.Err() == nil {
		if err := tp.session(ctx, c, w, name, rec, &seq); err != nil {
			tp.fail(err.Error())
			sleep(ctx, time.Second)
		}
	}
}

// session runs one GroupTransactSession until ctx ends or a transaction
// ends in an error, numbering its transactions on from *seq.
func (tp *txnPipeline) session(ctx context.Context, c *Cluster, w Workload, name string, rec *recorder, seq *int) error {
	opts, err := c.kafkaOpts(nil)
	if err != nil {
		return err
	}
	s, err := kgo.NewGroupTransactSession(append(opts,
		kgo.TransactionalID(w.Topic+"-"+name), kgo.TransactionTimeout(40*time.Second),
		// A member whose session ends with its gateway gone is out of the
		// group after 15 s rather than franz-go's 45, so its partitions
		// move on sooner (Kafka's default before 3.0 was 10 s).
		kgo.ConsumerGroup(txnGroupName(w)), kgo.ConsumeTopics(w.Topic), kgo.SessionTimeout(15*time.Second),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.RequireStableFetchOffsets(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(time.Second),
		kgo.DefaultProduceTopic(txnOutputTopic(w)), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProduceRequestTimeout(30*time.Second))...)
	if err != nil {
		return fmt.Errorf("transact session: %w", err)
	}
	defer s.Close()
	tp.mu.Lock()
	tp.sessions++
	tp.mu.Unlock()
	for ctx.Err() == nil {
		fs := s.PollFetches(ctx)
		for _, e := range fs.Errors() {
			if ctx.Err() == nil {
				tp.fail("fetch: " + e.Err.Error())
			}
		}
		records := fs.Records()
		if len(records) == 0 {
			continue
		}
		*seq++
		t := Txn{Processor: name, Seq: *seq, Abort: *seq%txnAbortEvery == 2, Offsets: map[uint32]int64{}}
		if err := s.Begin(); err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		var produced sync.WaitGroup
		for _, r := range records {
			out := fmt.Sprintf("out|%s|%d|%d@%d|%s", name, t.Seq, r.Partition, r.Offset, r.Value)
			t.Records = append(t.Records, TxnRecord{InPartition: uint32(r.Partition), InOffset: uint64(r.Offset), Out: out})
			t.Offsets[uint32(r.Partition)] = max(t.Offsets[uint32(r.Partition)], r.Offset+1)
			produced.Add(1)
			s.Produce(context.Background(), &kgo.Record{Partition: int32((int64(r.Partition) + r.Offset) % txnOutPartitions), Value: []byte(out)},
				func(_ *kgo.Record, err error) {
					defer produced.Done()
					if err != nil {
						tp.fail("produce: " + err.Error())
					}
				})
		}
		ectx, cancel := context.WithTimeout(context.Background(), txnEndTimeout)
		if t.Abort {
			// Written first, so the log holds what the abort must hide:
			// an abort drops the records still buffered.
			_ = s.Client().Flush(ectx)
		}
		committed, err := s.End(ectx, kgo.TransactionEndTry(!t.Abort))
		cancel()
		produced.Wait()
		switch {
		case err != nil:
			t.Outcome, t.Err = TxnUnknown, err.Error()
		case committed:
			t.Outcome = TxnCommitted
		default:
			t.Outcome = TxnAborted
		}
		tp.ended(t)
		rec.txn(t)
		if err != nil {
			return fmt.Errorf("end: %w", err)
		}
	}
	return nil
}

// ended counts t.
func (tp *txnPipeline) ended(t Txn) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if t.Abort {
		tp.onPurpose++
	}
	switch t.Outcome {
	case TxnCommitted:
		tp.committed++
		tp.processed += len(t.Records)
	case TxnAborted:
		tp.aborted++
	default:
		tp.unknown++
	}
}

// readOutput reads the output topic from its start at read_committed or
// read_uncommitted, recording each record, until ctx ends; final, it
// stops once it has read everything there is (no record for
// txnQuietPolls polls in a row after one came, or none at all for
// txnQuietPolls polls after the first minute).
func readOutput(ctx context.Context, c *Cluster, w Workload, committed, final bool, rec *recorder) error {
	reader := "ru"
	iso := kgo.ReadUncommitted()
	if committed {
		reader, iso = "rc", kgo.ReadCommitted()
	}
	if final {
		reader += "-final"
	}
	opts, err := c.kafkaOpts(nil)
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(append(opts, kgo.ConsumeTopics(txnOutputTopic(w)), kgo.FetchIsolationLevel(iso),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(500*time.Millisecond))...)
	if err != nil {
		return fmt.Errorf("%s: %w", reader, err)
	}
	defer cl.Close()
	seq, quiet, some := 0, 0, false
	start := time.Now()
	for ctx.Err() == nil {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		fs := cl.PollFetches(pctx)
		cancel()
		n := 0
		fs.EachRecord(func(r *kgo.Record) {
			seq++
			n++
			rec.txnRead(TxnRead{Reader: reader, Committed: committed, Final: final, Seq: seq, Partition: uint32(r.Partition), Offset: uint64(r.Offset), Value: string(r.Value)})
		})
		if !final {
			continue
		}
		if n > 0 {
			quiet, some = 0, true
			continue
		}
		if quiet++; quiet >= txnQuietPolls && (some || time.Since(start) > time.Minute) {
			return nil
		}
	}
	if final {
		return fmt.Errorf("%s: stopped before the output's end: %w", reader, ctx.Err())
	}
	return nil
}

// txnQuietPolls is how many empty polls in a row end a final read.
const txnQuietPolls = 5

// drain waits, up to settle, until the processors' group has committed
// every input partition up to its end, and returns what went wrong.
func (tp *txnPipeline) drain(ctx context.Context, c *Cluster, w Workload, loadEnd time.Time, settle time.Duration) []string {
	cl, err := c.kafkaClient()
	if err != nil {
		return []string{fmt.Sprintf("transactional pipeline: %v", err)}
	}
	defer cl.Close()
	deadline := time.Now().Add(settle)
	var ends map[int32]int64
	var got OffsetRead
	for {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		ends, err = endOffsets(rctx, cl, w.Topic, w.Partitions)
		if err == nil {
			got, err = readOffsets(rctx, cl, txnGroupName(w), w.Topic, w.Partitions)
		}
		cancel()
		if err == nil && drained(ends, got.Offsets) {
			tp.mu.Lock()
			tp.drained = time.Since(loadEnd)
			tp.mu.Unlock()
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return []string{fmt.Sprintf("the transactional pipeline did not drain within %s: the input ends at %v, the processors' group committed %v (%v)", settle, ends, got.Offsets, err)}
		}
		sleep(ctx, time.Second)
	}
}

// drained reports whether the committed offsets reach every end.
func drained(ends map[int32]int64, committed map[uint32]int64) bool {
	for p, end := range ends {
		if committed[uint32(p)] < end {
			return false
		}
	}
	return true
}

// finish reads the whole output at both isolations and the group's
// committed offsets, once the processors have stopped, and returns the
// row's notes and errors.
func (tp *txnPipeline) finish(ctx context.Context, c *Cluster, w Workload, rec *recorder, settle time.Duration) (notes, errs []string) {
	fctx, cancel := context.WithTimeout(ctx, settle)
	defer cancel()
	var wg sync.WaitGroup
	readErrs := make([]error, 2)
	for i, committed := range []bool{true, false} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			readErrs[i] = readOutput(fctx, c, w, committed, true, rec)
		}()
	}
	cl, err := c.kafkaClient()
	if err == nil {
		defer cl.Close()
		for {
			rctx, rcancel := context.WithTimeout(fctx, 10*time.Second)
			var r OffsetRead
			r, err = readOffsets(rctx, cl, txnGroupName(w), w.Topic, w.Partitions)
			rcancel()
			if err == nil {
				rec.mu.Lock()
				rec.h.TxnOffsets = r.Offsets
				rec.mu.Unlock()
				break
			}
			if fctx.Err() != nil {
				break
			}
			sleep(fctx, time.Second)
		}
	}
	if err != nil {
		errs = append(errs, fmt.Sprintf("the processors' group's committed offsets could not be read at the end: %v", err))
	}
	wg.Wait()
	for _, err := range readErrs {
		if err != nil {
			errs = append(errs, err.Error())
		}
	}
	// What the aborted-read check had to find: records of aborted
	// transactions in the log, which read_uncommitted shows.
	rec.mu.Lock()
	never := map[string]bool{}
	for _, t := range rec.h.Txns {
		for _, r := range t.Records {
			never[r.Out] = t.Abort || t.Outcome == TxnAborted
		}
	}
	uncommitted, aborted := 0, 0
	for _, rd := range rec.h.TxnReads {
		if rd.Final && !rd.Committed {
			uncommitted++
			if never[rd.Value] {
				aborted++
			}
		}
	}
	rec.mu.Unlock()
	tp.mu.Lock()
	defer tp.mu.Unlock()
	drained := "not drained"
	if tp.drained > 0 {
		drained = fmt.Sprintf("drained %s after the load", tp.drained.Round(100*time.Millisecond))
	}
	drained += fmt.Sprintf("; the output holds %d records read uncommitted at the end, %d of them of aborted transactions", uncommitted, aborted)
	notes = append(notes, fmt.Sprintf("transactions: %d processors in %d sessions ended %d, %d committed (%d input records processed), %d aborted, %d of unknown outcome, %d of them aborted on purpose; %s; failures seen: %s",
		w.TxnProcessors, tp.sessions, tp.committed+tp.aborted+tp.unknown, tp.committed, tp.processed, tp.aborted, tp.unknown, tp.onPurpose, drained, countsOf(tp.failures)))
	return notes, errs
}

// endOffsets is each partition's high watermark.
func endOffsets(ctx context.Context, cl *kgo.Client, topic string, partitions uint32) (map[int32]int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	t := kmsg.NewListOffsetsRequestTopic()
	t.Topic = topic
	for p := int32(0); p < int32(partitions); p++ {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp = p, -1 // latest
		t.Partitions = append(t.Partitions, rp)
	}
	req.Topics = append(req.Topics, t)
	shards := cl.RequestSharded(ctx, req)
	ends := map[int32]int64{}
	for _, sh := range shards {
		if sh.Err != nil {
			return nil, sh.Err
		}
		for _, rt := range sh.Resp.(*kmsg.ListOffsetsResponse).Topics {
			for _, p := range rt.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					return nil, fmt.Errorf("end offset of %s/%d: %w", topic, p.Partition, err)
				}
				ends[p.Partition] = p.Offset
			}
		}
	}
	if len(ends) != int(partitions) {
		return nil, fmt.Errorf("end offsets of %s: %d of %d partitions answered", topic, len(ends), partitions)
	}
	return ends, nil
}
