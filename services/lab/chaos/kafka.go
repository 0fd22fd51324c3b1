package chaos

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/byzlog/byzlog/services/internal/keyfile"
	"github.com/byzlog/byzlog/services/internal/localnet"
)

// The Kafka workload (Workload.KafkaProducers, KafkaMembers): franz-go
// clients through the gateways' Kafka faces, next to the SDK's producers
// and NATS consumers or in their place (Workload.KafkaOnly). Every client
// is localnet.KafkaUser, with every gateway a seed.
//
// Producers, acks=all, side by side: the even-numbered are idempotent
// (franz-go's default, up to 5 Produce requests in flight per connection),
// the odd ones plain (kgo.DisableIdempotentWrite), with 5 in flight too,
// which franz-go does only when told (without idempotence its default is
// 1): Kafka's enable.idempotence=false, max.in.flight 5. Both pipeline
// Produce requests on one connection, so a face that let a connection's
// requests race would store them out of order. A watch on each producer's
// connections (kafkawire.go) marks the sends a failure may have made it
// send again (Send.Retried); the checker holds a plain producer's other
// sends to the idempotent producers' rules (check.go).
//
// Consumers: the members of one consumer group, which commit offsets on the
// chain through the face, asynchronously (kafkaMember.commit). A group
// delivers at least once: after a rebalance a member reads again from the
// last committed offset. So the group is one observer ("group") that
// records each partition's deliveries up to the highest offset delivered,
// and counts the rest as redeliveries; a skip is still a poll-skip. Kafka
// deliveries carry no producer key: the validators' read-back checks the
// keys (forged). While the members run, the group's committed offsets are
// read every second (OffsetFetch), and once more after they stopped: the
// checker's offset-regression.

// kafkaGroupObserver is the consumer group's name in the history.
const kafkaGroupObserver = "group"

// kafkaOpts are a franz-go client's options for the cluster's Kafka faces,
// every gateway a seed, with retries that outlast a fault. With watch, the
// client dials through it.
func (c *Cluster) kafkaOpts(watch *produceWatch) ([]kgo.Opt, error) {
	gws := make([]int, c.Services.Gateways)
	for g := range gws {
		gws[g] = g
	}
	opts, err := c.Net.KafkaClientOpts(c.Services, localnet.KafkaUser, gws...)
	if err != nil {
		return nil, err
	}
	opts = append(opts, kgo.RetryTimeout(time.Minute), kgo.RequestTimeoutOverhead(5*time.Second))
	if watch != nil {
		tlsCfg, err := c.Net.ClientTLS(c.Services)
		if err != nil {
			return nil, err
		}
		// franz-go takes a dialer or a TLS config, not both.
		opts = append(opts, kgo.DialTLSConfig(nil), kgo.Dialer(watch.dialer(tlsCfg)))
	}
	return opts, nil
}

// kafkaClient is a franz-go client of the cluster's Kafka faces, with
// kafkaOpts's options and no others.
func (c *Cluster) kafkaClient() (*kgo.Client, error) {
	opts, err := c.kafkaOpts(nil)
	if err != nil {
		return nil, err
	}
	return kgo.NewClient(opts...)
}

// kafkaProducerKey is the hex of the key the gateways sign KafkaUser's
// batches with.
func (c *Cluster) kafkaProducerKey() (string, error) {
	k, err := keyfile.Read(c.Net.KafkaKeyFile(localnet.KafkaUser))
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(k.Public().(ed25519.PublicKey)), nil
}

// kafkaPlain says whether Kafka producer id of w is plain (not idempotent):
// every other one, from the second.
func kafkaPlain(w Workload, id int) bool { return (id-w.Producers)%2 == 1 }

// produceKafka is produce with a franz-go producer, idempotent or plain
// (kafkaPlain), which waits for its sends' outcomes up to the phase's
// kafkaSettle after ctx ends.
func produceKafka(ctx context.Context, c *Cluster, w Workload, id int, ph Phase, rec *recorder) error {
	plain := kafkaPlain(w, id)
	watch := &produceWatch{}
	opts, err := c.kafkaOpts(watch)
	if err != nil {
		return err
	}
	key, err := c.kafkaProducerKey()
	if err != nil {
		return err
	}
	// A Produce request may wait up to 30 s (the Java client's
	// request.timeout.ms): a gateway answers every one within its
	// pending_timeout (30 s) even when a fault lost the bundle. With
	// franz-go's 10 s (plus RequestTimeoutOverhead) the client closes the
	// connection first and sends again, and a plain producer's new batches
	// then queue behind the face's sequence stream: measured, a gateway
	// kill left 427 plain sends unresolved after 120 s, where 30 s has
	// them all acknowledged within 15 s of the load's end.
	opts = append(opts, kgo.DefaultProduceTopic(w.Topic), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.MaxBufferedRecords(w.InFlight), kgo.RecordDeliveryTimeout(ph.Settle), kgo.ProduceRequestTimeout(30*time.Second))
	if plain {
		opts = append(opts, kgo.DisableIdempotentWrite(), kgo.MaxProduceRequestsInflightPerBroker(5))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("kafka producer %d: %w", id, err)
	}
	defer cl.Close()
	rec.mu.Lock()
	rec.h.ProducerKeys[id] = key
	rec.mu.Unlock()

	paced(ctx, w, func(i int, release func()) {
		value := fmt.Sprintf("%s-k%d-%d", ph.Nemesis.Name, id, i)
		sent, failures := time.Now(), watch.failures.Load()
		r := &kgo.Record{Key: []byte(fmt.Sprintf("k%d-%d", id, i%16)), Value: []byte(value)}
		cl.Produce(context.Background(), r, func(r *kgo.Record, err error) {
			defer release()
			s := outcome(id, i, value, uint32(r.Partition), uint64(r.Offset), err)
			s.Plain, s.Retried = plain, watch.failures.Load() != failures || err != nil
			rec.send(s, sent, time.Now())
		})
	})
	fctx, cancel := context.WithTimeout(context.Background(), ph.kafkaSettle())
	defer cancel()
	_ = cl.Flush(fctx) // what does not resolve in time fails as the client closes
	rec.kafkaWatched(plain, watch)
	return nil
}

// kafkaGroup is what the group's members share: the next offset each
// partition's deliveries have reached, and the delivery sequence.
type kafkaGroup struct {
	mu          sync.Mutex
	next        map[int32]int64
	seq         int
	redelivered int
	members     []*kafkaMember
}

// consumeKafka runs w.KafkaMembers members of one consumer group on the
// topic, and a reader of the group's committed offsets, until ctx ends.
func consumeKafka(ctx context.Context, c *Cluster, w Workload, rec *recorder, wg *sync.WaitGroup) *kafkaGroup {
	g := &kafkaGroup{next: map[int32]int64{}}
	rec.h.Consumers = append(rec.h.Consumers, kafkaGroupObserver)
	for i := 0; i < w.KafkaMembers; i++ {
		m := &kafkaMember{name: fmt.Sprintf("member%d", i), group: kafkaGroupName(w), topic: w.Topic,
			rec: rec, wrote: make(chan struct{}, 1), coordinator: -1}
		g.members = append(g.members, m)
		wg.Add(1)
		go func() {
			defer wg.Done()
			g.member(ctx, c, w, m)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		sampleOffsets(ctx, c, w, rec)
	}()
	return g
}

// kafkaGroupName is the phase's consumer group.
func kafkaGroupName(w Workload) string { return "chaos-" + w.Topic }

// member is one group member, polling until ctx ends, then waiting for
// its commits' answers.
func (g *kafkaGroup) member(ctx context.Context, c *Cluster, w Workload, m *kafkaMember) {
	opts, err := c.kafkaOpts(nil)
	if err != nil {
		m.rec.consumerError(err)
		return
	}
	cl, err := kgo.NewClient(append(opts, kgo.ConsumerGroup(m.group), kgo.ConsumeTopics(w.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(time.Second),
		kgo.DisableAutoCommit(), kgo.WithHooks(m))...)
	if err != nil {
		m.rec.consumerError(err)
		return
	}
	defer cl.Close()
	defer m.pending.Wait()
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		for _, e := range fs.Errors() {
			if ctx.Err() == nil {
				m.rec.consumerError(fmt.Errorf("kafka fetch %s/%d: %w", e.Topic, e.Partition, e.Err))
			}
		}
		polled := map[int32][]int64{}
		fs.EachRecord(func(r *kgo.Record) {
			g.deliver(m.rec, r)
			polled[r.Partition] = append(polled[r.Partition], r.Offset)
		})
		var last map[int32]int64
		for step := 1; step <= commitSteps && len(polled) > 0; step++ {
			offsets := map[int32]int64{}
			for p, os := range polled {
				offsets[p] = os[(step*len(os)+commitSteps-1)/commitSteps-1] + 1
			}
			if !maps.Equal(offsets, last) { // a poll of one or two records has fewer steps
				m.commit(cl, offsets)
			}
			last = offsets
		}
	}
}

// deliver records r unless the group delivered its offset before.
func (g *kafkaGroup) deliver(rec *recorder, r *kgo.Record) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if next, ok := g.next[r.Partition]; ok && r.Offset < next {
		g.redelivered++
		return
	}
	g.next[r.Partition] = r.Offset + 1
	g.seq++
	rec.observe(Observation{Observer: kafkaGroupObserver, Poll: true, Seq: g.seq, Partition: uint32(r.Partition), Offset: uint64(r.Offset), Value: string(r.Value)})
}

// commitSteps is how many OffsetCommit requests a member sends after each
// poll, none waiting for another's answer: the first commits a third of
// what each partition delivered, the next two thirds, the last all of it.
// So however small the polls, several commits are in flight on the
// member's connection at once, in an order the checker knows, as with a
// consumer that commits every message asynchronously (librdkafka's
// commit(asynchronous=True)). franz-go's own CommitOffsets waits for the
// commit before it: it never has two in flight.
const commitSteps = 3

// commitTimeout bounds one commit's wait for its answer.
const commitTimeout = 20 * time.Second

// kafkaMember is one member's committing. Its requests go straight to the
// group's coordinator (kgo.Broker.Request, which never retries: a retry
// would reorder them unseen), on the member's one connection to it, each
// issued once the one before is on the wire. A failure (an error answer,
// a broken connection) makes the commits then unresolved of unknown order
// (Commit.Failure), and the coordinator is looked up again.
type kafkaMember struct {
	name, group, topic string
	rec                *recorder
	wrote              chan struct{} // an OffsetCommit went out (the write hook)
	failures           atomic.Int64
	coordinator        int32 // -1: look it up; the poll loop's alone
	pending            sync.WaitGroup

	mu                    sync.Mutex
	seq                   int
	inFlight, maxInFlight int
	sent, acked           int            // partition commits
	kinds                 map[string]int // failures by kind
}

// fail counts a failure of kind.
func (m *kafkaMember) fail(kind string) {
	m.failures.Add(1)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.kinds == nil {
		m.kinds = map[string]int{}
	}
	m.kinds[kind]++
}

var (
	_ kgo.HookBrokerWrite      = (*kafkaMember)(nil)
	_ kgo.HookBrokerDisconnect = (*kafkaMember)(nil)
)

// OnBrokerWrite is told of every request the member's client writes.
func (m *kafkaMember) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key != kmsg.OffsetCommit.Int16() {
		return
	}
	if err != nil {
		m.fail("write failed")
	}
	select {
	case m.wrote <- struct{}{}:
	default:
	}
}

// OnBrokerDisconnect is told of every connection of the client that ends.
func (m *kafkaMember) OnBrokerDisconnect(kgo.BrokerMetadata, net.Conn) { m.fail("connection ended") }

// commit sends offsets (partition -> next offset to read) and returns once
// the request is on the wire (or failed); its answer is recorded when it
// comes.
func (m *kafkaMember) commit(cl *kgo.Client, offsets map[int32]int64) {
	memberID, generation := cl.GroupMetadata()
	if memberID == "" {
		return // not in the group (yet): Kafka would refuse it
	}
	ctx, cancel := context.WithTimeout(context.Background(), commitTimeout)
	if m.coordinator < 0 {
		id, err := findCoordinator(ctx, cl, m.group)
		if err != nil {
			cancel()
			m.fail("no coordinator: " + errorKind(err.Error()))
			return
		}
		m.coordinator = id
	}
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group, req.MemberID, req.Generation = m.group, memberID, generation
	t := kmsg.NewOffsetCommitRequestTopic()
	t.Topic = m.topic
	for p, o := range offsets {
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset = p, o
		t.Partitions = append(t.Partitions, rp)
	}
	req.Topics = append(req.Topics, t)

	m.mu.Lock()
	m.seq++
	seq := m.seq
	m.inFlight++
	m.maxInFlight = max(m.maxInFlight, m.inFlight)
	m.mu.Unlock()
	select { // a write hook left from a request that failed unwritten
	case <-m.wrote:
	default:
	}
	broker, failures, sent := m.coordinator, m.failures.Load(), time.Now()
	done := make(chan struct{})
	m.pending.Add(1)
	go func() {
		defer m.pending.Done()
		defer close(done)
		defer cancel()
		resp, err := cl.Broker(int(broker)).Request(ctx, req)
		m.answered(req, resp, err, seq, broker, sent, failures)
	}()
	// The next request goes out after this one. The hook fires after the
	// write and before the answer can be read, so a request done without a
	// signal was never written (and failed: answered counted it).
	select {
	case <-m.wrote:
	case <-done:
		select {
		case <-m.wrote:
		default:
		}
	}
	if m.failures.Load() != failures {
		m.coordinator = -1
	}
}

// answered records a commit request's outcome, one Commit per partition.
func (m *kafkaMember) answered(req *kmsg.OffsetCommitRequest, resp kmsg.Response, err error, seq int, broker int32, sent time.Time, failures int64) {
	failed := map[int32]bool{}
	kind := ""
	if r, ok := resp.(*kmsg.OffsetCommitResponse); !ok || err != nil {
		kind = "request failed"
		if err != nil {
			kind = errorKind(err.Error())
		}
		for _, p := range req.Topics[0].Partitions {
			failed[p.Partition] = true
		}
	} else {
		answered := map[int32]bool{}
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				answered[p.Partition] = true
				if err := kerr.TypedErrorForCode(p.ErrorCode); err != nil {
					failed[p.Partition], kind = true, err.Message
				}
			}
		}
		for _, p := range req.Topics[0].Partitions {
			if !answered[p.Partition] {
				failed[p.Partition], kind = true, "partition not answered"
			}
		}
	}
	if kind != "" {
		m.fail(kind)
	}
	done := time.Now()
	failure := m.failures.Load() != failures
	m.mu.Lock()
	m.inFlight--
	for _, p := range req.Topics[0].Partitions {
		m.sent++
		if !failed[p.Partition] {
			m.acked++
		}
	}
	m.mu.Unlock()
	for _, p := range req.Topics[0].Partitions {
		m.rec.commit(Commit{Member: m.name, Seq: seq, Broker: broker, Partition: uint32(p.Partition), Offset: p.Offset,
			Sent: sent, Done: done, Acked: !failed[p.Partition], Failure: failure})
	}
}

// countsOf lists counts by kind, most first: "3× a, 1× b" ("no failure").
func countsOf(kinds map[string]int) string {
	if len(kinds) == 0 {
		return "no failure"
	}
	ks := slices.SortedFunc(maps.Keys(kinds), func(a, b string) int { return cmp.Or(cmp.Compare(kinds[b], kinds[a]), cmp.Compare(a, b)) })
	var parts []string
	for _, k := range ks {
		parts = append(parts, fmt.Sprintf("%d× %s", kinds[k], k))
	}
	return strings.Join(parts, ", ")
}

// findCoordinator is the broker coordinating group.
func findCoordinator(ctx context.Context, cl *kgo.Client, group string) (int32, error) {
	req := kmsg.NewPtrFindCoordinatorRequest()
	req.CoordinatorKey = group
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, err
	}
	id, code := resp.NodeID, resp.ErrorCode
	if len(resp.Coordinators) > 0 {
		id, code = resp.Coordinators[0].NodeID, resp.Coordinators[0].ErrorCode
	}
	if err := kerr.ErrorForCode(code); err != nil {
		return 0, fmt.Errorf("find coordinator of %s: %w", group, err)
	}
	return id, nil
}

// sampleOffsets reads the group's committed offsets every second until
// ctx ends.
func sampleOffsets(ctx context.Context, c *Cluster, w Workload, rec *recorder) {
	opts, err := c.kafkaOpts(nil)
	if err != nil {
		rec.consumerError(err)
		return
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		rec.consumerError(err)
		return
	}
	defer cl.Close()
	for ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if r, err := readOffsets(rctx, cl, kafkaGroupName(w), w.Topic, w.Partitions); err == nil {
			rec.offsetRead(r)
		}
		cancel()
		sleep(ctx, time.Second)
	}
}

// readOffsets reads group's committed offset of every partition of topic.
func readOffsets(ctx context.Context, cl *kgo.Client, group, topic string, partitions uint32) (OffsetRead, error) {
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	t := kmsg.NewOffsetFetchRequestTopic()
	t.Topic = topic
	for p := int32(0); p < int32(partitions); p++ {
		t.Partitions = append(t.Partitions, p)
	}
	req.Topics = append(req.Topics, t)
	r := OffsetRead{Start: time.Now(), Offsets: map[uint32]int64{}}
	resp, err := req.RequestWith(ctx, cl)
	r.End = time.Now()
	if err != nil {
		return r, err
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return r, err
	}
	for _, rt := range resp.Topics {
		for _, p := range rt.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return r, fmt.Errorf("partition %d: %w", p.Partition, err)
			}
			r.Offsets[uint32(p.Partition)] = p.Offset
		}
	}
	if len(r.Offsets) != int(partitions) {
		return r, fmt.Errorf("%d of %d partitions answered", len(r.Offsets), partitions)
	}
	return r, nil
}

// finish reads the group's committed offsets once its members have
// stopped, trying for up to settle, and returns what the row should note.
func (g *kafkaGroup) finish(ctx context.Context, c *Cluster, w Workload, rec *recorder, settle time.Duration) (notes, errs []string) {
	cl, err := c.kafkaClient()
	if err == nil {
		defer cl.Close()
		deadline := time.Now().Add(settle)
		for {
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			var r OffsetRead
			r, err = readOffsets(rctx, cl, kafkaGroupName(w), w.Topic, w.Partitions)
			cancel()
			if err == nil {
				r.Final = true
				rec.offsetRead(r)
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				break
			}
			sleep(ctx, time.Second)
		}
	}
	if err != nil {
		errs = append(errs, fmt.Sprintf("the consumer group's committed offsets could not be read at the end: %v", err))
	}
	g.mu.Lock()
	notes = append(notes, fmt.Sprintf("the consumer group was delivered %d records again after rebalances (at least once, as Kafka groups are)", g.redelivered))
	g.mu.Unlock()
	sent, acked, most := 0, 0, 0
	kinds := map[string]int{}
	for _, m := range g.members {
		m.mu.Lock()
		sent, acked, most = sent+m.sent, acked+m.acked, max(most, m.maxInFlight)
		for k, n := range m.kinds {
			kinds[k] += n
		}
		m.mu.Unlock()
	}
	rec.mu.Lock()
	reads := len(rec.h.OffsetReads)
	rec.mu.Unlock()
	notes = append(notes, fmt.Sprintf("the group's members committed %d partition offsets asynchronously (%d acknowledged), up to %d requests in flight on one connection, and saw %s; its committed offsets were read %d times",
		sent, acked, most, countsOf(kinds), reads))
	return notes, errs
}
