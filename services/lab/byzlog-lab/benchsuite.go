package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/gateway/client"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
	"github.com/byzlog/byzlog/services/internal/localnet"
	"github.com/byzlog/byzlog/services/lab/bench"
)

// suiteOptions is what `byzlog-lab bench suite` was asked for.
type suiteOptions struct {
	out         string
	systems     []string
	recordSizes []int
	load        bench.Config // producers, in-flight, warm-up, duration
	partitions  uint32
	retention   int64 // retention_bytes per partition of the bench topic; 0: none
	basePort    int
	scaling     bool
	validators  []int     // scaling: validator counts beyond 4
	rates       []float64 // scaling: offered load as fractions of the closed-loop peak
	profile     bool
	inFlightSet bool // --in-flight given: the same count for every record size
	// timeoutCommit is the validators' timeout_commit in every CometBFT
	// row (byzlog and the built-in baselines alike).
	timeoutCommit time.Duration
	smoke         bool // the short variant make test runs
}

const suiteHelp = `Run, one after another on this machine and with the same record sizes, load
shape, warm-up and duration, every system in --systems:

  byzlog            a fresh 4-validator localnet (gRPC ABCI), NATS, a gateway and
                    the indexer; closed-loop producers with the SDK, acks=commit,
                    random (incompressible) records, a consumer through NATS;
                    every receipt verified by the producer (light client)
  byzlog-noverify   the same with receipts taken on the gateway's word
                    (client.TrustGateway): the cost of verifying them
  byzlog-plaintext  the same as byzlog with every link in plaintext (--insecure)
                    (--insecure): the cost of TLS between producers and gateway
  byzlog-write      the write path alone: validators, the gateway and the
                    producers, without the indexer, NATS and the consumer (what
                    the noop and kvstore baselines also leave out)
  byzlog-kafka      the write path alone with franz-go producers (idempotent,
                    acks=all) through the gateway's Kafka face instead of the SDK
  byzlog-kafka-txn  the same with transactional producers, each committing
                    transactions of 100 records over 3 partitions one after
                    another (BeginTransaction to EndTransaction: begin→commit)
  byzlog-keyed      byzlog-write with records of 1,000 keys (Kafka's partitioner)
  byzlog-compacted  the same to a compacted topic (cleanup.policy=compact)
  byzlog-socket     byzlog over the socket ABCI transport
  byzlog-json-zstd  the same with JSON-like records in zstd-compressed batches
  byzlog-idle       byzlog with one producer, already running, sending one record
                    a second, all of one key: the latency of an idle produce
                    (not in --smoke)
  kvstore           stock cometbft with its built-in kvstore app, one record per
                    transaction (the "no batching" baseline)
  noop              stock cometbft with its built-in noop app, fed transactions of
                    the mean bundle size byzlog's gateway produced (the consensus
                    engine's ceiling; a record counts as --record-size bytes)
  jetstream         NATS JetStream, 3 servers, 3 replicas, async publish
  jetstream-sync    the same with sync_interval: always (an fsync per write)

Each row starts its own processes in a temporary directory and stops them
before the next. The suite prints one table per record size and the ratios
byzlog/kvstore, byzlog/noop and byzlog/JetStream with the goals they are held
to, and writes suite.json, suite.txt and suite.svg (throughput and p99 per
system) to --out.

--scaling adds byzlog with more validators (--validators) and an open-loop
latency-throughput curve: byzlog offered --rates times its closed-loop peak.
--profile collects 10-second CPU profiles and a heap profile of byzlog-app,
cometbft (node 0), the gateway, the indexer and nats-server, and a CPU profile of
the load generator (this process), in the middle of each byzlog row, next to
the JSON (go tool pprof -top FILE).
--smoke is the short variant make test runs: 100 B records, 3 s warm-up, 3 s
measured, every system but byzlog-kafka-txn once (unless --systems names
them); it only checks that each produced figures.

Ports: nodes from --base-port (node i: BASE+100i..+2), NATS BASE+800 (its
monitoring port 8222 plus the difference from 4222), gateway BASE+810..811,
indexer BASE+830, profiles BASE+840.. (cometbft +860..), the gateway's Kafka face
BASE+880 (byzlog-kafka, byzlog-kafka-txn), JetStream servers BASE+860.. (cluster ports +100).`

func newBenchSuiteCommand() *cobra.Command {
	o := &suiteOptions{out: "bench-results", systems: bench.Systems(), recordSizes: []int{100, 1024},
		load: bench.Default(), partitions: 64, basePort: 30656,
		validators: []int{7}, rates: []float64{0.25, 0.5, 0.7, 0.9, 1.1},
		timeoutCommit: time.Duration(localnet.Default().TimeoutCommit)}
	// The SDK keeps one batch in flight per partition, so a closed loop
	// reaches the cluster's peak only with many partitions: 8 producers on
	// 64 partitions, 8,000 records in flight each (measured: 8 partitions
	// 20,000 records/s on the write path, 32 24,400, 64 28,300).
	o.load.InFlight = 8000
	o.load.Warmup, o.load.Duration = 10*time.Second, 30*time.Second
	cmd := &cobra.Command{
		Use:   "suite",
		Short: "Measure byzlog and its baselines one after another on this machine: a table with ratios, a chart and JSON",
		Long:  suiteHelp,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd)
		},
	}
	o.addFlags(cmd.Flags())
	return cmd
}

func (o *suiteOptions) addFlags(f *pflag.FlagSet) {
	f.StringVar(&o.out, "out", o.out, "directory for suite.json, suite.txt, suite.svg (and profiles)")
	f.StringSliceVar(&o.systems, "systems", o.systems, "systems to measure, in this order: "+strings.Join(bench.Systems(), ","))
	f.IntSliceVar(&o.recordSizes, "record-sizes", o.recordSizes, "record sizes in bytes, each a full round of --systems")
	f.IntVar(&o.load.Producers, "producers", o.load.Producers, "producers (byzlog), publishers (JetStream) or senders (kvstore, noop)")
	f.IntVar(&o.load.InFlight, "in-flight", o.load.InFlight, "unresolved records per producer (byzlog) or pending publishes per publisher (JetStream); default 8,000 at 100 B, scaled to ~800 KB per producer for other sizes")
	f.Uint32Var(&o.partitions, "partitions", o.partitions, "partitions of byzlog's bench topic")
	f.Int64Var(&o.retention, "retention-bytes", 0, "retention_bytes per partition of byzlog's bench topic (0: keep everything); the chain and the topic's stream then stay bounded, as a long soak needs")
	f.DurationVar(&o.load.Warmup, "warmup", o.load.Warmup, "load before measuring, per row")
	f.DurationVar(&o.load.Duration, "duration", o.load.Duration, "measured time per row")
	f.DurationVar(&o.load.Window, "window", 0, "also report each byzlog row in windows of this length (records/s, latencies, every process's RSS at each window's end), as a soak needs to show drift; 0: none")
	f.IntVar(&o.basePort, "base-port", o.basePort, "first port of the suite's processes (see above)")
	f.Float64Var(&o.load.Rate, "rate", 0, "offered records/s in all for every byzlog row (open loop); 0: closed loop")
	f.BoolVar(&o.scaling, "scaling", false, "add the scaling curves: more validators and offered-rate steps")
	f.IntSliceVar(&o.validators, "validators", o.validators, "with --scaling: validator counts to add to the default 4")
	f.Float64SliceVar(&o.rates, "rates", o.rates, "with --scaling: offered rates as fractions of byzlog's closed-loop peak")
	f.DurationVar(&o.timeoutCommit, "timeout-commit", o.timeoutCommit, "validators' timeout_commit in every CometBFT row (the floor of the block interval)")
	f.BoolVar(&o.profile, "profile", false, "collect CPU and heap profiles of byzlog-app, cometbft, the gateway, the indexer and nats-server, and a CPU profile of the load generator")
	f.BoolVar(&o.smoke, "smoke", false, "the short variant: 100 B only, 3 s warm-up, 3 s measured, every system but byzlog-kafka-txn unless --systems is given")
}

// run measures the suite, writes it, and fails when a row has no figures.
func (o *suiteOptions) run(cmd *cobra.Command) error {
	if o.smoke {
		if !cmd.Flags().Changed("systems") {
			o.systems = bench.SmokeSystems()
		}
		o.recordSizes = []int{100}
		o.load.Warmup, o.load.Duration = 3*time.Second, 3*time.Second
	}
	o.inFlightSet = cmd.Flags().Changed("in-flight")
	if err := o.validate(); err != nil {
		return err
	}
	s, err := runSuite(cmd.Context(), *o, cmd.OutOrStdout(), cmd.ErrOrStderr())
	if werr := writeSuite(o.out, s, cmd.OutOrStdout()); werr != nil && err == nil {
		err = werr
	}
	if err != nil {
		return err
	}
	var failed []string
	for _, r := range s.Runs {
		if r.Err != "" || r.Result.Committed == 0 {
			failed = append(failed, fmt.Sprintf("%s at %d B", r.System, r.RecordSize))
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("no figures from %s (see the table above and %s)", strings.Join(failed, ", "), filepath.Join(o.out, "suite.txt"))
	}
	return nil
}

func (o suiteOptions) validate() error {
	for _, s := range o.systems {
		if !slices.Contains(bench.Systems(), s) {
			return fmt.Errorf("--systems: unknown system %q; known: %s", s, strings.Join(bench.Systems(), ", "))
		}
	}
	if len(o.systems) == 0 || len(o.recordSizes) == 0 {
		return errors.New("--systems and --record-sizes must not be empty")
	}
	for _, size := range o.recordSizes {
		if size < 16 || size > 64<<10 {
			return fmt.Errorf("--record-sizes: %d B: want 16 B to 64 KiB", size)
		}
	}
	for _, v := range o.validators {
		if v < 1 || v > 7 {
			return fmt.Errorf("--validators: %d: want 1 to 7 (ports are spaced for 7)", v)
		}
	}
	for _, r := range o.rates {
		if r <= 0 || r > 2 {
			return fmt.Errorf("--rates: %v: want fractions of the peak in (0, 2]", r)
		}
	}
	if o.basePort < 1024 || o.basePort+5000 > 65000 {
		return fmt.Errorf("--base-port %d: want 1024..60000", o.basePort)
	}
	if o.partitions < 1 {
		return errors.New("--partitions must be at least 1")
	}
	if o.retention < 0 {
		return fmt.Errorf("--retention-bytes %d: want 0 (keep everything) or a positive byte count", o.retention)
	}
	load := o.load
	load.Gateways = []string{"-"}
	return load.Validate()
}

// suiteRow is one row of the suite: a system at a record size.
type suiteRow struct {
	system     string
	size       int
	validators int
	rate       float64 // fraction of the peak, scaling only
}

// rows lists the suite's rows in the order they run: per record size,
// every system, then (--scaling) more validators and the offered rates.
func (o suiteOptions) rows() []suiteRow {
	var rows []suiteRow
	for _, size := range o.recordSizes {
		for _, sys := range o.systems {
			rows = append(rows, suiteRow{system: sys, size: size, validators: 4})
		}
		if o.scaling {
			for _, v := range o.validators {
				rows = append(rows, suiteRow{system: bench.ScalingSystem(v), size: size, validators: v})
			}
			for _, f := range o.rates {
				rows = append(rows, suiteRow{system: bench.SystemByzlog, size: size, validators: 4, rate: f})
			}
		}
	}
	return rows
}

// runSuite measures every row in turn. A row that fails is recorded with
// its error and the suite goes on; only cancellation stops it.
func runSuite(ctx context.Context, o suiteOptions, out, progress io.Writer) (bench.Suite, error) {
	s := bench.Suite{Started: time.Now(), Warmup: o.load.Warmup, Duration: o.load.Duration,
		Host: fmt.Sprintf("%d CPUs, %s/%s, %s", runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version())}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return s, err
	}
	rows := o.rows()
	bundle := map[int]int{} // record size -> byzlog's mean bundle bytes
	for i, r := range rows {
		if ctx.Err() != nil {
			return s, ctx.Err()
		}
		load := o.load
		load.RecordSize = r.size
		if !o.inFlightSet {
			// About 800 KB unresolved per producer, whatever the record size.
			load.InFlight = max(100, o.load.InFlight*100/r.size)
		}
		run := bench.Row{System: r.system, RecordSize: r.size}
		tag := fmt.Sprintf("[%d/%d] %s, %d B", i+1, len(rows), r.system, r.size)
		if r.rate > 0 {
			peak, ok := s.Find(bench.SystemByzlog, r.size)
			if !ok || peak.Result.RecordsPerSec == 0 {
				run.Err = "no closed-loop byzlog figure to scale the offered rate from"
				s.Runs = append(s.Runs, run)
				continue
			}
			load.Rate = r.rate * peak.Result.RecordsPerSec
			run.Rate = load.Rate
			tag += fmt.Sprintf(", offered %.0f/s", load.Rate)
		}
		fmt.Fprintf(progress, "\n%s: %s\n", tag, bench.Describe(r.system))
		// The load generator shares the cores: its own cost is part of the row.
		self := bench.Watch([]bench.Process{{Name: "load generator", PID: os.Getpid()}})
		res, err := runSuiteRow(ctx, o, r, load, &run, bundle, tag, progress)
		res.Processes = append(res.Processes, self()...)
		run.Result = res
		if err != nil {
			if ctx.Err() != nil {
				return s, ctx.Err()
			}
			run.Err = err.Error()
			fmt.Fprintf(progress, "%s failed: %v\n", tag, err)
		}
		report(out, res)
		s.Runs = append(s.Runs, run)
	}
	return s, nil
}

// runSuiteRow measures one row with load, noting in run what the row
// was given (transaction size, offered rate). bundle carries byzlog's
// mean bundle size per record size from its closed-loop row to the noop
// row, which sends transactions of that size.
func runSuiteRow(ctx context.Context, o suiteOptions, r suiteRow, load bench.Config, run *bench.Row, bundle map[int]int, tag string, progress io.Writer) (bench.Result, error) {
	switch {
	case r.system == bench.SystemKVStore || r.system == bench.SystemNoop:
		app, txSize := r.system, 0
		if app == bench.SystemNoop {
			txSize = bundle[r.size]
			if txSize == 0 {
				txSize = 1 << 20 // the gateway's default bundle bound
			}
			run.TxSize = txSize
		}
		return suiteBuiltin(ctx, o, app, txSize, load, tag, progress)
	case r.system == bench.SystemJetStream || r.system == bench.SystemJetStreamSync:
		return suiteJetStream(ctx, o, r.system == bench.SystemJetStreamSync, load, tag, progress)
	}
	transport := "grpc"
	if r.system == bench.SystemByzlogSocket {
		transport = "socket"
	}
	run.Rate = load.Rate
	kafka := r.system == bench.SystemByzlogKafka || r.system == bench.SystemByzlogKafkaTxn
	table := r.system == bench.SystemByzlogKeyed || r.system == bench.SystemByzlogTable
	writeOnly := r.system == bench.SystemByzlogWrite || kafka || table
	if table {
		load.Keys = bench.TableKeys
	}
	if r.system == bench.SystemByzlogKafkaTxn {
		load.TxnRecords, load.TxnPartitions, load.Partitions = bench.KafkaTxnRecords, bench.KafkaTxnPartitions, int(o.partitions)
	}
	if r.system == bench.SystemByzlogIdle {
		load = bench.IdleLoad(load)
		run.Rate = load.Rate
	}
	if r.system == bench.SystemByzlogJSON {
		load.Payload = "json"
		load.Options = append(load.Options, client.WithCompression(byzlogv1.Codec_CODEC_ZSTD))
	}
	profDir := ""
	if o.profile {
		profDir = filepath.Join(o.out, "profiles", fmt.Sprintf("%s-%dB", r.system, r.size))
		if r.rate > 0 {
			profDir = "" // the closed-loop row has them
		}
	}
	row := byzlogRow{transport: transport, validators: r.validators, writeOnly: writeOnly,
		verify: r.system != bench.SystemByzlogTrusted, plaintext: r.system == bench.SystemByzlogPlain, kafka: kafka,
		compacted: r.system == bench.SystemByzlogTable}
	res, mean, err := suiteByzlog(ctx, o, row, load, tag, progress, profDir)
	if r.system == bench.SystemByzlog && r.rate == 0 && mean > 0 {
		bundle[r.size] = int(mean)
	}
	return res, err
}

// writeSuite writes suite.json, suite.txt and suite.svg and prints the table.
func writeSuite(dir string, s bench.Suite, out io.Writer) error {
	if len(s.Runs) == 0 {
		return nil
	}
	var table strings.Builder
	s.WriteTable(&table)
	fmt.Fprintf(out, "\n%s", table.String())
	b, _ := json.MarshalIndent(s, "", "  ")
	for name, data := range map[string][]byte{"suite.json": append(b, '\n'), "suite.txt": []byte(table.String()), "suite.svg": s.SVG()} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "\nwrote %s/suite.json, suite.txt and suite.svg\n", dir)
	return nil
}

// rowProgress prints a row's one-second snapshots on one status line.
func rowProgress(w io.Writer, tag string) (func(bench.Progress), func()) {
	line := localnet.StatusLine(w)
	return func(p bench.Progress) {
			phase := "measuring"
			if p.Warmup {
				phase = "warming up"
			}
			line(fmt.Sprintf("%s: %s %s, %.0f/s, %d acknowledged, %d errors, p99 %s",
				tag, p.Elapsed.Round(time.Second), phase, p.Rate, p.Acked, p.Errors, p.P99.Round(time.Millisecond)), false)
		}, func() {
			line("", true)
		}
}

// byzlogRow is how one byzlog row runs: its ABCI transport, validators,
// and what it leaves out or turns off.
type byzlogRow struct {
	transport  string
	validators int
	writeOnly  bool // no indexer, NATS or consumer
	verify     bool // producers verify receipts
	plaintext  bool // every link without TLS
	kafka      bool // franz-go producers through the Kafka face
	compacted  bool // the topic is compacted
}

// suiteByzlog runs one byzlog row on a fresh cluster and returns the
// gateway's mean bundle size with the result.
func suiteByzlog(ctx context.Context, o suiteOptions, row byzlogRow, load bench.Config, tag string, progress io.Writer, profDir string) (bench.Result, float64, error) {
	dir, err := os.MkdirTemp("", "byzlog-bench-suite-")
	if err != nil {
		return bench.Result{}, 0, err
	}
	defer os.RemoveAll(dir)
	n, cfg, svc, err := startSuiteCluster(ctx, o, row, dir, profDir != "")
	if err != nil {
		return bench.Result{}, 0, err
	}
	defer func() { _ = n.Down(io.Discard) }()
	if load, err = byzlogLoad(ctx, o, row, n, svc, load); err != nil {
		return bench.Result{}, 0, err
	}
	var ps []bench.Process
	for _, p := range n.Processes() {
		ps = append(ps, bench.Process{Name: p.Name, PID: p.PID})
	}
	watch := bench.Watch(ps)
	load.Sample = bench.RSSOf(append(ps, bench.Process{Name: "load generator", PID: os.Getpid()}))
	profiled := profileRow(ctx, cfg, svc, row.writeOnly, load, profDir)
	prog, done := rowProgress(progress, tag)
	res, err := bench.Run(ctx, load, prog)
	done()
	res.Processes = watch()
	res.Disk = map[string]int64{"nats": bench.DirBytes(n.NATSStoreDir()), "node0/app": bench.DirBytes(filepath.Join(n.Home(0), "app")), "node0/cometbft": bench.DirBytes(filepath.Join(n.Home(0), "data"))}
	if logBytes, err := topicBytes(ctx, n, load.Topic); err == nil {
		res.Disk["node0 log"] = logBytes // the partitions' stored records, what retention and compaction left
	}
	if perr := <-profiled; perr != nil {
		fmt.Fprintf(progress, "%s: profiles: %v\n", tag, perr)
	} else if profDir != "" {
		fmt.Fprintf(progress, "%s: profiles in %s\n", tag, profDir)
	}
	mean := meanBundleBytes(ctx, n, svc)
	if err == nil && res.Committed == 0 {
		err = errors.New("nothing was committed in the measured window")
	}
	return res, mean, err
}

// startSuiteCluster starts the row's localnet and services under dir,
// with pprof listeners when profiled.
func startSuiteCluster(ctx context.Context, o suiteOptions, row byzlogRow, dir string, profiled bool) (*localnet.Net, localnet.Config, localnet.Services, error) {
	cfg := localnet.Default()
	cfg.Dir, cfg.BasePort, cfg.Transport, cfg.Validators, cfg.ChainID = filepath.Join(dir, "cluster"), o.basePort, row.transport, row.validators, "byzlog-bench"
	cfg.TimeoutCommit = localnet.Duration(o.timeoutCommit)
	cfg.InsecureRPC = row.plaintext
	bin := localnet.BinDir()
	cfg.CometBFT, cfg.App = localnet.FindBinary(bin, "cometbft"), localnet.FindBinary(bin, "byzlog-app")
	n, err := localnet.Open(cfg)
	if err != nil {
		return nil, cfg, localnet.Services{}, err
	}
	svc := localnet.Services{NATSPort: o.basePort + 800, Gateways: 1, GatewayPort: o.basePort + 810, IndexerPort: o.basePort + 830,
		NATS: localnet.FindBinary(bin, "nats-server"), Gateway: localnet.FindBinary(bin, "byzlog-gateway"), Indexer: localnet.FindBinary(bin, "byzlog-indexer")}
	svc.GatewaysOnly = row.writeOnly
	svc.Insecure = row.plaintext
	if row.kafka {
		svc.KafkaPort = o.basePort + 880 // past the profile ports (cometbft: +860..+866)
	}
	if profiled {
		cfg.PprofPort = o.basePort + 840
		svc.PprofPort = o.basePort + 850
		n, err = localnet.Open(cfg)
		if err != nil {
			return nil, cfg, svc, err
		}
	}
	if err := localnet.StartAll(ctx, n, svc, io.Discard); err != nil {
		return nil, cfg, svc, err
	}
	return n, cfg, svc, nil
}

// byzlogLoad points load at the row's cluster (trust, TLS, gateway, NATS
// unless write-only) and creates its topic.
func byzlogLoad(ctx context.Context, o suiteOptions, row byzlogRow, n *localnet.Net, svc localnet.Services, load bench.Config) (bench.Config, error) {
	trust, err := client.TrustGenesis(n.GenesisPath())
	if err != nil {
		return load, err
	}
	if !row.verify {
		trust = client.TrustGateway(trust.ChainID())
	}
	tlsOpt, err := n.ProducerTransport(svc)
	if err != nil {
		return load, err
	}
	load.Options = append(slices.Clip(load.Options), client.WithTrust(trust), tlsOpt)
	load.Gateways, load.NATSURL = []string{svc.GatewayAddr(0)}, svc.NATSURL()
	if row.kafka {
		if load.Kafka, err = n.KafkaClientOpts(svc, localnet.KafkaUser, 0); err != nil {
			return load, err
		}
	}
	if row.writeOnly {
		load.NATSURL = ""
	} else if load.NATSOptions, err = n.NATSOptions(svc, localnet.NATSConsumerUser); err != nil {
		return load, err
	}
	topic := &byzlogv1.TopicConfig{Partitions: o.partitions, RetentionBytes: o.retention}
	if row.compacted {
		topic.CleanupPolicy = byzlogv1.CleanupPolicy_CLEANUP_COMPACT
	}
	return load, suiteTopic(ctx, n, svc.GatewayAddr(0), load.Topic, topic, tlsOpt)
}

// profileRow collects profiles into profDir in the middle of the
// measured window (none when profDir is empty); the channel gets the
// outcome.
func profileRow(ctx context.Context, cfg localnet.Config, svc localnet.Services, writeOnly bool, load bench.Config, profDir string) <-chan error {
	profiled := make(chan error, 1)
	targets := []bench.ProfileTarget{
		{Name: "byzlog-app-node0", Addr: fmt.Sprintf("127.0.0.1:%d", cfg.PprofPort)},
		{Name: "gateway0", Addr: fmt.Sprintf("127.0.0.1:%d", svc.PprofPort)},
		{Name: "cometbft-node0", Addr: fmt.Sprintf("127.0.0.1:%d", cfg.CometBFTPprofPort(0))},
	}
	if !writeOnly {
		targets = append(targets,
			bench.ProfileTarget{Name: "indexer", Addr: fmt.Sprintf("127.0.0.1:%d", svc.PprofPort+9)},
			bench.ProfileTarget{Name: "nats-server", Addr: fmt.Sprintf("127.0.0.1:%d", svc.NATSPprofPort())})
	}
	if profDir == "" {
		profiled <- nil
		return profiled
	}
	go func() {
		// Profile the middle of the measured window.
		select {
		case <-time.After(load.Warmup + load.Duration/2 - min(load.Duration/2, 5*time.Second)):
		case <-ctx.Done():
		}
		profiled <- bench.CollectProfiles(ctx, profDir, targets, min(10*time.Second, load.Duration))
	}()
	return profiled
}

// suiteTopic creates the bench topic with the network's admin key.
func suiteTopic(ctx context.Context, n *localnet.Net, gateway, topic string, cfg *byzlogv1.TopicConfig, transport client.Option) error {
	key, err := n.AdminKey()
	if err != nil {
		return err
	}
	trust, err := client.TrustGenesis(n.GenesisPath())
	if err != nil {
		return err
	}
	adm, err := client.NewAdmin(gateway, key, trust, transport)
	if err != nil {
		return err
	}
	defer adm.Close()
	_, err = adm.CreateTopic(ctx, topic, cfg)
	return err
}

// meanBundleBytes reads the gateway's bundle_bytes histogram: sum / count.
func meanBundleBytes(ctx context.Context, n *localnet.Net, svc localnet.Services) float64 {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	hc, base, err := n.GatewayHTTPClient(svc, 0)
	if err != nil {
		return 0
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	resp, err := hc.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var sum, count float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		v, _ := strconv.ParseFloat(value, 64)
		switch name {
		case "byzlog_gateway_bundle_bytes_sum":
			sum = v
		case "byzlog_gateway_bundle_bytes_count":
			count = v
		}
	}
	if count == 0 {
		return 0
	}
	return sum / count
}

// suiteBuiltin runs the kvstore or noop row.
func suiteBuiltin(ctx context.Context, o suiteOptions, app string, txSize int, load bench.Config, tag string, progress io.Writer) (bench.Result, error) {
	dir, err := os.MkdirTemp("", "byzlog-bench-suite-"+app+"-")
	if err != nil {
		return bench.Result{}, err
	}
	defer os.RemoveAll(dir)
	net := localnet.Default()
	net.Dir, net.BasePort, net.TimeoutCommit = dir, o.basePort, localnet.Duration(o.timeoutCommit)
	net.CometBFT, net.App = localnet.FindBinary(localnet.BinDir(), "cometbft"), localnet.FindBinary(localnet.BinDir(), "byzlog-app")
	prog, done := rowProgress(progress, tag)
	defer done()
	return bench.RunKVStore(ctx, bench.KVStoreConfig{Net: net, App: app, TxSize: txSize, Senders: load.Producers,
		RecordSize: load.RecordSize, Warmup: load.Warmup, Duration: load.Duration}, prog)
}

// suiteJetStream runs a JetStream row.
func suiteJetStream(ctx context.Context, o suiteOptions, syncAlways bool, load bench.Config, tag string, progress io.Writer) (bench.Result, error) {
	dir, err := os.MkdirTemp("", "byzlog-bench-suite-jetstream-")
	if err != nil {
		return bench.Result{}, err
	}
	defer os.RemoveAll(dir)
	js := bench.DefaultJetStream()
	js.NATSServer, js.Dir, js.BasePort, js.SyncAlways = localnet.FindBinary(localnet.BinDir(), "nats-server"), dir, o.basePort+860, syncAlways
	js.Publishers, js.MaxPending, js.RecordSize, js.Warmup, js.Duration = load.Producers, load.InFlight, load.RecordSize, load.Warmup, load.Duration
	prog, done := rowProgress(progress, tag)
	defer done()
	return bench.RunJetStream(ctx, js, prog)
}

// topicBytes is topic's stored bytes over its partitions on node0: what
// retention and compaction left of the records written.
func topicBytes(ctx context.Context, n *localnet.Net, topic string) (int64, error) {
	c, err := n.Client(0)
	if err != nil {
		return 0, err
	}
	req, err := proto.Marshal(&byzlogv1.TopicRequest{Name: topic})
	if err != nil {
		return 0, err
	}
	q, err := c.ABCIQuery(ctx, wire.PathTopic, req)
	if err != nil {
		return 0, err
	}
	if q.Response.Code != 0 {
		return 0, fmt.Errorf("topic %s: %s", topic, q.Response.Log)
	}
	var info byzlogv1.TopicInfo
	if err := proto.Unmarshal(q.Response.Value, &info); err != nil {
		return 0, err
	}
	var sum int64
	for _, p := range info.Partitions {
		sum += int64(p.SizeBytes)
	}
	return sum, nil
}
