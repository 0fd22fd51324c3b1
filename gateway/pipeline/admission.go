package pipeline

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// Admission: what one producer may hold in the gateway, and which of its
// batches may be bundled at all. A batch that cannot commit must never
// reach a bundle: CheckTx lets sequences run up to wire.MaxLookahead ahead,
// so a batch with a gap passes it, is never valid in a block, and would
// strand its bundle and hold an in-flight slot until the pending timeout.
// So a batch is bundled only when its sequence is the producer's next one
// after what is committed and what this gateway already has pending.

// A batch whose sequence is ahead (within CheckTx's lookahead) waits
// Waits.GapWait for the batches before it: requests of one producer, sent
// in order, may reach the admission check out of order (each call of a
// stream is served by its own goroutine). It waits charged to its
// producer.

// maxSeqStates bounds the producer sequences the gateway remembers; past it
// those with nothing pending are forgotten (and read again when needed).
const maxSeqStates = 1 << 16

// seqKey is one producer's sequence space.
type seqKey struct {
	key       string // producer public key
	topic     string
	partition uint32
	// kafka is a Kafka producer's id and epoch (zero for a byzlog producer):
	// each epoch is a sequence space of its own, counted in records.
	kafka kafkaStream
}

type kafkaStream struct {
	id    int64
	epoch int32
}

func seqKeyOf(key []byte, topic string, partition uint32, k *byzlogv1.KafkaProducer) seqKey {
	sk := seqKey{key: string(key), topic: topic, partition: partition}
	if k != nil {
		sk.kafka = kafkaStream{k.ProducerId, k.Epoch}
	}
	return sk
}

func (r *request) seqKey() seqKey {
	return seqKeyOf([]byte(r.key), r.body.Topic, r.body.Partition, r.body.Kafka)
}

// seqState is what the gateway knows of one producer's sequences.
type seqState struct {
	// next is the next sequence after those committed, as last read from a
	// node or advanced by this gateway's own commits (never backwards).
	next  uint64
	known bool
	// pending are the sequences accepted and not yet settled, each with
	// its request.
	pending map[uint64]*request
	// changed is closed (and replaced) when a sequence is reserved or next
	// moves: batches waiting for the ones before them look again.
	changed chan struct{}
}

func (st *seqState) notify() {
	close(st.changed)
	st.changed = make(chan struct{})
}

// expected is the sequence a new batch must carry: the first after the
// committed ones and the run of pending ones that follows them.
func (st *seqState) expected() uint64 {
	e := st.next
	for p := st.pending[e]; p != nil; p = st.pending[e] {
		e += wire.Span(p.body)
	}
	return e
}

// follows reports whether a pending batch ends right before sequence s.
func (st *seqState) follows(s uint64) bool {
	if p := st.pending[s-1]; s > 0 && p != nil && wire.Span(p.body) == 1 {
		return true
	}
	for q, p := range st.pending {
		if q+wire.Span(p.body) == s {
			return true
		}
	}
	return false
}

// usage is what one producer key holds queued.
type usage struct {
	bytes   int64
	batches int
}

// placement is where a batch's sequence stands.
type placement int

const (
	placeUnknown   placement = iota // the producer's committed sequence is not known yet
	placeNext                       // the next sequence: reserved for this batch
	placeCommitted                  // already committed: the chain answers it as a duplicate
	placeFollow                     // the same batch is pending: wait for its answer
	placeConflict                   // another batch with this sequence is pending
	placeGap                        // skips a sequence
)

// charge counts r against the gateway's queue and its producer's share, or
// refuses it with RESOURCE_EXHAUSTED. Every batch is charged before the
// gateway waits for anything on its behalf; finish uncharges it.
func (g *Gateway) charge(r *request) error {
	if q := g.queued.Add(int64(r.size)); q > g.cfg.MaxQueuedBytes {
		g.queued.Add(-int64(r.size))
		return exhausted(retrySoon, "gateway queue full (%d bytes waiting, max_queued_bytes %d); retry shortly", q-int64(r.size), g.cfg.MaxQueuedBytes)
	}
	g.prodMu.Lock()
	defer g.prodMu.Unlock()
	u := g.usage[r.key]
	if u == nil {
		u = &usage{}
	}
	switch {
	case u.bytes+int64(r.size) > g.cfg.MaxProducerQueuedBytes:
		g.queued.Add(-int64(r.size))
		return exhausted(retryLater, "producer %x holds %d bytes at this gateway (max_producer_queued_bytes %d); wait for answers before sending more", r.key, u.bytes, g.cfg.MaxProducerQueuedBytes)
	case u.batches+1 > g.cfg.MaxProducerQueuedBatches:
		g.queued.Add(-int64(r.size))
		return exhausted(retryLater, "producer %x holds %d batches at this gateway (max_producer_queued_batches %d); wait for answers before sending more", r.key, u.batches, g.cfg.MaxProducerQueuedBatches)
	}
	u.bytes += int64(r.size)
	u.batches++
	g.usage[r.key] = u
	r.charged = true
	return nil
}

// settle gives back what r held once it has its final answer: its queue
// bytes, its producer's share and its sequence, which a commit advances.
// Batches that waited on r (the same bytes, sent again) get its answer.
func (g *Gateway) settle(r *request, rc *byzlogv1.Receipt, err error) {
	g.prodMu.Lock()
	if r.charged {
		g.queued.Add(-int64(r.size))
		if u := g.usage[r.key]; u != nil {
			u.bytes -= int64(r.size)
			if u.batches--; u.batches <= 0 {
				delete(g.usage, r.key)
			}
		}
	}
	if r.reserved {
		if st := g.seqs[r.seqKey()]; st != nil {
			if st.pending[r.body.Sequence] == r {
				delete(st.pending, r.body.Sequence)
			}
			if end := r.body.Sequence + wire.Span(r.body); err == nil && rc.GetAck() == byzlogv1.Ack_ACK_COMMIT && end > st.next {
				st.next = end
				st.notify()
			}
		}
	}
	followers := r.followers
	r.followers = nil
	g.prodMu.Unlock()
	for _, f := range followers {
		f.finish(rc, err)
	}
}

// place decides where r's sequence stands and, when it is the next one,
// reserves it. The caller holds prodMu.
func (g *Gateway) place(r *request) (placement, uint64) {
	st := g.seqs[r.seqKey()]
	if st == nil || !st.known {
		return placeUnknown, 0
	}
	s := r.body.Sequence
	if p := st.pending[s]; p != nil {
		if bytes.Equal(p.batch.Body, r.batch.Body) && bytes.Equal(p.batch.Signature, r.batch.Signature) {
			p.followers = append(p.followers, r)
			return placeFollow, s
		}
		return placeConflict, s
	}
	switch {
	case s < st.next:
		return placeCommitted, st.next
	case s == st.next || st.follows(s):
		st.pending[s] = r
		r.reserved = true
		st.notify()
		return placeNext, s
	}
	return placeGap, st.expected()
}

// learn records a producer's committed next sequence as a node reported it.
func (g *Gateway) learn(k seqKey, next uint64) {
	g.prodMu.Lock()
	defer g.prodMu.Unlock()
	st := g.seqs[k]
	if st == nil {
		if len(g.seqs) >= maxSeqStates {
			for sk, s := range g.seqs {
				if len(s.pending) == 0 {
					delete(g.seqs, sk)
				}
			}
		}
		st = &seqState{pending: map[uint64]*request{}, changed: make(chan struct{})}
		g.seqs[k] = st
	}
	if next > st.next || !st.known {
		st.next, st.known = max(st.next, next), true
		st.notify()
	}
}

// admitSequence accepts r only if its sequence can commit after what is
// committed and pending. It reads the producer's state from a node when
// the gateway does not know it. A batch ahead of the expected sequence
// (within CheckTx's lookahead) waits up to gapWait for the ones before it;
// then the state is read once more, a block later (the producer may have
// written through another gateway), before the batch is refused as a gap.
func (g *Gateway) admitSequence(ctx context.Context, r *request) error {
	k := r.seqKey()
	var readAt int64
	var waitUntil time.Time
	for reads := 0; ; {
		g.prodMu.Lock()
		where, expected := g.place(r)
		var changed chan struct{}
		if st := g.seqs[k]; st != nil {
			changed = st.changed
		}
		g.prodMu.Unlock()
		switch where {
		case placeNext, placeCommitted:
			return nil
		case placeFollow:
			r.following = true
			return nil
		case placeConflict:
			return errorf(ErrConflict, "sequence %d of producer %x in %s/%d is pending at this gateway with other contents: a sequence carries one batch; wait for its answer",
				r.body.Sequence, r.key, r.body.Topic, r.body.Partition)
		case placeGap:
			gap := rejected(wire.CodeSequenceGap, fmt.Sprintf("producer %x in %s/%d: expected sequence %d, got %d (committed and pending at this gateway); send the missing batches first",
				r.key, r.body.Topic, r.body.Partition, expected, r.body.Sequence))
			if reads >= 2 || (reads == 1 && r.body.Sequence > expected+wire.Lookahead(r.body)) {
				return gap
			}
			if reads == 1 {
				if waitUntil.IsZero() {
					waitUntil = time.Now().Add(g.cfg.Waits.GapWait)
				}
				if wait := time.Until(waitUntil); wait > 0 {
					t := time.NewTimer(wait)
					select {
					case <-changed:
					case <-t.C:
					case <-ctx.Done():
						t.Stop()
						return ctx.Err()
					}
					t.Stop()
					continue
				}
			}
		}
		minHeight := g.seenHeight()
		if reads == 1 {
			minHeight = readAt + 1 // a block later than the last read
		}
		req := &byzlogv1.ProducerRequest{ProducerKey: r.batch.ProducerKey, Topic: r.body.Topic, Partition: r.body.Partition}
		if k := r.body.Kafka; k != nil {
			req.Kafka = &byzlogv1.KafkaProducer{ProducerId: k.ProducerId, Epoch: k.Epoch}
		}
		reason := "gap"
		if where == placeUnknown {
			reason = "unknown"
		}
		_, h, err := g.agreedNextSequence(ctx, req, minHeight, reason) // it learns the answer
		if err != nil {
			return err
		}
		readAt = h
		reads++
	}
}

// checkRecords applies the topic's ACL and the chain's record limits that
// are cheap to check here: the declared size, and for uncompressed records
// their count, headers and sizes (scanned, not decoded). Compressed
// records are left to the validators, who inflate them under a budget.
func checkRecords(r *request, cfg *byzlogv1.TopicConfig, l *byzlogv1.Limits) error {
	b := r.body
	if !allowed(cfg, r.batch.ProducerKey) {
		return rejected(wire.CodeNotAllowed, fmt.Sprintf("producer key %x is not in topic %q's allowed_producers", r.batch.ProducerKey, b.Topic))
	}
	if l == nil {
		return nil
	}
	if b.UncompressedSize > l.MaxBatchBytes {
		return rejected(wire.CodeBatchTooLarge, fmt.Sprintf("declared uncompressed size %d exceeds the chain's max_batch_bytes (%d)", b.UncompressedSize, l.MaxBatchBytes))
	}
	if b.Codec != byzlogv1.Codec_CODEC_NONE {
		return nil
	}
	if len(b.Records) != int(b.UncompressedSize) {
		return rejected(wire.CodeBatchTooLarge, fmt.Sprintf("records are %d bytes uncompressed, the batch declares %d", len(b.Records), b.UncompressedSize))
	}
	maxRecord := l.MaxRecordBytes
	if cfg.GetMaxRecordBytes() != 0 && cfg.GetMaxRecordBytes() < maxRecord {
		maxRecord = cfg.GetMaxRecordBytes()
	}
	if code, msg := scanRecords(b.Records, int(l.MaxBatchRecords), int(l.MaxHeaders), uint64(maxRecord)); code != wire.CodeOK {
		return rejected(code, msg)
	}
	return nil
}

func allowed(cfg *byzlogv1.TopicConfig, key []byte) bool {
	if len(cfg.GetAllowedProducers()) == 0 {
		return true
	}
	for _, k := range cfg.AllowedProducers {
		if bytes.Equal(k, key) {
			return true
		}
	}
	return false
}

// scanRecords checks a serialized RecordSet's record count, headers per
// record and record sizes (key + value + headers, as the chain counts
// them) without allocating.
func scanRecords(b []byte, maxRecords, maxHeaders int, maxRecord uint64) (wire.Code, string) {
	malformed := func(what string) (wire.Code, string) {
		return wire.CodeMalformedTx, "records are not a byzlog.v1.RecordSet: " + what
	}
	records := 0
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return malformed("bad field tag")
		}
		b = b[n:]
		if num != 1 || typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return malformed("bad field value")
			}
			b = b[n:]
			continue
		}
		rec, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return malformed("bad record length")
		}
		b = b[n:]
		if records++; records > maxRecords {
			return wire.CodeBatchTooLarge, fmt.Sprintf("batch holds more than the chain's %d records", maxRecords)
		}
		i := records - 1
		var key, value, hdrs uint64
		headers := 0
		for len(rec) > 0 {
			num, typ, n := protowire.ConsumeTag(rec)
			if n < 0 {
				return malformed(fmt.Sprintf("record %d: bad field tag", i))
			}
			rec = rec[n:]
			if typ != protowire.BytesType || num < 1 || num > 3 {
				if n = protowire.ConsumeFieldValue(num, typ, rec); n < 0 {
					return malformed(fmt.Sprintf("record %d: bad field value", i))
				}
				rec = rec[n:]
				continue
			}
			v, n := protowire.ConsumeBytes(rec)
			if n < 0 {
				return malformed(fmt.Sprintf("record %d: bad field length", i))
			}
			rec = rec[n:]
			switch num {
			case 1:
				key = uint64(len(v))
			case 2:
				value = uint64(len(v))
			case 3:
				if headers++; headers > maxHeaders {
					return wire.CodeTooManyHeaders, fmt.Sprintf("record %d has more than the chain's %d headers", i, maxHeaders)
				}
				hdrs += headerSize(v)
			}
		}
		if size := key + value + hdrs; size > maxRecord {
			return wire.CodeRecordTooLarge, fmt.Sprintf("record %d is %d bytes (key + value + headers), the topic allows %d", i, size, maxRecord)
		}
	}
	if records == 0 {
		return wire.CodeEmptyBatch, "batch holds no record"
	}
	return wire.CodeOK, ""
}

// headerSize is a RecordHeader's key and value length (the last of each
// field, as protobuf decoding keeps).
func headerSize(h []byte) uint64 {
	var key, value uint64
	for len(h) > 0 {
		num, typ, n := protowire.ConsumeTag(h)
		if n < 0 {
			return 0
		}
		h = h[n:]
		if typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, h); n < 0 {
				return 0
			}
			h = h[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(h)
		if n < 0 {
			return 0
		}
		h = h[n:]
		switch num {
		case 1:
			key = uint64(len(v))
		case 2:
			value = uint64(len(v))
		}
	}
	return key + value
}

// agreedNextSequence reads a producer's next sequence from every node that
// has committed minHeight and returns the (f+1)-th highest answer, with
// the lowest height among them. One node's word would steer admission: a
// liar's low value made honest batches gaps the gateway refused, a high
// one made their sequences look committed. Honest nodes that have caught
// up agree, and at most f answers lie, so the (f+1)-th highest is one an
// honest node gave or lies between two honest ones. For a Kafka producer
// it is the next sequence of the request's epoch, and 2^64-1 for an epoch
// fenced off by a newer one (no batch of it can commit). The gateway
// learns the answer: the producer's next batch is admitted against it
// without a read of its own. reason labels the read in the metrics.
func (g *Gateway) agreedNextSequence(ctx context.Context, req *byzlogv1.ProducerRequest, minHeight int64, reason string) (uint64, int64, error) {
	g.metrics.sequenceReads.WithLabelValues(reason).Inc()
	body := &byzlogv1.BatchBody{Kafka: req.Kafka}
	data, err := proto.Marshal(req)
	if err != nil {
		return 0, 0, errorf(ErrInvalid, "encode query: %v", err)
	}
	type answer struct {
		next   uint64
		height int64
		err    error
	}
	all := g.pool.All()
	answers := make([]answer, len(all))
	var wg sync.WaitGroup
	for i, n := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !g.queries.caughtUp(ctx, n, minHeight) {
				answers[i].err = fmt.Errorf("node %s has not committed height %d", n.Addr, minHeight)
				return
			}
			res, err := n.Client.ABCIQuery(ctx, wire.PathProducer, data)
			switch {
			case err != nil:
				answers[i].err = err
			case res.Response.Code != 0:
				answers[i].err = rejected(wire.Code(res.Response.Code), res.Response.Log)
			default:
				var ps byzlogv1.ProducerState
				if err := proto.Unmarshal(res.Response.Value, &ps); err != nil {
					answers[i].err = fmt.Errorf("node %s answered bytes that do not decode: %v", n.Addr, err)
					return
				}
				next, fenced := wire.NextSequence(&ps, body)
				if fenced {
					// No batch of this epoch can commit: every one goes on
					// to the chain, which refuses it as fenced.
					next = math.MaxUint64
				}
				answers[i] = answer{next: next, height: res.Response.Height}
			}
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return 0, 0, ctx.Err()
	}
	var nexts []uint64
	var low int64
	var lastErr error
	for _, a := range answers {
		if a.err != nil {
			lastErr = a.err
			continue
		}
		nexts = append(nexts, a.next)
		if low == 0 || a.height < low {
			low = a.height
		}
	}
	need := g.quorum()
	if len(nexts) < need {
		return 0, 0, errorf(ErrUnavailable, "only %d of %d nodes answered the producer's sequence, %d must (last error: %v); retry", len(nexts), len(all), need, lastErr)
	}
	slices.Sort(nexts)
	next := nexts[len(nexts)-need]
	// Whoever asked, the batch that follows is admitted against it.
	g.learn(seqKeyOf(req.ProducerKey, req.Topic, req.Partition, req.Kafka), next)
	return next, low, nil
}
