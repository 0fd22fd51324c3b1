package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/byzlog/byzlog/services/internal/localnet"
)

// KVStoreConfig is a built-in-app baseline on the same 4-validator
// localnet, fed with broadcast_tx_async by Senders senders spread over the
// nodes. With App "kvstore" each transaction is one RecordSize record (the
// "no batching" baseline); with App "noop" each is TxSize random bytes,
// the size of a gateway's bundle (the consensus ceiling), and a record
// counts as RecordSize of them.
type KVStoreConfig struct {
	Net        localnet.Config // Transport is set to App
	App        string          // "kvstore" (default) or "noop"
	TxSize     int             // noop: bytes per transaction
	Senders    int
	RecordSize int
	Warmup     time.Duration
	Duration   time.Duration
}

// RunKVStore starts the network, sends for Warmup+Duration, stops it and
// reports committed records/s and send→block latency (the time until the
// sender saw its transaction in a committed block).
func RunKVStore(ctx context.Context, cfg KVStoreConfig, progress func(Progress)) (Result, error) {
	res := Result{Started: time.Now(), Errors: map[string]int64{}}
	if cfg.App == "" {
		cfg.App = "kvstore"
	}
	if cfg.App != "kvstore" && (cfg.App != "noop" || cfg.TxSize < cfg.RecordSize) {
		return res, fmt.Errorf("built-in baseline: app %q with tx size %d: want kvstore, or noop with tx size ≥ record size", cfg.App, cfg.TxSize)
	}
	res.Config = Config{Producers: cfg.Senders, RecordSize: cfg.RecordSize, Warmup: cfg.Warmup, Duration: cfg.Duration, Payload: "random", Topic: cfg.App}
	cfg.Net.Transport = cfg.App
	perTx := int64(1) // records a transaction stands for
	txBytes := cfg.RecordSize + 16
	if cfg.App == "noop" {
		perTx, txBytes = int64(cfg.TxSize/cfg.RecordSize), cfg.TxSize
	}
	// Transactions are known by their first 16 bytes (random or unique), and
	// at most 8 MiB of them (under three blocks) wait to be seen in a block: async broadcast
	// gives no other back-pressure than a full mempool.
	keyOf := func(tx []byte) string { return string(tx[:min(16, len(tx))]) }
	pendingCap := max(8, (8<<20)/txBytes)
	n, err := localnet.Open(cfg.Net)
	if err != nil {
		return res, err
	}
	if err := n.Up(ctx, io.Discard); err != nil {
		return res, fmt.Errorf("kvstore localnet: %w", err)
	}
	defer func() { _ = n.Down(io.Discard) }()
	var watched []Process
	for _, p := range n.Processes() {
		watched = append(watched, Process{Name: p.Name, PID: p.PID})
	}
	watch := Watch(watched)

	start := time.Now()
	measureFrom, end := start.Add(cfg.Warmup), start.Add(cfg.Warmup+cfg.Duration)
	var mu sync.Mutex
	sent := map[string]time.Time{}
	var lat, window []time.Duration
	var lastSeen time.Time // when the watcher last fetched a block
	var acked, ackedAll, errCount atomic.Int64

	// A watcher follows node 0's blocks and times each transaction seen.
	watcher, err := n.Client(0)
	if err != nil {
		return res, err
	}
	st, err := watcher.Status(ctx)
	if err != nil {
		return res, err
	}
	next := st.SyncInfo.LatestBlockHeight + 1
	wctx, stopWatch := context.WithCancel(ctx)
	watched2 := make(chan struct{})
	go func() {
		defer close(watched2)
		for wctx.Err() == nil {
			b, err := watcher.Block(wctx, &next)
			if err != nil {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			now := time.Now()
			mu.Lock()
			lastSeen = now
			for _, tx := range b.Block.Txs {
				t0, ok := sent[keyOf(tx)]
				if !ok {
					continue
				}
				delete(sent, keyOf(tx))
				d := now.Sub(t0)
				ackedAll.Add(perTx)
				window = append(window, d)
				if inWindow(now, measureFrom, end) {
					acked.Add(perTx)
					lat = append(lat, d)
				}
			}
			mu.Unlock()
			next++
		}
	}()

	var wg sync.WaitGroup
	for i := 0; i < cfg.Senders; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := n.Client(i % cfg.Net.Validators)
			if err != nil {
				return
			}
			payload := make([]byte, max(1, cfg.RecordSize/2))
			if cfg.App == "noop" {
				payload = make([]byte, cfg.TxSize)
			}
			for seq := 0; time.Now().Before(end) && ctx.Err() == nil; seq++ {
				_, _ = rand.Read(payload)
				var tx []byte
				if cfg.App == "noop" {
					tx = payload[:len(payload):len(payload)]
					tx = append([]byte(nil), tx...)
				} else {
					tx = []byte(fmt.Sprintf("%016x=%s", uint64(i)<<40|uint64(seq), hex.EncodeToString(payload)))
				}
				for {
					mu.Lock()
					full := len(sent) >= pendingCap
					mu.Unlock()
					if !full || ctx.Err() != nil || !time.Now().Before(end) {
						break
					}
					time.Sleep(5 * time.Millisecond)
				}
				t0 := time.Now()
				mu.Lock()
				sent[keyOf(tx)] = t0
				mu.Unlock()
				if _, err := c.BroadcastTxAsync(ctx, tx); err != nil {
					errCount.Add(1)
					mu.Lock()
					delete(sent, keyOf(tx))
					name := "error"
					if strings.Contains(err.Error(), "mempool is full") {
						name = "mempool_full"
					}
					res.Errors[name]++
					mu.Unlock()
					time.Sleep(10 * time.Millisecond)
				}
			}
		}()
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	everySecond(finished, progress, func() (Progress, int64) {
		w := takeWindow(&mu, &window)
		return Progress{Elapsed: time.Since(start), Warmup: time.Now().Before(measureFrom), Acked: acked.Load(), Errors: errCount.Load(), P99: w.P99}, ackedAll.Load()
	})
	// The watcher may still be behind node 0's tip: let it reach the end
	// of the window.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(50 * time.Millisecond) {
		mu.Lock()
		caughtUp := lastSeen.After(end)
		mu.Unlock()
		if caughtUp {
			break
		}
	}
	stopWatch()
	<-watched2
	res.Processes = watch()
	mu.Lock()
	defer mu.Unlock()
	res.Committed = acked.Load()
	res.RecordsPerSec = float64(res.Committed) / cfg.Duration.Seconds()
	res.MBPerSec = res.RecordsPerSec * float64(cfg.RecordSize) / 1e6
	res.Receipt = Summarize(lat)
	return res, ctx.Err()
}
