package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/byzlog/byzlog/services/internal/localnet"
	"github.com/byzlog/byzlog/services/lab/chaos"
	"github.com/byzlog/byzlog/services/lab/tamper"
)

type chaosOptions struct {
	nemeses  []string
	phase    chaos.Phase
	load     chaos.Workload
	basePort int
	out      string
	keep     bool
	noVerify bool
	// weakNATSSync (--weaken nats-sync) runs NATS with its default sync.
	weakNATSSync bool
	weaken       []string
}

// testClusterPorts ends the help of the commands that start the test
// cluster (chaos, attack): where its processes listen.
const testClusterPorts = `Ports: nodes from --base-port (node i: BASE+100i..+2), NATS BASE+800,
gateways BASE+810..813, their Kafka faces BASE+850..851, indexer BASE+830,
node0's lying RPC proxy BASE+870,
gateway0's lying proxy BASE+875 (the producers' way to gateway0),
peer proxies BASE+1000..1033.`

func newChaosCommand() *cobra.Command {
	o := &chaosOptions{nemeses: []string{"all"}, basePort: 28656,
		phase: chaos.Phase{Duration: 3 * time.Minute, Hold: 8 * time.Second, Gap: 6 * time.Second, Settle: 90 * time.Second, Seed: 1},
		load:  chaos.Workload{Partitions: 4, Producers: 4, Consumers: 2, KafkaProducers: 4, KafkaMembers: 2, TxnProcessors: 2, CompactKeys: 20, Rate: 400, InFlight: 2000}}
	cmd := &cobra.Command{
		Use:   "chaos",
		Short: "Run byzlog under faults and check the history for lost, duplicated, reordered or forged records",
		Long:  chaosHelp(),
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			nemeses, err := chaos.Lookup(o.nemeses)
			if err != nil {
				return err
			}
			if err := o.validate(); err != nil {
				return err
			}
			return runChaos(cmd.Context(), *o, nemeses, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	o.addFlags(cmd.Flags())
	return cmd
}

// chaosHelp is the chaos command's long help, with the nemeses listed.
func chaosHelp() string {
	var names []string
	for _, n := range chaos.Nemeses {
		line := fmt.Sprintf("  %-19s %s", n.Name, n.Doc)
		if n.Open != "" {
			line += " (not in all: " + n.Open + ")"
		}
		names = append(names, line)
	}
	return chaosHelpRun + strings.Join(names, "\n") + chaosHelpOutput
}

// chaosHelpRun is the chaos help before its list of nemeses: what a run
// does and the anomalies it checks for.
const chaosHelpRun = `Start a 4-validator localnet with NATS, 2 gateways and the indexer, then run
each nemesis in --nemeses in turn, each on a fresh topic for --duration:
producers (the SDK and franz-go Kafka producers, idempotent and plain, through
both gateways) write unique values at --rate in all, consumers (the consumer
SDK through NATS, and the members of a Kafka consumer group through the
gateways' Kafka faces, committing offsets asynchronously) read every
partition from its start, and the nemesis injects a fault every --gap, holds
it for --hold and heals it. After the last heal the run waits (up to --settle
each) for the producers' outcomes, for every validator to catch up and for
the consumers to reach the log's end, reads the group's committed offsets and
every validator's log back, and checks the history for Jepsen's anomalies:

  lost                  acknowledged, held by no validator and seen by no
                        consumer (split by where: prefix, middle, postfix)
  unseen                acknowledged and in the log, never delivered to a consumer
  duplicate             one value at two offsets (unknown outcomes included;
                        a plain Kafka producer's retried send may be twice)
  inconsistent-offsets  one offset with two values across validators and
                        consumers, or a receipt naming another offset
  nonmonotonic-poll     a consumer going back within a partition
  poll-skip             a consumer skipping offsets the log holds
  nonmonotonic-send     a producer's later record at an earlier offset (a
                        plain Kafka producer's retried send excepted)
  offset-regression     the group's committed offset, read during the run or
                        at the end, below one whose commit was acknowledged
                        before the read, with no commit of the offset read
                        that may have been applied after it
  forged                a record no producer sent, or under another key
  app-hash-divergence   nodes (or a node's app) disagreeing on an app hash
  replica-divergence    a validator's own log with a hole, a late start or a
                        record where more validators hold another
  double-sign           evidence, committed in the phase's blocks, of a
                        validator signing two votes for one height and round

The txn- nemeses add a transactional pipeline (--txn-processors franz-go
GroupTransactSession processors in one group read the topic at
read_committed and write one output record per input record to a
3-partition topic, committing the input offsets in the same transaction;
every 4th transaction from the 2nd is aborted on purpose). After the load it waits (up to
--settle) for the pipeline to drain, then reads the output whole at
read_committed and read_uncommitted and checks:

  aborted-read          a read_committed reader got a record of an aborted
                        transaction
  torn-read             a transaction partly visible read_committed at the end
  lost-commit           a commit acknowledged, its records or input offsets
                        not committed at the end
  txn-duplicate         an input record with two committed outputs
  txn-nonmonotonic-poll a read_committed reader going back, or passing over a
                        committed record
  unprocessed           an input record with no committed output at the end

Nemeses:
`

// chaosHelpOutput is the chaos help after its list of nemeses: what a run
// prints and writes, and what it needs.
const chaosHelpOutput = `

It prints one table (nemesis, faults, sends, acknowledged, unknown,
availability, longest stall, recovery after the last heal, each anomaly's
count) and exits 1 if any phase found an anomaly or could not run whole.
With --out it writes chaos.json and chaos.txt there. The run directory is
removed at the end unless --keep, or the run failed (its logs stay for
reading).

Producers verify every receipt against the chain (light client from the
cluster's genesis), as the SDK does by default; --no-verify turns that off to
show what a lying gateway then gets acknowledged.

The nemeses crash-app, byzantine-proposer and rolling-restart need byzlog-app-failpoints (the
-tags failpoints build; make chaos builds it) next to this binary.

The validators reach each other through loopback TCP proxies run by this
command (one per ordered pair, BASE+1000+10i+j), which the partition nemeses
cut: a network partition without network namespaces or firewall rules.

` + testClusterPorts

func (o *chaosOptions) addFlags(f *pflag.FlagSet) {
	f.StringSliceVar(&o.nemeses, "nemeses", o.nemeses, "nemeses to run, in order (all, or names from the list above; -name leaves one out: all,-txn-pause)")
	f.DurationVar(&o.phase.Duration, "duration", o.phase.Duration, "load and faults per nemesis")
	f.DurationVar(&o.phase.Hold, "hold", o.phase.Hold, "how long each fault lasts")
	f.DurationVar(&o.phase.Gap, "gap", o.phase.Gap, "time between a heal and the next fault")
	f.DurationVar(&o.phase.Settle, "settle", o.phase.Settle, "bound of each wait after the faults (outcomes, catch-up, consumers)")
	f.DurationVar(&o.phase.KafkaSettle, "kafka-settle", 0, "bound of the wait for the Kafka producers' outcomes after the load (0: --settle); a send unanswered then is of unknown outcome")
	f.Uint64Var(&o.phase.Seed, "seed", o.phase.Seed, "seed of the nemeses' random choices")
	f.IntVar(&o.load.Producers, "producers", o.load.Producers, "SDK producers, each with its own key")
	f.IntVar(&o.load.Consumers, "consumers", o.load.Consumers, "consumers reading every partition through NATS")
	f.IntVar(&o.load.KafkaProducers, "kafka-producers", o.load.KafkaProducers, "franz-go producers through the gateways' Kafka faces, idempotent and plain in turn (the Kafka-only nemeses' producers)")
	f.IntVar(&o.load.KafkaMembers, "kafka-members", o.load.KafkaMembers, "members of the Kafka consumer group, committing asynchronously")
	f.IntVar(&o.load.TxnProcessors, "txn-processors", o.load.TxnProcessors, "transactional processors of the txn- nemeses' pipeline, in one consumer group")
	f.IntVar(&o.load.Rate, "rate", o.load.Rate, "records/s offered over all producers (SDK and Kafka)")
	f.IntVar(&o.load.InFlight, "in-flight", o.load.InFlight, "unresolved records per producer before it waits")
	f.Uint32Var(&o.load.Partitions, "partitions", o.load.Partitions, "partitions of each phase's topic")
	f.IntVar(&o.basePort, "base-port", o.basePort, "first port of the run's processes (see above)")
	f.StringVar(&o.out, "out", "", "directory for chaos.json and chaos.txt")
	f.BoolVar(&o.keep, "keep", false, "keep the run directory (data and logs) when the run passes")
	f.BoolVar(&o.noVerify, "no-verify", false, "producers take receipts on the gateway's word (client.TrustGateway): shows what lying-gateway finds without receipt verification")
	f.StringSliceVar(&o.weaken, "weaken", nil, "run on a deliberately weakened configuration to show a nemesis bites: nats-sync (NATS syncs its store every 2 minutes, its default, instead of at every write)")
}

func (o *chaosOptions) validate() error {
	for _, w := range o.weaken {
		switch w {
		case "nats-sync":
			o.weakNATSSync = true
		default:
			return fmt.Errorf("--weaken %s: want nats-sync", w)
		}
	}
	switch {
	case o.phase.Duration < time.Second:
		return fmt.Errorf("--duration %s: want at least 1s", o.phase.Duration)
	case o.phase.Hold <= 0 || o.phase.Gap <= 0:
		return fmt.Errorf("--hold %s and --gap %s must be positive", o.phase.Hold, o.phase.Gap)
	case o.phase.Settle < 10*time.Second:
		return fmt.Errorf("--settle %s: want at least 10s (a restarted node needs a few to catch up)", o.phase.Settle)
	case o.phase.KafkaSettle < 0 || o.phase.KafkaSettle > o.phase.Settle:
		return fmt.Errorf("--kafka-settle %s: want 0 (--settle) up to --settle %s", o.phase.KafkaSettle, o.phase.Settle)
	case o.load.Producers < 0 || o.load.KafkaProducers < 0 || o.load.Producers+o.load.KafkaProducers < 1 ||
		o.load.Consumers < 0 || o.load.KafkaMembers < 0 || o.load.Rate < o.load.Producers+o.load.KafkaProducers:
		return fmt.Errorf("--producers %d, --kafka-producers %d, --consumers %d, --kafka-members %d, --rate %d: want a producer or more, no negative count and a rate of at least 1 record/s per producer",
			o.load.Producers, o.load.KafkaProducers, o.load.Consumers, o.load.KafkaMembers, o.load.Rate)
	case o.load.InFlight < 1:
		return fmt.Errorf("--in-flight %d: want at least 1", o.load.InFlight)
	case o.load.Partitions < 1 || o.load.Partitions > 64:
		return fmt.Errorf("--partitions %d: want 1..64", o.load.Partitions)
	case o.basePort < 1024 || o.basePort+1100 > 65000:
		return fmt.Errorf("--base-port %d: want 1024..63900", o.basePort)
	}
	return nil
}

func runChaos(ctx context.Context, o chaosOptions, nemeses []chaos.Nemesis, out, progress io.Writer) (err error) {
	for _, n := range nemeses {
		if _, serr := os.Stat(localnet.FindBinary(localnet.BinDir(), "byzlog-app-failpoints")); n.NeedsFailpoints && serr != nil {
			return fmt.Errorf("nemesis %s needs byzlog-app-failpoints next to byzlog (build it with `go build -tags failpoints -o bin/byzlog-app-failpoints ./services/byzlog-app`, or run `make chaos`): %v", n.Name, serr)
		}
		if n.Kafka && o.load.KafkaProducers < 1 {
			return fmt.Errorf("nemesis %s runs Kafka clients alone: --kafka-producers %d, want 1 or more", n.Name, o.load.KafkaProducers)
		}
		if n.Txn && o.load.TxnProcessors < 1 {
			return fmt.Errorf("nemesis %s runs the transactional pipeline: --txn-processors %d, want 1 or more", n.Name, o.load.TxnProcessors)
		}
	}
	disks := false
	for _, n := range nemeses {
		disks = disks || n.NeedsDisks
	}
	tc, err := startTestCluster(ctx, "chaos", o.basePort, clusterOptions{disks: disks, natsLazySync: o.weakNATSSync}, progress)
	if err != nil {
		return err
	}
	defer func() { tc.close(err == nil && !o.keep, progress) }()
	c := tc.c
	c.Unverified = o.noVerify

	var rows []chaos.Row
	for i, nem := range nemeses {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		fmt.Fprintf(progress, "[%d/%d] %s for %s: %s\n", i+1, len(nemeses), nem.Name, o.phase.Duration, nem.Doc)
		w := o.load
		if nem.Kafka {
			w = w.KafkaOnly()
		}
		if !nem.Txn {
			w.TxnProcessors = 0
		}
		w.Topic = fmt.Sprintf("chaos-%d-%s", i, nem.Name)
		ph := o.phase
		ph.Nemesis, ph.Seed = nem, o.phase.Seed+uint64(i)
		row, perr := chaos.RunPhase(ctx, c, w, ph, progress)
		if perr != nil {
			row.Errors = append(row.Errors, perr.Error())
		}
		rows = append(rows, row)
		verdict := "ok"
		if !row.Safe() {
			verdict = "ANOMALIES"
		}
		fmt.Fprintf(progress, "[%d/%d] %s: %d faults, %d of %d sends acknowledged, %s\n", i+1, len(nemeses), nem.Name, row.Faults, row.Report.Acked, row.Report.Sends, verdict)
	}
	if err := chaos.WriteTable(out, rows); err != nil {
		return err
	}
	if o.out != "" {
		if werr := writeRows(o.out, "chaos", rows, func(w io.Writer) error { return chaos.WriteTable(w, rows) }); werr != nil {
			return werr
		}
	}
	var unsafe []string
	for _, r := range rows {
		if !r.Safe() {
			unsafe = append(unsafe, r.Nemesis)
			// Last, where a log's tail (CI keeps only the end) shows it:
			// what went wrong under each nemesis that found something.
			fmt.Fprintf(progress, "UNSAFE %s: %s%s\n", r.Nemesis, strings.TrimSpace(r.Report.Summary()), strings.Join(append([]string{""}, r.Errors...), "\n  error: "))
		}
	}
	if len(unsafe) > 0 {
		return fmt.Errorf("%w under %s (see above)", chaos.ErrUnsafe, strings.Join(unsafe, ", "))
	}
	return nil
}

// testCluster is the cluster `byzlog-lab chaos` and `byzlog-lab attack` run on: a
// 4-validator localnet whose validators reach each other through loopback
// proxies (partitions cut them), NATS, 2 gateways and the indexer, and a
// lying RPC proxy in front of node0 for gateway0 and the indexer. With
// disks, the validators' homes and the JetStream store are on powerfs (the
// power nemeses), backed under the run's power/ directory.
type testCluster struct {
	dir     string
	c       *chaos.Cluster
	links   *localnet.Links
	proxy   *tamper.Proxy
	gwProxy *tamper.GatewayProxy
}

// startTestCluster creates and starts a test cluster in a fresh temporary
// directory (byzlog-NAME-*) from basePort on. On failure it stops what it
// started.
// clusterOptions are what a test cluster may differ in.
type clusterOptions struct {
	// disks mounts every validator's data and the NATS store on powerfs.
	disks bool
	// natsLazySync runs NATS with its default sync (weakened, --weaken).
	natsLazySync bool
}

func startTestCluster(ctx context.Context, name string, basePort int, co clusterOptions, progress io.Writer) (tc *testCluster, err error) {
	bin := localnet.BinDir()
	dir, err := os.MkdirTemp("", "byzlog-"+name+"-")
	if err != nil {
		return nil, err
	}
	tc = &testCluster{dir: dir}
	defer func() {
		if err != nil {
			tc.close(false, progress)
		}
	}()
	cfg := localnet.Default()
	cfg.Dir, cfg.BasePort, cfg.ChainID = filepath.Join(dir, "cluster"), basePort, "byzlog-"+name
	cfg.CometBFT, cfg.App = localnet.FindBinary(bin, "cometbft"), localnet.FindBinary(bin, "byzlog-app")
	cfg.PeerProxies = true // validators reach each other through Links, which partitions cut
	n, err := localnet.Open(cfg)
	if err != nil {
		return tc, err
	}
	if tc.links, err = localnet.StartLinks(cfg); err != nil {
		return tc, err
	}
	svc := localnet.Services{NATSPort: basePort + 800, Gateways: 2, GatewayPort: basePort + 810, IndexerPort: basePort + 830,
		NATS: localnet.FindBinary(bin, "nats-server"), Gateway: localnet.FindBinary(bin, "byzlog-gateway"), Indexer: localnet.FindBinary(bin, "byzlog-indexer"),
		KafkaPort: basePort + 850, ProxiedRPC: map[int]int{0: basePort + 870}, MutualTLS: true, NATSLazySync: co.natsLazySync}
	// gateway0 and the indexer reach node0 through a proxy that lies on
	// demand (tamper-rpc, huge-rpc); it tells the truth otherwise.
	rpcClient, err := n.RPCHTTPClient(0)
	if err != nil {
		return tc, err
	}
	rpcTLS, err := n.NodeServerTLS()
	if err != nil {
		return tc, err
	}
	if tc.proxy, err = tamper.Start(fmt.Sprintf("127.0.0.1:%d", basePort+870), n.Config().RPCAddr(0), rpcClient, rpcTLS); err != nil {
		return tc, err
	}
	// The producers reach gateway0 through a gateway that lies on demand
	// (lying-gateway); it relays the truth otherwise.
	serveTLS, err := n.GatewayServerTLS(svc)
	if err != nil {
		return tc, err
	}
	dialTLS, err := n.ClientTLS(svc)
	if err != nil {
		return tc, err
	}
	if tc.gwProxy, err = tamper.StartGateway(fmt.Sprintf("127.0.0.1:%d", basePort+875), svc.GatewayAddr(0), serveTLS, dialTLS); err != nil {
		return tc, err
	}
	tc.c = &chaos.Cluster{Net: n, Services: svc, FailpointApp: localnet.FindBinary(bin, "byzlog-app-failpoints"), Links: tc.links, Tamper: tc.proxy, GatewayProxy: tc.gwProxy}
	if co.disks {
		if err := n.Create(ctx); err != nil {
			return tc, err
		}
		if tc.c.Disks, err = chaos.MountDisks(n, filepath.Join(dir, "power")); err != nil {
			return tc, err
		}
	}
	fmt.Fprintf(progress, "starting a 4-validator localnet, NATS, 2 gateways and the indexer in %s\n", dir)
	if err := localnet.StartAll(ctx, n, svc, progress); err != nil {
		return tc, err
	}
	if tc.c.AdminKey, err = n.AdminKey(); err != nil {
		return tc, err
	}
	return tc, nil
}

// close stops every process of the cluster, then its proxies, and removes
// its directory when remove (else it says where the data and logs stay).
func (tc *testCluster) close(remove bool, progress io.Writer) {
	if c := tc.c; c != nil {
		// A paused process ignores SIGTERM until continued.
		for i := 0; i < c.Net.Config().Validators; i++ {
			_ = c.Net.Resume(c.Services, localnet.CometBFTName(i))
			_ = c.Net.Resume(c.Services, localnet.AppName(i))
		}
		_ = c.Net.Down(io.Discard)
		if err := c.Disks.Unmount(); err != nil {
			fmt.Fprintf(progress, "unmounting the powerfs disks: %v\n", err)
		}
	}
	if tc.proxy != nil {
		_ = tc.proxy.Close()
	}
	if tc.gwProxy != nil {
		_ = tc.gwProxy.Close()
	}
	if tc.links != nil {
		tc.links.Close()
	}
	if remove {
		_ = os.RemoveAll(tc.dir)
	} else {
		fmt.Fprintf(progress, "the run's data and logs stay in %s\n", tc.dir)
	}
}
