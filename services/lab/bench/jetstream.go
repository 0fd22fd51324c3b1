package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// JetStreamConfig is the crash-fault-tolerant baseline: a JetStream cluster
// of Servers nats-server processes on loopback, one stream with Servers
// replicas, and Publishers async publishers of RecordSize-byte messages.
type JetStreamConfig struct {
	NATSServer string // the nats-server binary
	Dir        string // store directories and logs
	BasePort   int    // client ports BasePort.., cluster ports BasePort+100..
	Servers    int
	// SyncAlways sets sync_interval: always: an fsync per write, durability
	// like byzlog's synced commit.
	SyncAlways bool
	Publishers int
	MaxPending int // unacknowledged publishes per publisher
	RecordSize int
	Warmup     time.Duration
	Duration   time.Duration
}

// DefaultJetStream is 3 servers, 8 publishers of 100 B with 4,096 pending
// each, 5 s warm-up, 30 s measured.
func DefaultJetStream() JetStreamConfig {
	return JetStreamConfig{BasePort: 14222, Servers: 3, Publishers: 8, MaxPending: 4096, RecordSize: 100,
		Warmup: 5 * time.Second, Duration: 30 * time.Second}
}

// RunJetStream starts the cluster, publishes for Warmup+Duration, stops the
// cluster and reports like Run: acknowledged messages/s, publish→ack
// latency, errors, and each server's CPU and memory.
func RunJetStream(ctx context.Context, cfg JetStreamConfig, progress func(Progress)) (Result, error) {
	res := Result{Started: time.Now(), Errors: map[string]int64{}}
	res.Config = Config{Producers: cfg.Publishers, RecordSize: cfg.RecordSize, Warmup: cfg.Warmup, Duration: cfg.Duration, Payload: "random", Topic: "jetstream"}
	if cfg.Servers < 1 || cfg.Publishers < 1 || cfg.MaxPending < 1 || cfg.RecordSize < 1 || cfg.Duration < time.Second || cfg.NATSServer == "" || cfg.Dir == "" {
		return res, fmt.Errorf("jetstream baseline: incomplete config %+v", cfg)
	}
	procs, urls, err := startNATSCluster(ctx, cfg)
	defer stopProcs(procs)
	if err != nil {
		return res, err
	}
	var watched []Process
	for i, p := range procs {
		watched = append(watched, Process{Name: fmt.Sprintf("nats-server-%d", i), PID: p.Process.Pid})
	}
	watch := Watch(watched)

	nc, err := nats.Connect(strings.Join(urls, ","))
	if err != nil {
		return res, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(cfg.MaxPending*cfg.Publishers))
	if err != nil {
		return res, err
	}
	if err := createBenchStream(ctx, js, cfg.Servers); err != nil {
		return res, err
	}

	start := time.Now()
	t := &jsTally{measureFrom: start.Add(cfg.Warmup), end: start.Add(cfg.Warmup + cfg.Duration), errors: res.Errors}
	var wg sync.WaitGroup
	for i := 0; i < cfg.Publishers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.publish(ctx, js, fmt.Sprintf("bench.%d", i), cfg)
		}()
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	everySecond(finished, progress, func() (Progress, int64) {
		w := takeWindow(&t.mu, &t.window)
		return Progress{Elapsed: time.Since(start), Warmup: time.Now().Before(t.measureFrom), Acked: t.acked.Load(), Errors: t.errCount.Load(), P99: w.P99}, t.ackedAll.Load()
	})
	res.Processes = watch()
	res.Committed = t.acked.Load()
	res.RecordsPerSec = float64(res.Committed) / cfg.Duration.Seconds()
	res.MBPerSec = res.RecordsPerSec * float64(cfg.RecordSize) / 1e6
	res.Receipt = t.lat.Latency()
	return res, ctx.Err()
}

// createBenchStream creates the BENCH stream with replicas, retrying for
// a minute: the cluster needs a meta leader before it takes a replicated
// stream.
func createBenchStream(ctx context.Context, js jetstream.JetStream, replicas int) error {
	var err error
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "BENCH", Subjects: []string{"bench.>"},
			Storage: jetstream.FileStorage, Replicas: replicas})
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("create the R%d stream: %w", replicas, err)
	}
	return nil
}

// jsTally is what the publishers measured, shared between them: acks
// and their latencies within [measureFrom, end), every ack's latency
// since the last progress report (window), and errors by name.
type jsTally struct {
	measureFrom, end          time.Time
	mu                        sync.Mutex // guards lat, window, errors
	lat, window               Histogram
	errors                    map[string]int64
	acked, ackedAll, errCount atomic.Int64
}

func (t *jsTally) fail(err error) {
	t.errCount.Add(1)
	t.mu.Lock()
	t.errors[errName(err)]++
	t.mu.Unlock()
}

func (t *jsTally) ack(sent time.Time) {
	now := time.Now()
	d := now.Sub(sent)
	t.ackedAll.Add(1)
	t.mu.Lock()
	t.window.Add(d)
	if inWindow(now, t.measureFrom, t.end) {
		t.acked.Add(1)
		t.lat.Add(d)
	}
	t.mu.Unlock()
}

// publish is one publisher: async publishes to subject until the end,
// at most cfg.MaxPending unacknowledged, then waits for the last acks.
func (t *jsTally) publish(ctx context.Context, js jetstream.JetStream, subject string, cfg JetStreamConfig) {
	type pending struct {
		f    jetstream.PubAckFuture
		sent time.Time
	}
	queue := make(chan pending, cfg.MaxPending)
	done := make(chan struct{})
	go func() { // acks arrive in publish order per publisher
		defer close(done)
		for p := range queue {
			select {
			case <-p.f.Ok():
				t.ack(p.sent)
			case err := <-p.f.Err():
				t.fail(err)
			}
		}
	}()
	payload := make([]byte, cfg.RecordSize)
	for time.Now().Before(t.end) && ctx.Err() == nil {
		sent := time.Now()
		f, err := js.PublishAsync(subject, payload)
		if err != nil {
			t.fail(err)
			time.Sleep(time.Millisecond)
			continue
		}
		queue <- pending{f, sent}
	}
	close(queue)
	<-done
}

func errName(err error) string {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return fmt.Sprintf("jetstream_%d", apiErr.ErrorCode)
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) {
		return "timeout"
	}
	return "error"
}

// startNATSCluster runs cfg.Servers nats-server processes routed to each
// other and waits until each takes connections.
func startNATSCluster(ctx context.Context, cfg JetStreamConfig) ([]*exec.Cmd, []string, error) {
	var procs []*exec.Cmd
	var urls, routes []string
	for i := 0; i < cfg.Servers; i++ {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", cfg.BasePort+100+i))
	}
	for i := 0; i < cfg.Servers; i++ {
		dir := filepath.Join(cfg.Dir, fmt.Sprintf("n%d", i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return procs, nil, err
		}
		sync := ""
		if cfg.SyncAlways {
			sync = "\n  sync_interval: always"
		}
		conf := fmt.Sprintf(`server_name: n%d
listen: 127.0.0.1:%d
jetstream {
  store_dir: %q%s
}
cluster {
  name: bench
  listen: 127.0.0.1:%d
  routes: [%s]
}
`, i, cfg.BasePort+i, dir, sync, cfg.BasePort+100+i, strings.Join(routes, ", "))
		confPath := filepath.Join(dir, "nats.conf")
		if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
			return procs, nil, err
		}
		logf, err := os.Create(filepath.Join(dir, "nats.log"))
		if err != nil {
			return procs, nil, err
		}
		cmd := exec.Command(cfg.NATSServer, "-c", confPath)
		cmd.Stdout, cmd.Stderr = logf, logf
		err = cmd.Start()
		logf.Close()
		if err != nil {
			return procs, nil, fmt.Errorf("start %s: %w", cfg.NATSServer, err)
		}
		procs = append(procs, cmd)
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", cfg.BasePort+i))
	}
	for _, u := range urls {
		addr := strings.TrimPrefix(u, "nats://")
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
			if err == nil {
				c.Close()
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return procs, nil, fmt.Errorf("nats-server on %s did not listen: %w (logs in %s)", addr, err, cfg.Dir)
			}
		}
	}
	return procs, urls, nil
}

// stopProcs stops processes this package started: SIGTERM, then SIGKILL.
func stopProcs(ps []*exec.Cmd) {
	for _, p := range ps {
		_ = p.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = p.Process.Kill()
			<-done
		}
	}
}
