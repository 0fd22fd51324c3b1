package chaos

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/byzlog/byzlog/abciapp/failpoint"
	"github.com/byzlog/byzlog/gateway/client"
	"github.com/byzlog/byzlog/services/internal/localnet"
	"github.com/byzlog/byzlog/services/lab/tamper"
)

// Cluster is the running system a nemesis acts on: a localnet, its
// services, and the failpoints build of byzlog-app for the nemeses that
// need one.
type Cluster struct {
	Net          *localnet.Net
	Services     localnet.Services
	FailpointApp string
	AdminKey     ed25519.PrivateKey
	// Links cuts the validators' p2p links (a network created with
	// PeerProxies); nil leaves the partition nemeses out.
	Links *localnet.Links
	// Tamper is a lying RPC proxy in front of one node, which gateway0 and
	// the indexer use for that node; nil leaves tamper-rpc out.
	Tamper *tamper.Proxy
	// GatewayProxy is a lying gateway in front of gateway0, which the
	// producers use in its place; nil leaves lying-gateway out.
	GatewayProxy *tamper.GatewayProxy
	// Disks are the validators' and NATS's power-loss file systems; nil
	// leaves the power nemeses out.
	Disks Disks
	// Unverified makes the producers take receipts on the gateway's word
	// (client.TrustGateway): what the lying nemeses find without the
	// verification that stops them.
	Unverified bool

	topic     string            // the running phase's topic
	notes     []string          // what the running phase's faults observed
	snapshots map[string][]byte // corrupt-one: files at the phase's start
}

func (c *Cluster) note(s string) { c.notes = append(c.notes, s) }

// Trust is the clients' root of trust: the cluster's genesis, so every
// receipt the workload counts as acknowledged was verified against the
// chain, whatever a gateway said.
func (c *Cluster) Trust() (client.Trust, error) {
	t, err := client.TrustGenesis(c.Net.GenesisPath())
	if err != nil || !c.Unverified {
		return t, err
	}
	return client.TrustGateway(t.ChainID()), nil
}

// Transport is how clients reach the gateways (and the lying proxy):
// TLS with the network's CA unless the services are insecure.
func (c *Cluster) Transport() (client.Option, error) { return c.Net.ProducerTransport(c.Services) }

// producerGateway is the address producers use for gateway g: gateway0's
// lying proxy when there is one.
func (c *Cluster) producerGateway(g int) string {
	if g == 0 && c.GatewayProxy != nil {
		return c.GatewayProxy.Addr()
	}
	return c.Services.GatewayAddr(g)
}

func (c *Cluster) validators() int { return c.Net.Config().Validators }

// Nemesis injects one kind of fault, round after round. Inject starts
// fault number round and returns what undoes it, and a word on what it
// did ("node2", "node0 forged").
type Nemesis struct {
	Name string
	Doc  string
	// NeedsFailpoints: the nemesis restarts apps with the failpoints build.
	NeedsFailpoints bool
	// NeedsLinks: the nemesis cuts p2p links (Cluster.Links).
	NeedsLinks bool
	// NeedsDisks: the nemesis cuts power (Cluster.Disks).
	NeedsDisks bool
	// Open names the issue a nemesis still finds anomalies for: "all"
	// leaves it out until that is fixed; it runs when named.
	Open string
	// Kafka: the phase's workload is franz-go's alone, through the
	// gateways' Kafka faces (Workload.KafkaOnly).
	Kafka bool
	// Txn: the phase's workload adds the transactional pipeline
	// (Workload.TxnProcessors, txn.go); with Kafka, its only consumers.
	Txn    bool
	Inject func(ctx context.Context, c *Cluster, round int, rng *rand.Rand) (what string, heal func(context.Context) error, err error)
}

// Nemeses lists every nemesis, in the order `byzlog-lab chaos` runs them.
var Nemeses = []Nemesis{
	{
		Name: "kill-node", Doc: "kill -9 a validator's cometbft and byzlog-app together, one validator at a time in turn; restart both",
		Inject: func(ctx context.Context, c *Cluster, round int, _ *rand.Rand) (string, func(context.Context) error, error) {
			i := round % c.validators()
			if err := c.Net.KillNode(i); err != nil {
				return "", nil, err
			}
			return fmt.Sprintf("node%d", i), func(ctx context.Context) error { return c.Net.StartNode(ctx, i) }, nil
		},
	},
	{
		Name: "kill-cometbft", Doc: "kill -9 a validator's cometbft alone (its app keeps running); restart it",
		Inject: func(ctx context.Context, c *Cluster, round int, _ *rand.Rand) (string, func(context.Context) error, error) {
			i := round % c.validators()
			name := localnet.CometBFTName(i)
			if err := c.Net.Kill(c.Services, name); err != nil {
				return "", nil, err
			}
			return name, func(ctx context.Context) error { return c.Net.Start(ctx, c.Services, name) }, nil
		},
	},
	{
		Name: "kill-app", Doc: "kill -9 a validator's byzlog-app alone; its cometbft cannot go on without it, so the heal restarts the node",
		Inject: func(ctx context.Context, c *Cluster, round int, _ *rand.Rand) (string, func(context.Context) error, error) {
			i := round % c.validators()
			if err := c.Net.Kill(c.Services, localnet.AppName(i)); err != nil {
				return "", nil, err
			}
			return localnet.AppName(i), restartNode(c, i), nil
		},
	},
	{
		Name: "pause-proposer", Doc: "SIGSTOP both processes of the validator proposing the current round; SIGCONT them",
		Inject: func(ctx context.Context, c *Cluster, round int, rng *rand.Rand) (string, func(context.Context) error, error) {
			i, err := proposer(ctx, c)
			if err != nil {
				i = rng.IntN(c.validators())
			}
			return pauseNode(c, i)
		},
	},
	{
		Name: "pause-random", Doc: "SIGSTOP both processes of a random validator; SIGCONT them",
		Inject: func(ctx context.Context, c *Cluster, round int, rng *rand.Rand) (string, func(context.Context) error, error) {
			return pauseNode(c, rng.IntN(c.validators()))
		},
	},
	{
		Name: "partition-one", Doc: "cut one validator's p2p links to all others, each validator in turn (loopback proxies); heal",
		NeedsLinks: true,
		Inject: func(ctx context.Context, c *Cluster, round int, _ *rand.Rand) (string, func(context.Context) error, error) {
			i := round % c.validators()
			var rest []int
			for j := 0; j < c.validators(); j++ {
				if j != i {
					rest = append(rest, j)
				}
			}
			c.Links.Partition([]int{i}, rest)
			return fmt.Sprintf("node%d|%v", i, rest), func(context.Context) error { c.Links.Heal(); return nil }, nil
		},
	},
	{
		Name: "partition-halves", Doc: "split the validators 2|2 (pairs in turn): no side has a quorum, so nothing may commit until the heal",
		NeedsLinks: true,
		Inject:     partitionHalves,
	},
	{
		Name: "crash-app", Doc: "restart a validator with a failpoints app that crashes itself (SIGKILL) at finalize-start, commit-before-write or commit-after-write a few blocks on, in turn; restart it clean",
		NeedsFailpoints: true,
		Inject: func(ctx context.Context, c *Cluster, round int, _ *rand.Rand) (string, func(context.Context) error, error) {
			i := round % c.validators()
			points := []string{failpoint.FinalizeStart, failpoint.CommitBeforeWrite, failpoint.CommitAfterWrite}
			point := points[round%len(points)]
			st := c.Net.Status(ctx)
			at := st[i].Committed() + 3
			if err := c.Net.KillNode(i); err != nil {
				return "", nil, err
			}
			env := []string{fmt.Sprintf("%s=%s@%d", failpoint.EnvVar, point, at)}
			if err := c.Net.StartApp(ctx, i, c.FailpointApp, env); err != nil {
				return "", nil, err
			}
			if err := c.Net.Start(ctx, c.Services, localnet.CometBFTName(i)); err != nil {
				return "", nil, err
			}
			return fmt.Sprintf("node%d %s@%d", i, point, at), restartNode(c, i), nil
		},
	},
	{
		Name: "wrong-app-hash", Doc: "restart a validator with a failpoints app that answers a wrong app hash a few blocks on: it must halt while the others go on; then rebuild it from its peers (cometbft reset-state, a fresh app, the signing state raised past the tip)",
		NeedsFailpoints: true,
		Inject: func(ctx context.Context, c *Cluster, round int, _ *rand.Rand) (string, func(context.Context) error, error) {
			i := round % c.validators()
			at := maxCommitted(ctx, c) + 3
			if err := c.Net.KillNode(i); err != nil {
				return "", nil, err
			}
			env := []string{fmt.Sprintf("%s=%s@%d", failpoint.EnvVar, failpoint.WrongAppHash, at)}
			if err := c.Net.StartNodeWith(ctx, i, c.FailpointApp, env); err != nil {
				return "", nil, err
			}
			return fmt.Sprintf("node%d lies at %d", i, at), func(ctx context.Context) error { return rebuildLiar(ctx, c, i, at) }, nil
		},
	},
	{
		Name: "tamper-rpc", Doc: "the RPC proxy in front of node0 (gateway0's first node, the indexer's light-client primary) forges headers, alters transactions and results, or withholds blocks, in turn; then tells the truth",
		Inject: proxyLies("tamper-rpc", tamper.Modes),
	},
	{
		Name: "lying-node", Doc: "the RPC proxy in front of node0 lies to gateway0 in what it answers directly, in turn: drops bundles and answers that every batch is a committed duplicate, claims a height a million blocks ahead, answers producer queries with sequence 0, refuses bundles as badly signed; then tells the truth",
		Inject: proxyLies("lying-node", tamper.LiarModes),
	},
	{
		Name: "lying-gateway", Doc: "gateway0 (through a lying proxy) lies to its producers, in turn: invents receipts for batches it drops, moves a receipt's offsets, answers batches as duplicates of another's write, replays others' batches; then tells the truth (a verifying producer leaves a gateway whose receipt does not check, so later rounds see less of its traffic)",
		Inject: lyingGateway,
	},
	{
		Name: "kill-gateway", Doc: "kill -9 a gateway, each in turn; restart it",
		Inject: func(ctx context.Context, c *Cluster, round int, _ *rand.Rand) (string, func(context.Context) error, error) {
			return killService(ctx, c, localnet.GatewayName(round%c.Services.Gateways))
		},
	},
	{
		Name: "kafka-kill", Doc: "Kafka clients alone (franz-go idempotent and plain producers and a consumer group committing asynchronously, through the gateways' Kafka faces), without the SDK and NATS: kill -9 a gateway and a validator together, each in turn; restart both",
		Kafka:  true,
		Inject: killGatewayAndNode,
	},
	{
		Name: "txn-kill", Doc: "the transactional pipeline (franz-go GroupTransactSession processors reading the Kafka producers' topic at read_committed and writing each record's output to a 3-partition topic exactly once, every 4th transaction from the 2nd aborted on purpose; verifiers at read_committed and read_uncommitted) beside the kafka-kill clients: kill -9 a gateway and a validator together, each in turn; restart both",
		Kafka: true, Txn: true,
		Inject: killGatewayAndNode,
	},
	{
		Name: "txn-pause", Doc: "the transactional pipeline (see txn-kill): SIGSTOP both processes of a random validator; SIGCONT them",
		Kafka: true, Txn: true,
		Inject: func(ctx context.Context, c *Cluster, round int, rng *rand.Rand) (string, func(context.Context) error, error) {
			return pauseNode(c, rng.IntN(c.validators()))
		},
	},
	{
		Name: "txn-lying-node", Doc: "the transactional pipeline (see txn-kill): the RPC proxy in front of node0 lies to gateway0, whose Kafka face serves half the clients, as in lying-node, in turn; then tells the truth",
		Kafka: true, Txn: true,
		Inject: proxyLies("txn-lying-node", tamper.LiarModes),
	},
	{
		Name: "txn-partition", Doc: "the transactional pipeline (see txn-kill): split the validators 2|2 as in partition-halves, so no transaction can end until the heal",
		Kafka: true, Txn: true, NeedsLinks: true,
		Inject: partitionHalves,
	},
	{
		Name: "txn-power", Doc: "the transactional pipeline (see txn-kill): cut a validator's power as in power-one (unsynced writes dropped), one validator at a time in turn",
		Kafka: true, Txn: true, NeedsDisks: true,
		Inject: powerOne,
	},
	{
		Name: "txn-lying-gateway", Doc: "the transactional pipeline (see txn-kill) over the whole workload (SDK producers and consumers beside the Kafka clients): gateway0 lies to its SDK producers as in lying-gateway, so the pipeline's input is written through a liar",
		Txn:    true,
		Inject: lyingGateway,
	},
	{
		Name: "kill-indexer", Doc: "kill -9 the indexer; restart it (it resumes from its cursor)",
		Inject: func(ctx context.Context, c *Cluster, round int, _ *rand.Rand) (string, func(context.Context) error, error) {
			return killService(ctx, c, localnet.IndexerName)
		},
	},
	{
		Name: "kill-nats", Doc: "kill -9 nats-server; restart it on its JetStream store",
		Inject: func(ctx context.Context, c *Cluster, round int, _ *rand.Rand) (string, func(context.Context) error, error) {
			return killService(ctx, c, localnet.NATSName)
		},
	},
	{
		Name: "power-one", Doc: "cut a validator's power: kill -9 its cometbft and app and drop every write they had not fsynced (powerfs); restart both, one validator at a time in turn",
		NeedsDisks: true,
		Inject:     powerOne,
	},
	{
		Name: "power-all", Doc: "cut every validator's power at the same instant: kill -9 all, drop every unsynced write everywhere; restart them",
		NeedsDisks: true,
		Inject: func(ctx context.Context, c *Cluster, round int, _ *rand.Rand) (string, func(context.Context) error, error) {
			return powerFail(ctx, c, c.allNodes())
		},
	},
	{
		Name: "power-paused", Doc: "pause a validator, cut another's power (kill -9, unsynced writes dropped): no quorum; restart the power-failed one, so the quorum that commits next includes it, then resume the paused one; pairs in turn",
		NeedsDisks: true,
		Inject: func(ctx context.Context, c *Cluster, round int, _ *rand.Rand) (string, func(context.Context) error, error) {
			n := c.validators()
			i, j := round%n, (round+1)%n
			paused, resume, err := pauseNode(c, j)
			if err != nil {
				return "", nil, err
			}
			failed, restart, err := powerFail(ctx, c, []int{i})
			if err != nil {
				_ = resume(ctx)
				return "", nil, err
			}
			return failed + " while " + paused + " is paused", func(ctx context.Context) error {
				if err := restart(ctx); err != nil {
					_ = resume(ctx)
					return err
				}
				// The next quorum is the power-failed node and two others.
				sleep(ctx, 3*time.Second)
				return resume(ctx)
			}, nil
		},
	},
	{
		Name: "corrupt-one", Doc: "stop node3 and damage one of its files (CometBFT's WAL, block store, state, signing state; the app's RocksDB tables, WAL, MANIFEST, CURRENT, in turn) by a bit flip, a truncated tail, a 4 KB chunk rolled back or zeroed, or deletion (file and damage each in turn); start it: it must converge or halt, and is rebuilt from its peers if it halts",
		Inject: func(ctx context.Context, c *Cluster, round int, _ *rand.Rand) (string, func(context.Context) error, error) {
			return corruptOne(ctx, c, round)
		},
	},
	{
		Name: "power-nats", Doc: "cut nats-server's power: kill -9 it and drop the JetStream store's unsynced writes; restart it",
		NeedsDisks: true,
		Inject: func(ctx context.Context, c *Cluster, _ int, _ *rand.Rand) (string, func(context.Context) error, error) {
			return powerNATS(ctx, c)
		},
	},
	{
		Name: "byzantine-proposer", Doc: "restart a validator with a failpoints app whose proposals carry a forged, replayed, oversized or unknown-topic batch (in turn); honest validators must reject them; restart it clean",
		NeedsFailpoints: true,
		Inject: func(ctx context.Context, c *Cluster, round int, _ *rand.Rand) (string, func(context.Context) error, error) {
			i := round % c.validators()
			kinds := []string{"forged", "replay", "oversized", "unknown-topic"}
			kind := kinds[round%len(kinds)]
			if err := c.Net.KillNode(i); err != nil {
				return "", nil, err
			}
			env := []string{fmt.Sprintf("%s=%s=%s:%s", failpoint.EnvVar, failpoint.ByzantineProposer, kind, c.topic)}
			if err := c.Net.StartNodeWith(ctx, i, c.FailpointApp, env); err != nil {
				return "", nil, err
			}
			return fmt.Sprintf("node%d %s", i, kind), func(ctx context.Context) error {
				if err := c.Net.KillRest(i); err != nil {
					return err
				}
				return c.Net.StartNode(ctx, i)
			}, nil
		},
	},
	{
		Name: "bundle-liar", Doc: "restart a validator with a failpoints app that lies about the bundles blocks reference (rules version 3), in turn: it never gossips the large bundles it receives, so its peers must fetch what it proposes from it; or it answers every /bundles query with corrupted bytes, which fetching validators, gateways and the indexer must refuse and get elsewhere; restart it clean",
		NeedsFailpoints: true,
		Inject: func(ctx context.Context, c *Cluster, round int, _ *rand.Rand) (string, func(context.Context) error, error) {
			i := (round + 1) % c.validators()
			mode := []string{"withhold", "corrupt"}[round%2]
			if err := c.Net.KillNode(i); err != nil {
				return "", nil, err
			}
			env := []string{fmt.Sprintf("%s=%s=%s", failpoint.EnvVar, failpoint.BundleLiar, mode)}
			if err := c.Net.StartNodeWith(ctx, i, c.FailpointApp, env); err != nil {
				return "", nil, err
			}
			return fmt.Sprintf("node%d %s", i, mode), func(ctx context.Context) error {
				if err := c.Net.KillRest(i); err != nil {
					return err
				}
				return c.Net.StartNode(ctx, i)
			}, nil
		},
	},
	{
		Name: "statesync-one", Doc: "stop a validator (in turn), wipe it (cometbft reset-state, the app's state and snapshots; the signing state raised past the tip) and start it with [statesync]: it must restore a snapshot its app checks against the light-client-verified app hash, not replay from height 1, and catch up",
		Inject: func(ctx context.Context, c *Cluster, round int, _ *rand.Rand) (string, func(context.Context) error, error) {
			return stateSyncOne(ctx, c, round%c.validators())
		},
	},
	{
		Name: "join-validator", Doc: "add a fifth node that joins by state sync under load (it must restore a snapshot), make it a validator (SetValidator, a quarter of the set's power), then remove it (power 0) and stop it; each round a new join from a wiped node",
		Inject: func(ctx context.Context, c *Cluster, round int, _ *rand.Rand) (string, func(context.Context) error, error) {
			return joinValidator(ctx, c)
		},
	},
	{
		Name: "rolling-restart", Doc: "restart every validator one by one, each on the other byzlog-app binary than it ran (the failpoints build without failpoints, then the release build, in turn), each caught up before the next: a binary replaced validator by validator under load",
		NeedsFailpoints: true,
		Inject: func(ctx context.Context, c *Cluster, round int, _ *rand.Rand) (string, func(context.Context) error, error) {
			bin := c.FailpointApp
			if round%2 == 1 {
				bin = c.Net.Config().App
			}
			for i := 0; i < c.validators(); i++ {
				if err := restartCaughtUp(ctx, c, i, bin); err != nil {
					return "", nil, err
				}
			}
			return filepath.Base(bin), func(context.Context) error { return nil }, nil
		},
	},
	{
		// Last: pruned blocks stay gone, and the nemeses that rebuild a
		// node from its peers' blocks cannot run after it.
		Name: "prune-indexer", Doc: "restart every validator one by one with --retain-blocks 100 --snapshot-keep 1 (once); kill -9 the indexer and let the chain move on until its last report alone holds every node's pruning back: every node must keep each block the indexer has not reported published; restart it (it resumes from the root it saved, height 1 being pruned)",
		Inject: func(ctx context.Context, c *Cluster, round int, _ *rand.Rand) (string, func(context.Context) error, error) {
			return pruneIndexer(ctx, c)
		},
	},
}

// Lookup finds nemeses by name ("all" is every one without an open
// finding); a name with a leading "-" leaves that nemesis out of what the
// names before and after it choose ("all,-txn-pause").
func Lookup(names []string) ([]Nemesis, error) {
	var out []Nemesis
	var without []string
	for _, name := range names {
		if rest, ok := strings.CutPrefix(name, "-"); ok {
			if rest == "all" {
				return nil, errors.New(`nemesis "-all" leaves every nemesis out: name the ones to run`)
			}
			without = append(without, rest)
			name = rest
		}
		if name == "all" {
			for _, n := range Nemeses {
				if n.Open == "" {
					out = append(out, n)
				}
			}
			continue
		}
		found := false
		for _, n := range Nemeses {
			if n.Name == name {
				found = true
				if !slices.Contains(without, name) {
					out = append(out, n)
				}
			}
		}
		if !found {
			var known []string
			for _, n := range Nemeses {
				known = append(known, n.Name)
			}
			return nil, fmt.Errorf("unknown nemesis %q: choose from all, %s (a leading - leaves one out)", name, strings.Join(known, ", "))
		}
	}
	out = slices.DeleteFunc(out, func(n Nemesis) bool { return slices.Contains(without, n.Name) })
	if len(out) == 0 {
		return nil, fmt.Errorf("the nemeses %s leave none to run", strings.Join(names, ","))
	}
	return out, nil
}

// partitionHalves splits the validators 2|2, pairs in turn; the heal
// fails if a side without a quorum committed.
func partitionHalves(ctx context.Context, c *Cluster, round int, _ *rand.Rand) (string, func(context.Context) error, error) {
	if c.validators() != 4 {
		return "", nil, fmt.Errorf("partition-halves needs 4 validators, the network has %d", c.validators())
	}
	splits := [][2][]int{{{0, 1}, {2, 3}}, {{0, 2}, {1, 3}}, {{0, 3}, {1, 2}}}
	split := splits[round%len(splits)]
	before := maxCommitted(ctx, c)
	c.Links.Partition(split[0], split[1])
	return fmt.Sprintf("%v|%v", split[0], split[1]), func(ctx context.Context) error {
		// One block may have been committing as the links were cut.
		during := maxCommitted(ctx, c)
		c.Links.Heal()
		if during > before+1 {
			return fmt.Errorf("the validators committed heights %d..%d during a 2|2 split: a side without a quorum committed", before+1, during)
		}
		return nil
	}, nil
}

// powerOne cuts validator round's power (modulo their count).
func powerOne(ctx context.Context, c *Cluster, round int, _ *rand.Rand) (string, func(context.Context) error, error) {
	return powerFail(ctx, c, []int{round % c.validators()})
}

// lyingGateway makes gateway0's proxy lie to its producers, a mode a
// round in turn; the heal makes it tell the truth.
func lyingGateway(ctx context.Context, c *Cluster, round int, _ *rand.Rand) (string, func(context.Context) error, error) {
	px := c.GatewayProxy
	if px == nil {
		return "", nil, errors.New("lying-gateway: the cluster has no lying gateway proxy")
	}
	mode := tamper.GatewayModes[round%len(tamper.GatewayModes)]
	before := px.Count(mode)
	px.SetMode(mode)
	return "gateway0 " + mode, func(context.Context) error {
		px.SetMode("")
		c.note(fmt.Sprintf("gateway0 lied %d times (%s)", px.Count(mode)-before, mode))
		return nil
	}, nil
}

// killGatewayAndNode kills gateway and validator round (modulo their
// counts) together; the heal restarts both.
func killGatewayAndNode(ctx context.Context, c *Cluster, round int, _ *rand.Rand) (string, func(context.Context) error, error) {
	gw := localnet.GatewayName(round % c.Services.Gateways)
	if err := c.Net.Kill(c.Services, gw); err != nil {
		return "", nil, err
	}
	i := round % c.validators()
	if err := c.Net.KillNode(i); err != nil {
		return "", nil, err
	}
	return fmt.Sprintf("%s+node%d", gw, i), func(ctx context.Context) error {
		if err := c.Net.StartNode(ctx, i); err != nil {
			return err
		}
		return c.Net.Start(ctx, c.Services, gw)
	}, nil
}

// proxyLies makes node0's RPC proxy tell the lies of modes, one a round,
// until the heal.
func proxyLies(nemesis string, modes []string) func(context.Context, *Cluster, int, *rand.Rand) (string, func(context.Context) error, error) {
	return func(ctx context.Context, c *Cluster, round int, _ *rand.Rand) (string, func(context.Context) error, error) {
		if c.Tamper == nil {
			return "", nil, fmt.Errorf("%s: the cluster has no tampering proxy", nemesis)
		}
		mode := modes[round%len(modes)]
		before := c.Tamper.Count(mode)
		c.Tamper.SetMode(mode)
		return "node0 rpc " + mode, func(context.Context) error {
			c.Tamper.SetMode("")
			c.note(fmt.Sprintf("node0's rpc proxy lied %d times (%s)", c.Tamper.Count(mode)-before, mode))
			return nil
		}, nil
	}
}

// restartNode kills whatever half of node i still runs and starts the
// node again with the normal app.
func restartNode(c *Cluster, i int) func(context.Context) error {
	return func(ctx context.Context) error {
		if err := c.Net.KillRest(i); err != nil {
			return err
		}
		return c.Net.StartNode(ctx, i)
	}
}

func pauseNode(c *Cluster, i int) (string, func(context.Context) error, error) {
	names := []string{localnet.CometBFTName(i), localnet.AppName(i)}
	for _, name := range names {
		if err := c.Net.Pause(c.Services, name); err != nil {
			return "", nil, err
		}
	}
	return fmt.Sprintf("node%d", i), func(context.Context) error {
		var first error
		for _, name := range names {
			if err := c.Net.Resume(c.Services, name); err != nil && first == nil {
				first = err
			}
		}
		return first
	}, nil
}

func killService(ctx context.Context, c *Cluster, name string) (string, func(context.Context) error, error) {
	if err := c.Net.Kill(c.Services, name); err != nil {
		return "", nil, err
	}
	return name, func(ctx context.Context) error { return c.Net.Start(ctx, c.Services, name) }, nil
}

// proposer finds the validator proposing the current round, from a node's
// consensus state and the nodes' validator addresses.
func proposer(ctx context.Context, c *Cluster) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	addrs := map[string]int{}
	var state []byte
	for i := 0; i < c.validators(); i++ {
		cl, err := c.Net.Client(i)
		if err != nil {
			continue
		}
		st, err := cl.Status(ctx)
		if err != nil {
			continue
		}
		addrs[st.ValidatorInfo.Address.String()] = i
		if state == nil {
			if cs, err := cl.ConsensusState(ctx); err == nil {
				state = cs.RoundState
			}
		}
	}
	var rs struct {
		Proposer struct {
			Address string `json:"address"`
		} `json:"proposer"`
	}
	if err := json.Unmarshal(state, &rs); err != nil {
		return 0, fmt.Errorf("consensus state: %w", err)
	}
	i, ok := addrs[rs.Proposer.Address]
	if !ok {
		return 0, fmt.Errorf("proposer %q is no node of this network", rs.Proposer.Address)
	}
	return i, nil
}

// rebuildLiar checks that node i, whose app answered a wrong app hash at
// height at, stopped there while the others committed past it, then wipes
// and restarts it.
func rebuildLiar(ctx context.Context, c *Cluster, i int, at int64) error {
	var liar, honest int64
	for deadline := time.Now().Add(30 * time.Second); ; {
		liar, honest = 0, 0
		for _, st := range c.Net.Status(ctx) {
			if st.Node == i {
				liar = st.Height
			} else {
				honest = max(honest, st.Committed())
			}
		}
		if honest > at+2 || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		sleep(ctx, 250*time.Millisecond)
	}
	if err := c.Net.KillRest(i); err != nil {
		return err
	}
	if err := c.Net.ResetNode(ctx, i); err != nil {
		return err
	}
	if err := c.Net.StartNode(ctx, i); err != nil {
		return err
	}
	// The rebuilt node syncs every block from genesis. Until it is back,
	// the network runs on 3 of 4: the next fault must not start before.
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if err := c.Net.WaitHeight(wctx, []int{i}, maxCommitted(ctx, c), io.Discard); err != nil {
		return fmt.Errorf("node%d, rebuilt after its wrong app hash, did not catch up: %w", i, err)
	}
	switch {
	case honest <= at+2:
		return fmt.Errorf("node%d answered a wrong app hash at %d and the honest validators got no further than %d", i, at, honest)
	case liar > at+1:
		return fmt.Errorf("node%d answered a wrong app hash at %d yet its chain went on to %d: it was not stopped", i, at, liar)
	}
	return nil
}
