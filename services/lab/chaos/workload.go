package chaos

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	coretypes "github.com/cometbft/cometbft/rpc/core/types"
	"github.com/cometbft/cometbft/types"

	"github.com/byzlog/byzlog/gateway/client"
	"github.com/byzlog/byzlog/indexer/consumer"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
	"github.com/byzlog/byzlog/services/internal/localnet"
)

// Workload is what one phase sends and reads.
type Workload struct {
	Topic      string
	Partitions uint32
	// Producers are the SDK's, through the gateways' gRPC faces;
	// Consumers read every partition through NATS (the consumer SDK).
	Producers int
	Consumers int
	// KafkaProducers are franz-go producers through the gateways' Kafka
	// faces, idempotent and plain in turn; KafkaMembers are the members of
	// one consumer group that commit asynchronously (kafka.go).
	KafkaProducers int
	KafkaMembers   int
	// TxnProcessors are the transactional workload's processors (txn.go),
	// which read the topic and write its output topic exactly once; none:
	// no transactional workload.
	TxnProcessors int
	// CompactKeys is how many keys the compaction workload (compact.go)
	// writes versions of to a compacted topic; 0: none.
	CompactKeys int
	// Rate is the records per second offered over all producers, SDK and
	// Kafka; InFlight bounds each producer's unresolved records (past it,
	// it waits).
	Rate     int
	InFlight int
}

// KafkaOnly is w with Kafka clients alone: no SDK producer, no NATS
// consumer.
func (w Workload) KafkaOnly() Workload {
	w.Producers, w.Consumers = 0, 0
	return w
}

// producers counts the SDK and Kafka producers.
func (w Workload) producers() int { return w.Producers + w.KafkaProducers }

// consumers counts the observers that must get every record: the NATS
// consumers and the consumer group.
func (w Workload) consumers() int {
	n := w.Consumers
	if w.KafkaMembers > 0 {
		n++
	}
	return n
}

// recorder collects a phase's history as it happens.
type recorder struct {
	mu        sync.Mutex
	h         History
	ackTimes  []time.Time
	ackWaits  []time.Duration // produce→receipt of each acknowledged send
	pollTimes []time.Time
	errs      map[string]int // consumer errors by kind
	// kafkaMaxInFlight is the most Produce requests seen in flight on one
	// connection of a plain (true) and an idempotent (false) producer;
	// kafkaFailures counts the failures the Kafka producers saw, by kind.
	kafkaMaxInFlight map[bool]int
	kafkaFailures    map[string]int
}

func newRecorder() *recorder {
	return &recorder{h: History{ProducerKeys: map[int]string{}, AppHashes: map[int64]map[string]string{}}, errs: map[string]int{},
		kafkaMaxInFlight: map[bool]int{}, kafkaFailures: map[string]int{}}
}

func (r *recorder) commit(c Commit) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.Commits = append(r.h.Commits, c)
}

func (r *recorder) txn(t Txn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.Txns = append(r.h.Txns, t)
}

func (r *recorder) txnRead(rd TxnRead) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.TxnReads = append(r.h.TxnReads, rd)
}

func (r *recorder) offsetRead(o OffsetRead) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.OffsetReads = append(r.h.OffsetReads, o)
}

// kafkaWatched adds what a Kafka producer's watch saw.
func (r *recorder) kafkaWatched(plain bool, w *produceWatch) {
	kinds := w.failureKinds()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.kafkaMaxInFlight[plain] = max(r.kafkaMaxInFlight[plain], int(w.maxInFlight.Load()))
	for k, n := range kinds {
		r.kafkaFailures[k] += n
	}
}

func (r *recorder) send(s Send, sent, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.Sends = append(r.h.Sends, s)
	if s.Outcome == Acked {
		r.ackTimes = append(r.ackTimes, at)
		r.ackWaits = append(r.ackWaits, at.Sub(sent))
	}
}

func (r *recorder) observe(o Observation) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.Observations = append(r.h.Observations, o)
	if o.Poll {
		r.pollTimes = append(r.pollTimes, time.Now())
	}
}

func (r *recorder) consumerError(err error) {
	kind := "other"
	switch {
	case errors.Is(err, consumer.ErrGap):
		kind = "gap"
	case errors.Is(err, consumer.ErrMalformed):
		kind = "malformed"
	case errors.Is(err, consumer.ErrUnverified):
		kind = "unverified"
	}
	r.mu.Lock()
	r.errs[kind]++
	r.mu.Unlock()
}

// produce runs one producer until ctx ends, then waits up to settle for
// its records' outcomes; what is still unresolved is recorded Unknown.
func produce(ctx context.Context, c *Cluster, w Workload, id int, phase string, rec *recorder, settle time.Duration) error {
	var gws []string
	for g := 0; g < c.Services.Gateways; g++ {
		gws = append(gws, c.producerGateway((id+g)%c.Services.Gateways))
	}
	trust, err := c.Trust()
	if err != nil {
		return err
	}
	transport, err := c.Transport()
	if err != nil {
		return err
	}
	p, err := client.NewProducer(ctx, client.WithTrust(trust), client.WithGateways(gws...), client.WithRequestTimeout(5*time.Second), transport)
	if err != nil {
		return fmt.Errorf("producer %d: %w", id, err)
	}
	rec.mu.Lock()
	rec.h.ProducerKeys[id] = hex.EncodeToString(p.PublicKey())
	rec.mu.Unlock()

	var wg sync.WaitGroup
	paced(ctx, w, func(i int, release func()) {
		value := fmt.Sprintf("%s-p%d-%d", phase, id, i)
		sent := time.Now()
		f := p.Produce(context.Background(), &client.Record{Topic: w.Topic, Key: []byte(fmt.Sprintf("p%d-k%d", id, i%16)), Value: []byte(value)})
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer release()
			r, err := f.Wait(context.Background())
			rec.send(outcome(id, i, value, r.Partition, r.Offset, err), sent, time.Now())
		}()
	})
	fctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	_ = p.Flush(fctx) // what does not resolve in time is failed by Close
	cctx, ccancel := context.WithTimeout(context.Background(), time.Second)
	defer ccancel()
	_ = p.Close(cctx)
	wg.Wait()
	return nil
}

// paced calls send for i = 0, 1, ... at the producer's share of the
// workload's rate until ctx ends, with at most w.InFlight sends
// unresolved: each send calls release once its outcome is recorded.
func paced(ctx context.Context, w Workload, send func(i int, release func())) {
	slots := make(chan struct{}, w.InFlight)
	interval := time.Duration(float64(time.Second) * float64(w.producers()) / float64(w.Rate))
	next := time.Now()
	for i := 0; ctx.Err() == nil; i++ {
		if d := time.Until(next); d > 0 {
			sleep(ctx, d)
		}
		next = next.Add(interval)
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			return
		}
		send(i, func() { <-slots })
	}
}

// outcome is producer id's send i of value: acknowledged at partition
// and offset, or of unknown outcome after err.
func outcome(id, i int, value string, partition uint32, offset uint64, err error) Send {
	s := Send{Producer: id, Index: i, Value: value}
	if err != nil {
		s.Outcome, s.Err = Unknown, err.Error()
	} else {
		s.Outcome, s.Partition, s.Offset = Acked, partition, offset
	}
	return s
}

// consume reads one partition of the topic through NATS from its start
// until ctx ends, recording every record in delivery order. Errors the
// consumer SDK reports and carries on from (a gap, a malformed message)
// are counted; others (NATS gone) make it subscribe again after the last
// record it got.
func consume(ctx context.Context, c *Cluster, w Workload, name string, partition uint32, rec *recorder, seq *int, mu *sync.Mutex) {
	next := uint64(0)
	for ctx.Err() == nil {
		natsOpts, err := c.Net.NATSOptions(c.Services, localnet.NATSConsumerUser)
		if err != nil {
			rec.consumerError(err)
			return
		}
		cons, err := consumer.Connect(c.Services.NATSURL(), consumer.WithNATSOptions(natsOpts...))
		if err != nil {
			sleep(ctx, 500*time.Millisecond)
			continue
		}
		sub, err := cons.Subscribe(ctx, w.Topic, consumer.WithPartitions(partition), consumer.FromOffset(next))
		if err != nil {
			_ = cons.Close()
			sleep(ctx, 500*time.Millisecond)
			continue
		}
		for ctx.Err() == nil {
			r, err := sub.Next(ctx)
			if err != nil {
				if ctx.Err() != nil {
					break
				}
				rec.consumerError(err)
				if errors.Is(err, consumer.ErrGap) || errors.Is(err, consumer.ErrMalformed) || errors.Is(err, consumer.ErrUnverified) {
					continue
				}
				break // resubscribe after the last record delivered
			}
			mu.Lock()
			*seq++
			s := *seq
			mu.Unlock()
			rec.observe(Observation{Observer: name, Poll: true, Seq: s, Partition: r.Partition, Offset: r.Offset,
				Value: string(r.Value), Producer: hex.EncodeToString(r.Producer)})
			next = r.Offset + 1
		}
		_ = sub.Close()
		_ = cons.Close()
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}

// readBack reads every record of topic/partition from node i, as the
// node's app holds it.
func readBack(ctx context.Context, n *localnet.Net, i int, topic string, partition uint32) ([]*byzlogv1.StoredRecord, error) {
	c, err := n.Client(i)
	if err != nil {
		return nil, err
	}
	var out []*byzlogv1.StoredRecord
	for offset := uint64(0); ; {
		req, err := proto.Marshal(&byzlogv1.RecordsRequest{Topic: topic, Partition: partition, Offset: offset})
		if err != nil {
			return nil, err
		}
		q, err := c.ABCIQuery(ctx, wire.PathRecords, req)
		if err != nil {
			return nil, fmt.Errorf("node%d records %s/%d@%d: %w", i, topic, partition, offset, err)
		}
		if q.Response.Code != 0 {
			return nil, fmt.Errorf("node%d records %s/%d@%d: %s", i, topic, partition, offset, q.Response.Log)
		}
		var resp byzlogv1.RecordsResponse
		if err := proto.Unmarshal(q.Response.Value, &resp); err != nil {
			return nil, fmt.Errorf("node%d records %s/%d@%d: %w", i, topic, partition, offset, err)
		}
		for _, b := range resp.Records {
			var r byzlogv1.StoredRecord
			if err := proto.Unmarshal(b, &r); err != nil {
				return nil, fmt.Errorf("node%d records %s/%d@%d: a record does not decode: %w", i, topic, partition, offset, err)
			}
			out = append(out, &r)
		}
		next := offset + uint64(len(resp.Records))
		if resp.ReadTo > offset {
			next = resp.ReadTo // past holes compaction left
		}
		if next <= offset || next >= resp.NextOffset {
			return out, nil
		}
		offset = next
	}
}

// evidence records the misbehaviour committed in blocks from..to: it reads
// the headers 20 at a time, and only the blocks whose evidence hash is not
// the empty list's, from the validator whose block store reaches back
// furthest (a node that joined by state sync or prunes holds no blocks
// before its earliest height). Heights no validator holds any more are
// noted, not read.
func evidence(ctx context.Context, n *localnet.Net, from, to int64, h *History, note func(string)) error {
	h.Heights = int(max(0, to-from+1))
	best, earliest := -1, int64(0)
	for i := 0; i < n.Config().Validators; i++ {
		e, err := earliestHeight(ctx, n, i)
		if err != nil {
			return err
		}
		if best < 0 || e < earliest {
			best, earliest = i, e
		}
	}
	c, err := n.Client(best)
	if err != nil {
		return err
	}
	if earliest > from {
		note(fmt.Sprintf("evidence: no validator holds blocks %d..%d any more (pruned or state-synced); read from %d on node%d", from, min(earliest-1, to), earliest, best))
		from = earliest
	}
	empty := types.EvidenceList{}.Hash()
	for lo := from; lo <= to; lo += 20 {
		res, err := c.BlockchainInfo(ctx, lo, min(lo+19, to))
		if err != nil {
			if e, serr := earliestHeight(ctx, n, best); serr == nil && lo < e {
				lo = e - 20 // pruned meanwhile
				continue
			}
			return fmt.Errorf("evidence: node%d headers %d..%d: %w", best, lo, min(lo+19, to), err)
		}
		for _, m := range res.BlockMetas {
			if bytes.Equal(m.Header.EvidenceHash, empty) {
				continue
			}
			height := m.Header.Height
			b, err := c.Block(ctx, &height)
			if err != nil {
				return fmt.Errorf("evidence: node%d block %d: %w", best, height, err)
			}
			if b == nil || b.Block == nil {
				return fmt.Errorf("evidence: node%d serves no block %d, which its header %d lists", best, height, height)
			}
			for _, ev := range b.Block.Evidence.Evidence {
				h.Evidence = append(h.Evidence, fmt.Sprintf("block %d: %s", height, ev))
			}
		}
	}
	return nil
}

// earliestHeight is the lowest height node i's block store holds.
func earliestHeight(ctx context.Context, n *localnet.Net, i int) (int64, error) {
	c, err := n.Client(i)
	if err != nil {
		return 0, err
	}
	st, err := c.Status(ctx)
	if err != nil {
		return 0, fmt.Errorf("node%d status: %w", i, err)
	}
	return max(1, st.SyncInfo.EarliestBlockHeight), nil
}

// errNoHeader is a node's null answer for a header it committed.
var errNoHeader = errors.New("no header")

// appHashes records, for heights from..to, the app hash in header h of
// each node's own block store (what its chain agreed on after block h-1),
// and each node's app's own hash after the last block it committed, next
// to the header that must carry it. A node whose block store lacks a header
// it committed (CometBFT answers null: a table of its block store damaged
// while it ran on) serves nothing there rather than anything else, so it
// is noted, not counted as a divergence: the headers it does serve are
// compared.
func appHashes(ctx context.Context, n *localnet.Net, from, to int64, into map[int64]map[string]string, note func(string)) error {
	header := func(c interface {
		Commit(context.Context, *int64) (*coretypes.ResultCommit, error)
	}, node string, h int64) error {
		res, err := c.Commit(ctx, &h)
		if err != nil {
			return fmt.Errorf("%s header %d: %w", node, h, err)
		}
		if res == nil || res.SignedHeader.Header == nil {
			return errNoHeader
		}
		if into[h] == nil {
			into[h] = map[string]string{}
		}
		into[h][node] = fmt.Sprintf("%X", res.SignedHeader.Header.AppHash)
		return nil
	}
	for i := 0; i < n.Config().Validators; i++ {
		c, err := n.Client(i)
		if err != nil {
			return err
		}
		node := fmt.Sprintf("node%d", i)
		// A node that joined by state sync, or prunes, holds no headers
		// before its earliest height, which may rise while this reads.
		earliest, err := earliestHeight(ctx, n, i)
		if err != nil {
			return err
		}
		if earliest > from {
			note(fmt.Sprintf("%s holds blocks from %d (state sync or pruning): its headers %d..%d are not compared", node, earliest, from, min(earliest-1, to)))
		}
		var holes []int64
		for h := max(from, earliest); h <= to; h++ {
			err := header(c, node, h)
			if errors.Is(err, errNoHeader) {
				holes = append(holes, h)
				continue
			}
			if err != nil {
				if e, serr := earliestHeight(ctx, n, i); serr == nil && h < e {
					h = e - 1 // pruned meanwhile
					continue
				}
				return err
			}
		}
		if len(holes) > 0 {
			note(fmt.Sprintf("%s serves no header for %d of heights %d..%d (first %d, last %d): its block store lacks them", node, len(holes), from, to, holes[0], holes[len(holes)-1]))
		}
		info, err := c.ABCIInfo(ctx)
		if err != nil {
			return fmt.Errorf("%s abci_info: %w", node, err)
		}
		next := info.Response.LastBlockHeight + 1
		for try := 0; ; try++ {
			err := header(c, node, next)
			if err == nil || errors.Is(err, errNoHeader) {
				break
			}
			if try == 40 {
				return err
			}
			sleep(ctx, 250*time.Millisecond)
		}
		if into[next] == nil {
			into[next] = map[string]string{}
		}
		into[next][node+"/app"] = fmt.Sprintf("%X", info.Response.LastBlockAppHash)
	}
	return nil
}
