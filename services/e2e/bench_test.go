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
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/byzlog/byzlog/abciapp/sign"
	"github.com/byzlog/byzlog/gateway/client"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
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
	adm, err := client.NewAdmin(gw.addr, adminKey)
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
	var lat []time.Duration
	var latMu sync.Mutex
	var acked atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for i := uint32(0); i < partitions; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := client.NewProducer(ctx, client.WithGateways(gw.addr))
			if err != nil {
				t.Error(err)
				return
			}
			part := i
			var inner sync.WaitGroup
			sem := make(chan struct{}, 3000) // bounded records in flight per producer
			for time.Since(start) < d {
				sem <- struct{}{}
				t0 := time.Now()
				f := p.Produce(ctx, &client.Record{Topic: "viagw", Value: value, Partition: &part})
				inner.Add(1)
				go func() {
					defer inner.Done()
					defer func() { <-sem }()
					if _, err := f.Wait(ctx); err == nil && time.Since(start) <= d {
						acked.Add(1)
						latMu.Lock()
						lat = append(lat, time.Since(t0))
						latMu.Unlock()
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
	gwRate := float64(acked.Load()) / d.Seconds()

	// Baseline: one record per transaction, broadcast_tx_async, 8 senders.
	var sent atomic.Int64
	start = time.Now()
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
				s := sign.NewSigner(ed25519.NewKeyFromSeed(seed[:]), chain)
				b, err := s.Batch("baseline", uint32(i), 0, byzlogv1.Codec_CODEC_NONE, []*byzlogv1.Record{{Value: value}})
				if err != nil {
					t.Error(err)
					return
				}
				tx, _ := sign.BundleTx(b)
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

	t.Logf("byzlog via 1 gateway: %.0f committed records/s (100 B), produce→commit receipt p50 %s p99 %s (%d records in %s)",
		gwRate, percentile(lat, 0.5).Round(time.Millisecond), percentile(lat, 0.99).Round(time.Millisecond), acked.Load(), d)
	t.Logf("baseline one record per tx, broadcast_tx_async: %.0f committed records/s (%d sent, %d committed within %s)", baseRate, sent.Load(), baseline, d)
	if baseRate > 0 {
		t.Logf("ratio gateway/baseline: %.1fx", gwRate/baseRate)
	}
}
