package attack

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/byzlog/byzlog/gateway/client"
	"github.com/byzlog/byzlog/indexer/natsauth"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/chain/rpcnode"
	"github.com/byzlog/byzlog/protos/chain/tlsconf"
	"github.com/byzlog/byzlog/protos/wire"
	"github.com/byzlog/byzlog/services/internal/localnet"
	"github.com/byzlog/byzlog/services/lab/chaos"
)

// Config is one attack run's shape.
type Config struct {
	// Duration is each row's honest load; the attack runs for all of it
	// but the first Gap and the last second.
	Duration time.Duration
	// Settle bounds each wait after the load (chaos.Phase.Settle).
	Settle time.Duration
	// Load is the honest workload; its Topic is set per row.
	Load chaos.Workload
	Seed uint64
	// MinRatio is the honest throughput each row must keep, as a share of
	// the no-attack phase's (0.8).
	MinRatio float64
	// Reset restarts every validator and gateway between rows, so what one
	// attack left in a mempool or a queue cannot count against the next.
	// Off by default: the rows then also show that nothing an attack leaves
	// behind hurts what follows (the code before issue 13 needed it on).
	Reset bool
}

// JunkTopic is the attackers' own topic (JunkPartitions partitions): what
// they get committed stays out of the honest history.
const (
	JunkTopic      = "attack-junk"
	JunkPartitions = 1024
)

// SecretTopic is a topic whose config lists one reader, a key nobody
// keeps: what forbidden-reader tries to read.
const SecretTopic = "attack-secret"

// CompactedTopic is compacted (records need a key) and BoundedTopic a
// CreateTime topic that refuses create times more than a minute from the
// block's: what refused-records writes to.
const (
	CompactedTopic = "attack-compacted"
	BoundedTopic   = "attack-bounded"
)

// accessEnv fills what forbidden-reader and foreign-ca need: the secret
// topic's reader, a key no topic lists, NATS's TLS and the consumer's
// password, and a client certificate of another CA.
func accessEnv(c *chaos.Cluster, env *Env, reader ed25519.PrivateKey) error {
	var err error
	if env.SecretReader, err = natsauth.ReaderNkey(reader.Public().(ed25519.PublicKey)); err != nil {
		return err
	}
	if _, env.Stranger, err = ed25519.GenerateKey(nil); err != nil {
		return err
	}
	pw, err := os.ReadFile(c.Net.NATSPasswordFile(localnet.NATSConsumerUser))
	if err != nil {
		return err
	}
	env.NATSPassword = strings.TrimSpace(string(pw))
	if c.Services.Insecure {
		return nil
	}
	env.NATSTLS = []nats.Option{nats.RootCAs(c.Net.TLS().CA())}
	other := tlsconf.Local{Dir: filepath.Join(c.Net.Config().Dir, "foreign-ca")}
	if err := other.Ensure([]string{"127.0.0.1"}, "client"); err != nil {
		return err
	}
	f := other.Party("client")
	f.CA = c.Net.TLS().CA()
	env.Foreign, err = f.Client()
	return err
}

// Run runs the no-attack baseline and then each attack on c, each a chaos
// phase on a fresh topic, and returns one row each, judged against the
// baseline. With cfg.Reset it restarts the validators and the gateways
// between rows, so what one attack left in a mempool or a gateway's queue
// does not carry into the next row.
func Run(ctx context.Context, c *chaos.Cluster, attacks []Attack, cfg Config, progress io.Writer) ([]Row, error) {
	reader, err := createTopics(ctx, c)
	if err != nil {
		return nil, err
	}
	env, err := newEnv(c, reader)
	if env.closeData != nil {
		defer env.closeData()
	}
	if err != nil {
		return nil, err
	}

	all := append([]Attack{Baseline}, attacks...)
	var rows []Row
	for i, a := range all {
		if ctx.Err() != nil {
			return rows, ctx.Err()
		}
		if i > 0 && cfg.Reset {
			if err := reset(ctx, c); err != nil {
				return rows, fmt.Errorf("restart the cluster before %s: %w", a.Name, err)
			}
		}
		fmt.Fprintf(progress, "[%d/%d] %s for %s: %s\n", i+1, len(all), a.Name, cfg.Duration, a.Doc)
		e := env
		e.Topic, e.Seed = fmt.Sprintf("attack-%d-%s", i, a.Name), cfg.Seed+uint64(i)
		row := runRow(ctx, c, a, &e, cfg, progress)
		if i == 0 {
			row.Ratio = 1
		} else if rows[0].Rate > 0 {
			row.Ratio = row.Rate / rows[0].Rate
		}
		base := row
		if i > 0 {
			base = rows[0]
		}
		row.Misses = Evaluate(row, base.Rate, cfg.MinRatio)
		rows = append(rows, row)
		verdict := "ok"
		if len(row.Misses) > 0 {
			verdict = "MISS: " + strings.Join(row.Misses, "; ")
		}
		fmt.Fprintf(progress, "[%d/%d] %s: %d crashes, %.0f honest records/s (%.2f×), p99 %s, %d anomalies: %s\n", i+1, len(all), a.Name,
			row.Crashes(), row.Rate, row.Ratio, row.Chaos.ReceiptP99.Round(time.Millisecond), row.Anomalies(), verdict)
	}
	return rows, nil
}

// createTopics creates the attackers' junk topic and the secret topic,
// whose one reader is a key thrown away at once (returned for the
// attacks that need a reader's key nobody holds).
func createTopics(ctx context.Context, c *chaos.Cluster) (ed25519.PrivateKey, error) {
	trust, err := c.Trust()
	if err != nil {
		return nil, err
	}
	transport, err := c.Transport()
	if err != nil {
		return nil, err
	}
	adm, err := client.NewAdmin(c.Services.GatewayAddr(0), c.AdminKey, trust, transport)
	if err != nil {
		return nil, err
	}
	defer adm.Close()
	_, err = adm.CreateTopic(ctx, JunkTopic, &byzlogv1.TopicConfig{Partitions: JunkPartitions})
	if err != nil {
		return nil, fmt.Errorf("create the attackers' topic %s: %w", JunkTopic, err)
	}
	_, reader, err := ed25519.GenerateKey(nil)
	if err != nil {
		return nil, err
	}
	_, err = adm.CreateTopic(ctx, SecretTopic, &byzlogv1.TopicConfig{Partitions: 1, Readers: [][]byte{reader.Public().(ed25519.PublicKey)}})
	if err != nil {
		return nil, fmt.Errorf("create the secret topic %s: %w", SecretTopic, err)
	}
	for name, cfg := range map[string]*byzlogv1.TopicConfig{
		CompactedTopic: {Partitions: 4, CleanupPolicy: byzlogv1.CleanupPolicy_CLEANUP_COMPACT},
		BoundedTopic:   {Partitions: 4, TimestampBeforeMaxMs: 60_000, TimestampAfterMaxMs: 60_000},
	} {
		if _, err := adm.CreateTopic(ctx, name, cfg); err != nil {
			return nil, fmt.Errorf("create the topic %s: %w", name, err)
		}
	}
	return reader, nil
}

// newEnv is what every attack gets to know about c: its chain, limits,
// nodes, gateways, NATS and the clients to reach them.
func newEnv(c *chaos.Cluster, reader ed25519.PrivateKey) (Env, error) {
	env := Env{ChainID: c.Net.Config().ChainID, Junk: JunkTopic, JunkPartitions: JunkPartitions, Secret: SecretTopic,
		Limits: wire.DefaultLimits(), MaxTxBytes: min(wire.MaxTxBytes, localnet.RPCMaxBodyBytes*3/4-64<<10) - 1<<10, Tamper: c.Tamper}
	for i := 0; i < c.Net.Config().Validators; i++ {
		env.Nodes = append(env.Nodes, c.Net.Config().RPCAddr(i))
	}
	var err error
	if env.RPC, err = c.Net.RPCHTTPClient(15 * time.Second); err != nil {
		return env, err
	}
	if env.TLS, err = c.Net.ClientTLS(c.Services); err != nil {
		return env, err
	}
	if err := dataEnv(c, &env); err != nil {
		return env, err
	}
	env.NATSURL = c.Services.NATSURL()
	if env.NATSOptions, err = c.Net.NATSOptions(c.Services, localnet.NATSConsumerUser); err != nil {
		return env, err
	}
	if err := accessEnv(c, &env, reader); err != nil {
		return env, err
	}
	for g := 0; g < c.Services.Gateways; g++ {
		env.Gateways = append(env.Gateways, c.Services.GatewayAddr(g))
		env.GatewayHTTP = append(env.GatewayHTTP, c.Services.GatewayHTTP(g))
	}
	return env, nil
}

// runRow runs one attack as the nemesis of a chaos phase: it starts once
// (after the phase's first Gap) and is healed a second before the load
// ends; meanwhile a watcher notes every process of the cluster that dies.
func runRow(ctx context.Context, c *chaos.Cluster, a Attack, env *Env, cfg Config, progress io.Writer) Row {
	t := newTally()
	dead := newDeaths()
	var attackErr error
	gap := min(time.Second, cfg.Duration/10)
	nem := chaos.Nemesis{Name: a.Name, Doc: a.Doc,
		Inject: func(ctx context.Context, c *chaos.Cluster, _ int, _ *rand.Rand) (string, func(context.Context) error, error) {
			actx, stop := context.WithCancel(ctx)
			var wg sync.WaitGroup
			wg.Add(2)
			go func() { defer wg.Done(); attackErr = a.Run(actx, env, t) }()
			go func() { defer wg.Done(); watch(actx, c, dead) }()
			return a.Name, func(hctx context.Context) error {
				stop()
				wg.Wait()
				dead.sweep(c) // what died as the attack ended
				if err := restart(hctx, c, dead.names()); err != nil {
					return err
				}
				if attackErr != nil {
					return fmt.Errorf("the attack could not run: %w", attackErr)
				}
				return nil
			}, nil
		}}
	ph := chaos.Phase{Nemesis: nem, Duration: cfg.Duration, Gap: gap, Hold: cfg.Duration - gap - time.Second - 250*time.Millisecond,
		Seed: cfg.Seed, Settle: cfg.Settle}
	w := cfg.Load
	w.Topic = env.Topic
	cr, err := chaos.RunPhase(ctx, c, w, ph, progress)
	if err != nil {
		cr.Errors = append(cr.Errors, err.Error())
	}
	// A process that died after the heal (or one the phase found down)
	// counts too; it is restarted for the next row.
	before := len(dead.names())
	dead.sweep(c)
	if names := dead.names(); len(names) > before {
		if err := restart(ctx, c, names[before:]); err != nil {
			cr.Errors = append(cr.Errors, err.Error())
		}
	}
	row := Row{Attack: a.Name, Chaos: cr, Stats: t.stats(), Crashed: dead.names(), Unauthorized: a.Unauthorized}
	if s := cr.Load.Seconds(); s > 0 {
		row.Rate = float64(cr.AckedShifted) / s
	}
	return row
}

// deaths records which processes of the cluster were seen dead, once each.
type deaths struct {
	mu   sync.Mutex
	seen map[string]bool
	list []string
}

func newDeaths() *deaths { return &deaths{seen: map[string]bool{}} }

func (d *deaths) sweep(c *chaos.Cluster) {
	for _, name := range c.ProcessNames() {
		if !c.Net.IsRunning(c.Services, name) {
			d.mu.Lock()
			if !d.seen[name] {
				d.seen[name] = true
				d.list = append(d.list, name)
			}
			d.mu.Unlock()
		}
	}
}

func (d *deaths) names() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.list...)
}

// watch sweeps the cluster's processes every 200 ms until ctx ends. No one
// else stops a process during an attack, so each one down died.
func watch(ctx context.Context, c *chaos.Cluster, d *deaths) {
	for ctx.Err() == nil {
		d.sweep(c)
		sleep(ctx, 200*time.Millisecond)
	}
}

// restart brings the named processes back: a validator whole (whichever
// half still runs is killed first, as its cometbft cannot go on without
// its app), a service alone.
func restart(ctx context.Context, c *chaos.Cluster, names []string) error {
	nodes := map[int]bool{}
	var services []string
	for _, name := range names {
		found := false
		for i := 0; i < c.Net.Config().Validators; i++ {
			if name == localnet.CometBFTName(i) || name == localnet.AppName(i) {
				nodes[i], found = true, true
			}
		}
		if !found {
			services = append(services, name)
		}
	}
	var idx []int
	for i := range nodes {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	for _, i := range idx {
		if err := c.Net.KillRest(i); err != nil {
			return err
		}
		if err := c.Net.StartNode(ctx, i); err != nil {
			return fmt.Errorf("restart node%d after it died: %w", i, err)
		}
	}
	for _, name := range services {
		if c.Net.IsRunning(c.Services, name) {
			continue
		}
		if err := c.Net.Start(ctx, c.Services, name); err != nil {
			return fmt.Errorf("restart %s after it died: %w", name, err)
		}
	}
	return nil
}

// reset restarts every validator (all at once: their mempools go) and
// every gateway (their queues go), then waits until the chain is live.
func reset(ctx context.Context, c *chaos.Cluster) error {
	if c.Tamper != nil {
		c.Tamper.SetMode("")
	}
	n := c.Net.Config().Validators
	for i := 0; i < n; i++ {
		if err := c.Net.KillRest(i); err != nil {
			return err
		}
	}
	all := make([]int, n)
	for i := range all {
		all[i] = i
		if err := c.Net.StartNode(ctx, i); err != nil {
			return err
		}
	}
	var top int64
	for _, st := range c.Net.Status(ctx) {
		top = max(top, st.Committed())
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := c.Net.WaitHeight(wctx, all, top+1, io.Discard); err != nil {
		return fmt.Errorf("the validators did not resume: %w", err)
	}
	for g := 0; g < c.Services.Gateways; g++ {
		name := localnet.GatewayName(g)
		if c.Net.IsRunning(c.Services, name) {
			if err := c.Net.Kill(c.Services, name); err != nil {
				return err
			}
		}
		if err := c.Net.Start(ctx, c.Services, name); err != nil {
			return err
		}
	}
	return nil
}

// dataEnv dials every validator's node data service as the cluster's
// gateways do (the nodes' link: their CA, or plaintext when the RPC is).
func dataEnv(c *chaos.Cluster, env *Env) error {
	var conns []*grpc.ClientConn
	env.closeData = func() {
		for _, conn := range conns {
			_ = conn.Close()
		}
	}
	link, err := c.Net.NodeLink()
	if err != nil {
		return err
	}
	env.queries = new(atomic.Uint64)
	cfg := c.Net.Config()
	for i := 0; i < cfg.Validators; i++ {
		host, scheme, err := rpcnode.DataHost(cfg.DataAddr(i), false)
		if err != nil {
			return err
		}
		creds := insecure.NewCredentials()
		if scheme == "https" && link.TLS != nil {
			creds = credentials.NewTLS(link.TLS.Clone())
		}
		conn, err := grpc.NewClient("passthrough:///"+host, grpc.WithTransportCredentials(creds),
			grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(8<<20), grpc.MaxCallRecvMsgSize(16<<20)))
		if err != nil {
			return fmt.Errorf("node %d's data service: %w", i, err)
		}
		conns = append(conns, conn)
		env.Data = append(env.Data, byzlogv1.NewNodeDataClient(conn))
	}
	return nil
}
