// Command byzlog-indexer follows byzlog's committed blocks, verifies them
// with CometBFT's light client and publishes every record to NATS
// JetStream exactly once. This file is wiring only.
package main

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"syscall"

	cmttypes "github.com/cometbft/cometbft/types"
	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/byzlog/byzlog/abciapp/core"
	"github.com/byzlog/byzlog/indexer"
	"github.com/byzlog/byzlog/indexer/natsauth"
	"github.com/byzlog/byzlog/indexer/publish"
	"github.com/byzlog/byzlog/indexer/verify"
	"github.com/byzlog/byzlog/services/internal/daemon"
	"github.com/byzlog/byzlog/services/internal/keyfile"
	"github.com/byzlog/byzlog/services/internal/natsconn"
	"github.com/byzlog/byzlog/services/internal/nodelink"
)

func main() {
	if err := newCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "byzlog-indexer:", err)
		os.Exit(1)
	}
}

// options are byzlog-indexer's settings, one flag each.
type options struct {
	daemon.Options
	ix                                  indexer.Config
	nodes, genesis, natsURL, httpListen string
	nodeData                            string
	chainID, trustHash                  string
	trustHeight                         int64
	maxLag                              int64 // blocks behind the chain /readyz tolerates
	nats                                natsconn.Flags
	link                                nodelink.Flags
	authz                               string // the natsauth.Spec file; empty: none
	progressKey                         string // the key file of the indexer's registration; empty: no reports
}

func defaultOptions() options {
	return options{Options: daemon.Default(), ix: indexer.Default(),
		nodes: "127.0.0.1:26657,127.0.0.1:26757,127.0.0.1:26857,127.0.0.1:26957", natsURL: nats.DefaultURL, httpListen: "127.0.0.1:7080", maxLag: 10}
}

// Validate says which setting is wrong: one root of trust, genesis or a
// trusted header, must be given.
func (o options) Validate() error {
	switch {
	case o.genesis != "" && (o.trustHeight != 0 || o.trustHash != ""):
		return errors.New("give either --genesis or --trust-height with --trust-hash, not both")
	case o.genesis == "" && !(o.trustHeight > 0 && o.trustHash != "" && o.chainID != ""):
		return errors.New("no root of trust: give --genesis FILE, or --chain-id, --trust-height and --trust-hash")
	}
	return o.Options.Validate()
}

const help = `byzlog-indexer follows committed blocks by height from several CometBFT nodes,
verifies every header with CometBFT's light client (the first reachable node is
the primary, the others witnesses), checks each block's transactions, results
and app-hash digest against the verified headers, and publishes each record to
JetStream subject byzlog.<topic>.<partition> (stream byzlog-<topic>) and one
message per block to byzlog.$blocks.

The root of trust is the genesis file (the height-1 header must be signed by the
genesis validators), or --chain-id with --trust-height and --trust-hash. Its
cursor, the last height JetStream stored in full, is kept in the JetStream
key-value bucket byzlog-indexer under cursor.<chain-id>.<id>; on restart it
resumes there. Run two with different --id for availability: each message names
the stream sequence it must follow (Nats-Expected-Last-Sequence), so a record
is stored once whoever publishes it, however long after.

With --progress-key (the key an admin registered with byzlog indexer register,
or genesis app_state "indexers"), it reports to the chain every
--progress-interval the height JetStream acknowledged --progress-delay ago;
validators that prune (byzlog-app --retain-blocks) keep every block above it.
Keep --progress-delay above the NATS servers' sync_interval (JetStream's default
is 2m): blocks whose records a server lost with its power are published again
from the chain. With each report it keeps that header, signed with the key, in
the same bucket under root.<chain-id>.<id>, and a restart takes it as the root of
trust instead of genesis, whose first header pruned nodes no longer serve.

HTTP on --http-listen: /metrics (Prometheus), /healthz (200 while running),
/readyz (200 while within --max-lag blocks of the chain).`

func newCommand() *cobra.Command {
	o := defaultOptions()
	cmd := &cobra.Command{
		Use:           "byzlog-indexer --genesis FILE [--nodes ADDR,...] [--nats URL]",
		Short:         "byzlog's indexer: verified blocks in, JetStream records out",
		Long:          help,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return run(cmd.Context(), o, cmd.Flags())
		},
	}
	o.addFlags(cmd.Flags())
	return cmd
}

func (o *options) addFlags(f *pflag.FlagSet) {
	f.StringVar(&o.nodes, "nodes", o.nodes, nodelink.NodesHelp+"; at least two")
	f.StringVar(&o.nodeData, "node-data", "", nodelink.NodeDataHelp)
	f.StringVar(&o.genesis, "genesis", "", "genesis.json: chain id and the validators the root of trust is checked against")
	f.StringVar(&o.chainID, "chain-id", "", "chain id, with --trust-height and --trust-hash instead of --genesis")
	f.Int64Var(&o.trustHeight, "trust-height", 0, "height of a header you trust")
	f.StringVar(&o.trustHash, "trust-hash", "", "hex hash of the header at --trust-height")
	f.StringVar(&o.natsURL, "nats", o.natsURL, "NATS server URL(s), comma-separated")
	o.nats.Add(f, natsconn.Flags{})
	o.link.Add(f, nodelink.Flags{})
	f.StringVar(&o.authz, "nats-authz", "", "JSON file naming NATS's accounts file and its fixed users (natsauth.Spec): keep the server's read permissions following the topics' readers, reloading it through the system account's reloader user; empty: leave NATS's accounts alone")
	f.StringVar(&o.httpListen, "http-listen", o.httpListen, "host:port of /metrics, /healthz and /readyz; empty disables it")
	f.Int64Var(&o.maxLag, "max-lag", o.maxLag, "blocks behind the chain /readyz tolerates")
	f.StringVar(&o.ix.ID, "id", o.ix.ID, "this indexer's cursor name")
	f.Int64Var(&o.ix.StartHeight, "start-height", o.ix.StartHeight, "first height to publish when there is no cursor")
	f.IntVar(&o.ix.Replicas, "replicas", o.ix.Replicas, "JetStream replicas of the streams it creates")
	f.DurationVar(&o.ix.TrustingPeriod, "trusting-period", o.ix.TrustingPeriod, "light client trusting period")
	f.IntVar(&o.ix.MaxPending, "max-pending", o.ix.MaxPending, "messages published and not yet acknowledged, counted in acknowledgements awaited at once (one per 128 messages to a stream)")
	f.IntVar(&o.ix.RecordsPerMessage, "records-per-message", o.ix.RecordsPerMessage, "in the topic streams it makes: a block's consecutive records of a partition that one NATS message carries at most (a byzlog.v1.RecordRun of up to 64 KiB; the consumer SDK reads it); 1: a message per record, its fields in headers, for NATS clients without byzlog's protos. A stream keeps the format it was made with (metadata byzlog_message_format), and every indexer cuts as it says")
	f.IntVar(&o.ix.MaxHeldBytes, "max-held-bytes", o.ix.MaxHeldBytes, "bytes of records held back in memory behind open Kafka transactions (a partition publishes nothing past its last stable offset until the transaction there ends); past it a partition's held records are dropped and read again from the chain once the transaction ends")
	f.StringVar(&o.progressKey, "progress-key", "", "key file of this indexer's registration on the chain: report progress so pruning nodes keep the blocks it has not published; empty: no reports")
	f.DurationVar(&o.ix.ProgressInterval, "progress-interval", o.ix.ProgressInterval, "how often progress is reported")
	f.DurationVar(&o.ix.ProgressDelay, "progress-delay", o.ix.ProgressDelay, "report the height acknowledged this long ago (above NATS's sync_interval)")
	o.Options.AddFlags(f)
}

// authz reads the --nats-authz spec into cfg, with a reload through a
// connection as the spec's reloader (the system account) to the server nc
// is connected to.
func authz(cfg *indexer.Config, path, url string, natsOpts []nats.Option, nc *nats.Conn) (func(), error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--nats-authz: %w", err)
	}
	var spec natsauth.Spec
	if err := json.Unmarshal(b, &spec); err != nil {
		return nil, fmt.Errorf("--nats-authz %s: %w", path, err)
	}
	if err := spec.Validate(); err != nil {
		return nil, fmt.Errorf("--nats-authz %s: %w", path, err)
	}
	sys, err := nats.Connect(url, append(slices.Clone(natsOpts), nats.Name("byzlog-indexer reloader"), nats.MaxReconnects(-1), nats.Timeout(cfg.NATSTimeout),
		nats.UserInfo(spec.Reloader.Name, spec.Reloader.Password))...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s as the reloader %q (--nats-authz): %w", url, spec.Reloader.Name, err)
	}
	cfg.Authz = &publish.Authz{Spec: spec, Reload: func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, cfg.NATSTimeout)
		defer cancel()
		return natsauth.Reload(ctx, sys, nc.ConnectedServerId())
	}}
	return sys.Close, nil
}

// trustRoot fills o.ix's nodes, link, chain id and root of trust (and
// genesis topics) from the flags. With a progress key, the root saved with
// the last report (indexer.SavedRoot) is taken over genesis's.
func (o *options) trustRoot(ctx context.Context, flagSet *pflag.FlagSet, nc *nats.Conn) error {
	var err error
	if o.ix.Link, err = o.link.Link(flagSet); err != nil {
		return err
	}
	if o.ix.Nodes, err = nodelink.ParseNodes(o.nodes, o.ix.Link.Insecure); err != nil {
		return fmt.Errorf("--nodes: %w", err)
	}
	if o.ix.NodeData, err = nodelink.ParseNodeData(o.nodeData, len(o.ix.Nodes), o.ix.Link.Insecure); err != nil {
		return fmt.Errorf("--node-data: %w", err)
	}
	if o.genesis == "" {
		h, err := hex.DecodeString(o.trustHash)
		if err != nil {
			return fmt.Errorf("--trust-hash: %w", err)
		}
		o.ix.ChainID, o.ix.Trust = o.chainID, verify.Trust{Height: o.trustHeight, Hash: h}
		return nil
	}
	gen, err := cmttypes.GenesisDocFromFile(o.genesis)
	if err != nil {
		return fmt.Errorf("--genesis: %w", err)
	}
	saved := false
	if o.ix.ProgressKey != nil {
		trust, ok, err := indexer.SavedRoot(ctx, nc, gen.ChainID, o.ix.ID, o.ix.ProgressKey.Public().(ed25519.PublicKey))
		if err != nil {
			return err
		}
		if ok {
			o.ix.Trust, saved = trust, true
		}
	}
	if !saved {
		// The first block may take a moment on a new chain.
		if _, o.ix.Trust, err = nodelink.TrustGenesis(ctx, o.genesis, o.ix.Nodes, o.ix.Link, o.ix.GenesisWait); err != nil {
			return err
		}
	}
	o.ix.ChainID = gen.ChainID
	_, topics, err := core.ParseGenesis(gen.ChainID, gen.AppState)
	if err != nil {
		return fmt.Errorf("--genesis: %w", err)
	}
	for _, t := range topics {
		o.ix.GenesisTopics = append(o.ix.GenesisTopics, core.TopicChange{Name: t.Name, Config: t.Config})
	}
	return nil
}

func run(ctx context.Context, o options, flagSet *pflag.FlagSet) error {
	if err := o.Validate(); err != nil {
		return err
	}
	log, stopProfiles, err := o.Start(os.Stderr, "byzlog-indexer")
	if err != nil {
		return err
	}
	defer stopProfiles()
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.progressKey != "" {
		k, err := keyfile.Read(o.progressKey)
		if err != nil {
			return fmt.Errorf("--progress-key: %w", err)
		}
		o.ix.ProgressKey = k
	}
	natsOpts, err := o.nats.Options(flagSet)
	if err != nil {
		return err
	}
	// Nothing published while reconnecting is kept to send after: see
	// indexer.New.
	nc, err := nats.Connect(o.natsURL, append([]nats.Option{nats.Name("byzlog-indexer " + o.ix.ID), nats.MaxReconnects(-1), nats.Timeout(o.ix.NATSTimeout), nats.ReconnectBufSize(-1)}, natsOpts...)...)
	if err != nil {
		return fmt.Errorf("connect to NATS at %s: %w", o.natsURL, err)
	}
	defer nc.Close()
	if err := o.trustRoot(ctx, flagSet, nc); err != nil {
		return err
	}
	cfg := o.ix
	if o.authz != "" {
		stop, err := authz(&cfg, o.authz, o.natsURL, natsOpts, nc)
		if err != nil {
			return err
		}
		defer stop()
	}
	ix, err := indexer.New(cfg, nc, log)
	if err != nil {
		return err
	}
	if o.httpListen != "" {
		stopHTTP, err := daemon.ServeHTTP(o.httpListen, nil, daemon.NewHTTPServer(httpFace(ix, o.maxLag)))
		if err != nil {
			return fmt.Errorf("listen on %s: %w", o.httpListen, err)
		}
		defer stopHTTP()
	}
	log.Info().Strs("nodes", cfg.Nodes).Int("node_data", len(cfg.NodeData)).Str("chain_id", cfg.ChainID).Int64("trust_height", cfg.Trust.Height).
		Str("trust_hash", hex.EncodeToString(cfg.Trust.Hash)).Str("nats", o.natsURL).Msg("indexing")
	err = ix.Run(ctx)
	log.Info().Msg("stopped")
	return err
}

// httpFace is the indexer's HTTP endpoint: /metrics, /healthz (200 while
// running) and /readyz (200 while within maxLag blocks of the chain).
func httpFace(ix *indexer.Indexer, maxLag int64) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", daemon.MetricsHandler(ix.Metrics().Collectors()...))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		pub, chain := ix.Progress()
		if chain == 0 || chain-pub > maxLag {
			http.Error(w, fmt.Sprintf("published %d of %d", pub, chain), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, "published %d of %d\n", pub, chain)
	})
	return mux
}
