package chaos

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/byzlog/byzlog/services/internal/keyfile"
	"github.com/byzlog/byzlog/services/internal/localnet"
)

// The Kafka workload (Workload.Kafka): franz-go clients through the
// gateways' Kafka faces in place of the SDK and NATS. Each producer is an
// idempotent franz-go producer (its default) with acks=all, seeded with
// every gateway, as localnet.KafkaUser; the consumers are the members of
// one consumer group, which commit offsets on the chain. A group delivers
// at least once: after a rebalance a member reads again from the last
// committed offset. So the group is one observer ("group") that records
// each partition's deliveries up to the highest offset delivered, and
// counts the rest as redeliveries; a skip is still a poll-skip. Kafka
// deliveries carry no producer key: the validators' read-back checks the
// keys (forged).

// kafkaGroupObserver is the consumer group's name in the history.
const kafkaGroupObserver = "group"

// kafkaOpts are a franz-go client's options for the cluster's Kafka faces,
// every gateway a seed, with retries that outlast a fault.
func (c *Cluster) kafkaOpts() ([]kgo.Opt, error) {
	gws := make([]int, c.Services.Gateways)
	for g := range gws {
		gws[g] = g
	}
	opts, err := c.Net.KafkaClientOpts(c.Services, localnet.KafkaUser, gws...)
	return append(opts, kgo.RetryTimeout(time.Minute), kgo.RequestTimeoutOverhead(5*time.Second)), err
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

// produceKafka is produce with a franz-go idempotent producer.
func produceKafka(ctx context.Context, c *Cluster, w Workload, id int, phase string, rec *recorder, settle time.Duration) error {
	opts, err := c.kafkaOpts()
	if err != nil {
		return err
	}
	key, err := c.kafkaProducerKey()
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(append(opts, kgo.DefaultProduceTopic(w.Topic), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.MaxBufferedRecords(w.InFlight), kgo.RecordDeliveryTimeout(settle))...)
	if err != nil {
		return fmt.Errorf("kafka producer %d: %w", id, err)
	}
	defer cl.Close()
	rec.mu.Lock()
	rec.h.ProducerKeys[id] = key
	rec.mu.Unlock()

	paced(ctx, w, func(i int, release func()) {
		value := fmt.Sprintf("%s-k%d-%d", phase, id, i)
		sent := time.Now()
		r := &kgo.Record{Key: []byte(fmt.Sprintf("k%d-%d", id, i%16)), Value: []byte(value)}
		cl.Produce(context.Background(), r, func(r *kgo.Record, err error) {
			defer release()
			rec.send(outcome(id, i, value, uint32(r.Partition), uint64(r.Offset), err), sent, time.Now())
		})
	})
	fctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	_ = cl.Flush(fctx) // what does not resolve in time fails as the client closes
	return nil
}

// kafkaGroup is what the group's members share: the next offset each
// partition's deliveries have reached, and the delivery sequence.
type kafkaGroup struct {
	mu          sync.Mutex
	next        map[int32]int64
	seq         int
	redelivered int
}

// consumeKafka runs w.Consumers members of one consumer group on the
// topic until ctx ends; the returned func reports the redeliveries.
func consumeKafka(ctx context.Context, c *Cluster, w Workload, rec *recorder, wg *sync.WaitGroup) func() int {
	g := &kafkaGroup{next: map[int32]int64{}}
	rec.h.Consumers = append(rec.h.Consumers, kafkaGroupObserver)
	for m := 0; m < w.Consumers; m++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g.member(ctx, c, w, rec)
		}()
	}
	return func() int {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.redelivered
	}
}

// member is one group member, polling until ctx ends; a client that
// fails to start is tried again.
func (g *kafkaGroup) member(ctx context.Context, c *Cluster, w Workload, rec *recorder) {
	opts, err := c.kafkaOpts()
	if err != nil {
		rec.consumerError(err)
		return
	}
	cl, err := kgo.NewClient(append(opts, kgo.ConsumerGroup("chaos-"+w.Topic), kgo.ConsumeTopics(w.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(time.Second))...)
	if err != nil {
		rec.consumerError(err)
		return
	}
	defer cl.Close()
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		for _, e := range fs.Errors() {
			if ctx.Err() == nil {
				rec.consumerError(fmt.Errorf("kafka fetch %s/%d: %w", e.Topic, e.Partition, e.Err))
			}
		}
		fs.EachRecord(func(r *kgo.Record) { g.deliver(rec, r) })
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
