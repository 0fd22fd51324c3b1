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
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/byzlog/byzlog/gateway/grpcface"
	"github.com/byzlog/byzlog/gateway/httpface"
	"github.com/byzlog/byzlog/gateway/pipeline"
	"github.com/byzlog/byzlog/protos/chain/tlsconf"
	"github.com/byzlog/byzlog/services/internal/daemon"
	"github.com/byzlog/byzlog/services/internal/nodelink"
)

func main() {
	if err := newCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "byzlog-gateway:", err)
		os.Exit(1)
	}
}

// options are byzlog-gateway's settings, one flag each.
type options struct {
	daemon.Options
	gw         pipeline.Config
	listen     string // host:port of the gRPC API
	httpListen string // host:port of the HTTP face; empty: none
	nodes      string
	nodeData   string
	tlsFiles   tlsconf.Files
	insecure   bool
	link       nodelink.Flags
	kafka      kafkaOptions
}

func defaultOptions() options {
	return options{Options: daemon.Default(), gw: pipeline.Default(), listen: "127.0.0.1:7070", httpListen: "127.0.0.1:7071",
		nodes: "http://127.0.0.1:26657", kafka: defaultKafkaOptions()}
}

// Validate says which setting is wrong: --insecure serves plaintext, so
// it may not come with TLS files.
func (o options) Validate() error {
	if o.insecure && o.tlsFiles != (tlsconf.Files{}) {
		return errors.New("--insecure serves plaintext: drop --tls-cert, --tls-key and --tls-client-ca, or --insecure")
	}
	return o.Options.Validate()
}

const help = `byzlog-gateway serves the byzlog.v1.Gateway gRPC API (with reflection and the
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
committed state is confirmed by f+1 of them.`

func newCommand() *cobra.Command {
	o := defaultOptions()
	cmd := &cobra.Command{
		Use:           "byzlog-gateway",
		Short:         "byzlog's produce gateway: bundles signed batches into CometBFT transactions",
		Long:          help,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			l, err := o.link.Link(cmd.Flags())
			if err != nil {
				return err
			}
			if o.gw.Nodes.Addrs, err = nodelink.ParseNodes(o.nodes, l.Insecure); err != nil {
				return fmt.Errorf("--nodes: %w", err)
			}
			if o.gw.Nodes.DataAddrs, err = nodelink.ParseNodeData(o.nodeData, len(o.gw.Nodes.Addrs), l.Insecure); err != nil {
				return fmt.Errorf("--node-data: %w", err)
			}
			o.gw.Nodes.TLS, o.gw.Nodes.Insecure = l.TLS, l.Insecure
			var serverTLS *tls.Config
			if !o.insecure {
				if serverTLS, err = o.tlsFiles.Server(); err != nil {
					return err
				}
			}
			return run(cmd.Context(), o, serverTLS)
		},
	}
	cmd.AddCommand(newHealthcheckCommand(), newKafkaUserCommand())
	o.addFlags(cmd.Flags())
	return cmd
}

func (o *options) addFlags(f *pflag.FlagSet) {
	f.StringVar(&o.listen, "listen", o.listen, "host:port of the gRPC API")
	f.StringVar(&o.nodes, "nodes", o.nodes, nodelink.NodesHelp)
	f.StringVar(&o.nodeData, "node-data", "", nodelink.NodeDataHelp)
	o.link.Add(f, nodelink.Flags{})
	f.StringVar(&o.tlsFiles.Cert, "tls-cert", "", "PEM certificate (chain) the gRPC and HTTP faces serve TLS with")
	f.StringVar(&o.tlsFiles.Key, "tls-key", "", "PEM private key of --tls-cert")
	f.StringVar(&o.tlsFiles.CA, "tls-client-ca", "", "PEM CA: require every client to present a certificate it signed (mutual TLS); empty: any client")
	f.BoolVar(&o.insecure, "insecure", false, "serve plaintext gRPC and HTTP instead of TLS (anyone on the path reads and alters the traffic)")
	f.StringVar(&o.httpListen, "http-listen", o.httpListen, "host:port of the HTTP endpoint: the JSON API (/v1/produce, /v1/topics), /metrics (Prometheus) and /healthz; empty disables it")
	f.DurationVar(&o.gw.Linger, "linger", o.gw.Linger, "how long a bundle waits for more batches")
	f.IntVar(&o.gw.MaxBundleBytes, "max-bundle-bytes", o.gw.MaxBundleBytes, "close a bundle at this size (below the chain's 2 MiB tx limit)")
	f.IntVar(&o.gw.MaxBundleBatches, "max-bundle-batches", o.gw.MaxBundleBatches, "close a bundle at this many batches")
	f.Int64Var(&o.gw.MaxQueuedBytes, "max-queued-bytes", o.gw.MaxQueuedBytes, "bytes of batches waiting before RESOURCE_EXHAUSTED")
	f.IntVar(&o.gw.MaxInFlight, "max-in-flight", o.gw.MaxInFlight, "bundles submitted and not yet committed")
	f.DurationVar(&o.gw.CommitTimeout, "commit-timeout", o.gw.CommitTimeout, "resubmit a bundle not committed after this long")
	f.IntVar(&o.gw.Nodes.HexSubmitMaxBytes, "hex-submit-max-bytes", o.gw.Nodes.HexSubmitMaxBytes, "submit bundles up to this size as hex forms (cheaper for nodes than JSON-RPC's base64); 2x+16 must fit the nodes' rpc.max_body_bytes; 0: always JSON-RPC")
	f.DurationVar(&o.gw.PendingTimeout, "pending-timeout", o.gw.PendingTimeout, "answer a batch not committed after this long with DEADLINE_EXCEEDED and free its slot (the producer retries with the same sequence)")
	f.Int64Var(&o.gw.MaxProducerQueuedBytes, "max-producer-queued-bytes", o.gw.MaxProducerQueuedBytes, "bytes of batches one producer key may have waiting before RESOURCE_EXHAUSTED")
	f.IntVar(&o.gw.MaxProducerQueuedBatches, "max-producer-queued-batches", o.gw.MaxProducerQueuedBatches, "batches one producer key may have waiting before RESOURCE_EXHAUSTED")
	f.IntVar(&o.gw.HTTP.MaxConcurrent, "http-max-concurrent", o.gw.HTTP.MaxConcurrent, "HTTP requests served at once; more get 429 with Retry-After")
	f.DurationVar(&o.gw.StartTimeout, "start-timeout", o.gw.StartTimeout, "how long to wait at start for a healthy CometBFT node")
	o.kafka.addFlags(f)
	o.Options.AddFlags(f)
}

func run(ctx context.Context, o options, serverTLS *tls.Config) error {
	log, stopProfiles, err := o.Start(os.Stderr, "byzlog-gateway")
	if err != nil {
		return err
	}
	defer stopProfiles()
	g, err := pipeline.New(o.gw, log)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := g.Start(ctx); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", o.listen, err)
	}
	var opts []grpc.ServerOption
	if serverTLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(serverTLS)))
	}
	srv, hs := grpcface.NewServer(grpcface.Over(g), g.Config().GRPC, opts...)
	waitKafka := func() error { return nil }
	if o.kafka.cfg.Listen != "" {
		kcfg, err := o.kafka.config(serverTLS)
		if err != nil {
			return err
		}
		if waitKafka, err = serveKafka(ctx, kcfg, g, log); err != nil {
			return err
		}
	}
	stopHTTP := func() {}
	if o.httpListen != "" {
		if stopHTTP, err = daemon.ServeHTTP(o.httpListen, serverTLS, httpface.NewServer(o.gw.HTTP, httpFace(g))); err != nil {
			return fmt.Errorf("listen for metrics on %s: %w", o.httpListen, err)
		}
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); g.Run(ctx) }()
	go func() { defer wg.Done(); grpcface.WatchHealth(ctx, g, g.Config().GRPC.HealthInterval, hs) }()
	log.Info().Str("listen", o.listen).Strs("nodes", o.gw.Nodes.Addrs).Int("node_data", len(o.gw.Nodes.DataAddrs)).Str("chain_id", g.ChainID()).Bool("tls", serverTLS != nil).Bool("mutual_tls", serverTLS != nil && serverTLS.ClientCAs != nil).Msg("serving")
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err = <-errc:
	case <-ctx.Done():
	}
	// Stop taking requests, fail what is waiting, then close the streams.
	stop()
	wg.Wait()
	if kerr := waitKafka(); kerr != nil && err == nil {
		err = kerr
	}
	stopHTTP()
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

// httpFace is the gateway's HTTP endpoint: the JSON API, /metrics and
// /healthz (200 while a CometBFT node is healthy).
func httpFace(g *pipeline.Gateway) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/v1/", httpface.Handler(grpcface.NewService(grpcface.Over(g)), g.Config().HTTP))
	mux.Handle("/metrics", daemon.MetricsHandler(g.Metrics().Collectors()...))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if _, top := g.Health(); top == 0 {
			http.Error(w, "no healthy CometBFT node", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}
