package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/byzlog/byzlog/gateway/client"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/services/internal/gatewaylink"
	"github.com/byzlog/byzlog/services/internal/keyfile"
	"github.com/byzlog/byzlog/services/internal/localnet"
	"github.com/byzlog/byzlog/services/internal/natsconn"
	"github.com/byzlog/byzlog/services/lab/bench"
)

// benchOptions are the bench command's flags.
type benchOptions struct {
	cfg        bench.Config
	gateways   []string
	natsURL    string
	acks       string
	dir        string
	adminKey   string
	partitions uint32
	out        string
	zstd       bool
	baseline   string
	js         bench.JetStreamConfig
	kvPort     int
	txSize     int
	tf         gatewaylink.Trust
	tlsf       gatewaylink.TLS
	natsf      natsconn.Flags
}

const benchHelp = `Drive --producers producers through --gateway with the producer SDK: closed
loop (each keeps --in-flight records unresolved, as fast as they resolve) or,
with --rate, open loop at that many records/s in all. Records are --record-size
bytes (at least 16: they name themselves so a consumer can time them), random
or JSON-like (--payload), keyless or over --keys keys. After --warmup, it
measures for --duration; with --nats it also reads the records back through
JetStream and times receipt→consumer.

Receipts are verified as the producer SDK does by default (--genesis, default
DIR/node0/config/genesis.json); --no-verify measures without it.

It creates --topic with --partitions when missing (signed with --admin-key,
default DIR/admin.key). Each second it prints the rate, records acknowledged,
errors and the last second's receipt p99. At the end it reports committed
records/s and MB/s, produce→receipt latency (p50/p90/p99/max), receipt→consumer
latency, errors by gRPC code, and the CPU time and peak RSS of every process of
the cluster running in --dir (from its PID files), and writes it all as JSON to
--out when given.

--baseline jetstream measures the crash-fault-tolerant peer instead, with the
same producers, record size, warm-up and duration: a JetStream cluster of
--servers nats-server processes on loopback (client ports from
--jetstream-port), one stream with that many replicas, async publishes with
--in-flight pending per publisher; --sync-always makes every write fsync
(sync_interval: always), like byzlog's synced commit. --baseline kvstore runs a
4-validator localnet of stock cometbft with its built-in kvstore app (nodes from
--kvstore-base-port, same network settings as byzlog's localnet) and sends
one record per transaction with broadcast_tx_async from --producers senders:
the "no batching" baseline; latency is until the sender's transaction is seen
in a committed block. --baseline noop does the same with the built-in noop
app and --tx-size random bytes per transaction (a gateway bundle's size): the
consensus engine's ceiling, a record counting as --record-size of its bytes.`

func newBenchCommand() *cobra.Command {
	o := &benchOptions{cfg: bench.Default(), gateways: []string{gatewaylink.LocalnetGateway}, natsURL: natsconn.LocalnetURL, acks: "commit",
		dir: localnet.Default().Dir, partitions: 8, js: bench.DefaultJetStream(), kvPort: 30656, txSize: 256 << 10}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Load a running cluster and report committed records/s, latency, errors and process costs",
		Long:  benchHelp,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return o.run(ctx, cmd)
		},
	}
	o.addFlags(cmd.Flags())
	cmd.AddCommand(newBenchSuiteCommand())
	return cmd
}

func (o *benchOptions) addFlags(f *pflag.FlagSet) {
	cfg := &o.cfg
	f.StringSliceVar(&o.gateways, "gateway", o.gateways, "gateway address(es)")
	f.StringVar(&o.natsURL, "nats", o.natsURL, "NATS URL to read the records back from (empty: no consumer)")
	f.StringVar(&cfg.Topic, "topic", cfg.Topic, "topic to write")
	f.Uint32Var(&o.partitions, "partitions", o.partitions, "partitions of --topic when it has to be created")
	f.StringVar(&o.adminKey, "admin-key", "", "admin key FILE to create --topic (default DIR/admin.key)")
	f.StringVar(&o.dir, "dir", o.dir, "run directory of the cluster (for the admin key and process statistics)")
	f.IntVar(&cfg.Producers, "producers", cfg.Producers, "producers (SDK instances, each its own key)")
	f.IntVar(&cfg.RecordSize, "record-size", cfg.RecordSize, "bytes per record value (at least 16)")
	f.IntVar(&cfg.Keys, "keys", cfg.Keys, "distinct keys (0: keyless, sticky partitioning)")
	f.StringVar(&cfg.Payload, "payload", cfg.Payload, "random (incompressible) or json (JSON-like)")
	f.BoolVar(&o.zstd, "zstd", false, "compress batches with zstd")
	f.Float64Var(&cfg.Rate, "rate", cfg.Rate, "offered records/s in all (open loop); 0: closed loop")
	f.IntVar(&cfg.InFlight, "in-flight", cfg.InFlight, "records unresolved per producer at most")
	f.DurationVar(&cfg.Warmup, "warmup", cfg.Warmup, "load before measuring")
	f.DurationVar(&cfg.Duration, "duration", cfg.Duration, "measured time")
	f.StringVar(&o.acks, "acks", o.acks, "none, mempool or commit")
	f.StringVar(&o.out, "out", "", "write the result as JSON to this FILE")
	f.StringVar(&o.baseline, "baseline", "", "measure a baseline instead of byzlog: jetstream, kvstore or noop")
	f.IntVar(&o.kvPort, "kvstore-base-port", o.kvPort, "with --baseline kvstore or noop: node 0's p2p port")
	f.IntVar(&o.txSize, "tx-size", o.txSize, "with --baseline noop: bytes per transaction (the gateway's bundle size)")
	f.BoolVar(&o.js.SyncAlways, "sync-always", false, "with --baseline jetstream: fsync every write")
	f.IntVar(&o.js.Servers, "servers", o.js.Servers, "with --baseline jetstream: servers (and stream replicas)")
	f.IntVar(&o.js.BasePort, "jetstream-port", o.js.BasePort, "with --baseline jetstream: first client port (cluster ports +100)")
	o.tf.Add(f)
	o.tlsf.Add(f)
	o.natsf.Add(f, natsconn.Flags{User: "consumer"})
}

// run measures byzlog, or the baseline --baseline names.
func (o *benchOptions) run(ctx context.Context, cmd *cobra.Command) error {
	switch o.baseline {
	case "":
	case "jetstream":
		return runJetStreamBaseline(ctx, cmd, o.js, o.cfg, o.out)
	case "kvstore", "noop":
		return runKVStoreBaseline(ctx, cmd, o.baseline, o.kvPort, o.txSize, o.cfg, o.out)
	default:
		return fmt.Errorf("--baseline %q: the baselines it knows are jetstream, kvstore and noop", o.baseline)
	}
	trust, err := o.configure(cmd.Flags())
	if err != nil {
		return err
	}
	if err := ensureTopic(cmd, o.gateways[0], o.cfg.Topic, o.partitions, o.adminKey, o.dir, trust, &o.tlsf); err != nil {
		return err
	}
	var watch func() []bench.ProcessStat
	if n, err := localnet.Open(localnet.Config{Dir: o.dir}); err == nil {
		var ps []bench.Process
		for _, p := range n.Processes() {
			ps = append(ps, bench.Process{Name: p.Name, PID: p.PID})
		}
		watch = bench.Watch(ps)
	}
	line := localnet.StatusLine(cmd.ErrOrStderr())
	res, err := bench.Run(ctx, o.cfg, func(p bench.Progress) {
		phase := "measuring"
		if p.Warmup {
			phase = "warming up"
		}
		line(fmt.Sprintf("%s %s: %.0f records/s, %d acknowledged, %d errors, p99 %s, %d consumed",
			p.Elapsed.Round(time.Second), phase, p.Rate, p.Acked, p.Errors, p.P99.Round(time.Millisecond), p.Consumed), false)
	})
	line("", true)
	if watch != nil {
		res.Processes = watch()
	}
	if werr := writeResult(cmd, res, o.out); werr != nil {
		return werr
	}
	if err != nil && !errors.Is(err, ctx.Err()) {
		return err
	}
	if res.Committed == 0 {
		return errors.New("no record was acknowledged in the measured window")
	}
	return nil
}

// configure completes o.cfg from the flags (files default to --dir's)
// and validates it; it returns the receipts' trust, which creating the
// topic needs too.
func (o *benchOptions) configure(f *pflag.FlagSet) (client.Trust, error) {
	a, err := gatewaylink.ParseAcks(o.acks)
	if err != nil {
		return client.Trust{}, err
	}
	if !f.Changed("genesis") {
		o.tf.Genesis = filepath.Join(o.dir, "node0", "config", "genesis.json")
	}
	if !f.Changed("tls-ca") {
		o.tlsf.Files.CA = filepath.Join(o.dir, "tls", "ca.pem")
	}
	if !f.Changed("nats-password-file") {
		o.natsf.PasswordFile = filepath.Join(o.dir, "nats", "consumer.password")
	}
	if !f.Changed("nats-tls-ca") {
		o.natsf.CA = filepath.Join(o.dir, "tls", "ca.pem")
	}
	o.natsf.Insecure = o.tlsf.Insecure
	trust, err := o.tf.Root(f)
	if err != nil {
		return client.Trust{}, err
	}
	transport, err := o.tlsf.ProducerOption(f)
	if err != nil {
		return client.Trust{}, err
	}
	cfg := &o.cfg
	cfg.Acks, cfg.Gateways, cfg.NATSURL = a, o.gateways, o.natsURL
	if cfg.NATSOptions, err = o.natsf.Options(f); err != nil {
		return client.Trust{}, err
	}
	cfg.Options = append(cfg.Options, client.WithTrust(trust), transport)
	if o.zstd {
		cfg.Options = append(cfg.Options, client.WithCompression(byzlogv1.Codec_CODEC_ZSTD))
	}
	return trust, cfg.Validate()
}

// ensureTopic creates topic unless it exists.
func ensureTopic(cmd *cobra.Command, gateway, topic string, partitions uint32, adminKey, dir string, trust client.Trust, tlsf *gatewaylink.TLS) error {
	c, err := tlsf.Config(cmd.Flags())
	if err != nil {
		return err
	}
	transport, _ := tlsf.ProducerOption(cmd.Flags())
	gw, closeFn, err := gatewaylink.Dial(gateway, c)
	if err != nil {
		return err
	}
	defer closeFn()
	if _, err := gw.DescribeTopic(cmd.Context(), &byzlogv1.DescribeTopicRequest{Name: topic}); err == nil {
		return nil
	}
	if adminKey == "" {
		adminKey = dir + "/admin.key"
	}
	key, err := keyfile.Read(adminKey)
	if err != nil {
		return fmt.Errorf("topic %s does not exist and creating it needs the admin key: %w (--admin-key)", topic, err)
	}
	adm, err := client.NewAdmin(gateway, key, trust, transport)
	if err != nil {
		return err
	}
	defer adm.Close()
	h, err := adm.CreateTopic(cmd.Context(), topic, &byzlogv1.TopicConfig{Partitions: partitions})
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "created topic %s with %d partitions at height %d\n", topic, partitions, h)
	return nil
}

func report(w io.Writer, r bench.Result) {
	c := r.Config
	load := "closed loop"
	if c.Rate > 0 {
		load = fmt.Sprintf("open loop at %.0f records/s", c.Rate)
	}
	acks := ""
	if c.Acks != byzlogv1.Ack_ACK_UNSPECIFIED {
		acks = ", acks=" + c.Acks.String()
	}
	fmt.Fprintf(w, "\nload: %d producers, %d B %s records, %s%s, %s measured after %s\n",
		c.Producers, c.RecordSize, c.Payload, load, acks, c.Duration, c.Warmup)
	fmt.Fprintf(w, "  committed         %d records: %.0f records/s, %.2f MB/s of values\n", r.Committed, r.RecordsPerSec, r.MBPerSec)
	fmt.Fprintf(w, "  produce→receipt   %s\n", r.Receipt)
	if r.Transactions > 0 {
		fmt.Fprintf(w, "  begin→commit      %s (%d transactions)\n", r.Commit, r.Transactions)
	}
	if c.NATSURL != "" {
		fmt.Fprintf(w, "  receipt→consumer  %s (%d records read back)\n", r.EndToEnd, r.Consumed)
	}
	fmt.Fprintf(w, "  errors            %s\n", bench.FormatErrors(r.Errors))
	for code, msg := range r.ErrorSamples {
		fmt.Fprintf(w, "    first %s: %.300s\n", code, msg)
	}
	for _, p := range r.Processes {
		fmt.Fprintf(w, "  %-20s pid %-7d cpu %6.1f s (%3.0f%% of a core)  rss %4d -> %4d MiB  peak %4d MiB\n",
			p.Name, p.PID, p.CPUSeconds, 100*p.CPUSeconds/(c.Duration+c.Warmup).Seconds(), p.StartRSS>>20, p.RSS>>20, p.PeakRSS>>20)
	}
	reportWindows(w, r)
}

// reportWindows prints a run's windows: figures per window, then each
// process's RSS at the end of each.
func reportWindows(w io.Writer, r bench.Result) {
	if len(r.Windows) == 0 {
		return
	}
	ms := func(d time.Duration) int64 { return d.Milliseconds() }
	fmt.Fprintf(w, "  by %s: from  records/s  read/s  receipt p50 p99 ms  e2e p50 p90 p99 ms\n", r.Config.Window)
	var names []string
	for _, win := range r.Windows {
		fmt.Fprintf(w, "    %8s  %9.0f  %6.0f  %7d %7d  %7d %7d %7d\n", win.From, win.RecordsPerSec, win.ReadPerSec,
			ms(win.Receipt.P50), ms(win.Receipt.P99), ms(win.EndToEnd.P50), ms(win.EndToEnd.P90), ms(win.EndToEnd.P99))
		for n := range win.RSS {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	slices.Sort(names)
	if len(names) == 0 {
		return
	}
	fmt.Fprintf(w, "  rss MiB at the end of each %s:\n", r.Config.Window)
	for _, n := range names {
		fmt.Fprintf(w, "    %-20s", n)
		for _, win := range r.Windows {
			if v, ok := win.RSS[n]; ok {
				fmt.Fprintf(w, " %5d", v>>20)
			} else {
				fmt.Fprintf(w, " %5s", "-")
			}
		}
		fmt.Fprintln(w)
	}
}

// runKVStoreBaseline runs the kvstore baseline with the load's shape.
func runKVStoreBaseline(ctx context.Context, cmd *cobra.Command, app string, basePort, txSize int, cfg bench.Config, out string) error {
	dir, err := os.MkdirTemp("", "byzlog-bench-"+app+"-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	net := localnet.Default()
	net.Dir, net.BasePort = dir, basePort
	net.CometBFT, net.App = localnet.FindBinary(localnet.BinDir(), "cometbft"), localnet.FindBinary(localnet.BinDir(), "byzlog-app")
	line := localnet.StatusLine(cmd.ErrOrStderr())
	res, err := bench.RunKVStore(ctx, bench.KVStoreConfig{Net: net, App: app, TxSize: txSize, Senders: cfg.Producers, RecordSize: cfg.RecordSize, Warmup: cfg.Warmup, Duration: cfg.Duration},
		func(p bench.Progress) {
			line(fmt.Sprintf("%s %s: %.0f records/s, %d committed, %d errors, p99 %s",
				p.Elapsed.Round(time.Second), app, p.Rate, p.Acked, p.Errors, p.P99.Round(time.Millisecond)), false)
		})
	line("", true)
	if err != nil && !errors.Is(err, ctx.Err()) {
		return err
	}
	if app == "noop" {
		fmt.Fprintf(cmd.OutOrStdout(), "\nnoop baseline: 4 stock cometbft validators, built-in noop, %d-byte txs (a record = %d of their bytes), broadcast_tx_async\n", txSize, cfg.RecordSize)
	} else {
		fmt.Fprintf(cmd.OutOrStdout(), "\nkvstore baseline: 4 stock cometbft validators, built-in kvstore, one record per tx, broadcast_tx_async\n")
	}
	return finishBaseline(cmd, res, out)
}

// writeResult prints a result and, with out, writes it as JSON there.
func writeResult(cmd *cobra.Command, res bench.Result, out string) error {
	report(cmd.OutOrStdout(), res)
	if out == "" {
		return nil
	}
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return fmt.Errorf("encode the result for --out: %w", err)
	}
	if err := os.WriteFile(out, append(b, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "wrote %s\n", out)
	return nil
}

// finishBaseline prints and writes a baseline's result.
func finishBaseline(cmd *cobra.Command, res bench.Result, out string) error {
	if err := writeResult(cmd, res, out); err != nil {
		return err
	}
	if res.Committed == 0 {
		return errors.New("nothing was committed in the measured window")
	}
	return nil
}

// runJetStreamBaseline runs the JetStream baseline with the load's shape.
func runJetStreamBaseline(ctx context.Context, cmd *cobra.Command, js bench.JetStreamConfig, cfg bench.Config, out string) error {
	js.NATSServer = localnet.FindBinary(localnet.BinDir(), "nats-server")
	js.Publishers, js.MaxPending, js.RecordSize, js.Warmup, js.Duration = cfg.Producers, cfg.InFlight, cfg.RecordSize, cfg.Warmup, cfg.Duration
	dir, err := os.MkdirTemp("", "byzlog-bench-jetstream-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	js.Dir = dir
	line := localnet.StatusLine(cmd.ErrOrStderr())
	res, err := bench.RunJetStream(ctx, js, func(p bench.Progress) {
		line(fmt.Sprintf("%s jetstream R%d: %.0f msgs/s, %d acknowledged, %d errors, p99 %s",
			p.Elapsed.Round(time.Second), js.Servers, p.Rate, p.Acked, p.Errors, p.P99.Round(time.Millisecond)), false)
	})
	line("", true)
	if err != nil && !errors.Is(err, ctx.Err()) {
		return err
	}
	sync := "default sync"
	if js.SyncAlways {
		sync = "sync_interval: always"
	}
	fmt.Fprintf(cmd.OutOrStdout(), "\nJetStream baseline: R%d on %d loopback servers, %s, async publish\n", js.Servers, js.Servers, sync)
	return finishBaseline(cmd, res, out)
}
