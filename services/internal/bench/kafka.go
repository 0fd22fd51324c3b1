package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
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
	var wg sync.WaitGroup
	for i, cl := range clients {
		wg.Add(1)
		go func() { defer wg.Done(); r.produceKafka(ctx, i, cl) }()
	}
	produced := make(chan struct{})
	go func() { wg.Wait(); close(produced) }()
	everySecond(produced, progress, func() (Progress, int64) {
		w := takeWindow(&r.mu, &r.window)
		return Progress{Elapsed: time.Since(start), Warmup: time.Now().Before(r.measureFrom),
			Acked: r.acked.Load(), Errors: r.errCount.Load(), P99: w.P99}, r.ackedAll.Load()
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	res.Committed = r.acked.Load()
	res.RecordsPerSec = float64(res.Committed) / r.cfg.Duration.Seconds()
	res.MBPerSec = res.RecordsPerSec * float64(r.cfg.RecordSize) / 1e6
	res.Receipt = Summarize(r.receipts)
	res.Errors, res.ErrorSamples = r.errs, r.samples
	return res, ctx.Err()
}

// produceKafka is produce with a franz-go client.
func (r *runner) produceKafka(ctx context.Context, i int, cl *kgo.Client) {
	var interval time.Duration
	if r.cfg.Rate > 0 {
		interval = time.Duration(float64(time.Second) * float64(r.cfg.Producers) / r.cfg.Rate)
	}
	sem := make(chan struct{}, r.cfg.InFlight)
	next := time.Now()
	for seq := uint64(0); time.Now().Before(r.end) && ctx.Err() == nil; seq++ {
		if interval > 0 {
			if d := time.Until(next); d > 0 {
				time.Sleep(d)
			}
			next = next.Add(interval)
		}
		sem <- struct{}{}
		rec := &kgo.Record{Value: r.value(i, seq)}
		if r.cfg.Keys > 0 {
			rec.Key = []byte(fmt.Sprintf("key-%d", (uint64(i)*7919+seq)%uint64(r.cfg.Keys)))
		}
		sent := time.Now()
		cl.Produce(ctx, rec, func(rec *kgo.Record, err error) {
			defer func() { <-sem }()
			r.record(sent, time.Now(), "", err)
		})
	}
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
