package consumer

import (
	"context"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/byzlog/byzlog/indexer/layout"
)

// Subscription reads one topic. Next is not safe for concurrent use; Close
// and Commit may be called from another goroutine.
type Subscription struct {
	c      *Consumer
	topic  string
	group  string
	stream string
	// keyed: the stream is a compacted topic's table (layout.FormatKey),
	// whose partitions have holes where older records of keys were.
	keyed bool
	// ackWait is the group's: runs are reported in progress (deliver).
	ackWait time.Duration
	st      jetstream.Stream
	floor   floor
	cons    jetstream.Consumer
	iter    jetstream.MessagesContext

	closing context.Context // done once Close starts
	stop    context.CancelFunc
	closed  atomic.Bool

	nextMu  sync.Mutex           // held by Next, and by Close once Next has returned
	last    *Record              // group mode: the record Next returned before, acked by the next call
	pending *Record              // a record held back while Next reports a gap (or an error finding one) before it
	queue   []*Record            // the rest of the message Next read last, in offset order
	mine    map[uint32]delivered // group mode: per partition, this member's latest record in the stream
	dec     layout.Decoder       // Next's
	// aborts: in verify mode, per partition, the Kafka producer ids of
	// aborted transactions' places Next passed over, each at its first
	// such offset, until their transaction's marker proves the abort.
	aborts map[uint32]map[int64]uint64

	mu        sync.Mutex
	positions map[uint32]uint64 // per partition, last delivered offset + 1
}

// Subscribe starts reading topic. Without WithGroup it reads every selected
// record once, in offset order per partition (an ephemeral ordered
// consumer). With WithGroup it joins the group's durable consumer (see
// WithGroup and WithMaxAckPending for how members share it). It fails with
// ErrTopicNotIndexed when the topic has no stream yet.
func (c *Consumer) Subscribe(ctx context.Context, topic string, opts ...SubscribeOption) (*Subscription, error) {
	o := subDefaults()
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	if o.start == startCommitted && c.gw == nil {
		return nil, errors.New("byzlog subscribe: FromCommitted needs WithGateway on the Consumer, to read the group's offsets")
	}
	name := layout.StreamName(topic)
	st, err := c.js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("%w: topic %q has no JetStream stream %s; the indexer creates it when it indexes the block that created the topic, so check that the topic exists and byzlog-indexer runs against this NATS and keeps up", ErrTopicNotIndexed, topic, name)
	}
	if err != nil {
		return nil, fmt.Errorf("look up stream %s of topic %q: %w", name, topic, err)
	}
	parts := slices.Clone(o.partitions)
	slices.Sort(parts)
	keyed := streamKeyed(st)
	filters := []string{layout.TopicFilter(topic, keyed)}
	if len(parts) > 0 {
		filters = filters[:0]
		for _, p := range parts {
			filters = append(filters, layout.PartitionFilter(topic, p, keyed))
		}
	}
	s := &Subscription{c: c, topic: topic, group: o.group, stream: name, st: st, keyed: keyed, ackWait: o.ackWait, positions: map[uint32]uint64{}, mine: map[uint32]delivered{}}
	s.closing, s.stop = context.WithCancel(context.Background())
	if o.group == "" {
		err = s.ordered(ctx, st, parts, filters, o)
	} else {
		err = s.join(ctx, st, parts, filters, o)
	}
	if err != nil {
		s.stop()
		return nil, err
	}
	buffer := o.buffer
	if f := st.CachedInfo().Config.Metadata[layout.FormatMetadata]; !o.bufferSet && (f == "" || f == layout.FormatRecord || keyed) {
		buffer = RecordBuffer
	}
	s.iter, err = s.cons.Messages(jetstream.PullMaxMessages(buffer))
	if err != nil {
		s.stop()
		return nil, fmt.Errorf("start reading stream %s: %w", name, err)
	}
	return s, nil
}

// ordered sets up an ephemeral ordered consumer at the start position.
func (s *Subscription) ordered(ctx context.Context, st jetstream.Stream, parts []uint32, filters []string, o subOptions) error {
	s.floor = newFloor(o, nil)
	seq, err := startSeq(ctx, st, s.topic, parts, s.floor)
	if err != nil {
		return fmt.Errorf("find where to start in topic %q: %w", s.topic, err)
	}
	// The server drops the ephemeral consumer 30 s after its last fetch
	// (Close does not delete it: a reader may not delete consumers, which
	// would let it delete other groups').
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: filters, DeliverPolicy: jetstream.DeliverAllPolicy, InactiveThreshold: orderedIdle}
	if seq > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, seq
	}
	s.cons, err = st.OrderedConsumer(ctx, cfg)
	if err != nil {
		return fmt.Errorf("create an ordered consumer on stream %s: %w", s.stream, err)
	}
	return nil
}

// join looks up the group's durable consumer, or creates it at the start
// position when this is the group's first member.
func (s *Subscription) join(ctx context.Context, st jetstream.Stream, parts []uint32, filters []string, o subOptions) error {
	name := GroupConsumerName(s.c.o.key, o.group)
	for attempt := 0; ; attempt++ {
		cons, err := st.Consumer(ctx, name)
		if err == nil {
			s.cons = cons
			return s.adopt(cons.CachedInfo(), filters, o)
		}
		if !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return fmt.Errorf("look up group %q's consumer %s on stream %s: %w", o.group, name, s.stream, err)
		}
		if attempt > 0 {
			return fmt.Errorf("group %q's consumer %s on stream %s vanished while joining it", o.group, name, s.stream)
		}
		var committed map[uint32]uint64
		if o.start == startCommitted {
			if committed, err = s.committed(ctx, o.group); err != nil {
				return err
			}
		}
		f := newFloor(o, committed)
		seq, err := startSeq(ctx, st, s.topic, parts, f)
		if err != nil {
			return fmt.Errorf("find where group %q starts in topic %q: %w", o.group, s.topic, err)
		}
		cfg := jetstream.ConsumerConfig{
			Durable:       name,
			Description:   "byzlog consumer group " + o.group,
			DeliverPolicy: jetstream.DeliverAllPolicy,
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       o.ackWait,
			MaxAckPending: o.maxAckPending,
			Metadata:      map[string]string{"byzlog_group": o.group, floorMetadata: f.encode()},
		}
		if seq > 0 {
			cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, seq
		}
		if len(filters) == 1 {
			cfg.FilterSubject = filters[0]
		} else {
			cfg.FilterSubjects = filters
		}
		created, err := st.CreateConsumer(ctx, cfg)
		if errors.Is(err, jetstream.ErrConsumerExists) {
			continue // another member created it first: join that one
		}
		if err != nil {
			return fmt.Errorf("create group %q's consumer %s on stream %s: %w", o.group, name, s.stream, err)
		}
		s.cons, s.floor = created, f
		return nil
	}
}

// adopt checks that an existing group consumer reads what this member asks
// for, and takes its floor.
func (s *Subscription) adopt(info *jetstream.ConsumerInfo, filters []string, o subOptions) error {
	cfg := info.Config
	have := cfg.FilterSubjects
	if cfg.FilterSubject != "" {
		have = []string{cfg.FilterSubject}
	}
	have = slices.Clone(have)
	sort.Strings(have)
	want := slices.Clone(filters)
	sort.Strings(want)
	switch {
	case cfg.AckPolicy != jetstream.AckExplicitPolicy:
		return fmt.Errorf("group %q: consumer %s on stream %s has ack policy %s, not explicit; it was not made by this SDK, delete it or choose another group", o.group, info.Name, s.stream, cfg.AckPolicy)
	case !slices.Equal(have, want):
		return fmt.Errorf("group %q reads subjects %v of stream %s, this member asks for %v: give every member the same WithPartitions, or delete the group's consumer %s to change them", o.group, have, s.stream, want, info.Name)
	case cfg.MaxAckPending != o.maxAckPending || cfg.AckWait != o.ackWait:
		return fmt.Errorf("group %q's consumer %s has max ack pending %d and ack wait %s, this member asks for %d and %s: give every member the same WithMaxAckPending and WithAckWait, or delete the consumer to change them",
			o.group, info.Name, cfg.MaxAckPending, cfg.AckWait, o.maxAckPending, o.ackWait)
	}
	f, err := decodeFloor(cfg.Metadata[floorMetadata])
	if err != nil {
		return fmt.Errorf("group %q: %w", o.group, err)
	}
	s.floor = f
	return nil
}

// committed reads the group's committed offsets of this topic.
func (s *Subscription) committed(ctx context.Context, group string) (map[uint32]uint64, error) {
	g, err := s.c.GroupOffsets(ctx, group)
	if errors.Is(err, ErrNoGroup) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	m := map[uint32]uint64{}
	for _, o := range g.Offsets {
		if o.Topic == s.topic {
			m[o.Partition] = o.Offset
		}
	}
	return m, nil
}

// GroupConsumerName is the durable JetStream consumer of a consumer group
// in each topic's stream. With the consumer's key (WithKey, which every
// member of a group shares: it owns the group's offsets on the chain) it
// is "g-_k" and 20 bytes of HMAC-SHA256 under the key's seed, in hex: only
// holders of the key can name it, and a NATS user that may not list a
// stream's consumers (the localnet's readers may not) cannot find it to
// pull from, ack or change it. Without a key it is "g-" and the group with
// every byte outside [A-Za-z0-9-] escaped ('_' as "__", others as '_' and
// two hex digits), or "g-_h" and the hex of 20 bytes of its SHA-256 when
// that would pass 200 bytes. Distinct groups get distinct names, and every
// name is a valid subject token, as JetStream requires.
func GroupConsumerName(key ed25519.PrivateKey, group string) string {
	if key != nil {
		mac := hmac.New(sha256.New, key.Seed())
		mac.Write([]byte("byzlog group consumer\x00" + group))
		return "g-_k" + hex.EncodeToString(mac.Sum(nil)[:20])
	}
	const hexdig = "0123456789abcdef"
	b := []byte("g-")
	for _, c := range []byte(group) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-':
			b = append(b, c)
		case c == '_':
			b = append(b, '_', '_')
		default:
			b = append(b, '_', hexdig[c>>4], hexdig[c&15])
		}
	}
	if len(b) > 200 {
		sum := sha256.Sum256([]byte(group))
		return "g-_h" + hex.EncodeToString(sum[:20])
	}
	return string(b)
}

// Next returns the next record, waiting for one until ctx is done. Records
// of one partition come in offset order (in a group, see WithMaxAckPending).
// In a group, calling Next acks the record it returned before.
//
// The stream holds committed records only (package layout): a Kafka
// transaction's markers and an aborted transaction's records' places are
// read and never returned, as a read_committed Kafka consumer skips them.
//
// A message that is not a byzlog record is reported as ErrMalformed (naming
// its subject, sequence and header) and skipped. Records missing from a
// partition are reported as ErrGap before the record after them, which the
// next call returns. After Close it returns ErrClosed.
//
// Outside a group, a gap is any offset missing between two records Next
// returned, and a record published twice is returned once. A group member
// sees only its share, so it asks the stream (reading messages by
// sequence): the indexer publishes a partition's records in offset order,
// so the message before the record on the partition's subject must hold the
// offset before it. It does not ask when its own last record of the
// partition is that offset. This finds records the indexer skipped or
// someone deleted; not records retention removed before the group read
// them, which leave nothing before the record to compare with (they cannot
// be told from records another member read before retention removed them).
// An error reading the stream is returned in ErrGap's place, and the next
// call returns the record. In a group a record published twice may come
// twice, as a redelivered one may. A compacted topic's stream (a table of
// keys, layout.FormatKey) holds each key's latest record only: the offsets
// missing between are its older ones, and no gap is reported there.
func (s *Subscription) Next(ctx context.Context) (*Record, error) {
	s.nextMu.Lock()
	defer s.nextMu.Unlock()
	if s.closed.Load() {
		return nil, ErrClosed
	}
	if s.last != nil {
		if err := s.last.Ack(); err != nil {
			return nil, err
		}
		s.last = nil
	}
	if r := s.pending; r != nil {
		s.pending = nil
		if !r.placeholder {
			return s.deliver(r), nil
		}
		if err := s.pass(r); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.closing, cancel)()
	for {
		if len(s.queue) == 0 {
			if err := s.read(ctx); err != nil {
				return nil, err
			}
			continue
		}
		r := s.queue[0]
		s.queue[0] = nil
		s.queue = s.queue[1:]
		if !s.floor.admits(r.Partition, r.Offset, r.Timestamp.UnixNano()) {
			if err := r.Ack(); err != nil {
				return nil, err
			}
			continue
		}
		if v := s.c.o.verifier; v != nil {
			err := s.verify(ctx, v, r)
			if err == nil {
				err = s.proveAbort(r)
			}
			if err != nil {
				_ = r.Ack() // done for the group too: no member should deliver it
				return nil, err
			}
		}
		copied, err := s.gap(ctx, r)
		if copied {
			continue
		}
		if err != nil {
			s.pending = r
			return nil, err
		}
		if r.placeholder {
			if err := s.pass(r); err != nil {
				return nil, err
			}
			continue
		}
		return s.deliver(r), nil
	}
}

// proveAbort keeps, in verify mode, what r (verified as the chain's record
// at its place) says of aborted transactions: an aborted transaction's
// place waits for its transaction's marker, and a marker that says the
// transaction committed proves the places before it were a committed
// transaction's records shown as aborted, which a reader would have
// skipped: the error wraps ErrUnverified. Places and marker come in
// offset order on the partition, so outside a group each place is proven
// by the marker after it; a group member proves those whose marker it
// gets.
func (s *Subscription) proveAbort(r *Record) error {
	st := r.stored
	switch {
	case st.Aborted:
		if s.aborts == nil {
			s.aborts = map[uint32]map[int64]uint64{}
		}
		if s.aborts[r.Partition] == nil {
			s.aborts[r.Partition] = map[int64]uint64{}
		}
		if _, ok := s.aborts[r.Partition][st.KafkaProducerId]; !ok {
			s.aborts[r.Partition][st.KafkaProducerId] = r.Offset
		}
	case st.KafkaControl != nil:
		first, ok := s.aborts[r.Partition][st.KafkaProducerId]
		if !ok {
			return nil
		}
		delete(s.aborts[r.Partition], st.KafkaProducerId)
		if st.KafkaControl.Commit {
			return fmt.Errorf("%w: stream %s showed %s/%d from offset %d as an aborted transaction's records, but the chain's marker at offset %d says producer %d's transaction committed: committed records were hidden from this reader",
				ErrUnverified, s.stream, r.Topic, r.Partition, first, r.Offset, st.KafkaProducerId)
		}
	}
	return nil
}

// pass takes r, a placeholder (a transaction's marker, or an aborted
// transaction's record), as read without delivering it: the partition's
// position moves past it, and a group is told it is done.
func (s *Subscription) pass(r *Record) error {
	s.advance(r)
	return r.Ack()
}

// read reads the next message into the queue: its records, decoded. A
// message that is not one of the topic's records is an error (terminated
// in a group: no member should get it again).
func (s *Subscription) read(ctx context.Context) error {
	m, err := s.nextMsg(ctx)
	if errors.Is(err, errStuck) {
		s.closed.Store(true)
		return fmt.Errorf("read stream %s: %w (the subscription is closed: subscribe again)", s.stream, ctx.Err())
	}
	if err != nil {
		if s.closed.Load() || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
			return ErrClosed
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("read stream %s: %w", s.stream, err)
	}
	rs, err := decode(&s.dec, s.stream, m, s.group != "", s.c.o.verifier != nil)
	if err == nil && rs[0].Topic != s.topic {
		err = fmt.Errorf("%w: stream %s sequence %d: subject %s belongs to topic %q, not %q", ErrMalformed, s.stream, streamSeq(m), m.Subject(), rs[0].Topic, s.topic)
	}
	if err != nil {
		if s.group != "" {
			_ = m.Term()
		}
		return err
	}
	s.queue = rs
	return nil
}

// stuckGrace is how long after Next's context ends nextMsg waits for
// nats.go to notice before it stops the iterator.
const stuckGrace = time.Second

// errStuck is a read that had to be cut short by stopping the iterator.
var errStuck = errors.New("read cut short")

// nextMsg is the iterator's next message, returning when ctx ends. nats.go
// waits for a message within the context given, but an ordered consumer
// whose consumer is gone (its stream lost, as a NATS server that lost power
// before syncing it loses it) re-creates it inside that wait, retrying
// without end and without looking at the context: so once ctx has ended
// and the wait has not, the iterator is stopped, and errStuck says so.
func (s *Subscription) nextMsg(ctx context.Context) (jetstream.Msg, error) {
	returned := make(chan struct{})
	var stopped atomic.Bool
	cut := context.AfterFunc(ctx, func() {
		t := time.NewTimer(stuckGrace)
		defer t.Stop()
		select {
		case <-returned:
		case <-t.C:
			stopped.Store(true)
			s.iter.Stop()
		}
	})
	m, err := s.iter.Next(jetstream.NextContext(ctx))
	close(returned)
	cut()
	if stopped.Load() {
		return nil, errStuck
	}
	return m, err
}

// gap reports the records of r's partition missing before r as ErrGap, and
// says whether r is a copy of a record already delivered, to skip.
func (s *Subscription) gap(ctx context.Context, r *Record) (copied bool, err error) {
	if s.group != "" {
		return false, s.groupGap(ctx, r)
	}
	s.mu.Lock()
	next, seen := s.positions[r.Partition]
	s.mu.Unlock()
	switch {
	case seen && r.Offset < next:
		return true, nil // published twice (after the stream's duplicate window)
	case seen && r.Offset > next && !s.keyed: // a table's holes are older records of keys
		return false, gapError(s.topic, r.Partition, next, r.Offset, "the stream's retention dropped them before they were read, or the indexer skipped them")
	}
	return false, nil
}

// groupGap is gap for a group member, which sees only its share of the
// records: the indexer publishes a partition's records in offset order, so
// the message before r's on the partition's subject must hold the offset
// before r's (or r's, a copy). It reads the stream only when this member's
// own latest record of the partition is not that offset.
func (s *Subscription) groupGap(ctx context.Context, r *Record) error {
	if !r.first || s.keyed {
		return nil // the record before it is in its message, or a table's holes are expected
	}
	mine, ok := s.mine[r.Partition]
	ok = ok && mine.seq < r.seq
	if ok && mine.offset+1 >= r.Offset {
		return nil
	}
	from := uint64(1)
	if ok {
		from = mine.seq // the message before r's is this member's, or after it
	}
	subject := layout.Subject(r.Topic, r.Partition)
	for seq := r.seq; ; {
		m, err := before(ctx, s.st, subject, from, seq)
		if err != nil {
			return fmt.Errorf("check for records missing before %s/%d@%d (stream %s sequence %d): %w", r.Topic, r.Partition, r.Offset, s.stream, r.seq, err)
		}
		if m == nil {
			return nil // nothing left before it to compare with
		}
		rs, err := layout.Records(m.Subject, m.Header, m.Data)
		if err != nil {
			seq = m.Sequence // not a record: no member was delivered it
			continue
		}
		prev := rs[len(rs)-1]
		if prev.Offset+1 >= r.Offset || !s.floor.admits(r.Partition, prev.Offset, prev.TimestampUnixNano) {
			return nil
		}
		return gapError(r.Topic, r.Partition, prev.Offset+1, r.Offset,
			fmt.Sprintf("stream %s holds offset %d right before it on %s (sequence %d, then %d): the indexer skipped them, or they were deleted from the stream", s.stream, prev.Offset, subject, m.Sequence, r.seq))
	}
}

// gapError reports offsets from to next-1 of topic/p missing, and why.
func gapError(topic string, p uint32, from, next uint64, why string) error {
	return fmt.Errorf("%w: %s/%d offsets %d to %d (the next delivered is %d): %s", ErrGap, topic, p, from, next-1, next, why)
}

// delivered is a record a group member was delivered: its offset and
// stream sequence.
type delivered struct {
	offset, seq uint64
}

// verify checks r with v; a failure wraps ErrUnverified.
func (s *Subscription) verify(ctx context.Context, v RecordVerifier, r *Record) error {
	if err := v.VerifyRecord(ctx, r.stored); err != nil {
		return fmt.Errorf("%w: stream %s sequence %d (%s): %v", ErrUnverified, s.stream, r.seq, layout.Subject(r.Topic, r.Partition), err)
	}
	return nil
}

// deliver records r as returned by Next.
func (s *Subscription) deliver(r *Record) *Record {
	if r.run != nil {
		s.last = r // acked by the next call, or Close
		// A run's ack wait started when it was fetched, perhaps a while
		// ago: it starts again with the run's first record, and every
		// quarter of the wait after, while the member works through it.
		if now := time.Now(); r.run.left.Load() > 1 && (r.first || now.Sub(r.run.touched) > s.ackWait/4) {
			_ = r.run.msg.InProgress()
			r.run.touched = now
		}
	}
	s.advance(r)
	return r
}

// advance moves r's partition past r, which Next read: its position, and
// a group member's latest record of it.
func (s *Subscription) advance(r *Record) {
	if r.run != nil {
		if d, ok := s.mine[r.Partition]; !ok || r.seq > d.seq || (r.seq == d.seq && r.Offset > d.offset) {
			s.mine[r.Partition] = delivered{offset: r.Offset, seq: r.seq}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.Offset+1 > s.positions[r.Partition] {
		s.positions[r.Partition] = r.Offset + 1
	}
}

// Positions is, per partition, the offset after the last record Next
// returned: what Commit would commit.
func (s *Subscription) Positions() []Offset {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Offset, 0, len(s.positions))
	for p, o := range s.positions {
		out = append(out, Offset{Topic: s.topic, Partition: p, Offset: o})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Partition < out[j].Partition })
	return out
}

// Commit records the group's position in each partition this subscription
// has read from (the offset after the last record Next returned, as Kafka
// commits) on the chain, and returns the committing height; 0 when there was
// nothing to move forward. Partitions where the chain already holds an
// equal or later offset (another member committed further) are left alone.
// It needs WithGroup, and WithGateway and WithKey on the Consumer.
func (s *Subscription) Commit(ctx context.Context) (int64, error) {
	if s.group == "" {
		return 0, errors.New("byzlog consumer: Commit needs a subscription made WithGroup")
	}
	return s.c.commit(ctx, s.group, func(ctx context.Context) ([]Offset, bool, error) {
		have, err := s.committed(ctx, s.group)
		if err != nil {
			return nil, false, err
		}
		var out []Offset
		for _, o := range s.Positions() {
			if c, ok := have[o.Partition]; !ok || o.Offset > c {
				out = append(out, o)
			}
		}
		return out, true, nil
	})
}

// Close stops reading. In a group it acks the record Next returned last,
// hands back the records fetched ahead or held back and not yet returned (so other
// members get them at once, not after the ack wait), and flushes the acks to
// the server. It does not commit offsets on the chain: call Commit first.
func (s *Subscription) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	s.stop() // a Next in progress returns ErrClosed
	s.nextMu.Lock()
	defer s.nextMu.Unlock()
	if s.group == "" {
		s.iter.Stop() // the server drops the consumer orderedIdle later
		return nil
	}
	var firstErr error
	if s.last != nil {
		firstErr = s.last.Ack()
	}
	// Take what was fetched ahead, and hand it back once this member's
	// fetches are gone. Reading the consumer's info makes the server drop
	// fetches nobody listens to any more; a nak while one is still listed
	// sends the record to the back of the redelivery queue.
	s.iter.Drain()
	// A message some of whose records Next has not returned goes back
	// whole: the group gets its returned records again too, as after a
	// member's crash.
	var ahead []jetstream.Msg
	var back *run
	for _, r := range append([]*Record{s.pending}, s.queue...) { // held back behind an error, or not yet returned
		if r != nil && r.run != back {
			back = r.run
			ahead = append(ahead, back.msg)
		}
	}
	for {
		m, err := s.iter.Next(jetstream.NextMaxWait(time.Second))
		if err != nil {
			break
		}
		ahead = append(ahead, m)
	}
	if len(ahead) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, _ = s.cons.Info(ctx)
		cancel()
	}
	for _, m := range ahead {
		_ = m.Nak()
	}
	if err := s.c.nc.FlushTimeout(5 * time.Second); err != nil && firstErr == nil {
		firstErr = fmt.Errorf("flush acks of group %q to NATS: %w", s.group, err)
	}
	return firstErr
}

// orderedIdle is how long the server keeps a closed subscription's
// ephemeral consumer.
const orderedIdle = 30 * time.Second
