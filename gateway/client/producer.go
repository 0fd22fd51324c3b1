// Package client is byzlog's producer SDK, shaped like a Kafka producer:
// records are batched per partition (linger, batch size), each batch is
// signed with the producer's ed25519 key and a sequence number, sent to a
// gateway, and retried with the same bytes on retriable errors, so a retry
// never duplicates. Partitions are picked like Kafka's default partitioner:
// murmur2 of the key, sticky for keyless records. Every ACK_COMMIT receipt
// is checked against a header the producer's own light client verified
// from the root of trust it is configured with (WithTrust), so an
// untrusted gateway cannot acknowledge records the chain did not write;
// Admin does the same for topic changes. It logs nothing; errors come back
// through each record's Future.
package client

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"google.golang.org/protobuf/proto"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/chain/receipt"
	"github.com/byzlog/byzlog/protos/chain/stateproof"
	"github.com/byzlog/byzlog/protos/wire"
)

// Record is one record to produce. A nil Key, Value or header value is
// null (Kafka's -1, a tombstone's value), an empty non-nil one is empty:
// the chain keeps the difference (rules version 5 on) and consumers read
// back what was sent.
type Record struct {
	Topic   string
	Key     []byte
	Value   []byte
	Headers []*byzlogv1.RecordHeader
	// Partition pins the partition; nil lets the partitioner choose.
	Partition *uint32
}

// Receipt says where a record landed.
type Receipt struct {
	Topic     string
	Partition uint32
	// Offset is the record's offset (for ACK_COMMIT; 0 for weaker acks).
	Offset  uint64
	Height  int64
	TxIndex uint32
	// Duplicate is true when the batch had been committed by an earlier
	// attempt: the offsets are the original ones.
	Duplicate bool
	// Verified is true when the producer checked the receipt against the
	// chain itself (WithTrust from a genesis or a header): the offsets are
	// the chain's, whatever the gateway is.
	Verified bool
}

// Future is the result of one Produce.
type Future struct {
	done    chan struct{}
	then    func(Receipt, error) // ProduceFunc's callback, in place of done
	receipt Receipt
	err     error
}

// Done is closed when the result is known.
func (f *Future) Done() <-chan struct{} { return f.done }

// Wait returns the receipt or the error.
func (f *Future) Wait(ctx context.Context) (Receipt, error) {
	select {
	case <-f.done:
		return f.receipt, f.err
	case <-ctx.Done():
		return Receipt{}, ctx.Err()
	}
}

func (f *Future) resolve(r Receipt, err error) {
	if f.then != nil {
		f.then(r, err)
		return
	}
	f.receipt, f.err = r, err
	close(f.done)
}

// ErrClosed is returned for records produced after Close.
var ErrClosed = errors.New("byzlog producer is closed")

// Producer batches, signs and sends records. Safe for concurrent use.
type Producer struct {
	o       options
	conns   []*grpc.ClientConn
	gws     []byzlogv1.GatewayClient
	signer  *wire.Signer
	chainID string
	verify  *receipt.Verifier // nil: receipts are taken on the gateway's word
	next    atomic.Uint64
	// verifying bounds the receipts being checked at once; each holds its
	// batch's records until it is resolved.
	verifying chan struct{}
	vwg       sync.WaitGroup // receipt checks

	mu      sync.Mutex
	space   *sync.Cond // on mu: a partition's queue has room again
	closed  bool
	parts   map[string]*partition
	counts  map[string]uint32 // topic -> partitions
	sticky  map[string]uint32
	pending sync.WaitGroup // records not yet resolved
	wg      sync.WaitGroup // partition senders
	ctx     context.Context
	cancel  context.CancelFunc

	// txnMu runs WriteAtomically's writes one at a time; txns are the
	// transactional ids this producer initialized.
	txnMu sync.Mutex
	txns  map[string]*txnProducer
}

// partition accumulates one topic-partition's records and sends its
// batches in order, one at a time, so sequences never leave a gap. While a
// batch is out, the next one keeps growing (up to the batch size) instead
// of being cut at every linger: like Kafka's accumulator, a partition
// whose request is in flight sends what gathered meanwhile as one batch.
type partition struct {
	topic string
	num   uint32
	recs  []*byzlogv1.Record
	futs  []*Future
	bytes int
	timer *time.Timer // linger of the records in recs; nil once it fired
	// queue holds batches handed to the sender and not yet taken; busy
	// says the sender has a batch (queued or out). Both under Producer.mu.
	queue   []batch
	busy    bool
	closing bool
	wake    chan struct{} // a batch was queued, or closing was set
	seq     uint64
	known   bool
	// verified is closed when the last batch handed to the verifier has
	// resolved its records, so records resolve in order; relearn asks the
	// sender to read the partition's sequence from the chain again (a
	// receipt it moved on from did not verify).
	verified chan struct{}
	relearn  atomic.Bool
}

// maxQueuedBatches bounds a partition's queue: Produce waits beyond it.
const maxQueuedBatches = 64

type batch struct {
	recs []*byzlogv1.Record
	futs []*Future
}

// maxVerifying bounds the receipts a producer checks at once.
const maxVerifying = 256

// NewProducer connects to the gateways, checks they serve the chain of its
// Trust, and starts the light client that verifies receipts.
func NewProducer(ctx context.Context, opts ...Option) (*Producer, error) {
	o := defaults()
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	if o.key == nil {
		_, k, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return nil, fmt.Errorf("generate producer key: %w", err)
		}
		o.key = k
	}
	p := &Producer{o: o, parts: map[string]*partition{}, counts: map[string]uint32{}, sticky: map[string]uint32{},
		chainID: o.trust.ChainID(), verifying: make(chan struct{}, maxVerifying), txns: map[string]*txnProducer{}}
	p.space = sync.NewCond(&p.mu)
	p.ctx, p.cancel = context.WithCancel(context.Background())
	for _, a := range o.gateways {
		c, err := grpc.NewClient(a, o.dialCreds())
		if err != nil {
			p.closeConns()
			return nil, fmt.Errorf("gateway %s: %w", a, err)
		}
		p.conns = append(p.conns, c)
		p.gws = append(p.gws, byzlogv1.NewGatewayClient(c))
	}
	if err := checkChain(ctx, p.gws, o.gateways, p.chainID); err != nil {
		p.closeConns()
		return nil, err
	}
	v, err := receipt.NewVerifier(o.trust, p.gws, o.requestTimeout)
	if err != nil {
		p.closeConns()
		return nil, err
	}
	p.verify = v
	p.signer = wire.NewSigner(o.key, p.chainID)
	return p, nil
}

// PublicKey is the producer's identity.
func (p *Producer) PublicKey() ed25519.PublicKey { return p.signer.PublicKey() }

// ChainID is the chain the producer signs for.
func (p *Producer) ChainID() string { return p.chainID }

// Produce queues a record and returns its Future at once.
func (p *Producer) Produce(ctx context.Context, r *Record) *Future {
	f := &Future{done: make(chan struct{})}
	if err := p.produce(ctx, r, f); err != nil {
		f.resolve(Receipt{}, err)
	}
	return f
}

// ProduceFunc queues a record, as Produce does, and calls fn with its
// receipt or its error once that is known, as a Kafka producer's callback
// (franz-go's promise) is called; nothing waits on a Future. fn is called
// once, on the producer's goroutine that learned the outcome (a
// partition's records in order), so it must not block: hand anything slow
// to another goroutine. A record refused at once (a closed producer, an
// unknown topic) has fn called before ProduceFunc returns.
func (p *Producer) ProduceFunc(ctx context.Context, r *Record, fn func(Receipt, error)) {
	f := &Future{then: fn}
	if err := p.produce(ctx, r, f); err != nil {
		f.resolve(Receipt{}, err)
	}
}

// produce queues r, to be answered through f; an error refuses it at once
// (the caller resolves f with it, outside the producer's lock).
func (p *Producer) produce(ctx context.Context, r *Record, f *Future) error {
	num, err := p.partitionFor(ctx, r)
	if err != nil {
		return err
	}
	rec := &byzlogv1.Record{Key: r.Key, Value: r.Value, Headers: r.Headers, CreateTimeUnixNano: time.Now().UnixNano()}
	size := len(r.Key) + len(r.Value) + 16
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	key := fmt.Sprintf("%s/%d", r.Topic, num)
	pt := p.parts[key]
	if pt == nil {
		pt = &partition{topic: r.Topic, num: num, wake: make(chan struct{}, 1)}
		p.parts[key] = pt
		p.wg.Add(1)
		go p.send(pt)
	}
	for len(pt.queue) >= maxQueuedBatches && !p.closed {
		p.space.Wait() // back-pressure: the sender is that far behind
	}
	if p.closed {
		return ErrClosed
	}
	p.pending.Add(1)
	pt.recs, pt.futs, pt.bytes = append(pt.recs, rec), append(pt.futs, f), pt.bytes+size
	switch {
	case len(pt.recs) >= p.o.batchRecords || pt.bytes >= p.o.batchBytes:
		p.flushLocked(pt) // a full batch queues even behind a busy sender
	case len(pt.recs) == 1:
		pt.timer = time.AfterFunc(p.o.linger, func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			pt.timer = nil
			if !pt.busy {
				p.flushLocked(pt) // else the sender takes it when its batch is answered
			}
		})
	}
	return nil
}

// ProduceSync produces one record and waits for its receipt.
func (p *Producer) ProduceSync(ctx context.Context, r *Record) (Receipt, error) {
	return p.Produce(ctx, r).Wait(ctx)
}

// flushLocked hands the partition's records to its sender as one batch.
func (p *Producer) flushLocked(pt *partition) {
	if p.closed {
		return
	}
	if pt.timer != nil {
		pt.timer.Stop()
		pt.timer = nil
	}
	if len(pt.recs) == 0 {
		return
	}
	b := batch{recs: pt.recs, futs: pt.futs}
	pt.recs, pt.futs, pt.bytes = nil, nil, 0
	if n, ok := p.counts[pt.topic]; ok && n > 1 {
		if s, ok := p.sticky[pt.topic]; ok && s == pt.num {
			delete(p.sticky, pt.topic) // keyless records move on after a batch, as Kafka's sticky partitioner does
		}
	}
	pt.queue = append(pt.queue, b)
	pt.busy = true
	select {
	case pt.wake <- struct{}{}:
	default:
	}
}

// Flush sends every queued record now and waits until all are resolved.
func (p *Producer) Flush(ctx context.Context) error {
	p.mu.Lock()
	for _, pt := range p.parts {
		p.flushLocked(pt)
	}
	p.mu.Unlock()
	done := make(chan struct{})
	go func() { p.pending.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close flushes (bounded by ctx), stops the senders and closes connections.
// Records still unresolved when ctx ends fail with ErrClosed.
func (p *Producer) Close(ctx context.Context) error {
	err := p.Flush(ctx)
	p.mu.Lock()
	p.closed = true
	for _, pt := range p.parts {
		pt.closing = true
		select {
		case pt.wake <- struct{}{}:
		default:
		}
	}
	p.space.Broadcast()
	p.mu.Unlock()
	p.cancel()
	p.wg.Wait()
	p.vwg.Wait()
	p.closeConns()
	return err
}

func (p *Producer) closeConns() {
	for _, c := range p.conns {
		_ = c.Close()
	}
}

// partitionFor picks the record's partition: pinned, murmur2 of the key, or
// the topic's sticky partition for keyless records.
func (p *Producer) partitionFor(ctx context.Context, r *Record) (uint32, error) {
	if r.Topic == "" {
		return 0, status.Error(codes.InvalidArgument, "record has no topic")
	}
	n, err := p.partitions(ctx, r.Topic)
	if err != nil {
		return 0, err
	}
	switch {
	case r.Partition != nil:
		if *r.Partition >= n {
			return 0, status.Errorf(codes.NotFound, "topic %q has partitions 0..%d, not %d", r.Topic, n-1, *r.Partition)
		}
		return *r.Partition, nil
	case r.Key != nil:
		return KafkaPartition(r.Key, n), nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.sticky[r.Topic]
	if !ok {
		v, err := rand.Int(rand.Reader, big.NewInt(int64(n)))
		if err != nil {
			return 0, err
		}
		s = uint32(v.Int64())
		p.sticky[r.Topic] = s
	}
	return s, nil
}

func (p *Producer) partitions(ctx context.Context, topic string) (uint32, error) {
	return p.partitionsOnce(ctx, topic, false)
}

func (p *Producer) partitionsOnce(ctx context.Context, topic string, retried bool) (uint32, error) {
	p.mu.Lock()
	n, ok := p.counts[topic]
	p.mu.Unlock()
	if ok {
		return n, nil
	}
	var lastErr error
	for i := range p.gws {
		resp, err := p.gws[(p.next.Load()+uint64(i))%uint64(len(p.gws))].DescribeTopic(ctx, &byzlogv1.DescribeTopicRequest{Name: topic})
		if err == nil {
			n = resp.GetTopic().GetConfig().GetPartitions()
			p.mu.Lock()
			p.counts[topic] = n
			p.mu.Unlock()
			return n, nil
		}
		if c := status.Code(err); c != codes.Unavailable && c != codes.DeadlineExceeded && c != codes.NotFound {
			return 0, err
		}
		lastErr = err
	}
	if status.Code(lastErr) == codes.NotFound && !retried {
		// Like a Kafka producer waiting for metadata: a topic created a
		// moment ago may not be on every node yet.
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		return p.partitionsOnce(ctx, topic, true)
	}
	return 0, lastErr
}

// send is one partition's sender: it signs and sends batches in order, and
// when one is answered takes whatever gathered meanwhile and lingered.
func (p *Producer) send(pt *partition) {
	defer p.wg.Done()
	for {
		p.mu.Lock()
		for len(pt.queue) == 0 && !pt.closing {
			p.mu.Unlock()
			<-pt.wake
			p.mu.Lock()
		}
		if len(pt.queue) == 0 { // closing, and everything was sent
			p.mu.Unlock()
			return
		}
		b := pt.queue[0]
		pt.queue = pt.queue[1:]
		p.space.Broadcast()
		p.mu.Unlock()

		p.sendBatch(pt, b)

		p.mu.Lock()
		if len(pt.queue) == 0 {
			if len(pt.recs) > 0 && pt.timer == nil && !p.closed {
				p.flushLocked(pt) // lingered while this batch was out
			} else {
				pt.busy = false
			}
		}
		p.mu.Unlock()
	}
}

// sendBatch sends one batch until it gets a definite answer: a receipt
// (duplicate included) or a rejection. Retriable errors — the gateway is
// unreachable, overloaded or timed out — are retried with the same signed
// bytes on the next gateway, so the batch commits at most once.
func (p *Producer) sendBatch(pt *partition, b batch) {
	handed := false // to the verifier, which resolves and releases the records
	defer func() {
		if handed {
			return
		}
		for range b.futs {
			p.pending.Done()
		}
	}()
	signed, err := p.sign(pt, b)
	if err != nil {
		b.fail(err)
		return
	}
	backoff := p.o.backoff
	start := p.next.Load()
	var uncertainSince time.Time // first attempt whose outcome is unknown
	for attempt := uint64(0); ; attempt++ {
		at := (start + attempt) % uint64(len(p.gws))
		ctx, cancel := context.WithTimeout(p.ctx, p.o.requestTimeout)
		resp, err := p.gws[at].Produce(ctx, &byzlogv1.ProduceRequest{Batch: signed, Ack: p.o.acks})
		cancel()
		if err == nil && p.verify != nil && resp.GetReceipt().GetAck() == byzlogv1.Ack_ACK_COMMIT {
			// The next batch goes out while this receipt is checked (it
			// needs the header after its block): the partition moves on, and
			// if the receipt does not verify its records fail and the
			// partition reads its sequence from the chain again.
			pt.seq++
			handed = true
			p.verifyReceipt(pt, b, signed, resp.GetReceipt(), at)
			return
		}
		if err == nil {
			b.resolve(resp.GetReceipt())
			pt.seq++
			return
		}
		if p.rejected(pt, err, &uncertainSince) {
			b.fail(err)
			return
		}
		if p.ctx.Err() != nil {
			b.fail(fmt.Errorf("%w while sending sequence %d of %s/%d: its outcome is unknown; a new producer with the same key learns the next sequence from the chain", ErrClosed, pt.seq, pt.topic, pt.num))
			return
		}
		p.next.Store(start + attempt + 1) // fail over: later batches start at the next gateway too
		select {
		case <-time.After(backoff):
		case <-p.ctx.Done():
		}
		backoff = min(2*backoff, p.o.maxBackoff)
	}
}

// sign signs the batch under the partition's next sequence, learning it
// from the chain first when the producer does not know it.
func (p *Producer) sign(pt *partition, b batch) (*byzlogv1.SignedBatch, error) {
	if pt.relearn.Swap(false) {
		pt.known = false
	}
	if !pt.known {
		seq, err := p.nextSequence(pt, time.Now().Add(-DefaultMaxAge))
		if err != nil {
			return nil, err
		}
		pt.seq, pt.known = seq, true
	}
	return p.signer.Batch(pt.topic, pt.num, pt.seq, p.o.codec, b.recs)
}

// rejected reports whether err, the answer to an attempt at the
// partition's current sequence, fails the batch for good. A rejection is
// final only while no earlier attempt may have been committed; after one
// whose outcome is unknown (uncertainSince is set), the same bytes are sent
// again (a committed batch answers as a duplicate with its offsets) until
// the chain shows the sequence is still free.
func (p *Producer) rejected(pt *partition, err error, uncertainSince *time.Time) bool {
	if retriable(err) {
		if uncertainSince.IsZero() && mayHaveSent(err) {
			*uncertainSince = time.Now()
		}
		return false
	}
	if uncertainSince.IsZero() {
		// Rejected, so not committed: the next batch reuses the sequence,
		// unless the chain says this producer's sequence is not the
		// partition's next (another producer with the key, or a number a
		// gateway gave): then the next batch reads it again.
		if msg := status.Convert(err).Message(); strings.HasPrefix(msg, wire.CodeSequenceReused.String()) || strings.HasPrefix(msg, wire.CodeSequenceGap.String()) {
			pt.relearn.Store(true)
		}
		return true
	}
	if time.Since(*uncertainSince) > p.o.requestTimeout {
		// Proven (when verifying) by a header after the attempt whose
		// outcome is unknown was sent.
		if next, qerr := p.nextSequence(pt, later(*uncertainSince, time.Now().Add(-maxProofSkew))); qerr == nil && next <= pt.seq {
			return true
		}
	}
	return false
}

// resolve answers the batch's records with the receipt.
func (b batch) resolve(rc *byzlogv1.Receipt) {
	for i, f := range b.futs {
		r := Receipt{Topic: rc.GetTopic(), Partition: rc.GetPartition(), Height: rc.GetHeight(), TxIndex: rc.GetTxIndex(), Duplicate: rc.GetDuplicate()}
		if rc.GetAck() == byzlogv1.Ack_ACK_COMMIT {
			r.Offset = rc.GetBaseOffset() + uint64(i)
		}
		f.resolve(r, nil)
	}
}

// fail answers the batch's records with err.
func (b batch) fail(err error) {
	for _, f := range b.futs {
		f.resolve(Receipt{}, err)
	}
}

// nextSequence asks a gateway where this producer stands in a partition.
// A producer that verifies receipts takes only a proven answer (the
// chain's rules version 10 on), from a header it verified that is no older
// than notBefore: a gateway's low number would have it sign a used
// sequence, or give up on a batch the chain holds, and a true proof of an
// old height is such a number. A gateway that refuses, or whose answer
// does not verify, is passed over for the next; once every gateway has in
// a row, the last refusal is the error. Gateways that do not answer are
// asked again, backing off, until the producer closes.
func (p *Producer) nextSequence(pt *partition, notBefore time.Time) (uint64, error) {
	backoff := p.o.backoff
	start := p.next.Load()
	req := &byzlogv1.ProducerRequest{ProducerKey: p.PublicKey(), Topic: pt.topic, Partition: pt.num, Prove: p.verify != nil && p.o.trust.Verifies()}
	refused := 0 // gateways in a row that refused or did not verify
	for attempt := uint64(0); ; attempt++ {
		gw := p.gws[(start+attempt)%uint64(len(p.gws))]
		ctx, cancel := context.WithTimeout(p.ctx, p.o.requestTimeout)
		ps, err := gw.GetProducerState(ctx, req)
		verifyErr := false
		if err == nil && req.Prove {
			var next uint64
			if next, err = p.provenSequence(ctx, req, ps.GetProof(), notBefore); err == nil {
				cancel()
				return next, nil
			}
			verifyErr = errors.Is(err, ErrUnverified) || errors.Is(err, ErrStale)
		}
		cancel()
		switch {
		case err == nil:
			return ps.GetNextSequence(), nil
		case p.ctx.Err() != nil:
			return 0, fmt.Errorf("read producer sequence of %s/%d: %w", pt.topic, pt.num, err)
		case verifyErr || !retriable(err):
			if refused++; refused >= len(p.gws) {
				return 0, fmt.Errorf("read producer sequence of %s/%d: every gateway refused or did not prove it; the last: %w", pt.topic, pt.num, err)
			}
			continue // the next gateway at once
		}
		refused = 0
		select {
		case <-time.After(backoff):
		case <-p.ctx.Done():
		}
		backoff = min(2*backoff, p.o.maxBackoff)
	}
}

// maxProofSkew is how much older than the query a proof may be that
// decides a batch whose outcome was unknown did not commit: a gateway can
// only pick among the heights of the last few seconds, and the chain's
// block times may trail this clock by that much.
const maxProofSkew = 5 * time.Second

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// provenSequence checks sp, a gateway's proof of req's producer state,
// against the verified header after its height, which must be no older than
// notBefore, and returns the proven next sequence.
func (p *Producer) provenSequence(ctx context.Context, req *byzlogv1.ProducerRequest, sp *byzlogv1.StateProof, notBefore time.Time) (uint64, error) {
	h := sp.GetHeight()
	if h <= 0 {
		return 0, fmt.Errorf("%w: the gateway gave no proof of the producer state of %s/%d (a gateway from before rules version 10's proofs ignores the request for one)", ErrUnverified, req.Topic, req.Partition)
	}
	lb, err := p.verify.Header(ctx, h+1)
	if err != nil {
		return 0, fmt.Errorf("producer state of %s/%d: %w", req.Topic, req.Partition, err)
	}
	if lb.Time.Before(notBefore) {
		return 0, fmt.Errorf("%w: producer state of %s/%d proven by header %d of %s, before %s", ErrStale, req.Topic, req.Partition, h+1, lb.Time.UTC().Format(time.RFC3339Nano), notBefore.UTC().Format(time.RFC3339Nano))
	}
	ps, err := stateproof.VerifyProducerState(sp, lb.AppHash, req)
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrUnverified, err)
	}
	return ps.GetNextSequence(), nil
}

// mayHaveSent reports whether a failed attempt may still have reached the
// chain: a timeout or a broken connection after the request left, as
// opposed to a gateway that refused to take it (RESOURCE_EXHAUSTED).
func mayHaveSent(err error) bool {
	switch status.Code(err) {
	case codes.ResourceExhausted:
		return false
	}
	return true
}

// retriable reports whether sending the same batch again may succeed.
func retriable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.ResourceExhausted, codes.DeadlineExceeded, codes.Aborted, codes.Canceled, codes.Unknown, codes.Internal:
		return true
	}
	return false
}

// verifyReceipt checks rc in the background and then resolves b's records,
// after those of the partition's previous batch.
func (p *Producer) verifyReceipt(pt *partition, b batch, signed *byzlogv1.SignedBatch, rc *byzlogv1.Receipt, gw uint64) {
	prev := pt.verified
	done := make(chan struct{})
	pt.verified = done
	p.verifying <- struct{}{}
	p.vwg.Add(1)
	go func() {
		defer p.vwg.Done()
		defer close(done)
		var body byzlogv1.BatchBody
		err := proto.Unmarshal(signed.Body, &body)
		var br *byzlogv1.BatchResult
		if err == nil {
			ctx, cancel := context.WithTimeout(p.ctx, max(2*p.o.requestTimeout, time.Minute))
			br, err = checkBatch(ctx, p.verify, signed, &body, len(b.recs), rc)
			cancel()
		}
		<-p.verifying
		if prev != nil {
			<-prev
		}
		if err != nil && p.ctx.Err() == nil {
			// A gateway whose receipt does not check is not used again
			// while another is there: later batches start at the next one.
			pt.relearn.Store(true)
			p.next.Store(gw + 1)
		}
		for i, f := range b.futs {
			if err != nil {
				f.resolve(Receipt{}, fmt.Errorf("%s/%d sequence %d: %w", pt.topic, pt.num, body.Sequence, err))
			} else {
				f.resolve(Receipt{Topic: br.Topic, Partition: br.Partition, Offset: br.BaseOffset + uint64(i),
					Height: rc.GetHeight(), TxIndex: rc.GetTxIndex(), Duplicate: br.Duplicate, Verified: true}, nil)
			}
			p.pending.Done()
		}
	}()
}

// checkChain asks the gateways which chain they serve: one that names
// another chain than the producer's Trust is a configuration error, said
// at once rather than as every batch refused. The answer is only checked,
// never adopted.
func checkChain(ctx context.Context, gws []byzlogv1.GatewayClient, addrs []string, chainID string) error {
	var lastErr error
	for i, gw := range gws {
		h, err := gw.Health(ctx, &byzlogv1.HealthRequest{})
		if err != nil {
			lastErr = err
			continue
		}
		if h.ChainId != chainID {
			return fmt.Errorf("gateway %s serves chain %q, this client trusts %q: check which genesis each side was given", addrs[i], h.ChainId, chainID)
		}
		return nil
	}
	return fmt.Errorf("no gateway of %v answered (last error: %v)", addrs, lastErr)
}
