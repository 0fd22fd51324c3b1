package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/services/internal/localnet"
)

func newRunCommand() *cobra.Command {
	cfg := localnet.Default()
	svc := localnet.DefaultServices()
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the whole system on this machine until Ctrl-C: validators, NATS, gateway and indexer",
		Long: `Run byzlog on loopback, in the foreground: a validator network (stock cometbft
and byzlog-app per validator, as "byzlog localnet up"), a NATS server with
JetStream, --gateways gateways and the indexer, all with data and logs under
--dir. It waits until the chain commits and the indexer is ready, prints where
everything listens and how to use it, then a status line (height, records
committed, height indexed) until Ctrl-C, when it stops every process it started
and says where the data stayed. Run it again on the same --dir to resume that
cluster with its data. A second run while one is running is refused.

Ports: node i p2p/RPC/ABCI BASE+100i/+1/+2 (BASE 26656), NATS 4222 (monitoring
8222), gateway g gRPC 7070+2g, HTTP 7071+2g and Kafka 9092+g, indexer HTTP
7080.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			cfg.InsecureRPC = svc.Insecure
			n, err := openNet(cmd, cfg)
			if err != nil {
				return err
			}
			bin := binDir()
			svc.NATS, svc.Gateway, svc.Indexer = findBinary(bin, "nats-server"), findBinary(bin, "byzlog-gateway"), findBinary(bin, "byzlog-indexer")
			errOut := cmd.ErrOrStderr()
			if err := startCluster(ctx, n, svc, errOut); err != nil {
				return err
			}
			printBanner(cmd.OutOrStdout(), n, svc)
			watch(ctx, cmd.OutOrStdout(), n, svc)
			fmt.Fprintln(errOut, "\nstopping…")
			downErr := n.Down(errOut)
			fmt.Fprintf(errOut, "stopped; the data stays in %s (make run resumes it, make clean removes it)\n", n.Config().Dir)
			return downErr
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Dir, "dir", cfg.Dir, "run directory (shared with byzlog localnet)")
	f.IntVar(&cfg.BasePort, "base-port", cfg.BasePort, "node 0's p2p port; node i uses BASE+100i.. (a new network only)")
	f.IntVar(&svc.Gateways, "gateways", svc.Gateways, "how many gateways to run (1 to 8)")
	f.IntVar(&svc.GatewayPort, "gateway-port", svc.GatewayPort, "gateway 0's gRPC port; gateway g uses PORT+2g, HTTP PORT+2g+1")
	f.IntVar(&svc.KafkaPort, "kafka-port", svc.KafkaPort, "gateway 0's Kafka port (SASL users in DIR/kafka); gateway g uses PORT+g; 0: no Kafka face")
	f.IntVar(&svc.NATSPort, "nats-port", svc.NATSPort, "NATS client port (monitoring: 8222 + the difference from 4222)")
	f.IntVar(&svc.IndexerPort, "indexer-port", svc.IndexerPort, "indexer HTTP port (/metrics, /healthz, /readyz)")
	addServiceTLSFlags(f, &svc)
	return cmd
}

// openNet opens (or prepares to create) the validator network in cfg.Dir
// with the binaries next to byzlog.
func openNet(cmd *cobra.Command, cfg localnet.Config) (*localnet.Net, error) {
	bin := binDir()
	cfg.CometBFT, cfg.App = findBinary(bin, "cometbft"), findBinary(bin, "byzlog-app")
	n, err := localnet.Open(cfg)
	if err != nil {
		return nil, err
	}
	if n.Existing() {
		if err := checkShape(cmd, cfg, n.Config()); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// startCluster brings the validators and the services up and waits until
// the indexer (if it runs) is ready; on failure it stops what it started.
func startCluster(ctx context.Context, n *localnet.Net, svc localnet.Services, progress io.Writer) error {
	if err := n.Up(ctx, progress); err != nil {
		if errors.Is(err, localnet.ErrRunning) {
			return fmt.Errorf("%w\n(is another `byzlog run` using %s? stop it with Ctrl-C there, or run `byzlog localnet down --dir %s`)", err, n.Config().Dir, n.Config().Dir)
		}
		return err
	}
	if err := n.StartServices(ctx, svc, progress); err != nil {
		_ = n.Down(io.Discard)
		return err
	}
	if svc.GatewaysOnly {
		return nil
	}
	line := localnet.StatusLine(progress)
	start := time.Now()
	for {
		ready, text := indexerReady(ctx, svc)
		if ready {
			line("indexer ready: "+text, true)
			return nil
		}
		if time.Since(start) > 2*time.Minute || ctx.Err() != nil {
			line("", true)
			_ = n.Down(progress)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("the indexer was not ready within 2 minutes (%s); see %s/indexer/indexer.log", text, n.Config().Dir)
		}
		line(fmt.Sprintf("waiting for the indexer to catch up: %s (%s)", text, time.Since(start).Round(time.Second)), false)
		select {
		case <-time.After(250 * time.Millisecond):
		case <-ctx.Done():
		}
	}
}

// addServiceTLSFlags adds how the localnet's gateways speak to clients.
func addServiceTLSFlags(f *pflag.FlagSet, svc *localnet.Services) {
	f.BoolVar(&svc.Insecure, "insecure", false, "plaintext everywhere: the gateways, the nodes' RPC and NATS (default: TLS with certificates of the network's CA, DIR/tls/ca.pem; a network keeps the choice it was created with)")
	f.BoolVar(&svc.MutualTLS, "mutual-tls", false, "make the gateways require a client certificate of the network's CA (DIR/tls/client.pem)")
}

// gatewaySecurity says how the gateways serve, for the banner.
func gatewaySecurity(n *localnet.Net, svc localnet.Services) string {
	switch {
	case svc.Insecure:
		return "plaintext (--insecure)"
	case svc.MutualTLS:
		return fmt.Sprintf("TLS with client certificates (CA %s, client %s)", n.TLS().CA(), n.TLS().Party("client").Cert)
	}
	return "TLS (CA " + n.TLS().CA() + ")"
}

// rpcSecurity says how the nodes serve RPC, for the banner.
func rpcSecurity(n *localnet.Net) string {
	if n.Config().InsecureRPC {
		return "plaintext"
	}
	return "TLS, the same CA"
}

// natsCAFlag is the nats CLI's --tlsca for the banner ("" when insecure).
func natsCAFlag(n *localnet.Net, svc localnet.Services) string {
	if svc.Insecure {
		return ""
	}
	return " --tlsca " + n.TLS().CA()
}

// indexerReady asks the indexer's /readyz.
func indexerReady(ctx context.Context, svc localnet.Services) (bool, string) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+svc.IndexerAddr()+"/readyz", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	return resp.StatusCode == http.StatusOK, strings.TrimSpace(string(b))
}

func printBanner(w io.Writer, n *localnet.Net, svc localnet.Services) {
	c := n.Config()
	var gws []string
	for g := 0; g < svc.Gateways; g++ {
		gws = append(gws, fmt.Sprintf("%s (HTTP %s)", svc.GatewayAddr(g), svc.GatewayHTTP(g)))
	}
	fmt.Fprintf(w, `
byzlog is running — %d validators, NATS, %d gateway(s), indexer. Data and logs: %s

  gateway   %s, %s
%s  NATS      %s (monitoring http://127.0.0.1:%d)
  indexer   http://%s/metrics
  nodes     %s … (RPC, %s; ABCI on a unix socket in each node's home)
  admin key %s/admin.key

Try, in another terminal:
  bin/byzlog topic create orders --partitions 3 --admin-key %s/admin.key --gateway %s
  seq 1 1000 | bin/byzlog produce orders --gateway %s
  bin/byzlog consume orders --count 1000 --nats %s
  bin/nats sub 'byzlog.orders.*' --server %s --user consumer --password "$(cat %s)"%s --headers-only
%s
Ctrl-C stops everything.
`, c.Validators, svc.Gateways, c.Dir, strings.Join(gws, ", "), gatewaySecurity(n, svc), kafkaLine(n, svc), svc.NATSURL(), svc.MonitorPort(), svc.IndexerAddr(),
		c.RPCAddr(0), rpcSecurity(n), c.Dir, c.Dir, svc.GatewayAddr(0), svc.GatewayAddr(0), svc.NATSURL(), svc.NATSURL(),
		n.NATSPasswordFile(localnet.NATSConsumerUser), natsCAFlag(n, svc), kafkaTry(n, svc))
}

// kafkaLine is the banner's line for the Kafka face ("" without one).
func kafkaLine(n *localnet.Net, svc localnet.Services) string {
	if svc.KafkaPort == 0 {
		return ""
	}
	var addrs []string
	for g := 0; g < svc.Gateways; g++ {
		addrs = append(addrs, svc.KafkaAddr(g))
	}
	return fmt.Sprintf("  kafka     %s (SASL user %s or %s, passwords in %s/)\n", strings.Join(addrs, ", "),
		localnet.KafkaUser, localnet.KafkaAdminUser, filepath.Dir(n.KafkaPasswordFile(localnet.KafkaUser)))
}

// kafkaTry shows kcat producing and consuming through the Kafka face.
func kafkaTry(n *localnet.Net, svc localnet.Services) string {
	if svc.KafkaPort == 0 {
		return ""
	}
	args, err := n.KafkaClientArgs(svc, localnet.KafkaUser)
	if err != nil {
		return ""
	}
	for i, a := range args {
		if strings.HasPrefix(a, "sasl.password=") {
			args[i] = fmt.Sprintf("sasl.password=\"$(cat %s)\"", n.KafkaPasswordFile(localnet.KafkaUser))
		}
	}
	x := strings.Join(args, " ")
	return fmt.Sprintf("  seq 1 10 | kcat -P -b %s -t orders %s\n  kcat -C -b %s -t orders -o beginning -e %s\n", svc.KafkaAddr(0), x, svc.KafkaAddr(0), x)
}

// watch prints a status line (height, records committed, height indexed)
// every second on a terminal, every 10 s otherwise, until ctx ends.
func watch(ctx context.Context, w io.Writer, n *localnet.Net, svc localnet.Services) {
	tty := false
	if f, ok := w.(*os.File); ok {
		tty = isatty.IsTerminal(f.Fd())
	}
	every := 10 * time.Second
	if tty {
		every = time.Second
	}
	c, err := n.ClientTLS(svc)
	var gw byzlogv1.GatewayClient
	if err == nil {
		var closeGW func()
		if gw, closeGW, err = dial(svc.GatewayAddr(0), c); err == nil {
			defer closeGW()
		}
	}
	for {
		s := clusterStatus(ctx, n, svc, gw)
		if tty {
			fmt.Fprintf(w, "\r\033[K%s", s)
		} else {
			fmt.Fprintln(w, s)
		}
		select {
		case <-time.After(every):
		case <-ctx.Done():
			return
		}
	}
}

// clusterStatus is one status line: chain height, records committed (the
// sum of every partition's next offset), height the indexer has published.
func clusterStatus(ctx context.Context, n *localnet.Net, svc localnet.Services, gw byzlogv1.GatewayClient) string {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var height int64
	for _, st := range n.Status(ctx) {
		height = max(height, st.Height)
	}
	committed := "?"
	if gw != nil {
		if resp, err := gw.ListTopics(ctx, &byzlogv1.ListTopicsRequest{}); err == nil {
			var total uint64
			for _, t := range resp.Topics {
				for _, p := range t.Partitions {
					total += p.NextOffset
				}
			}
			committed = strconv.FormatUint(total, 10)
		}
	}
	indexed := "?"
	if _, text := indexerReady(ctx, svc); strings.HasPrefix(text, "published ") {
		indexed = strings.Fields(text)[1]
	}
	return fmt.Sprintf("%s  height %d · %s records committed · indexed through height %s",
		time.Now().Format("15:04:05"), height, committed, indexed)
}
