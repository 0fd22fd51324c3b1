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

	rpchttp "github.com/cometbft/cometbft/rpc/client/http"

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
	// At most 8 MiB of transactions (under three blocks) wait to be seen
	// in a block: async broadcast gives no other back-pressure than a full
	// mempool.
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
	k := &kvTally{measureFrom: start.Add(cfg.Warmup), end: start.Add(cfg.Warmup + cfg.Duration), perTx: perTx,
		pendingCap: pendingCap, sent: map[string]time.Time{}, errors: res.Errors}

	stopWatch, err := k.startWatcher(ctx, n)
	if err != nil {
		return res, err
	}

	var wg sync.WaitGroup
	for i := 0; i < cfg.Senders; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := n.Client(i % cfg.Net.Validators)
			if err != nil {
				return
			}
			k.send(ctx, c, i, cfg)
		}()
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	everySecond(finished, progress, func() (Progress, int64) {
		w := takeWindow(&k.mu, &k.window)
		return Progress{Elapsed: time.Since(start), Warmup: time.Now().Before(k.measureFrom), Acked: k.acked.Load(), Errors: k.errCount.Load(), P99: w.P99}, k.ackedAll.Load()
	})
	k.awaitWatcher(ctx)
	stopWatch()
	res.Processes = watch()
	k.mu.Lock()
	defer k.mu.Unlock()
	res.Committed = k.acked.Load()
	res.RecordsPerSec = float64(res.Committed) / cfg.Duration.Seconds()
	res.MBPerSec = res.RecordsPerSec * float64(cfg.RecordSize) / 1e6
	res.Receipt = k.lat.Latency()
	return res, ctx.Err()
}

// keyOf is how a transaction is known: its first 16 bytes (random or
// unique).
func keyOf(tx []byte) string { return string(tx[:min(16, len(tx))]) }

// kvTally is what the senders and the block watcher share: transactions
// sent and not yet seen in a block (at most pendingCap), acks and their
// latencies within [measureFrom, end) (a transaction standing for perTx
// records), every ack's latency since the last progress report (window),
// and errors by name.
type kvTally struct {
	measureFrom, end time.Time
	perTx            int64
	pendingCap       int

	mu          sync.Mutex // guards the fields below
	sent        map[string]time.Time
	lat, window Histogram
	lastSeen    time.Time // when the watcher last fetched a block
	errors      map[string]int64

	acked, ackedAll, errCount atomic.Int64
}

// startWatcher starts a watcher that follows node 0's blocks from the
// next one and times each transaction seen; stop stops it and waits.
func (k *kvTally) startWatcher(ctx context.Context, n *localnet.Net) (stop func(), err error) {
	watcher, err := n.Client(0)
	if err != nil {
		return nil, err
	}
	st, err := watcher.Status(ctx)
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		k.watchBlocks(wctx, watcher, st.SyncInfo.LatestBlockHeight+1)
	}()
	return func() { cancel(); <-done }, nil
}

// watchBlocks follows watcher's blocks from height next until ctx ends,
// and times each transaction it sees that a sender sent.
func (k *kvTally) watchBlocks(ctx context.Context, watcher *rpchttp.HTTP, next int64) {
	for ctx.Err() == nil {
		b, err := watcher.Block(ctx, &next)
		if err != nil {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		now := time.Now()
		k.mu.Lock()
		k.lastSeen = now
		for _, tx := range b.Block.Txs {
			t0, ok := k.sent[keyOf(tx)]
			if !ok {
				continue
			}
			delete(k.sent, keyOf(tx))
			d := now.Sub(t0)
			k.ackedAll.Add(k.perTx)
			k.window.Add(d)
			if inWindow(now, k.measureFrom, k.end) {
				k.acked.Add(k.perTx)
				k.lat.Add(d)
			}
		}
		k.mu.Unlock()
		next++
	}
}

// send is sender i: broadcast_tx_async through c until the end, waiting
// while pendingCap transactions are unseen.
func (k *kvTally) send(ctx context.Context, c *rpchttp.HTTP, i int, cfg KVStoreConfig) {
	payload := make([]byte, max(1, cfg.RecordSize/2))
	if cfg.App == "noop" {
		payload = make([]byte, cfg.TxSize)
	}
	for seq := 0; time.Now().Before(k.end) && ctx.Err() == nil; seq++ {
		_, _ = rand.Read(payload)
		var tx []byte
		if cfg.App == "noop" {
			tx = payload[:len(payload):len(payload)]
			tx = append([]byte(nil), tx...)
		} else {
			tx = []byte(fmt.Sprintf("%016x=%s", uint64(i)<<40|uint64(seq), hex.EncodeToString(payload)))
		}
		for {
			k.mu.Lock()
			full := len(k.sent) >= k.pendingCap
			k.mu.Unlock()
			if !full || ctx.Err() != nil || !time.Now().Before(k.end) {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		t0 := time.Now()
		k.mu.Lock()
		k.sent[keyOf(tx)] = t0
		k.mu.Unlock()
		if _, err := c.BroadcastTxAsync(ctx, tx); err != nil {
			k.errCount.Add(1)
			k.mu.Lock()
			delete(k.sent, keyOf(tx))
			name := "error"
			if strings.Contains(err.Error(), "mempool is full") {
				name = "mempool_full"
			}
			k.errors[name]++
			k.mu.Unlock()
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// awaitWatcher gives the watcher, which may still be behind node 0's
// tip, up to 5 s to reach the end of the window.
func (k *kvTally) awaitWatcher(ctx context.Context) {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(50 * time.Millisecond) {
		k.mu.Lock()
		caughtUp := k.lastSeen.After(k.end)
		k.mu.Unlock()
		if caughtUp {
			break
		}
	}
}
