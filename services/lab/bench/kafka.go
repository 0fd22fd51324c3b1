package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The Kafka load (Config.Kafka): franz-go producers through a gateway's
// Kafka face in place of the SDK, each idempotent (franz-go's default)
// with acks=all, so an acknowledgement means committed in a block, as the
// SDK's does. The consumer, when there is one, still reads through NATS.

// runKafka is run with franz-go producers.
func (r *runner) runKafka(ctx context.Context, progress func(Progress)) (Result, error) {
	res := Result{Config: r.cfg, Started: time.Now()}
	clients := make([]*kgo.Client, r.cfg.Producers)
	for i := range clients {
		cl, err := kgo.NewClient(append(r.cfg.Kafka, kgo.DefaultProduceTopic(r.cfg.Topic), kgo.RequiredAcks(kgo.AllISRAcks()),
			kgo.MaxBufferedRecords(r.cfg.InFlight))...)
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
	if err := clients[0].ProduceSync(ctx, &kgo.Record{Value: []byte("bench-start")}).FirstErr(); err != nil {
		return res, fmt.Errorf("first record through the kafka face: %w", err)
	}
	start := time.Now()
	r.measureFrom = start.Add(r.cfg.Warmup)
	r.end = r.measureFrom.Add(r.cfg.Duration)
	r.drive(start, len(clients), func(i int) { r.produceKafka(ctx, i, clients[i]) }, progress)
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

// kafkaCode names a franz-go error by its Kafka error, if it has one.
func kafkaCode(err error) (string, bool) {
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Message, true
	}
	return "", false
}
