package bench

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

// The systems a suite measures, in the order it runs them. byzlog's own
// rows come first so the noop baseline can be fed byzlog's bundle size.
const (
	SystemByzlog         = "byzlog"             // gRPC ABCI, random payload, receipts verified
	SystemByzlogTrusted  = "byzlog-noverify"    // the same, receipts taken on the gateway's word
	SystemByzlogPlain    = "byzlog-plaintext"   // the same as byzlog, every link without TLS
	SystemByzlogWrite    = "byzlog-write"       // the write path alone: no indexer, NATS or consumer
	SystemByzlogKeyed    = "byzlog-keyed"       // the write path alone, records of TableKeys keys
	SystemByzlogTable    = "byzlog-compacted"   // the same to a compacted topic
	SystemByzlogIdle     = "byzlog-idle"        // byzlog with one record at a time: the latency of an idle produce
	SystemByzlogKafka    = "byzlog-kafka"       // the write path alone, franz-go producers through the Kafka face
	SystemByzlogKafkaTxn = "byzlog-kafka-txn"   // the same, the producers committing Kafka transactions
	SystemByzlogSocket   = "byzlog-socket"      // socket ABCI, random payload
	SystemByzlogJSON     = "byzlog-json-zstd"   // JSON-like payload, zstd batches
	SystemKVStore        = "kvstore"            // stock cometbft, one record per tx
	SystemNoop           = "noop"               // stock cometbft, bundle-sized txs
	SystemJetStream      = "jetstream"          // R3, default sync
	SystemJetStreamSync  = "jetstream-sync"     // R3, sync_interval: always
	systemScalingPrefix  = "byzlog-validators-" // scaling rows: byzlog-validators-7
)

// The transactions of the byzlog-kafka-txn row (issue 48): each producer
// commits transactions of KafkaTxnRecords records spread over
// KafkaTxnPartitions partitions, one after another.
const (
	KafkaTxnRecords    = 100
	KafkaTxnPartitions = 3
)

// IdleRate is the byzlog-idle row's offered load, records/s: one producer
// sends a record a second, so each is alone in its block and the next
// (a receipt takes about two block intervals).
const IdleRate = 1.0

// TableKeys is how many keys the byzlog-keyed and byzlog-compacted rows
// write versions of (issue 49).
const TableKeys = 1000

// Systems lists every system a suite knows, in run order.
func Systems() []string {
	return []string{SystemByzlog, SystemByzlogTrusted, SystemByzlogPlain, SystemByzlogWrite, SystemByzlogKeyed, SystemByzlogTable, SystemByzlogKafka, SystemByzlogKafkaTxn, SystemByzlogSocket, SystemByzlogJSON, SystemByzlogIdle, SystemKVStore, SystemNoop, SystemJetStream, SystemJetStreamSync}
}

// SmokeSystems lists the systems the suite's short variant runs: all but
// byzlog-kafka-txn, whose row would cost the smoke 11 s more (measured;
// the smoke took 163 s) for four transactions per producer in 3 s (make
// bench runs it, and the e2e Kafka test covers transactions through the
// face), and byzlog-idle, the byzlog row's code under IdleLoad, whose 3
// records in 3 s would cost a cluster's start.
func SmokeSystems() []string {
	return slices.DeleteFunc(Systems(), func(s string) bool { return s == SystemByzlogKafkaTxn || s == SystemByzlogIdle })
}

// IdleLoad is load as the byzlog-idle row offers it: one producer, one
// record at a time, IdleRate records a second, all of one key, so one
// partition: a verifying producer's first batch to a partition first
// reads its proven sequence (a block interval more), which the row would
// otherwise pay on most records of a many-partition topic.
func IdleLoad(load Config) Config {
	load.Producers, load.Rate, load.InFlight, load.Keys = 1, IdleRate, 1, 1
	return load
}

// Describe says in a few words what a system row is.
func Describe(system string) string {
	switch system {
	case SystemByzlog:
		return "byzlog, 4 validators, gRPC ABCI, random payload, every receipt verified by the producer"
	case SystemByzlogTrusted:
		return "byzlog as above, receipts taken on the gateway's word (client.TrustGateway)"
	case SystemByzlogPlain:
		return "byzlog as the first row, every link in plaintext (--insecure: producers to the gateway, the gateway and the indexer to the nodes' RPC, NATS) instead of TLS"
	case SystemByzlogWrite:
		return "byzlog's write path alone: 4 validators, gRPC ABCI, gateway, producers; no indexer, NATS or consumer"
	case SystemByzlogKeyed:
		return fmt.Sprintf("byzlog's write path as byzlog-write, records of %d keys (Kafka's partitioner), delete policy", TableKeys)
	case SystemByzlogTable:
		return fmt.Sprintf("byzlog-keyed to a compacted topic: the chain keeps the latest record of each of the %d keys", TableKeys)
	case SystemByzlogKafka:
		return "byzlog's write path as byzlog-write, the producers franz-go clients (idempotent, acks=all) through the gateway's Kafka face (TLS, SASL PLAIN) instead of the SDK"
	case SystemByzlogKafkaTxn:
		return fmt.Sprintf("byzlog-kafka with transactional producers: each commits transactions of %d records over %d partitions one after another", KafkaTxnRecords, KafkaTxnPartitions)
	case SystemByzlogSocket:
		return "byzlog, 4 validators, socket ABCI, random payload"
	case SystemByzlogIdle:
		return fmt.Sprintf("byzlog as the first row, one producer (already running) sending %.0f record a second, all of one key: an idle produce's latency", IdleRate)
	case SystemByzlogJSON:
		return "byzlog, 4 validators, gRPC ABCI, JSON-like payload, zstd batches"
	case SystemKVStore:
		return "stock cometbft kvstore, 4 validators, one record per tx"
	case SystemNoop:
		return "stock cometbft noop, 4 validators, txs of byzlog's bundle size"
	case SystemJetStream:
		return "NATS JetStream R3, 3 servers, async publish, default sync"
	case SystemJetStreamSync:
		return "NATS JetStream R3, 3 servers, async publish, sync_interval: always"
	}
	if v, ok := strings.CutPrefix(system, systemScalingPrefix); ok {
		return "byzlog, " + v + " validators, gRPC ABCI, random payload"
	}
	return system
}

// ScalingSystem names byzlog's row with v validators.
func ScalingSystem(v int) string { return fmt.Sprintf("%s%d", systemScalingPrefix, v) }

// Row is one row of a suite: a system under one load shape.
type Row struct {
	System     string  `json:"system"`
	RecordSize int     `json:"record_size"`
	Rate       float64 `json:"offered_rate,omitempty"` // open loop; 0 is closed loop
	TxSize     int     `json:"tx_size,omitempty"`      // noop: bytes per transaction
	Result     Result  `json:"result"`
	Err        string  `json:"error,omitempty"`
}

// Suite is a whole `byzlog-lab bench suite` run.
type Suite struct {
	Started  time.Time     `json:"started"`
	Host     string        `json:"host"`
	Warmup   time.Duration `json:"warmup_ns"`
	Duration time.Duration `json:"duration_ns"`
	Runs     []Row         `json:"runs"`
}

// Find returns the closed-loop row of system at recordSize.
func (s Suite) Find(system string, recordSize int) (Row, bool) {
	for _, r := range s.Runs {
		if r.System == system && r.RecordSize == recordSize && r.Rate == 0 {
			return r, true
		}
	}
	return Row{}, false
}

// RecordSizes lists the record sizes the suite ran, ascending.
func (s Suite) RecordSizes() []int {
	var out []int
	for _, r := range s.Runs {
		if !slices.Contains(out, r.RecordSize) {
			out = append(out, r.RecordSize)
		}
	}
	slices.Sort(out)
	return out
}

// Ratio is one comparison the issue sets a goal for.
type Ratio struct {
	RecordSize int     `json:"record_size"`
	Name       string  `json:"name"`
	Value      float64 `json:"value"`
	Goal       float64 `json:"goal"` // the ratio must reach it; 0: no goal, shown for context
}

// Met says whether the ratio reaches its goal.
func (r Ratio) Met() bool { return r.Goal == 0 || r.Value >= r.Goal }

// Ratios compares byzlog's rows with the baselines, per record size, for
// every pair the suite measured.
func (s Suite) Ratios() []Ratio {
	var out []Ratio
	for _, size := range s.RecordSizes() {
		add := func(name, num, den string, goal float64, bytes bool) {
			a, ok1 := s.Find(num, size)
			b, ok2 := s.Find(den, size)
			if !ok1 || !ok2 || a.Err != "" || b.Err != "" {
				return
			}
			x, y := a.Result.RecordsPerSec, b.Result.RecordsPerSec
			if bytes {
				x, y = a.Result.MBPerSec, b.Result.MBPerSec
			}
			if y <= 0 {
				return
			}
			out = append(out, Ratio{RecordSize: size, Name: name, Value: x / y, Goal: goal})
		}
		// Issue 19's goals, each at one record size; at the other the
		// ratio is shown for context.
		at := func(goalSize int, goal float64) float64 {
			if size != goalSize {
				return 0
			}
			return goal
		}
		add("byzlog / kvstore records/s", SystemByzlog, SystemKVStore, at(100, 12), false)
		add("byzlog-write / kvstore records/s", SystemByzlogWrite, SystemKVStore, 0, false)
		add("byzlog / noop MB/s", SystemByzlog, SystemNoop, at(100, 0.8), true)
		add("byzlog-write / noop MB/s", SystemByzlogWrite, SystemNoop, at(1024, 1), true)
		add("byzlog / jetstream-sync records/s", SystemByzlog, SystemJetStreamSync, at(100, 0.45), false)
		add("byzlog-write / jetstream-sync records/s", SystemByzlogWrite, SystemJetStreamSync, 0, false)
		add("byzlog-json-zstd / jetstream-sync records/s", SystemByzlogJSON, SystemJetStreamSync, 0, false)
		add("byzlog / jetstream records/s", SystemByzlog, SystemJetStream, 0, false)
		add("byzlog-kafka / byzlog-write records/s", SystemByzlogKafka, SystemByzlogWrite, 0, false)
		// Issue 49's goal, at every record size.
		add("byzlog-compacted / byzlog-keyed records/s", SystemByzlogTable, SystemByzlogKeyed, 0.8, false)
		// Issue 48's goal, at every record size.
		add("byzlog-kafka-txn / byzlog-kafka records/s", SystemByzlogKafkaTxn, SystemByzlogKafka, 0.7, false)
		add("byzlog-socket / byzlog records/s", SystemByzlogSocket, SystemByzlog, 0, false)
		add("byzlog / byzlog-noverify records/s", SystemByzlog, SystemByzlogTrusted, 0, false)
	}
	return out
}

// WriteTable prints the suite as a table, one block per record size, then
// the ratios with their goals.
func (s Suite) WriteTable(w io.Writer) {
	ms := func(d time.Duration) string {
		if d == 0 {
			return "-"
		}
		return fmt.Sprintf("%.0f", float64(d)/float64(time.Millisecond))
	}
	fmt.Fprintf(w, "byzlog-lab bench suite, %s, %s warm-up + %s measured per row, %s\n",
		s.Started.UTC().Format("2006-01-02 15:04 UTC"), s.Warmup, s.Duration, s.Host)
	for _, size := range s.RecordSizes() {
		fmt.Fprintf(w, "\n%d B records\n", size)
		fmt.Fprintf(w, "  %-22s %10s %8s %9s %9s %9s %9s %8s %9s  %s\n",
			"system", "records/s", "MB/s", "p50 ms", "p99 ms", "e2e p99", "errors", "cpu s", "peak MiB", "load")
		for _, r := range s.Runs {
			if r.RecordSize != size {
				continue
			}
			load := "closed loop"
			if r.Rate > 0 {
				load = fmt.Sprintf("offered %.0f/s", r.Rate)
			}
			if r.TxSize > 0 {
				load += fmt.Sprintf(", %d B txs", r.TxSize)
			}
			if r.Err != "" {
				fmt.Fprintf(w, "  %-22s failed: %s\n", r.System, r.Err)
				continue
			}
			res := r.Result
			var cpu float64
			var peak int64
			for _, p := range res.Processes {
				cpu += p.CPUSeconds
				peak += p.PeakRSS
			}
			var errs int64
			for _, n := range res.Errors {
				errs += n
			}
			fmt.Fprintf(w, "  %-22s %10.0f %8.2f %9s %9s %9s %9d %8.1f %9d  %s\n",
				r.System, res.RecordsPerSec, res.MBPerSec, ms(res.Receipt.P50), ms(res.Receipt.P99), ms(res.EndToEnd.P99),
				errs, cpu, peak>>20, load)
			if len(res.Disk) > 0 {
				keys := slices.Sorted(maps.Keys(res.Disk))
				parts := make([]string, len(keys))
				for i, k := range keys {
					parts[i] = fmt.Sprintf("%s %.1f MiB", k, float64(res.Disk[k])/(1<<20))
				}
				fmt.Fprintf(w, "  %-22s on disk at the end: %s\n", "", strings.Join(parts, ", "))
			}
			if res.Transactions > 0 {
				fmt.Fprintf(w, "  %-22s %d transactions committed: begin→commit p50 %s ms, p99 %s ms\n",
					"", res.Transactions, ms(res.Commit.P50), ms(res.Commit.P99))
			}
		}
	}
	if rs := s.Ratios(); len(rs) > 0 {
		fmt.Fprintf(w, "\nratios (same run)\n")
		for _, r := range rs {
			verdict := ""
			if r.Goal > 0 {
				verdict = fmt.Sprintf("goal ≥ %gx: ", r.Goal)
				if r.Met() {
					verdict += "met"
				} else {
					verdict += "not met"
				}
			}
			fmt.Fprintf(w, "  %5d B  %-45s %7.2fx  %s\n", r.RecordSize, r.Name, r.Value, verdict)
		}
	}
	fmt.Fprintf(w, "\ncpu s and peak MiB sum every process of the system; p50/p99 are produce→receipt (byzlog), produce→ack (byzlog-kafka, byzlog-kafka-txn), send→block (kvstore, noop), publish→ack (JetStream); e2e p99 is receipt→consumer through the indexer and NATS; begin→commit is a transaction's BeginTransaction to its EndTransaction's return.\n")
}
