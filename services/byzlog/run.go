package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/spf13/cobra"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/services/internal/gatewaylink"
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
			n, err := localnet.OpenChecked(cmd.Flags(), cfg)
			if err != nil {
				return err
			}
			bin := localnet.BinDir()
			svc.NATS, svc.Gateway, svc.Indexer = localnet.FindBinary(bin, "nats-server"), localnet.FindBinary(bin, "byzlog-gateway"), localnet.FindBinary(bin, "byzlog-indexer")
			errOut := cmd.ErrOrStderr()
			if err := localnet.StartAll(ctx, n, svc, errOut); err != nil {
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
	f.BoolVar(&svc.KafkaAutoCreate, "kafka-auto-create", true, "the Kafka faces create the topics clients name (Kafka's auto.create.topics.enable), with the network's admin key")
	f.IntVar(&svc.KafkaAutoCreatePartitions, "kafka-auto-create-partitions", 1, "partitions of an auto-created topic (Kafka's num.partitions)")
	f.IntVar(&svc.NATSPort, "nats-port", svc.NATSPort, "NATS client port (monitoring: 8222 + the difference from 4222)")
	f.IntVar(&svc.IndexerPort, "indexer-port", svc.IndexerPort, "indexer HTTP port (/metrics, /healthz, /readyz)")
	localnet.AddServiceTLSFlags(f, &svc)
	return cmd
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
	auto := ""
	if svc.KafkaAutoCreate {
		auto = "; topics a client names are created"
	}
	return fmt.Sprintf("  kafka     %s (SASL user %s or %s, passwords in %s/%s)\n", strings.Join(addrs, ", "),
		localnet.KafkaUser, localnet.KafkaAdminUser, filepath.Dir(n.KafkaPasswordFile(localnet.KafkaUser)), auto)
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
		if gw, closeGW, err = gatewaylink.Dial(svc.GatewayAddr(0), c); err == nil {
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
	if _, text := localnet.IndexerReady(ctx, svc); strings.HasPrefix(text, "published ") {
		indexed = strings.Fields(text)[1]
	}
	return fmt.Sprintf("%s  height %d · %s records committed · indexed through height %s",
		time.Now().Format("15:04:05"), height, committed, indexed)
}
