// Command byzlog-gateway is byzlog's stateless produce gateway: it bundles
// producers' signed batches into CometBFT transactions and answers each with
// a receipt from the committed block. This file is wiring only.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/byzlog/byzlog/gateway"
	"github.com/byzlog/byzlog/indexer/tlsconf"
	"github.com/byzlog/byzlog/services/internal/logging"
	"github.com/byzlog/byzlog/services/internal/nodelink"
	"github.com/byzlog/byzlog/services/internal/profiling"
)

func main() {
	if err := newCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "byzlog-gateway:", err)
		os.Exit(1)
	}
}

func newCommand() *cobra.Command {
	cfg := gateway.Default()
	logCfg := logging.Default()
	listen := "127.0.0.1:7070"
	metricsListen := "127.0.0.1:7071"
	nodes := "http://127.0.0.1:26657"
	pprofListen := ""
	var tlsFiles tlsconf.Files
	insecure := false
	var link nodelink.Flags
	cmd := &cobra.Command{
		Use:   "byzlog-gateway",
		Short: "byzlog's produce gateway: bundles signed batches into CometBFT transactions",
		Long: `byzlog-gateway serves the byzlog.v1.Gateway gRPC API (with reflection and the
standard gRPC health service). It bundles producers' signed batches for up to
--linger into one transaction, submits it to a healthy CometBFT node (round-robin,
failing over), follows committed blocks and answers each batch with a receipt
from the block's results. It keeps no state: run as many as you like.

Both faces, gRPC and HTTP, serve TLS 1.3 with --tls-cert and --tls-key; with
--tls-client-ca every client must present a certificate that CA signed (mutual
TLS). Plaintext needs --insecure.

It reaches nodes' RPC over https (the nodes' rpc.tls_cert_file), checking their
certificates against --node-tls-ca; plaintext http only on loopback, or beyond
it with --insecure-nodes. It trusts no single node: what one says about
committed state is confirmed by f+1 of them.`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Nodes.Addrs = strings.Split(nodes, ",")
			l, err := link.Link(cmd.Flags())
			if err != nil {
				return err
			}
			cfg.Nodes.TLS, cfg.Nodes.Insecure = l.TLS, l.Insecure
			serverTLS, err := serverTLS(tlsFiles, insecure)
			if err != nil {
				return err
			}
			return run(cmd.Context(), cfg, logCfg, serverTLS, listen, metricsListen, pprofListen)
		},
	}
	cmd.AddCommand(newHealthcheckCommand())
	f := cmd.Flags()
	f.StringVar(&listen, "listen", listen, "host:port of the gRPC API")
	f.StringVar(&nodes, "nodes", nodes, "comma-separated CometBFT RPC addresses: https://host:port, or host:port (plaintext) on loopback")
	link.Add(f, nodelink.Flags{})
	f.StringVar(&tlsFiles.Cert, "tls-cert", "", "PEM certificate (chain) the gRPC and HTTP faces serve TLS with")
	f.StringVar(&tlsFiles.Key, "tls-key", "", "PEM private key of --tls-cert")
	f.StringVar(&tlsFiles.CA, "tls-client-ca", "", "PEM CA: require every client to present a certificate it signed (mutual TLS); empty: any client")
	f.BoolVar(&insecure, "insecure", false, "serve plaintext gRPC and HTTP instead of TLS (anyone on the path reads and alters the traffic)")
	f.StringVar(&metricsListen, "http-listen", metricsListen, "host:port of the HTTP endpoint: the JSON API (/v1/produce, /v1/topics), /metrics (Prometheus) and /healthz; empty disables it")
	f.DurationVar(&cfg.Linger, "linger", cfg.Linger, "how long a bundle waits for more batches")
	f.IntVar(&cfg.MaxBundleBytes, "max-bundle-bytes", cfg.MaxBundleBytes, "close a bundle at this size (below the chain's 2 MiB tx limit)")
	f.IntVar(&cfg.MaxBundleBatches, "max-bundle-batches", cfg.MaxBundleBatches, "close a bundle at this many batches")
	f.Int64Var(&cfg.MaxQueuedBytes, "max-queued-bytes", cfg.MaxQueuedBytes, "bytes of batches waiting before RESOURCE_EXHAUSTED")
	f.IntVar(&cfg.MaxInFlight, "max-in-flight", cfg.MaxInFlight, "bundles submitted and not yet committed")
	f.DurationVar(&cfg.CommitTimeout, "commit-timeout", cfg.CommitTimeout, "resubmit a bundle not committed after this long")
	f.IntVar(&cfg.Nodes.HexSubmitMaxBytes, "hex-submit-max-bytes", cfg.Nodes.HexSubmitMaxBytes, "submit bundles up to this size as hex forms (cheaper for nodes than JSON-RPC's base64); 2x+16 must fit the nodes' rpc.max_body_bytes; 0: always JSON-RPC")
	f.DurationVar(&cfg.PendingTimeout, "pending-timeout", cfg.PendingTimeout, "answer a batch not committed after this long with DEADLINE_EXCEEDED and free its slot (the producer retries with the same sequence)")
	f.Int64Var(&cfg.MaxProducerQueuedBytes, "max-producer-queued-bytes", cfg.MaxProducerQueuedBytes, "bytes of batches one producer key may have waiting before RESOURCE_EXHAUSTED")
	f.IntVar(&cfg.MaxProducerQueuedBatches, "max-producer-queued-batches", cfg.MaxProducerQueuedBatches, "batches one producer key may have waiting before RESOURCE_EXHAUSTED")
	f.IntVar(&cfg.HTTP.MaxConcurrent, "http-max-concurrent", cfg.HTTP.MaxConcurrent, "HTTP requests served at once; more get 429 with Retry-After")
	f.DurationVar(&cfg.StartTimeout, "start-timeout", cfg.StartTimeout, "how long to wait at start for a healthy CometBFT node")
	f.StringVar(&pprofListen, "pprof-listen", "", "host:port to serve Go runtime profiles (/debug/pprof/) on; empty: off")
	f.StringVar(&logCfg.Level, "log-level", logCfg.Level, "trace, debug, info, warn or error")
	f.StringVar(&logCfg.Format, "log-format", logCfg.Format, "auto (pretty on a terminal, else JSON), json or pretty")
	return cmd
}

// serverTLS is the faces' TLS configuration: nil with --insecure, which
// may not come with TLS files.
func serverTLS(f tlsconf.Files, insecure bool) (*tls.Config, error) {
	if insecure {
		if f != (tlsconf.Files{}) {
			return nil, errors.New("--insecure serves plaintext: drop --tls-cert, --tls-key and --tls-client-ca, or --insecure")
		}
		return nil, nil
	}
	return f.Server()
}

func run(ctx context.Context, cfg gateway.Config, logCfg logging.Config, serverTLS *tls.Config, listen, metricsListen, pprofListen string) error {
	log, err := logging.New(logCfg, os.Stderr, "byzlog-gateway")
	if err != nil {
		return err
	}
	stopProfiles, err := profiling.Serve(pprofListen, log)
	if err != nil {
		return err
	}
	defer stopProfiles()
	g, err := gateway.New(cfg, log)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := g.Start(ctx); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", listen, err)
	}
	var opts []grpc.ServerOption
	if serverTLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(serverTLS)))
	}
	srv, hs := gateway.NewGRPCServer(g, opts...)
	var httpSrv *http.Server
	if metricsListen != "" {
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		reg.MustRegister(g.Metrics().Collectors()...)
		mux := http.NewServeMux()
		mux.Handle("/v1/", gateway.HTTPHandler(g))
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
			if _, top := g.Health(); top == 0 {
				http.Error(w, "no healthy CometBFT node", http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "ok")
		})
		mln, err := net.Listen("tcp", metricsListen)
		if err != nil {
			return fmt.Errorf("listen for metrics on %s: %w", metricsListen, err)
		}
		if serverTLS != nil {
			mln = tls.NewListener(mln, serverTLS)
		}
		httpSrv = gateway.NewHTTPServer(cfg.HTTP, mux)
		go func() { _ = httpSrv.Serve(mln) }()
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); g.Run(ctx) }()
	go func() { defer wg.Done(); gateway.WatchHealth(ctx, g, hs) }()
	log.Info().Str("listen", listen).Strs("nodes", cfg.Nodes.Addrs).Str("chain_id", g.ChainID()).Bool("tls", serverTLS != nil).Bool("mutual_tls", serverTLS != nil && serverTLS.ClientCAs != nil).Msg("serving")
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err = <-errc:
	case <-ctx.Done():
	}
	// Stop taking requests, fail what is waiting, then close the streams.
	stop()
	wg.Wait()
	if httpSrv != nil {
		_ = httpSrv.Close()
	}
	// Streams a client keeps open would hold GracefulStop forever.
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		srv.Stop()
	}
	log.Info().Msg("stopped")
	return err
}
