// Package bench is byzlog's load generator: producers writing through
// gateways with the producer SDK, closed-loop (as fast as the system
// acknowledges) or open-loop (a target rate), with an optional consumer
// reading the records back through NATS to time the whole path. It reports
// committed records/s and MB/s, receipt and end-to-end latency
// percentiles, errors by code, and the CPU time and peak RSS of the
// cluster's processes. It reads no flags; `byzlog-lab bench` wires it.
package bench

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc/status"

	"github.com/byzlog/byzlog/gateway/client"
	"github.com/byzlog/byzlog/indexer/consumer"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

// Config is one load run. Default fills it; Validate names what is wrong.
type Config struct {
	Gateways []string
	NATSURL  string // empty: no consumer
	// NATSOptions connect the consumer (credentials, TLS).
	NATSOptions []nats.Option `json:"-"`
	Topic       string
	Producers   int
	// RecordSize is the value's size in bytes; at least 16, which name the
	// record (producer, sequence) so the consumer can time it.
	RecordSize int
	// Keys is the number of distinct keys, spread evenly; 0 means keyless
	// records (sticky partitioning).
	Keys int
	// Rate is the offered load in records/s over all producers (open
	// loop); 0 means closed loop: each producer keeps InFlight records
	// unresolved and sends as fast as they resolve.
	Rate     float64
	InFlight int
	Warmup   time.Duration
	Duration time.Duration
	Acks     byzlogv1.Ack
	// Payload is "random" (incompressible) or "json" (JSON-like text).
	Payload string
	// Options are extra producer options (linger, batch size, codec).
	Options []client.Option `json:"-"`
	// Kafka, when set, are a franz-go client's options for a gateway's
	// Kafka face (seeds, SASL, TLS): the producers are franz-go clients
	// through it instead of the SDK (see kafka.go).
	Kafka []kgo.Opt `json:"-"`
	// TxnRecords, when not 0, makes the Kafka load transactional: each
	// producer commits transactions of this many records one after
	// another, each spread over TxnPartitions consecutive partitions of
	// the topic's Partitions (see kafka.go). Closed loop only.
	TxnRecords    int `json:"txn_records,omitempty"`
	TxnPartitions int `json:"txn_partitions,omitempty"`
	Partitions    int `json:"partitions,omitempty"`
	// Window, when not 0, also reports the measured time in windows of
	// this length (Result.Windows): whether a long run's figures drift.
	Window time.Duration `json:"window_ns,omitempty"`
	// Sample, when set, is called at the end of each window for the
	// resident set of every process, by name (see RSSOf).
	Sample func() map[string]int64 `json:"-"`
}

// Default is 8 closed-loop producers of 100 B random keyless records, 2,000
// in flight each, 5 s warm-up, 30 s measured, acks=commit.
func Default() Config {
	return Config{Topic: "bench", Producers: 8, RecordSize: 100, InFlight: 2000,
		Warmup: 5 * time.Second, Duration: 30 * time.Second, Acks: byzlogv1.Ack_ACK_COMMIT, Payload: "random"}
}

// Validate says which field is wrong.
func (c Config) Validate() error {
	switch {
	case len(c.Gateways) == 0:
		return errors.New("bench: at least one gateway is required")
	case c.Topic == "":
		return errors.New("bench: topic is empty")
	case c.Producers < 1 || c.Producers > 1024:
		return fmt.Errorf("bench: producers (%d) must be between 1 and 1024", c.Producers)
	case c.RecordSize < 1 || c.RecordSize > 1<<20:
		return fmt.Errorf("bench: record size (%d) must be between 1 B and 1 MiB", c.RecordSize)
	case c.Keys < 0 || c.Rate < 0:
		return fmt.Errorf("bench: keys (%d) and rate (%v) must not be negative", c.Keys, c.Rate)
	case c.InFlight < 1:
		return fmt.Errorf("bench: in-flight (%d) must be at least 1", c.InFlight)
	case c.Warmup < 0 || c.Duration < time.Second:
		return fmt.Errorf("bench: warm-up (%s) must not be negative and duration (%s) at least 1s", c.Warmup, c.Duration)
	case c.Kafka != nil && c.NATSURL != "":
		return errors.New("bench: the kafka load times the write path alone; give no NATS URL")
	case c.TxnRecords < 0:
		return fmt.Errorf("bench: txn records (%d) must not be negative", c.TxnRecords)
	case c.TxnRecords > 0 && c.Kafka == nil:
		return fmt.Errorf("bench: txn records (%d) need the kafka load: transactions are Kafka's", c.TxnRecords)
	case c.TxnRecords > 0 && c.Rate > 0:
		return fmt.Errorf("bench: txn records (%d) with rate (%v): the transactional load is closed loop only", c.TxnRecords, c.Rate)
	case c.TxnRecords > 0 && (c.TxnPartitions < 1 || c.TxnPartitions > c.Partitions):
		return fmt.Errorf("bench: txn partitions (%d) must be between 1 and the topic's partitions (%d)", c.TxnPartitions, c.Partitions)
	case c.Payload != "random" && c.Payload != "json":
		return fmt.Errorf("bench: payload %q: want random or json", c.Payload)
	case c.Window < 0 || (c.Window > 0 && c.Window < time.Second):
		return fmt.Errorf("bench: window (%s) must be 0 (none) or at least 1s", c.Window)
	}
	return nil
}

// Latency summarises a latency distribution.
type Latency struct {
	Count int64         `json:"count"`
	P50   time.Duration `json:"p50_ns"`
	P90   time.Duration `json:"p90_ns"`
	P99   time.Duration `json:"p99_ns"`
	Max   time.Duration `json:"max_ns"`
}

func (l Latency) String() string {
	if l.Count == 0 {
		return "none"
	}
	r := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	return fmt.Sprintf("p50 %s p90 %s p99 %s max %s", r(l.P50), r(l.P90), r(l.P99), r(l.Max))
}

// Result is what one run measured. Figures count only acknowledgements
// that arrived inside the measured window (after the warm-up, before the
// end), whenever their records were sent: a steady-state rate that a
// latency longer than the window cannot hide.
type Result struct {
	Config        Config           `json:"config"`
	Started       time.Time        `json:"started"`
	Committed     int64            `json:"committed_records"`
	RecordsPerSec float64          `json:"records_per_sec"`
	MBPerSec      float64          `json:"mb_per_sec"` // value bytes, 10^6
	Receipt       Latency          `json:"produce_to_receipt"`
	EndToEnd      Latency          `json:"receipt_to_consumer"`
	Consumed      int64            `json:"consumed_records"`
	Errors        map[string]int64 `json:"errors_by_code"`
	// ErrorSamples holds the first error message seen for each code.
	ErrorSamples map[string]string `json:"error_samples,omitempty"`
	Processes    []ProcessStat     `json:"processes,omitempty"`
	// Disk is the bytes on disk at the row's end, by what holds them
	// ("nats", "node0/app", "node0/cometbft").
	Disk map[string]int64 `json:"disk_bytes,omitempty"`
	// Windows are the measured time in Config.Window-long pieces.
	Windows []Window `json:"windows,omitempty"`
	// Transactions and Commit, with Config.TxnRecords: the transactions
	// committed in the measured window and their BeginTransaction →
	// EndTransaction latency. Committed then counts their records only.
	Transactions int64   `json:"committed_transactions,omitempty"`
	Commit       Latency `json:"begin_to_commit,omitzero"`
}

// Window is one piece of the measured time. A record counts in the window
// of its acknowledgement, so EndToEnd is the latency of the records
// acknowledged in it, whenever they were read.
type Window struct {
	From          time.Duration `json:"from_ns"` // since the measured time began
	Committed     int64         `json:"committed_records"`
	RecordsPerSec float64       `json:"records_per_sec"`
	Receipt       Latency       `json:"produce_to_receipt"`
	EndToEnd      Latency       `json:"receipt_to_consumer"`
	// ReadPerSec is the records the consumer read in the window, per
	// second: below RecordsPerSec, the read side falls behind.
	ReadPerSec float64 `json:"read_per_sec"`
	// RSS is each process's resident set at the window's end, in bytes.
	RSS map[string]int64 `json:"rss_bytes,omitempty"`
}

// window is what the runner gathers for one Window.
type window struct {
	receipts, e2e Histogram
	read          int64
	rss           map[string]int64
}

// DirBytes is the size of every regular file under dir (0 if it is gone).
func DirBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// Progress is a one-second snapshot while a run goes.
type Progress struct {
	Elapsed  time.Duration
	Warmup   bool
	Rate     float64 // records/s acknowledged in the last second
	Acked    int64   // since the measured window began
	Errors   int64
	P99      time.Duration // of receipts in the last second
	Consumed int64
}

// Run drives the load and reports. progress (may be nil) gets a snapshot
// every second.
func Run(ctx context.Context, cfg Config, progress func(Progress)) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	r := &runner{cfg: cfg, errs: map[string]int64{}, samples: map[string]string{}, sentAt: map[string]time.Time{}, readFirst: map[string]struct{}{}}
	if cfg.Kafka != nil {
		return r.runKafka(ctx, progress)
	}
	return r.run(ctx, progress)
}

type runner struct {
	cfg Config

	measureFrom time.Time
	end         time.Time

	mu       sync.Mutex
	receipts Histogram // measured window
	commits  Histogram // measured window, transactions
	window   Histogram // last second, for progress
	e2e      Histogram
	errs     map[string]int64
	samples  map[string]string
	sentAt   map[string]time.Time // value id -> receipt time, for the consumer
	// readFirst are value ids the consumer read before their receipt
	// arrived: without it their receipt times stayed in sentAt for good
	// (the load generator's RSS grew 212 → 640 MiB in a 4-minute soak).
	readFirst map[string]struct{}
	windows   []window // with Config.Window

	acked    atomic.Int64 // measured window
	ackedAll atomic.Int64
	errCount atomic.Int64
	consumed atomic.Int64
}

func (r *runner) run(ctx context.Context, progress func(Progress)) (Result, error) {
	res := Result{Config: r.cfg, Started: time.Now()}
	producers := make([]*client.Producer, r.cfg.Producers)
	for i := range producers {
		p, err := client.NewProducer(ctx, append([]client.Option{client.WithGateways(r.cfg.Gateways...), client.WithAcks(r.cfg.Acks)}, r.cfg.Options...)...)
		if err != nil {
			for _, q := range producers[:i] {
				_ = q.Close(ctx)
			}
			return res, fmt.Errorf("producer %d: %w", i, err)
		}
		producers[i] = p
	}
	var sub *consumer.Subscription
	if r.cfg.NATSURL != "" {
		var err error
		sub, err = r.subscribe(ctx, producers[0])
		if err != nil {
			return res, err
		}
		defer sub.Close()
	}
	// The warm-up starts with the load, once the reader is subscribed
	// (its first record committed, the stream found).
	start := time.Now()
	r.measureFrom = start.Add(r.cfg.Warmup)
	r.end = r.measureFrom.Add(r.cfg.Duration)
	if r.cfg.Window > 0 {
		r.windows = make([]window, (r.cfg.Duration+r.cfg.Window-1)/r.cfg.Window)
	}
	sampled := make(chan struct{})
	stopSampling := make(chan struct{})
	go func() { defer close(sampled); r.sampleWindows(stopSampling) }()
	cctx, stopConsumer := context.WithCancel(ctx)
	consumerDone := make(chan struct{})
	if sub != nil {
		go func() { defer close(consumerDone); r.consume(cctx, sub) }()
	} else {
		close(consumerDone)
	}

	r.drive(start, len(producers), func(i int) { r.produce(ctx, i, producers[i]) }, progress)
	for _, p := range producers {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		_ = p.Close(cctx)
		cancel()
	}
	if sub != nil {
		// Give the consumer a moment for the last records to arrive.
		deadline := time.Now().Add(10 * time.Second)
		for r.consumed.Load() < r.ackedAll.Load() && time.Now().Before(deadline) && ctx.Err() == nil {
			time.Sleep(50 * time.Millisecond)
		}
	}
	stopConsumer()
	<-consumerDone
	close(stopSampling)
	<-sampled

	r.summarize(&res)
	return res, ctx.Err()
}

// drive runs n producers (produce(i) until the end of the window or of
// ctx) from start, with a progress snapshot every second, and returns
// when all have stopped.
func (r *runner) drive(start time.Time, n int, produce func(i int), progress func(Progress)) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); produce(i) }()
	}
	produced := make(chan struct{})
	go func() { wg.Wait(); close(produced) }()
	everySecond(produced, progress, func() (Progress, int64) {
		w := takeWindow(&r.mu, &r.window)
		return Progress{Elapsed: time.Since(start), Warmup: time.Now().Before(r.measureFrom),
			Acked: r.acked.Load(), Errors: r.errCount.Load(), P99: w.P99, Consumed: r.consumed.Load()}, r.ackedAll.Load()
	})
}

// summarize fills in res's figures from what the run recorded.
func (r *runner) summarize(res *Result) {
	r.mu.Lock()
	defer r.mu.Unlock()
	res.Committed = r.acked.Load()
	res.RecordsPerSec = float64(res.Committed) / r.cfg.Duration.Seconds()
	res.MBPerSec = res.RecordsPerSec * float64(r.cfg.RecordSize) / 1e6
	res.Receipt = r.receipts.Latency()
	res.Commit = r.commits.Latency()
	res.Transactions = r.commits.Count()
	res.EndToEnd = r.e2e.Latency()
	res.Consumed = r.consumed.Load()
	res.Errors, res.ErrorSamples = r.errs, r.samples
	for i := range r.windows {
		w := &r.windows[i]
		from := time.Duration(i) * r.cfg.Window
		length := min(r.cfg.Window, r.cfg.Duration-from)
		res.Windows = append(res.Windows, Window{From: from, Committed: w.receipts.Count(),
			RecordsPerSec: float64(w.receipts.Count()) / length.Seconds(),
			Receipt:       w.receipts.Latency(), EndToEnd: w.e2e.Latency(), RSS: w.rss,
			ReadPerSec: float64(w.read) / length.Seconds()})
	}
}

// subscribe creates the topic's stream by producing one record, then
// subscribes from the end of what exists.
func (r *runner) subscribe(ctx context.Context, p *client.Producer) (*consumer.Subscription, error) {
	if _, err := p.ProduceSync(ctx, &client.Record{Topic: r.cfg.Topic, Value: []byte("bench-start")}); err != nil {
		return nil, fmt.Errorf("first record: %w", err)
	}
	c, err := consumer.Connect(r.cfg.NATSURL, consumer.WithNATSOptions(r.cfg.NATSOptions...))
	if err != nil {
		return nil, err
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		sub, err := c.Subscribe(ctx, r.cfg.Topic, consumer.FromTime(time.Now()))
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return sub, err
		}
	}
}

// consume reads records back and times each from its receipt.
func (r *runner) consume(ctx context.Context, sub *consumer.Subscription) {
	for {
		rec, err := sub.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			continue
		}
		now := time.Now()
		r.consumed.Add(1)
		if len(rec.Value) < 16 {
			continue
		}
		id := string(rec.Value[:16])
		r.mu.Lock()
		if w := r.windowAt(now); w != nil {
			w.read++
		}
		t, ok := r.sentAt[id]
		if !ok {
			// Read before its receipt arrived: record must not keep it.
			r.readFirst[id] = struct{}{}
		}
		if ok {
			delete(r.sentAt, id)
			if t.After(r.measureFrom) && now.After(t) {
				r.e2e.Add(now.Sub(t))
				if w := r.windowAt(t); w != nil {
					w.e2e.Add(now.Sub(t))
				}
			}
		}
		r.mu.Unlock()
	}
}

// produce runs one producer until the end of the run.
func (r *runner) produce(ctx context.Context, i int, p *client.Producer) {
	var inner sync.WaitGroup
	r.paced(ctx, i, func(seq uint64, value, key []byte, release func()) {
		rec := &client.Record{Topic: r.cfg.Topic, Key: key, Value: value}
		sent := time.Now()
		inner.Add(1)
		// A callback, as Kafka producers are driven, not a goroutine per
		// record waiting on its Future: the load generator shares the
		// cores with what it measures.
		p.ProduceFunc(ctx, rec, func(_ client.Receipt, err error) {
			defer inner.Done()
			defer release()
			r.record(sent, time.Now(), string(value[:min(16, len(value))]), err)
		})
	})
	answered := make(chan struct{})
	go func() { inner.Wait(); close(answered) }()
	select { // every record answered, the run interrupted, or no answer for long
	case <-answered:
	case <-ctx.Done():
	case <-time.After(time.Until(r.end) + answerGrace):
	}
}

// answerGrace is how long after the end of a run the producers wait for
// their records' answers before the run reports without them (a record
// never answered is not committed in the figures).
const answerGrace = time.Minute

// paced calls send with producer i's records (its sequence, value and
// key) until the end of the run, at its share of the offered rate (closed
// loop: as fast as slots free), with at most InFlight unresolved: send
// calls release once the record's outcome is recorded.
func (r *runner) paced(ctx context.Context, i int, send func(seq uint64, value, key []byte, release func())) {
	var interval time.Duration
	if r.cfg.Rate > 0 {
		interval = time.Duration(float64(time.Second) * float64(r.cfg.Producers) / r.cfg.Rate)
	}
	sem := make(chan struct{}, r.cfg.InFlight)
	// A system that stops answering holds every slot: waiting for one
	// ends with the run, or when it is interrupted.
	end := time.NewTimer(time.Until(r.end))
	defer end.Stop()
	next := time.Now()
	for seq := uint64(0); time.Now().Before(r.end) && ctx.Err() == nil; seq++ {
		if interval > 0 {
			if d := time.Until(next); d > 0 {
				time.Sleep(d)
			}
			next = next.Add(interval)
		}
		select {
		case sem <- struct{}{}:
		case <-end.C:
			return
		case <-ctx.Done():
			return
		}
		var key []byte
		if r.cfg.Keys > 0 {
			key = []byte(fmt.Sprintf("key-%d", (uint64(i)*7919+seq)%uint64(r.cfg.Keys)))
		}
		send(seq, r.value(i, seq), key, func() { <-sem })
	}
}

func (r *runner) record(sent, now time.Time, id string, err error) {
	measured := inWindow(now, r.measureFrom, r.end)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.failed(err, 1, measured)
		return
	}
	r.ackedAll.Add(1)
	d := now.Sub(sent)
	r.window.Add(d)
	if measured {
		r.acked.Add(1)
		r.receipts.Add(d)
		if w := r.windowAt(now); w != nil {
			w.receipts.Add(d)
		}
	}
	if r.cfg.NATSURL != "" && len(id) == 16 {
		if _, read := r.readFirst[id]; read {
			delete(r.readFirst, id) // its latency is not measured: negative
		} else {
			r.sentAt[id] = now
		}
	}
}

// failed counts n records lost to err, by its code. The caller holds mu.
func (r *runner) failed(err error, n int64, measured bool) {
	r.errCount.Add(n)
	code := status.Code(err).String()
	if kc, ok := kafkaCode(err); ok {
		code = kc
	}
	if measured {
		r.errs[code] += n
	}
	if _, ok := r.samples[code]; !ok {
		r.samples[code] = err.Error()
	}
}

// windowAt is the window that t, inside the measured time, falls in (nil
// without windows). The caller holds mu.
func (r *runner) windowAt(t time.Time) *window {
	if r.cfg.Window <= 0 || t.Before(r.measureFrom) || t.After(r.end) {
		return nil
	}
	i := int(t.Sub(r.measureFrom) / r.cfg.Window)
	if i >= len(r.windows) {
		return nil // the instant the measured time ends
	}
	return &r.windows[i]
}

// sampleWindows records every process's resident set at the end of each
// window, until the last one or done.
func (r *runner) sampleWindows(done <-chan struct{}) {
	if r.cfg.Window <= 0 || r.cfg.Sample == nil {
		return
	}
	for i := range r.windows {
		at := r.measureFrom.Add(time.Duration(i+1) * r.cfg.Window)
		if at.After(r.end) {
			at = r.end
		}
		select {
		case <-time.After(time.Until(at)):
		case <-done:
			return
		}
		rss := r.cfg.Sample()
		r.mu.Lock()
		r.windows[i].rss = rss
		r.mu.Unlock()
	}
}

// everySecond hands progress a snapshot once a second until done closes.
// snapshot returns the figures and the running count of acknowledgements,
// from which everySecond computes the last second's rate. A nil progress
// only waits for done.
func everySecond(done <-chan struct{}, progress func(Progress), snapshot func() (Progress, int64)) {
	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	var last int64
	for {
		select {
		case <-ticker.C:
			if progress != nil {
				p, total := snapshot()
				p.Rate = float64(total - last)
				last = total
				progress(p)
			}
		case <-done:
			return
		}
	}
}

// takeWindow summarizes the latencies gathered since its last call (under
// mu) and starts the next progress window.
func takeWindow(mu *sync.Mutex, window *Histogram) Latency {
	mu.Lock()
	defer mu.Unlock()
	w := window.Latency()
	window.Reset()
	return w
}

// inWindow reports whether an acknowledgement at t counts: at or after
// from and not after end.
func inWindow(t, from, end time.Time) bool { return !t.Before(from) && !t.After(end) }

// value builds a record value: 16 bytes identifying it (producer and
// sequence, for the consumer), then the payload.
func (r *runner) value(i int, seq uint64) []byte {
	v := make([]byte, max(r.cfg.RecordSize, 16))
	binary.BigEndian.PutUint64(v[0:8], uint64(i))
	binary.BigEndian.PutUint64(v[8:16], seq)
	switch r.cfg.Payload {
	case "json":
		const sample = `{"user":"u-1042","event":"page_view","path":"/products/9921","ts":1764460800,"ok":true}`
		for k := 16; k < len(v); k += len(sample) {
			copy(v[k:], sample)
		}
	default:
		_, _ = rand.Read(v[16:])
	}
	return v[:max(r.cfg.RecordSize, 16)]
}

// FormatErrors lists errors by code, most first.
func FormatErrors(errs map[string]int64) string {
	if len(errs) == 0 {
		return "none"
	}
	codes := make([]string, 0, len(errs))
	for c := range errs {
		codes = append(codes, c)
	}
	slices.SortFunc(codes, func(a, b string) int { return int(errs[b] - errs[a]) })
	var parts []string
	for _, c := range codes {
		parts = append(parts, fmt.Sprintf("%s %d", c, errs[c]))
	}
	return strings.Join(parts, ", ")
}
