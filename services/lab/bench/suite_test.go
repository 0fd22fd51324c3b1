package bench

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

func suiteFixture() Suite {
	row := func(system string, size int, rate, mbps float64, p99 time.Duration) Row {
		return Row{System: system, RecordSize: size, Result: Result{RecordsPerSec: rate, MBPerSec: mbps, Committed: int64(rate), Receipt: Latency{Count: 1, P99: p99}}}
	}
	return Suite{Started: time.Unix(1764460800, 0), Host: "test", Warmup: time.Second, Duration: 3 * time.Second, Runs: []Row{
		row(SystemByzlog, 100, 40000, 4, 900*time.Millisecond),
		row(SystemKVStore, 100, 4000, 0.4, 800*time.Millisecond),
		row(SystemNoop, 100, 50000, 5, 2*time.Second),
		row(SystemJetStreamSync, 100, 80000, 8, 200*time.Millisecond),
		row(SystemByzlogKafka, 100, 60000, 6, 700*time.Millisecond),
		{System: SystemByzlogKafkaTxn, RecordSize: 100, Result: Result{RecordsPerSec: 39000, MBPerSec: 3.9, Committed: 39000,
			Receipt: Latency{Count: 39000, P99: 600 * time.Millisecond}, Transactions: 390,
			Commit: Latency{Count: 390, P50: 1500 * time.Millisecond, P99: 2400 * time.Millisecond}}},
		row(SystemByzlog, 1024, 9000, 9.2, time.Second),
		{System: SystemKVStore, RecordSize: 1024, Err: "boom"},
		row(SystemNoop, 1024, 5000, 5.1, time.Second),
		row(SystemByzlogWrite, 1024, 4800, 4.9, time.Second),
	}}
}

func TestSuiteRatios(t *testing.T) {
	got := map[string]Ratio{}
	for _, r := range suiteFixture().Ratios() {
		got[fmt.Sprintf("%s@%d", r.Name, r.RecordSize)] = r
	}
	for _, tc := range []struct {
		key  string
		want float64
		met  bool
	}{
		{"byzlog / kvstore records/s@100", 10, false}, // goal 12
		{"byzlog / noop MB/s@100", 0.8, true},
		{"byzlog / jetstream-sync records/s@100", 0.5, true},           // goal 0.45
		{"byzlog / noop MB/s@1024", 9.2 / 5.1, true},                   // no goal at 1 KiB
		{"byzlog-write / noop MB/s@1024", 4.9 / 5.1, false},            // goal 1
		{"byzlog-kafka-txn / byzlog-kafka records/s@100", 0.65, false}, // goal 0.7
	} {
		r, ok := got[tc.key]
		if !ok {
			t.Errorf("ratio %s missing; have %v", tc.key, got)
			continue
		}
		if math.Abs(r.Value-tc.want) > 1e-9 || r.Met() != tc.met {
			t.Errorf("%s = %v (met %v), want %v (met %v)", tc.key, r.Value, r.Met(), tc.want, tc.met)
		}
	}
	if _, ok := got["byzlog / kvstore records/s@1024"]; ok {
		t.Error("a ratio against a failed row was computed")
	}
}

func TestSmokeSystems(t *testing.T) {
	smoke := SmokeSystems()
	if slices.Contains(smoke, SystemByzlogKafkaTxn) || slices.Contains(smoke, SystemByzlogIdle) || len(smoke) != len(Systems())-2 {
		t.Errorf("SmokeSystems() = %v, want every system but %s and %s", smoke, SystemByzlogKafkaTxn, SystemByzlogIdle)
	}
}

// TestIdleLoad: the idle row offers one record at a time from one
// producer, whatever the suite's load, and still validates.
func TestIdleLoad(t *testing.T) {
	load := Default()
	load.Gateways, load.Producers, load.InFlight = []string{"g"}, 8, 8000
	got := IdleLoad(load)
	if got.Producers != 1 || got.InFlight != 1 || got.Rate != IdleRate || got.Keys != 1 {
		t.Errorf("IdleLoad = %d producers, %d in flight, %v/s, %d keys; want 1, 1, %v/s, 1", got.Producers, got.InFlight, got.Rate, got.Keys, IdleRate)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("IdleLoad's load does not validate: %v", err)
	}
}

func TestSuiteTableAndSVG(t *testing.T) {
	s := suiteFixture()
	var b strings.Builder
	s.WriteTable(&b)
	for _, want := range []string{"100 B records", "1024 B records", "kvstore                failed: boom", "goal ≥ 12x: not met", "goal ≥ 0.8x: met", "goal ≥ 0.45x: met", "goal ≥ 1x: not met", "goal ≥ 0.7x: not met",
		"390 transactions committed: begin→commit p50 1500 ms, p99 2400 ms"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	// The chart is well-formed XML with two bars per successful row.
	dec := xml.NewDecoder(bytes.NewReader(s.SVG()))
	rects := 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("suite.svg is not well-formed: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "rect" {
			rects++
		}
	}
	if want := 1 + 2*9; rects != want { // background + 9 rows that succeeded
		t.Errorf("chart has %d rects, want %d", rects, want)
	}
}
