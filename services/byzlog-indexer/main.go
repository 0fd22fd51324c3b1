// Command byzlog-indexer follows byzlog's committed blocks, verifies them
// with CometBFT's light client and publishes every record to NATS
// JetStream exactly once. This file is wiring only.
package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	cmttypes "github.com/cometbft/cometbft/types"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/byzlog/byzlog/abciapp/core"
	"github.com/byzlog/byzlog/indexer"
	"github.com/byzlog/byzlog/indexer/natsauth"
	"github.com/byzlog/byzlog/services/internal/logging"
	"github.com/byzlog/byzlog/services/internal/natsconn"
	"github.com/byzlog/byzlog/services/internal/nodelink"
	"github.com/byzlog/byzlog/services/internal/profiling"
)

func main() {
	if err := newCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "byzlog-indexer:", err)
		os.Exit(1)
	}
}

type flags struct {
	nodes, genesis, natsURL, httpListen, chainID, trustHash string
	trustHeight                                             int64
	maxLag                                                  int64
	pprofListen                                             string
	nats                                                    natsconn.Flags
	link                                                    nodelink.Flags
	authz                                                   string
}

func newCommand() *cobra.Command {
	cfg := indexer.Default()
	logCfg := logging.Default()
	fl := flags{nodes: "127.0.0.1:26657,127.0.0.1:26757,127.0.0.1:26857,127.0.0.1:26957", natsURL: nats.DefaultURL, httpListen: "127.0.0.1:7080", maxLag: 10}
	cmd := &cobra.Command{
		Use:   "byzlog-indexer --genesis FILE [--nodes ADDR,...] [--nats URL]",
		Short: "byzlog's indexer: verified blocks in, JetStream records out",
		Long: `byzlog-indexer follows committed blocks by height from several CometBFT nodes,
verifies every header with CometBFT's light client (the first reachable node is
the primary, the others witnesses), checks each block's transactions, results
and app-hash digest against the verified headers, and publishes each record to
JetStream subject byzlog.<topic>.<partition> (stream byzlog-<topic>, message id
<topic>/<partition>/<offset>) and one message per block to byzlog.$blocks.

The root of trust is the genesis file (the height-1 header must be signed by the
genesis validators), or --chain-id with --trust-height and --trust-hash. Its
cursor, the last height JetStream stored in full, is kept in the JetStream
key-value bucket byzlog-indexer under cursor.<chain-id>.<id>; on restart it
resumes there. Run two with different --id for availability: records are
de-duplicated by message id.

HTTP on --http-listen: /metrics (Prometheus), /healthz (200 while running),
/readyz (200 while within --max-lag blocks of the chain).`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return run(cmd.Context(), cfg, logCfg, fl, cmd.Flags())
		},
	}
	f := cmd.Flags()
	f.StringVar(&fl.nodes, "nodes", fl.nodes, "comma-separated CometBFT RPC addresses (at least two)")
	f.StringVar(&fl.genesis, "genesis", "", "genesis.json: chain id and the validators the root of trust is checked against")
	f.StringVar(&fl.chainID, "chain-id", "", "chain id, with --trust-height and --trust-hash instead of --genesis")
	f.Int64Var(&fl.trustHeight, "trust-height", 0, "height of a header you trust")
	f.StringVar(&fl.trustHash, "trust-hash", "", "hex hash of the header at --trust-height")
	f.StringVar(&fl.natsURL, "nats", fl.natsURL, "NATS server URL(s), comma-separated")
	fl.nats.Add(f, natsconn.Flags{})
	fl.link.Add(f, nodelink.Flags{})
	f.StringVar(&fl.authz, "nats-authz", "", "JSON file naming NATS's accounts file and its fixed users (natsauth.Spec): keep the server's read permissions following the topics' readers, reloading it through the system account's reloader user; empty: leave NATS's accounts alone")
	f.StringVar(&fl.httpListen, "http-listen", fl.httpListen, "host:port of /metrics, /healthz and /readyz; empty disables it")
	f.Int64Var(&fl.maxLag, "max-lag", fl.maxLag, "blocks behind the chain /readyz tolerates")
	f.StringVar(&cfg.ID, "id", cfg.ID, "this indexer's cursor name")
	f.Int64Var(&cfg.StartHeight, "start-height", cfg.StartHeight, "first height to publish when there is no cursor")
	f.IntVar(&cfg.Replicas, "replicas", cfg.Replicas, "JetStream replicas of the streams it creates")
	f.DurationVar(&cfg.DuplicateWindow, "dedup-window", cfg.DuplicateWindow, "the streams' duplicate window")
	f.DurationVar(&cfg.TrustingPeriod, "trusting-period", cfg.TrustingPeriod, "light client trusting period")
	f.IntVar(&cfg.MaxPending, "max-pending", cfg.MaxPending, "records published and not yet acknowledged")
	f.StringVar(&fl.pprofListen, "pprof-listen", "", "host:port to serve Go runtime profiles (/debug/pprof/) on; empty: off")
	f.StringVar(&logCfg.Level, "log-level", logCfg.Level, "trace, debug, info, warn or error")
	f.StringVar(&logCfg.Format, "log-format", logCfg.Format, "auto (pretty on a terminal, else JSON), json or pretty")
	return cmd
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
	sys, err := nats.Connect(url, append(slices.Clone(natsOpts), nats.Name("byzlog-indexer reloader"), nats.MaxReconnects(-1), nats.Timeout(10*time.Second),
		nats.UserInfo(spec.Reloader.Name, spec.Reloader.Password))...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s as the reloader %q (--nats-authz): %w", url, spec.Reloader.Name, err)
	}
	cfg.Authz = &indexer.Authz{Spec: spec, Reload: func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return natsauth.Reload(ctx, sys, nc.ConnectedServerId())
	}}
	return sys.Close, nil
}

// trustRoot fills cfg's chain id and root of trust from the flags.
func trustRoot(ctx context.Context, cfg *indexer.Config, fl flags) error {
	switch {
	case fl.genesis != "" && (fl.trustHeight != 0 || fl.trustHash != ""):
		return errors.New("give either --genesis or --trust-height with --trust-hash, not both")
	case fl.genesis != "":
		gen, err := cmttypes.GenesisDocFromFile(fl.genesis)
		if err != nil {
			return fmt.Errorf("--genesis: %w", err)
		}
		cfg.ChainID = gen.ChainID
		_, topics, err := core.ParseGenesis(gen.ChainID, gen.AppState)
		if err != nil {
			return fmt.Errorf("--genesis: %w", err)
		}
		for _, t := range topics {
			cfg.GenesisTopics = append(cfg.GenesisTopics, core.TopicChange{Name: t.Name, Config: t.Config})
		}
		provs, _, err := indexer.NewNodes(cfg.ChainID, cfg.Nodes, cfg.Link)
		if err != nil {
			return err
		}
		// The first block may take a moment on a new chain.
		deadline := time.Now().Add(time.Minute)
		for {
			cfg.Trust, err = indexer.TrustGenesis(ctx, gen, provs)
			if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
				return err
			}
			time.Sleep(500 * time.Millisecond)
		}
	case fl.trustHeight > 0 && fl.trustHash != "" && fl.chainID != "":
		h, err := hex.DecodeString(fl.trustHash)
		if err != nil {
			return fmt.Errorf("--trust-hash: %w", err)
		}
		cfg.ChainID, cfg.Trust = fl.chainID, indexer.Trust{Height: fl.trustHeight, Hash: h}
		return nil
	}
	return errors.New("no root of trust: give --genesis FILE, or --chain-id, --trust-height and --trust-hash")
}

func run(ctx context.Context, cfg indexer.Config, logCfg logging.Config, fl flags, flagSet *pflag.FlagSet) error {
	log, err := logging.New(logCfg, os.Stderr, "byzlog-indexer")
	if err != nil {
		return err
	}
	stopProfiles, err := profiling.Serve(fl.pprofListen, log)
	if err != nil {
		return err
	}
	defer stopProfiles()
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	for _, n := range strings.Split(fl.nodes, ",") {
		if n = strings.TrimSpace(n); n != "" {
			cfg.Nodes = append(cfg.Nodes, n)
		}
	}
	if cfg.Link, err = fl.link.Link(flagSet); err != nil {
		return err
	}
	if err := trustRoot(ctx, &cfg, fl); err != nil {
		return err
	}
	natsOpts, err := fl.nats.Options(flagSet)
	if err != nil {
		return err
	}
	nc, err := nats.Connect(fl.natsURL, append([]nats.Option{nats.Name("byzlog-indexer " + cfg.ID), nats.MaxReconnects(-1), nats.Timeout(10 * time.Second)}, natsOpts...)...)
	if err != nil {
		return fmt.Errorf("connect to NATS at %s: %w", fl.natsURL, err)
	}
	defer nc.Close()
	if fl.authz != "" {
		stop, err := authz(&cfg, fl.authz, fl.natsURL, natsOpts, nc)
		if err != nil {
			return err
		}
		defer stop()
	}
	ix, err := indexer.New(cfg, nc, log)
	if err != nil {
		return err
	}
	if fl.httpListen != "" {
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		reg.MustRegister(ix.Metrics().Collectors()...)
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
		mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
			pub, chain := ix.Progress()
			if chain == 0 || chain-pub > fl.maxLag {
				http.Error(w, fmt.Sprintf("published %d of %d", pub, chain), http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintf(w, "published %d of %d\n", pub, chain)
		})
		ln, err := net.Listen("tcp", fl.httpListen)
		if err != nil {
			return fmt.Errorf("listen on %s: %w", fl.httpListen, err)
		}
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
	}
	log.Info().Strs("nodes", cfg.Nodes).Str("chain_id", cfg.ChainID).Int64("trust_height", cfg.Trust.Height).
		Str("trust_hash", hex.EncodeToString(cfg.Trust.Hash)).Str("nats", fl.natsURL).Msg("indexing")
	err = ix.Run(ctx)
	log.Info().Msg("stopped")
	return err
}
