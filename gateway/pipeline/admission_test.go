package pipeline

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// waitFor polls cond for up to d.
func waitFor(d time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

func TestProduceCommits(t *testing.T) {
	c := newTestChain(t, testTopics()...)
	runChain(t, c)
	g := startGateway(t, c, nil)
	p := newTestProducer("honest")
	ctx := context.Background()
	for seq := uint64(0); seq < 3; seq++ {
		rc, err := g.Produce(ctx, p.batch(t, "t", seq, "v"), byzlogv1.Ack_ACK_COMMIT)
		if err != nil || rc.GetBaseOffset() != seq || rc.GetDuplicate() {
			t.Fatalf("Produce(seq %d) = %v, %v; want base offset %d", seq, rc, err, seq)
		}
	}
	// A retry with the same bytes gets the original receipt (the node's
	// cache knows the tx); other bytes under a committed sequence were
	// never written, so they get an error, never the original's offsets.
	rc, err := g.Produce(ctx, p.batch(t, "t", 1, "v"), byzlogv1.Ack_ACK_COMMIT)
	if err != nil || rc.GetBaseOffset() != 1 {
		t.Fatalf("Produce(seq 1 again) = %v, %v; want offset 1", rc, err)
	}
	rc, err = g.Produce(ctx, p.batch(t, "t", 1, "other"), byzlogv1.Ack_ACK_COMMIT)
	if status.Code(err) != codes.FailedPrecondition || rc != nil {
		t.Fatalf("Produce(seq 1, other bytes) = %v, %v; want FAILED_PRECONDITION (sequence reused)", rc, err)
	}
	if !waitFor(time.Second, func() bool { return len(g.inflight) == 0 && g.queued.Load() == 0 }) {
		t.Fatalf("after every answer: %d bundles in flight, %d bytes queued; want 0, 0", len(g.inflight), g.queued.Load())
	}
}

// TestGapBatchDoesNotHoldSlot: a batch that skips sequences passes CheckTx
// (which allows sequences ahead) but never fits a block. The gateway must
// answer it at once and never bundle it, so it neither holds an in-flight
// slot nor strands the batches it would have been bundled with.
func TestGapBatchDoesNotHoldSlot(t *testing.T) {
	for _, tc := range []struct {
		name   string
		linger time.Duration
	}{
		{"alone", time.Millisecond},
		{"bundled with an honest batch", 300 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestChain(t, testTopics()...)
			runChain(t, c)
			g := startGateway(t, c, func(cfg *Config) { cfg.MaxInFlight, cfg.Linger = 1, tc.linger })
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			gap := produceAsync(ctx, g, newTestProducer("gapper").batch(t, "t", 5, "gap"))
			honest := produceAsync(ctx, g, newTestProducer("honest").batch(t, "t", 0, "ok"))
			a := await(t, gap, 3*time.Second, "gap batch")
			if status.Code(a.err) != codes.FailedPrecondition || !strings.Contains(a.err.Error(), "expected sequence 0, got 5") {
				t.Errorf("gap batch: Produce = %v, %v; want FAILED_PRECONDITION naming expected sequence 0, got 5", a.receipt, a.err)
			}
			if a := await(t, honest, 3*time.Second, "honest batch"); a.err != nil {
				t.Errorf("honest batch: Produce = %v; want a receipt", a.err)
			}
			if n := c.mempoolLen(); n != 0 {
				t.Errorf("the node's mempool holds %d transactions; want 0 (the gap batch never sent)", n)
			}
			if !waitFor(time.Second, func() bool { return len(g.inflight) == 0 && g.queued.Load() == 0 }) {
				t.Errorf("%d bundles in flight, %d bytes queued; want 0, 0", len(g.inflight), g.queued.Load())
			}
		})
	}
}

// TestSequenceAfterOtherGateway: a producer that failed over to another
// gateway and back is not refused as a gap, though this gateway's cache of
// its sequence is behind.
func TestSequenceAfterOtherGateway(t *testing.T) {
	c := newTestChain(t, testTopics()...)
	runChain(t, c)
	a, b := startGateway(t, c, nil), startGateway(t, c, nil)
	p := newTestProducer("roamer")
	ctx := context.Background()
	for seq, g := range []*Gateway{a, b, b, a, b} {
		rc, err := g.Produce(ctx, p.batch(t, "t", uint64(seq), "v"), byzlogv1.Ack_ACK_COMMIT)
		if err != nil || rc.GetBaseOffset() != uint64(seq) {
			t.Fatalf("Produce(seq %d) = %v, %v; want base offset %d", seq, rc, err, seq)
		}
	}
}

// TestPipelinedSequences: a client may send sequences 0..n-1 at once
// without waiting; each is next after the ones pending before it.
func TestPipelinedSequences(t *testing.T) {
	c := newTestChain(t, testTopics()...)
	runChain(t, c)
	g := startGateway(t, c, nil)
	p := newTestProducer("pipeliner")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var chans []<-chan answer
	for seq := range uint64(8) {
		chans = append(chans, produceAsync(ctx, g, p.batch(t, "t", seq, "v")))
		time.Sleep(2 * time.Millisecond) // arrive in order
	}
	for seq, ch := range chans {
		if a := await(t, ch, 5*time.Second, "pipelined batch"); a.err != nil || a.receipt.GetBaseOffset() != uint64(seq) {
			t.Errorf("seq %d: %v, %v; want base offset %d", seq, a.receipt, a.err, seq)
		}
	}
}

// TestResubmitSameBytesKeepsSlot: the same bytes submitted twice while the
// first is pending must not replace the first's entry (whose caller would
// never be answered and whose in-flight slot would never be freed).
func TestResubmitSameBytesKeepsSlot(t *testing.T) {
	offsets, err := newTestProducer("consumer").CommitOffsets(0, "group", false, &byzlogv1.PartitionOffset{Topic: "t", Partition: 0, Offset: 0})
	if err != nil {
		t.Fatal(err)
	}
	offsetsTx, err := wire.OffsetsTx(offsets)
	if err != nil {
		t.Fatal(err)
	}
	batch := newTestProducer("twice").batch(t, "t", 0, "v")
	for _, tc := range []struct {
		name   string
		submit func(ctx context.Context, g *Gateway) error
	}{
		{"a produce batch", func(ctx context.Context, g *Gateway) error {
			_, err := g.Produce(ctx, batch, byzlogv1.Ack_ACK_COMMIT)
			return err
		}},
		{"a consumer offset commit", func(ctx context.Context, g *Gateway) error {
			_, err := g.SubmitTx(ctx, offsetsTx)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestChain(t, testTopics()...)
			c.freeze(true)
			runChain(t, c)
			g := startGateway(t, c, func(cfg *Config) { cfg.MaxInFlight = 2 })
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			errs := make(chan error, 2)
			go func() { errs <- tc.submit(ctx, g) }()
			if !waitFor(2*time.Second, func() bool { return c.mempoolLen() == 1 }) {
				t.Fatal("the first submission never reached the node")
			}
			go func() { errs <- tc.submit(ctx, g) }()
			time.Sleep(200 * time.Millisecond) // the second is in, and sent if it is sent
			c.freeze(false)
			for i := range 2 {
				select {
				case err := <-errs:
					if err != nil {
						t.Errorf("submission %d: %v", i, err)
					}
				case <-time.After(5 * time.Second):
					t.Fatalf("submission %d: no answer within 5s after the block", i)
				}
			}
			if !waitFor(time.Second, func() bool { return len(g.inflight) == 0 && g.queued.Load() == 0 }) {
				t.Errorf("%d bundles in flight, %d bytes queued; want 0, 0", len(g.inflight), g.queued.Load())
			}
		})
	}
}

// TestPendingDeadlineFreesSlot: a bundle that never shows up in a block is
// answered after the pending timeout, which frees its slot and bytes.
func TestPendingDeadlineFreesSlot(t *testing.T) {
	c := newTestChain(t, testTopics()...)
	c.freeze(true)
	runChain(t, c)
	g := startGateway(t, c, func(cfg *Config) { cfg.MaxInFlight, cfg.PendingTimeout = 1, 2*time.Second })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	a := await(t, produceAsync(ctx, g, newTestProducer("stuck").batch(t, "t", 0, "v")), 6*time.Second, "never committed batch")
	if status.Code(a.err) != codes.DeadlineExceeded || !strings.Contains(a.err.Error(), "retry with the same sequence") {
		t.Errorf("Produce = %v, %v after %s; want DEADLINE_EXCEEDED saying to retry with the same sequence", a.receipt, a.err, time.Since(start))
	}
	if !waitFor(time.Second, func() bool { return len(g.inflight) == 0 && g.queued.Load() == 0 }) {
		t.Errorf("%d bundles in flight, %d bytes queued; want 0, 0", len(g.inflight), g.queued.Load())
	}
	// The slot is free: once blocks include transactions again, the same
	// batch, retried, commits.
	c.freeze(false)
	if a := await(t, produceAsync(ctx, g, newTestProducer("stuck").batch(t, "t", 0, "v")), 5*time.Second, "retry"); a.err != nil {
		t.Errorf("retry: %v; want a receipt", a.err)
	}
}

// TestPrecheckRefusesWhatCannotCommit: a producer key outside the topic's
// allowed_producers, or a record over the topic's limit, is refused
// before anything is sent to a node.
func TestPrecheckRefusesWhatCannotCommit(t *testing.T) {
	topics := append(testTopics(), &byzlogv1.TopicState{Name: "small", Config: &byzlogv1.TopicConfig{Partitions: 1, MaxRecordBytes: 8}})
	c := newTestChain(t, topics...)
	runChain(t, c)
	g := startGateway(t, c, nil)
	for _, tc := range []struct {
		name  string
		batch *byzlogv1.SignedBatch
		code  codes.Code
		msg   string
	}{
		{"key not allowed", newTestProducer("stranger").batch(t, "acl", 0, "v"), codes.PermissionDenied, "allowed_producers"},
		{"record too large", newTestProducer("big").batch(t, "small", 0, "more than eight bytes"), codes.InvalidArgument, "the topic allows 8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			start := time.Now()
			_, err := g.Produce(ctx, tc.batch, byzlogv1.Ack_ACK_COMMIT)
			if status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("Produce = %v; want %s mentioning %q", err, tc.code, tc.msg)
			}
			c.mu.Lock()
			sent := len(c.broadcasts)
			c.mu.Unlock()
			if sent != 0 {
				t.Errorf("%d transactions sent to the node (after %s); want none", sent, time.Since(start))
			}
		})
	}
	if _, err := g.Produce(context.Background(), newTestProducer("allowed").batch(t, "acl", 0, "v"), byzlogv1.Ack_ACK_COMMIT); err != nil {
		t.Errorf("allowed key: %v; want a receipt", err)
	}
}

// TestUnknownTopicChargedBeforeWait: while the gateway waits for the
// metadata of a topic it does not know, the batch already counts against
// the queue.
func TestUnknownTopicChargedBeforeWait(t *testing.T) {
	c := newTestChain(t, testTopics()...)
	runChain(t, c)
	g := startGateway(t, c, nil)
	ch := produceAsync(context.Background(), g, newTestProducer("lost").batch(t, "nope", 0, "v"))
	if !waitFor(500*time.Millisecond, func() bool { return g.queued.Load() > 0 }) {
		t.Errorf("queued bytes stayed 0 while the unknown topic's batch waited")
	}
	if a := await(t, ch, 3*time.Second, "unknown topic"); status.Code(a.err) != codes.NotFound {
		t.Errorf("Produce = %v; want NOT_FOUND", a.err)
	}
	if q := g.queued.Load(); q != 0 {
		t.Errorf("queued bytes after the answer = %d; want 0", q)
	}
}

// TestTxAlreadySeen: with mempool.type = "app" a node answers a
// transaction it already holds with "tx already seen"; that means the
// transaction is in its mempool, not that the node failed.
func TestTxAlreadySeen(t *testing.T) {
	c := newTestChain(t, testTopics()...)
	c.seenMsg = "tx already seen"
	c.freeze(true)
	runChain(t, c)
	g := startGateway(t, c, nil)
	b := newTestProducer("seen").batch(t, "t", 0, "v")
	tx, err := wire.BundleTx(b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.broadcast(tx); err != nil { // another gateway sent it first
		t.Fatal(err)
	}
	ch := produceAsync(context.Background(), g, b)
	time.Sleep(200 * time.Millisecond)
	c.freeze(false)
	if a := await(t, ch, 5*time.Second, "already seen batch"); a.err != nil || a.receipt.GetBaseOffset() != 0 {
		t.Errorf("Produce = %v, %v; want a receipt at offset 0", a.receipt, a.err)
	}
}

// TestPerProducerQueueLimit: one producer key may hold only so many
// batches and bytes in the gateway; past that it gets RESOURCE_EXHAUSTED
// naming the limit, and other producers are still served.
func TestPerProducerQueueLimit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(*Config)
		limit string
	}{
		{"batches", func(cfg *Config) { cfg.MaxProducerQueuedBatches = 2 }, "max_producer_queued_batches 2"},
		{"bytes", func(cfg *Config) { cfg.MaxBundleBytes, cfg.MaxProducerQueuedBytes = 1<<10, 1<<10 }, "max_producer_queued_bytes 1024"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestChain(t, testTopics()...)
			c.freeze(true) // nothing commits: what is accepted stays held
			runChain(t, c)
			g := startGateway(t, c, tc.edit)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			greedy := newTestProducer("greedy")
			var err error
			var seq uint64
			for ; seq < 100 && err == nil; seq++ {
				_, err = g.Produce(ctx, greedy.batch(t, "t", seq, strings.Repeat("x", 100)), byzlogv1.Ack_ACK_MEMPOOL)
			}
			if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), tc.limit) {
				t.Fatalf("after %d batches: Produce = %v; want RESOURCE_EXHAUSTED naming %q", seq-1, err, tc.limit)
			}
			if _, err := g.Produce(ctx, newTestProducer("modest").batch(t, "t", 0, "v"), byzlogv1.Ack_ACK_MEMPOOL); err != nil {
				t.Errorf("another producer: Produce = %v; want accepted", err)
			}
			c.freeze(false)
			if !waitFor(3*time.Second, func() bool { return g.queued.Load() == 0 }) {
				t.Fatalf("queued bytes = %d after the commits; want 0", g.queued.Load())
			}
			if _, err := g.Produce(ctx, greedy.batch(t, "t", seq-1, "v"), byzlogv1.Ack_ACK_COMMIT); err != nil {
				t.Errorf("once its batches committed: Produce = %v; want accepted", err)
			}
		})
	}
}

// TestSequenceConflict: a second batch with a pending sequence and other
// contents is refused; the same batch again waits for the first's answer.
func TestSequenceConflict(t *testing.T) {
	c := newTestChain(t, testTopics()...)
	c.freeze(true)
	runChain(t, c)
	g := startGateway(t, c, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p := newTestProducer("fickle")
	first := produceAsync(ctx, g, p.batch(t, "t", 0, "one"))
	if !waitFor(2*time.Second, func() bool { return c.mempoolLen() == 1 }) {
		t.Fatal("the first batch never reached the node")
	}
	_, err := g.Produce(ctx, p.batch(t, "t", 0, "two"), byzlogv1.Ack_ACK_COMMIT)
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "pending at this gateway with other contents") {
		t.Errorf("other contents, same sequence: Produce = %v; want FAILED_PRECONDITION", err)
	}
	again := produceAsync(ctx, g, p.batch(t, "t", 0, "one"))
	c.freeze(false)
	a, b := await(t, first, 5*time.Second, "first"), await(t, again, 5*time.Second, "same batch again")
	if a.err != nil || b.err != nil || a.receipt.GetBaseOffset() != 0 || b.receipt.GetBaseOffset() != 0 {
		t.Errorf("answers %v, %v / %v, %v; want both at offset 0", a.receipt, a.err, b.receipt, b.err)
	}
}

// TestProducerStateIsLearned: a producer starts by asking for its next
// sequence (GetProducerState), then sends a batch under it. The gateway
// already read that sequence from every node to answer; reading it again
// for the batch doubled the queries of each new producer and partition
// (441 and 441 in a 40 s bench).
func TestProducerStateIsLearned(t *testing.T) {
	c := newTestChain(t, testTopics()...)
	runChain(t, c)
	g := startGateway(t, c, nil)
	p := newTestProducer("learner")
	ctx := context.Background()
	next, err := g.ProducerState(ctx, &byzlogv1.ProducerRequest{ProducerKey: p.PublicKey(), Topic: "t", Partition: 0})
	if err != nil || next != 0 {
		t.Fatalf("ProducerState = %v, %v; want next sequence 0", next, err)
	}
	if _, err := g.Produce(ctx, p.batch(t, "t", 0, "v"), byzlogv1.Ack_ACK_COMMIT); err != nil {
		t.Fatalf("Produce(seq 0): %v", err)
	}
	reads := func(reason string) float64 {
		return testutil.ToFloat64(g.metrics.sequenceReads.WithLabelValues(reason))
	}
	if reads("client") != 1 || reads("unknown") != 0 {
		t.Fatalf("sequence reads: client %v, unknown %v; want 1, 0 (the batch's sequence was known from GetProducerState)", reads("client"), reads("unknown"))
	}
}
