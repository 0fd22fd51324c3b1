//go:build e2e && bench

package e2e

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/byzlog/byzlog/gateway/client"
	"github.com/byzlog/byzlog/indexer/consumer"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
	"github.com/byzlog/byzlog/services/internal/localnet"
)

// benchDuration is how long each side runs (BYZLOG_BENCH_SECONDS, default 20).
func benchDuration(t *testing.T) time.Duration {
	if s := os.Getenv("BYZLOG_BENCH_SECONDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("BYZLOG_BENCH_SECONDS=%q: want a positive integer", s)
		}
		return time.Duration(n) * time.Second
	}
	return 20 * time.Second
}

func committed(ctx context.Context, t *testing.T, n *localnet.Net, topic string, partitions uint32) uint64 {
	var total uint64
	for p := uint32(0); p < partitions; p++ {
		total += uint64(len(readPartition(ctx, t, n, 0, topic, p)))
	}
	return total
}

func percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[int(q*float64(len(d)-1))]
}

// loadResult is what one produce load achieved.
type loadResult struct {
	acked int64           // records acknowledged (ACK_COMMIT) within the run
	d     time.Duration   // how long the load ran
	lat   []time.Duration // produce→commit-receipt latency of each
}

func (r loadResult) rate() float64 { return float64(r.acked) / r.d.Seconds() }

func (r loadResult) String() string {
	return fmt.Sprintf("%.0f committed records/s, produce→commit receipt p50 %s p99 %s (%d records in %s)",
		r.rate(), percentile(r.lat, 0.5).Round(time.Millisecond), percentile(r.lat, 0.99).Round(time.Millisecond), r.acked, r.d)
}

// produceLoad runs producers SDK producers through gw for d, producer i
// pinned to partition i%partitions, each keeping at most inflight records
// unresolved, and counts the receipts that arrive within d.
func produceLoad(ctx context.Context, t *testing.T, gw, topic string, producers int, partitions uint32, d time.Duration, inflight int, opts ...client.Option) loadResult {
	t.Helper()
	type pending struct {
		f  *client.Future
		t0 time.Time
	}
	value := make([]byte, 100)
	var mu sync.Mutex
	res := loadResult{d: d}
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < producers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := client.NewProducer(ctx, append([]client.Option{client.WithGateways(gw)}, opts...)...)
			if err != nil {
				t.Error(err)
				return
			}
			part := uint32(i) % partitions
			queue := make(chan pending, inflight) // full queue = inflight records unresolved
			waited := make(chan struct{})
			go func() {
				defer close(waited)
				var acked int64
				var lat []time.Duration
				for q := range queue { // one partition resolves in order
					if _, err := q.f.Wait(ctx); err == nil && time.Since(start) <= d {
						acked++
						lat = append(lat, time.Since(q.t0))
					}
				}
				mu.Lock()
				res.acked += acked
				res.lat = append(res.lat, lat...)
				mu.Unlock()
			}()
			for time.Since(start) < d && ctx.Err() == nil {
				t0 := time.Now()
				queue <- pending{p.Produce(ctx, &client.Record{Topic: topic, Value: value, Partition: &part}), t0}
			}
			close(queue)
			cctx, ccancel := context.WithTimeout(ctx, time.Minute)
			defer ccancel()
			_ = p.Close(cctx)
			<-waited
		}()
	}
	wg.Wait()
	return res
}

// TestBenchGateway measures committed records/s and produce→commit-receipt
// latency for 100 B records through one gateway, against the same records
// sent one per transaction with broadcast_tx_async, on one 4-validator
// localnet, and prints both and their ratio. It asserts nothing about speed.
func TestBenchGateway(t *testing.T) {
	d := benchDuration(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*d+5*time.Minute)
	defer cancel()
	n, chain := startNet(ctx, t, 5000)
	gw := startGateway(t, n, fmt.Sprintf("127.0.0.1:%d", n.Config().BasePort+900))
	adminKey, err := n.AdminKey()
	if err != nil {
		t.Fatal(err)
	}
	adm, err := client.NewAdmin(gw.addr, adminKey, trustOf(t, n), tlsOpt(t, n))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	const partitions = 8
	for _, topic := range []string{"viagw", "baseline"} {
		if _, err := adm.CreateTopic(ctx, topic, &byzlogv1.TopicConfig{Partitions: partitions}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(time.Second)
	value := make([]byte, 100)

	// byzlog: 8 producers, one partition each, through one gateway.
	viaGW := produceLoad(ctx, t, gw.addr, "viagw", partitions, partitions, d, 3000, client.WithTrust(trustOf(t, n)), tlsOpt(t, n))
	var wg sync.WaitGroup

	// Baseline: one record per transaction, broadcast_tx_async, 8 senders.
	var sent atomic.Int64
	start := time.Now()
	for i := 0; i < partitions; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := n.Client(i % 4)
			if err != nil {
				t.Error(err)
				return
			}
			// A new producer key per record: one record per transaction with
			// no sequence to wait for, the best case for the baseline.
			for k := 0; time.Since(start) < d; k++ {
				seed := sha256.Sum256([]byte(fmt.Sprint("baseline-", i, "-", k)))
				s := wire.NewSigner(ed25519.NewKeyFromSeed(seed[:]), chain)
				b, err := s.Batch("baseline", uint32(i), 0, byzlogv1.Codec_CODEC_NONE, []*byzlogv1.Record{{Value: value}})
				if err != nil {
					t.Error(err)
					return
				}
				tx, _ := wire.BundleTx(b)
				if _, err := c.BroadcastTxAsync(ctx, tx); err != nil {
					time.Sleep(10 * time.Millisecond) // mempool full
					continue
				}
				sent.Add(1)
			}
		}()
	}
	wg.Wait()
	baseline := committed(ctx, t, n, "baseline", partitions)
	baseRate := float64(baseline) / d.Seconds()

	t.Logf("byzlog via 1 gateway, 100 B records: %s", viaGW)
	t.Logf("baseline one record per tx, broadcast_tx_async: %.0f committed records/s (%d sent, %d committed within %s)", baseRate, sent.Load(), baseline, d)
	if baseRate > 0 {
		t.Logf("ratio gateway/baseline: %.1fx", viaGW.rate()/baseRate)
	}
}

// TestBenchGatewaySweep runs the same load — many producers, small batches,
// so the gateway has many batches to bundle — through one gateway per
// setting of --linger and --max-bundle-bytes, one after another on one
// localnet, and prints committed records/s and latency for each, with the
// ratio to the defaults measured first and last in the same run.
func TestBenchGatewaySweep(t *testing.T) {
	d := benchDuration(t)
	settings := [][]string{
		{"--linger=5ms", "--max-bundle-bytes=1048576"}, // the defaults
		{"--linger=0s", "--max-bundle-bytes=1048576"},
		{"--linger=20ms", "--max-bundle-bytes=1048576"},
		{"--linger=5ms", "--max-bundle-bytes=262144"},
		{"--linger=5ms", "--max-bundle-bytes=2031616"},
		{"--linger=5ms", "--max-bundle-bytes=1048576"}, // the defaults again: drift
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(len(settings))*(2*d+time.Minute)+5*time.Minute)
	defer cancel()
	n, _ := startNet(ctx, t, 5000)
	adminKey, err := n.AdminKey()
	if err != nil {
		t.Fatal(err)
	}
	const producers, partitions = 64, 64
	var results []loadResult
	for k, args := range settings {
		gw := startGateway(t, n, fmt.Sprintf("127.0.0.1:%d", n.Config().BasePort+900+k), args...)
		if k == 0 {
			adm, err := client.NewAdmin(gw.addr, adminKey, trustOf(t, n), tlsOpt(t, n))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := adm.CreateTopic(ctx, "sweep", &byzlogv1.TopicConfig{Partitions: partitions}); err != nil {
				t.Fatal(err)
			}
			adm.Close()
			time.Sleep(time.Second)
		}
		// 200-record batches of 100 B (about 24 KiB signed), 64 at a time,
		// three batches queued behind each.
		r := produceLoad(ctx, t, gw.addr, "sweep", producers, partitions, d, 600, client.WithTrust(trustOf(t, n)), client.WithBatchRecords(200), tlsOpt(t, n))
		gw.stop(syscall.SIGTERM)
		results = append(results, r)
		t.Logf("%-45s %s", strings.Join(args, " "), r)
	}
	base := (results[0].rate() + results[len(results)-1].rate()) / 2
	for k, r := range results {
		if base > 0 {
			t.Logf("%-45s %.2fx the defaults", strings.Join(settings[k], " "), r.rate()/base)
		}
	}
}

// TestBenchIndexer measures, on a 4-validator localnet with one gateway,
// a nats-server and the indexer: commit-to-subscriber latency of 100 B
// records read with the consumer SDK while producing (from the block time,
// and from the producer's commit receipt), and the indexer's publish
// throughput when it catches up a backlog (records/s verified and stored
// in JetStream). It prints figures and asserts nothing about speed.
func TestBenchIndexer(t *testing.T) {
	d := benchDuration(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*d+5*time.Minute)
	defer cancel()
	n, _ := startNet(ctx, t, 5000)
	base := n.Config().BasePort
	natsURL := startNATS(t, base+850, t.TempDir())
	gw := startGateway(t, n, fmt.Sprintf("127.0.0.1:%d", base+900))
	const topic, partitions = "bench", 8
	createTopicVia(ctx, t, n, gw.addr, topic, partitions)
	ix := startIndexer(t, n, natsURL, "bench", base+860)

	// Live: produce for d while a subscriber reads.
	var receipts sync.Map // value -> time the commit receipt arrived
	cons, err := consumer.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	// The stream exists once the topic has a record.
	warm, err := client.NewProducer(ctx, client.WithTrust(trustOf(t, n)), client.WithGateways(gw.addr), tlsOpt(t, n))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := warm.ProduceSync(ctx, &client.Record{Topic: topic, Value: []byte("warm-up")}); err != nil {
		t.Fatal(err)
	}
	_ = warm.Close(ctx)
	var sub *consumer.Subscription
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if sub, err = cons.Subscribe(ctx, topic); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	var fromBlock, fromReceipt []time.Duration
	readDone := make(chan struct{})
	var read atomic.Int64
	go func() {
		defer close(readDone)
		for {
			rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
			r, err := sub.Next(rctx)
			rcancel()
			if err != nil {
				return
			}
			now := time.Now()
			read.Add(1)
			fromBlock = append(fromBlock, now.Sub(r.Timestamp))
			if v, ok := receipts.Load(string(r.Value)); ok {
				fromReceipt = append(fromReceipt, now.Sub(v.(time.Time)))
			}
		}
	}()
	produced := produceTagged(ctx, t, []client.Option{client.WithTrust(trustOf(t, n)), tlsOpt(t, n)}, gw.addr, topic, partitions, d, &receipts)
	<-readDone
	sub.Close()
	t.Logf("live: %d records produced and acknowledged in %s, %d read by the subscriber", produced, d, read.Load())
	t.Logf("commit→subscriber: from block time p50 %s p99 %s; from the producer's commit receipt p50 %s p99 %s",
		percentile(fromBlock, 0.5).Round(time.Millisecond), percentile(fromBlock, 0.99).Round(time.Millisecond),
		percentile(fromReceipt, 0.5).Round(time.Millisecond), percentile(fromReceipt, 0.99).Round(time.Millisecond))

	// Catch-up: stop the indexer, build a backlog, start it and time it.
	ix.stop(syscall.SIGTERM)
	backlog := produceTagged(ctx, t, []client.Option{client.WithTrust(trustOf(t, n)), tlsOpt(t, n)}, gw.addr, topic, partitions, d, nil)
	total := uint64(produced + backlog + 1) // and the warm-up record
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	stored := func() uint64 { return streamRecords(ctx, js, topic) }
	start := time.Now()
	startIndexer(t, n, natsURL, "bench", base+860)
	for stored() < total && time.Since(start) < 5*time.Minute {
		time.Sleep(50 * time.Millisecond)
	}
	took := time.Since(start)
	t.Logf("catch-up: %d backlog records verified and published in %s (%.0f records/s, including the indexer's start)",
		backlog, took.Round(time.Millisecond), float64(backlog)/took.Seconds())
}

// produceTagged produces 100 B records with unique values from one
// producer per partition for d, recording each receipt's arrival time in
// receipts (when not nil), and returns how many were acknowledged.
func produceTagged(ctx context.Context, t *testing.T, opts []client.Option, gw, topic string, partitions uint32, d time.Duration, receipts *sync.Map) int64 {
	t.Helper()
	var acked atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for i := uint32(0); i < partitions; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := client.NewProducer(ctx, append([]client.Option{client.WithGateways(gw)}, opts...)...)
			if err != nil {
				t.Error(err)
				return
			}
			sem := make(chan struct{}, 2000)
			var inner sync.WaitGroup
			for k := 0; time.Since(start) < d; k++ {
				sem <- struct{}{}
				v := fmt.Sprintf("%-100s", fmt.Sprintf("p%d-%d-%d", i, k, start.UnixNano()))
				f := p.Produce(ctx, &client.Record{Topic: topic, Value: []byte(v), Partition: &i})
				inner.Add(1)
				go func() {
					defer inner.Done()
					defer func() { <-sem }()
					if _, err := f.Wait(ctx); err == nil {
						acked.Add(1)
						if receipts != nil {
							receipts.Store(v, time.Now())
						}
					}
				}()
			}
			cctx, ccancel := context.WithTimeout(ctx, time.Minute)
			defer ccancel()
			_ = p.Close(cctx)
			inner.Wait()
		}()
	}
	wg.Wait()
	return acked.Load()
}
