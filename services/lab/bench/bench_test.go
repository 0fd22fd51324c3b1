package bench

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestInWindow(t *testing.T) {
	from := time.Unix(100, 0)
	end := from.Add(10 * time.Second)
	for _, tc := range []struct {
		at   time.Time
		want bool
	}{
		{from.Add(-time.Nanosecond), false},
		{from, true},
		{from.Add(5 * time.Second), true},
		{end, true},
		{end.Add(time.Nanosecond), false},
	} {
		if got := inWindow(tc.at, from, end); got != tc.want {
			t.Errorf("inWindow(from%+v) = %v, want %v", tc.at.Sub(from), got, tc.want)
		}
	}
}

func TestValidate(t *testing.T) {
	good := Default()
	good.Gateways = []string{"127.0.0.1:7070"}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		fn   func(*Config)
		want string
	}{
		{"no gateway", func(c *Config) { c.Gateways = nil }, "gateway"},
		{"size", func(c *Config) { c.RecordSize = 0 }, "record size"},
		{"payload", func(c *Config) { c.Payload = "zeros" }, "payload"},
		{"duration", func(c *Config) { c.Duration = time.Millisecond }, "duration"},
		{"rate", func(c *Config) { c.Rate = -1 }, "rate"},
		{"txn without kafka", func(c *Config) { c.TxnRecords, c.TxnPartitions, c.Partitions = 100, 3, 64 }, "need the kafka load"},
		{"txn open loop", func(c *Config) {
			c.Kafka, c.TxnRecords, c.TxnPartitions, c.Partitions, c.Rate = []kgo.Opt{}, 100, 3, 64, 1000
		}, "closed loop only"},
		{"txn partitions", func(c *Config) { c.Kafka, c.TxnRecords, c.TxnPartitions, c.Partitions = []kgo.Opt{}, 100, 3, 2 }, "txn partitions (3)"},
	} {
		c := good
		tc.fn(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %q", tc.name, err, tc.want)
		}
	}
}

func TestValuesCarryTheirIdentity(t *testing.T) {
	for _, payload := range []string{"random", "json"} {
		r := &runner{cfg: Config{RecordSize: 100, Payload: payload}}
		a, b := r.value(3, 7), r.value(3, 8)
		if len(a) != 100 || string(a[:16]) == string(b[:16]) {
			t.Fatalf("%s: values %x and %x", payload, a[:16], b[:16])
		}
	}
	if v := (&runner{cfg: Config{RecordSize: 4, Payload: "json"}}).value(0, 0); len(v) != 16 {
		t.Fatalf("a 4-byte record is %d bytes; records carry 16 bytes of identity at least", len(v))
	}
}

func TestWatchThisProcess(t *testing.T) {
	stats := Watch([]Process{{Name: "self", PID: os.Getpid()}, {Name: "gone", PID: 1 << 30}})
	x := 0
	for i := 0; i < 20_000_000; i++ {
		x += i
	}
	_ = x
	got := stats()
	if len(got) != 1 || got[0].Name != "self" || got[0].PeakRSS <= 0 || got[0].RSS <= 0 || got[0].CPUSeconds < 0 {
		t.Fatalf("Watch = %+v", got)
	}
}

// TestWindows: each acknowledgement counts in the window it arrived in,
// the last window is as long as what is left of the measured time, and
// each record's receipt→consumer latency counts in its receipt's window.
func TestWindows(t *testing.T) {
	cfg := Default()
	cfg.Duration, cfg.Window, cfg.NATSURL = 25*time.Second, 10*time.Second, "nats://x"
	r := &runner{cfg: cfg, errs: map[string]int64{}, samples: map[string]string{}, sentAt: map[string]time.Time{}, readFirst: map[string]struct{}{}}
	r.measureFrom = time.Unix(1000, 0)
	r.end = r.measureFrom.Add(cfg.Duration)
	r.windows = make([]window, 3)
	at := func(s float64) time.Time { return r.measureFrom.Add(time.Duration(s * float64(time.Second))) }
	for i, s := range []float64{-1, 0, 9.9, 10, 24, 25, 26} { // -1 and 26 are outside
		r.record(at(s).Add(-time.Second), at(s), fmt.Sprintf("%016d", i), nil)
	}
	r.windows[1].e2e.Add(3 * time.Second)
	var res Result
	r.summarize(&res)
	if len(res.Windows) != 3 {
		t.Fatalf("%d windows, want 3", len(res.Windows))
	}
	for i, want := range []struct {
		from      time.Duration
		committed int64
		rate      float64
	}{{0, 2, 0.2}, {10 * time.Second, 1, 0.1}, {20 * time.Second, 2, 0.4}} {
		w := res.Windows[i]
		if w.From != want.from || w.Committed != want.committed || w.RecordsPerSec != want.rate || w.Receipt.P50 != time.Second {
			t.Errorf("window %d = %+v; want from %s, %d committed, %v/s, receipts of 1s", i, w, want.from, want.committed, want.rate)
		}
	}
	if res.Windows[1].EndToEnd.Count != 1 || res.Windows[0].EndToEnd.Count != 0 {
		t.Errorf("end-to-end counts %d, %d; want 0, 1", res.Windows[0].EndToEnd.Count, res.Windows[1].EndToEnd.Count)
	}
	if res.Committed != 5 {
		t.Errorf("committed %d, want 5 (the windows' sum)", res.Committed)
	}
}

// TestReadBeforeReceipt: a record the consumer read before its receipt
// arrived leaves nothing behind when the receipt comes.
func TestReadBeforeReceipt(t *testing.T) {
	cfg := Default()
	cfg.NATSURL = "nats://x"
	r := &runner{cfg: cfg, errs: map[string]int64{}, samples: map[string]string{}, sentAt: map[string]time.Time{}, readFirst: map[string]struct{}{}}
	r.measureFrom, r.end = time.Unix(1000, 0), time.Unix(2000, 0)
	r.readFirst["0000000000000001"] = struct{}{}
	r.record(time.Unix(1500, 0), time.Unix(1501, 0), "0000000000000001", nil)
	r.record(time.Unix(1500, 0), time.Unix(1501, 0), "0000000000000002", nil)
	if len(r.readFirst) != 0 || len(r.sentAt) != 1 {
		t.Fatalf("readFirst %v, sentAt %v; want none, and only the unread record's receipt", r.readFirst, r.sentAt)
	}
}

// TestPacedStopsWithoutAnswers: a system that never answers holds every
// in-flight slot; the producer loop must still stop at the end of the run
// and when the run is interrupted (it waited for a free slot forever, and
// Ctrl-C did not stop the benchmark).
func TestPacedStopsWithoutAnswers(t *testing.T) {
	for _, tt := range []struct {
		name   string
		end    time.Duration
		cancel bool
	}{{"the run ends", 300 * time.Millisecond, false}, {"interrupted", time.Hour, true}} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Default()
			cfg.InFlight = 2
			r := &runner{cfg: cfg}
			r.measureFrom = time.Now()
			r.end = r.measureFrom.Add(tt.end)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			sent := 0
			done := make(chan struct{})
			go func() {
				defer close(done)
				r.paced(ctx, 0, func(uint64, []byte, []byte, func()) { sent++ }) // never released
			}()
			if tt.cancel {
				time.Sleep(100 * time.Millisecond)
				cancel()
			}
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("paced still waits for a free slot")
			}
			if sent != cfg.InFlight {
				t.Errorf("sent %d records, want the %d slots filled", sent, cfg.InFlight)
			}
		})
	}
}

func TestTxnPartitions(t *testing.T) {
	for _, tc := range []struct {
		i, k, producers, n, partitions int
		want                           []int32
	}{
		{0, 0, 8, 3, 64, []int32{0, 1, 2}},
		{7, 0, 8, 3, 64, []int32{21, 22, 23}},
		{0, 1, 8, 3, 64, []int32{24, 25, 26}},
		{1, 2, 8, 3, 64, []int32{51, 52, 53}},
		{2, 2, 8, 3, 64, []int32{54, 55, 56}},
		{5, 2, 8, 3, 64, []int32{63, 0, 1}}, // wraps
		{0, 0, 1, 3, 3, []int32{0, 1, 2}},
	} {
		if got := txnPartitions(tc.i, tc.k, tc.producers, tc.n, tc.partitions); !slices.Equal(got, tc.want) {
			t.Errorf("txnPartitions(%d, %d, %d, %d, %d) = %v, want %v", tc.i, tc.k, tc.producers, tc.n, tc.partitions, got, tc.want)
		}
	}
}

// TestRecordTxn: a transaction's records count once it commits inside the
// measured window, with one commit latency; a failed one counts each of
// its records as an error.
func TestRecordTxn(t *testing.T) {
	cfg := Default()
	cfg.Kafka, cfg.TxnRecords, cfg.TxnPartitions, cfg.Partitions = []kgo.Opt{}, 3, 3, 64
	r := &runner{cfg: cfg, errs: map[string]int64{}, samples: map[string]string{}}
	r.measureFrom, r.end = time.Unix(1000, 0), time.Unix(1030, 0)
	acks := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond}
	r.recordTxn(time.Unix(998, 0), time.Unix(999, 0), acks, 3, nil) // warm-up
	r.recordTxn(time.Unix(1010, 0), time.Unix(1011, 0), acks, 3, nil)
	r.recordTxn(time.Unix(1012, 0), time.Unix(1014, 0), acks, 3, nil)
	r.recordTxn(time.Unix(1015, 0), time.Unix(1016, 0), nil, 3, kerr.InvalidProducerEpoch)
	var res Result
	r.summarize(&res)
	if res.Committed != 6 || res.Transactions != 2 || res.Receipt.Count != 6 {
		t.Errorf("committed %d records in %d transactions, %d receipts; want 6 in 2, 6", res.Committed, res.Transactions, res.Receipt.Count)
	}
	if res.Commit.Count != 2 || res.Commit.Max != 2*time.Second || res.Commit.P50 < 990*time.Millisecond || res.Commit.P50 > 1010*time.Millisecond {
		t.Errorf("commit latency %+v, want 2 of 1s and 2s", res.Commit)
	}
	if n := res.Errors[kerr.InvalidProducerEpoch.Message]; n != 3 {
		t.Errorf("errors %v, want the failed transaction's 3 records under %s", res.Errors, kerr.InvalidProducerEpoch.Message)
	}
}
