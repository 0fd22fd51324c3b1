package localnet

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/byzlog/byzlog/gateway/client"
	"github.com/byzlog/byzlog/indexer/verify"
	"github.com/byzlog/byzlog/protos/chain/tlsconf"
)

// The network's TLS parties: the gateways share one certificate, NATS has
// one, clients (tests, the CLI with --tls-cert) another, all for loopback.
const (
	gatewayParty = "gateway"
	clientParty  = "client"
	natsParty    = "nats"
	nodeParty    = "node" // the nodes' RPC
)

var tlsHosts = []string{"127.0.0.1", "localhost", "::1"}

// TLS is the network's CA and certificates, under its directory; services
// started create what is missing.
func (n *Net) TLS() tlsconf.Local { return n.cfg.tls() }

func (c Config) tls() tlsconf.Local { return tlsconf.Local{Dir: filepath.Join(c.Dir, "tls")} }

// NodeLink is how clients reach the nodes' RPC: https checked against the
// network's CA, or plaintext with InsecureRPC.
func (n *Net) NodeLink() (verify.NodeLink, error) {
	if n.cfg.InsecureRPC {
		return verify.NodeLink{}, nil
	}
	if err := n.ensureTLS(); err != nil {
		return verify.NodeLink{}, err
	}
	c, err := tlsconf.Files{CA: n.TLS().CA()}.Client()
	return verify.NodeLink{TLS: c}, err
}

// NodeServerTLS is the TLS configuration the nodes' RPC serves with, for
// a proxy in a node's place; nil with InsecureRPC.
func (n *Net) NodeServerTLS() (*tls.Config, error) {
	if n.cfg.InsecureRPC {
		return nil, nil
	}
	if err := n.ensureTLS(); err != nil {
		return nil, err
	}
	f := n.TLS().Party(nodeParty)
	f.CA = ""
	return f.Server()
}

// RPCHTTPClient is an HTTP client for the nodes' RPC (NodeLink).
func (n *Net) RPCHTTPClient(timeout time.Duration) (*http.Client, error) {
	l, err := n.NodeLink()
	if err != nil {
		return nil, err
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = l.TLS
	return &http.Client{Timeout: timeout, Transport: t}, nil
}

// ClientTLS is the TLS configuration a client of s's gateways uses: their
// certificate checked against the network's CA and, with s.MutualTLS, the
// network's client certificate. nil when s is insecure.
func (n *Net) ClientTLS(s Services) (*tls.Config, error) {
	if s.Insecure {
		return nil, nil
	}
	if err := n.ensureTLS(); err != nil {
		return nil, err
	}
	f := n.TLS().Party(clientParty)
	if !s.MutualTLS {
		f.Cert, f.Key = "", ""
	}
	return f.Client()
}

// GatewayServerTLS is the TLS configuration the gateways serve with (for a
// proxy in their place); nil when s is insecure.
func (n *Net) GatewayServerTLS(s Services) (*tls.Config, error) {
	if s.Insecure {
		return nil, nil
	}
	if err := n.ensureTLS(); err != nil {
		return nil, err
	}
	f := n.TLS().Party(gatewayParty)
	if !s.MutualTLS {
		f.CA = ""
	}
	return f.Server()
}

// ensureTLS makes the network's CA and certificates that are missing.
func (n *Net) ensureTLS() error {
	if err := n.TLS().Ensure(tlsHosts, gatewayParty, clientParty, natsParty, nodeParty); err != nil {
		return fmt.Errorf("TLS certificates in %s: %w", n.TLS().Dir, err)
	}
	return nil
}

// GatewayHTTPClient is an HTTP client for gateway g's HTTP face (JSON API,
// /metrics, /healthz) and its base URL: https checked against the
// network's CA, or http when s is insecure.
func (n *Net) GatewayHTTPClient(s Services, g int) (*http.Client, string, error) {
	c, err := n.ClientTLS(s)
	if err != nil {
		return nil, "", err
	}
	if c == nil {
		return &http.Client{Timeout: 30 * time.Second}, "http://" + s.GatewayHTTP(g), nil
	}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: c}}, "https://" + s.GatewayHTTP(g), nil
}

// ProducerTransport is ClientTLS as a producer or admin option.
func (n *Net) ProducerTransport(s Services) (client.Option, error) {
	c, err := n.ClientTLS(s)
	if err != nil || c == nil {
		return client.WithInsecure(), err
	}
	return client.WithTLS(c), nil
}

// Services are the processes `byzlog run` adds to the validators: a NATS
// server with JetStream, gateways and an indexer, all on loopback, with
// their data and logs under the network's directory. Ports are not part of
// the saved network: each run says them.
type Services struct {
	// NATSPort is the NATS client port; its monitoring port, when
	// NATSMonitor, is 8222 + (NATSPort - 4222).
	NATSPort int
	// NATSMonitor serves NATS's HTTP monitoring (byzlog run's, on 8222).
	// Off for the other clusters: nothing reads it, and their monitoring
	// ports fall in the ephemeral range, where an outgoing connection's
	// source port can hold one.
	NATSMonitor bool
	// Gateways is how many gateways to run; gateway g serves gRPC on
	// GatewayPort+2g and HTTP on GatewayPort+2g+1.
	Gateways    int
	GatewayPort int
	// KafkaPort, when not 0, makes gateway g serve the Kafka face on
	// KafkaPort+g, with SASL users of writeKafkaUsers.
	KafkaPort int
	// KafkaAutoCreate makes the Kafka faces create the topics clients name,
	// with the genesis admin key (byzlog run's network: Kafka's default,
	// which client test suites and a first try with kcat expect).
	KafkaAutoCreate bool
	// KafkaAutoCreatePartitions are an auto-created topic's partitions (0:
	// the gateway's default, 1).
	KafkaAutoCreatePartitions int
	// IndexerPort serves the indexer's /metrics, /healthz and /readyz.
	IndexerPort int
	// PprofPort, when not 0, makes gateway g serve Go runtime profiles on
	// PprofPort+g, nats-server on PprofPort+8 (its prof_port) and the
	// indexer on PprofPort+9.
	PprofPort int
	// GatewaysOnly starts the gateways without NATS and the indexer: the
	// write path alone, for benchmarks that isolate it.
	GatewaysOnly bool
	// ProxiedRPC maps a node to the loopback port of a proxy in front of
	// its RPC (a tampering one, in chaos runs): the gateways and the
	// indexer reach that node through it, and not through its data
	// service (which would go around the proxy).
	ProxiedRPC map[int]int
	// Insecure serves the gateways and NATS in plaintext. By default they
	// serve TLS with certificates of the network's CA (Net.TLS), which
	// clients check them against (Net.ClientTLS, Net.NATSOptions). NATS
	// asks for a user and password either way.
	Insecure bool
	// MutualTLS makes the gateways require a client certificate of the
	// network's CA (Net.TLS().Party("client")).
	MutualTLS bool
	// NATSLazySync weakens NATS to its default sync (every 2 minutes) for
	// chaos runs that show what a power loss then costs. By default the
	// server syncs every NATSSyncInterval.
	NATSLazySync bool
	// Binaries.
	NATS, Gateway, Indexer string
}

// DefaultServices is one gateway on 7070 (HTTP 7071, Kafka 9092), NATS on
// 4222 (monitoring 8222) and the indexer on 7080, as DESIGN.md lays them
// out.
func DefaultServices() Services {
	return Services{NATSPort: 4222, NATSMonitor: true, Gateways: 1, GatewayPort: 7070, KafkaPort: 9092, IndexerPort: 7080}
}

// Validate names what is wrong.
func (s Services) Validate() error {
	for _, p := range []struct {
		name string
		port int
	}{{"nats port", s.NATSPort}, {"gateway port", s.GatewayPort}, {"indexer port", s.IndexerPort}} {
		if p.port < 1024 || p.port > 65000 {
			return fmt.Errorf("%s %d: want 1024..65000", p.name, p.port)
		}
	}
	if s.KafkaPort != 0 && (s.KafkaPort < 1024 || s.KafkaPort+s.Gateways > 65000) {
		return fmt.Errorf("kafka port %d: want 0 (none) or 1024..65000", s.KafkaPort)
	}
	if s.Insecure && s.MutualTLS {
		return errors.New("mutual TLS needs TLS: drop insecure or mutual_tls")
	}
	if s.Gateways < 1 || s.Gateways > 8 {
		return fmt.Errorf("gateways (%d): want 1 to 8", s.Gateways)
	}
	for _, b := range []struct{ name, path string }{{"nats-server", s.NATS}, {"byzlog-gateway", s.Gateway}, {"byzlog-indexer", s.Indexer}} {
		if b.path == "" {
			return fmt.Errorf("%s binary not given", b.name)
		}
	}
	return nil
}

// NATSURL is the NATS server's client URL.
func (s Services) NATSURL() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.NATSPort) }

// MonitorPort is the NATS server's HTTP monitoring port.
func (s Services) MonitorPort() int { return 8222 + s.NATSPort - 4222 }

// NATSPprofPort is where nats-server serves Go runtime profiles when
// PprofPort is set.
func (s Services) NATSPprofPort() int { return s.PprofPort + 8 }

// GatewayAddr is gateway g's gRPC address, GatewayHTTP its HTTP one.
func (s Services) GatewayAddr(g int) string { return fmt.Sprintf("127.0.0.1:%d", s.GatewayPort+2*g) }

// GatewayHTTP is gateway g's HTTP address (JSON API, /metrics, /healthz).
func (s Services) GatewayHTTP(g int) string { return fmt.Sprintf("127.0.0.1:%d", s.GatewayPort+2*g+1) }

// IndexerAddr is the indexer's HTTP address.
func (s Services) IndexerAddr() string { return fmt.Sprintf("127.0.0.1:%d", s.IndexerPort) }

// rpcURL is where the services reach node i's RPC; a proxy in its place
// serves the same scheme (NodeServerTLS).
func (s Services) rpcURL(c Config, i int) string {
	if port, ok := s.ProxiedRPC[i]; ok {
		scheme, _, _ := strings.Cut(c.RPCAddr(i), "://")
		return fmt.Sprintf("%s://127.0.0.1:%d", scheme, port)
	}
	return c.RPCAddr(i)
}

// nodeDataArgs are the gateway's and indexer's --node-data for nodes
// (their indexes, in the order of --nodes): the apps' data services. None
// for CometBFT's built-in apps; an empty entry for a node whose RPC is
// proxied: a tampering proxy stands for that node, and its data service
// would go around it.
func (n *Net) nodeDataArgs(s Services, nodes []int) []string {
	if n.cfg.Builtin() {
		return nil
	}
	addrs := make([]string, len(nodes))
	for k, i := range nodes {
		if _, proxied := s.ProxiedRPC[i]; !proxied {
			addrs[k] = n.cfg.DataAddr(i)
		}
	}
	return []string{"--node-data", strings.Join(addrs, ",")}
}

// nodeLinkArgs are the gateway's and indexer's flags for the nodes' RPC.
func (n *Net) nodeLinkArgs() []string {
	if n.cfg.InsecureRPC {
		return nil
	}
	return []string{"--node-tls-ca", n.TLS().CA()}
}

// natsProc runs NATS with the configuration StartServices writes
// (writeNATSConfig: TLS, users and their permissions).
func (n *Net) natsProc(s Services) proc {
	dir := n.natsDir()
	conf := n.natsConfigPath()
	return proc{
		name: NATSName, bin: s.NATS, mark: conf,
		args:    []string{"-c", conf},
		logPath: filepath.Join(dir, "nats.log"), pidPath: filepath.Join(dir, "nats.pid"),
	}
}

func (n *Net) gatewayProc(s Services, g int) proc {
	dir := filepath.Join(n.cfg.Dir, fmt.Sprintf("gateway%d", g))
	var rpcs []string
	var order []int
	for i := 0; i < n.cfg.Validators; i++ {
		order = append(order, (g+i)%n.cfg.Validators) // spread the gateways over the nodes
		rpcs = append(rpcs, s.rpcURL(n.cfg, order[i]))
	}
	args := append([]string{"--listen", s.GatewayAddr(g), "--http-listen", s.GatewayHTTP(g),
		"--nodes", strings.Join(rpcs, ","), "--log-format", "json",
		"--hex-submit-max-bytes", strconv.Itoa((RPCMaxBodyBytes - 16) / 2)}, n.nodeLinkArgs()...)
	args = append(args, n.nodeDataArgs(s, order)...)
	args = append(args, n.kafkaArgs(s, g)...)
	if s.PprofPort != 0 {
		args = append(args, "--pprof-listen", fmt.Sprintf("127.0.0.1:%d", s.PprofPort+g))
	}
	if s.Insecure {
		args = append(args, "--insecure")
	} else {
		f := n.TLS().Party(gatewayParty)
		args = append(args, "--tls-cert", f.Cert, "--tls-key", f.Key)
		if s.MutualTLS {
			args = append(args, "--tls-client-ca", f.CA)
		}
	}
	return proc{
		name: GatewayName(g), bin: s.Gateway, mark: s.GatewayAddr(g),
		args:    args,
		logPath: filepath.Join(dir, "gateway.log"), pidPath: filepath.Join(dir, "gateway.pid"),
	}
}

// The network's indexer reports its progress every
// IndexerProgressInterval, as it was IndexerProgressDelay before: ten
// times the NATS server's sync interval (NATSSyncInterval).
const (
	IndexerProgressInterval = 2 * time.Second
	IndexerProgressDelay    = 10 * time.Second
)

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func (n *Net) indexerProc(s Services) proc {
	dir := filepath.Join(n.cfg.Dir, "indexer")
	genesis := filepath.Join(n.cfg.home(0), "config", "genesis.json")
	var rpcs []string
	var order []int
	for i := 0; i < n.cfg.Validators; i++ {
		rpcs = append(rpcs, s.rpcURL(n.cfg, i))
		order = append(order, i)
	}
	args := append([]string{"--genesis", genesis, "--nodes", strings.Join(rpcs, ","), "--nats", s.NATSURL(),
		"--nats-user", NATSIndexerUser, "--nats-password-file", n.NATSPasswordFile(NATSIndexerUser), "--nats-authz", n.NATSAuthzPath(),
		"--http-listen", s.IndexerAddr(), "--log-format", "json"}, n.nodeLinkArgs()...)
	args = append(args, n.nodeDataArgs(s, order)...)
	if !s.Insecure {
		args = append(args, "--nats-tls-ca", n.TLS().CA())
	}
	// A network made before indexers were registered has no key.
	if key := filepath.Join(n.cfg.Dir, indexerKeyFile); fileExists(key) {
		args = append(args, "--id", IndexerID, "--progress-key", key,
			"--progress-interval", IndexerProgressInterval.String(), "--progress-delay", IndexerProgressDelay.String())
	}
	if s.PprofPort != 0 {
		args = append(args, "--pprof-listen", fmt.Sprintf("127.0.0.1:%d", s.PprofPort+9))
	}
	return proc{
		name: IndexerName, bin: s.Indexer, mark: genesis,
		args:    args,
		logPath: filepath.Join(dir, "indexer.log"), pidPath: filepath.Join(dir, "indexer.pid"),
	}
}

// serviceProcs lists the services' processes whose PID files exist, in
// the order they stop: indexer, gateways, NATS.
func (n *Net) serviceProcs() []proc {
	var ps []proc
	mk := func(name, dir, file string) proc {
		d := filepath.Join(n.cfg.Dir, dir)
		return proc{name: name, pidPath: filepath.Join(d, file), logPath: filepath.Join(d, strings.TrimSuffix(file, ".pid")+".log")}
	}
	ps = append(ps, mk("indexer", "indexer", "indexer.pid"))
	gws, _ := filepath.Glob(filepath.Join(n.cfg.Dir, "gateway*", "gateway.pid"))
	for _, p := range gws {
		ps = append(ps, mk(filepath.Base(filepath.Dir(p)), filepath.Base(filepath.Dir(p)), "gateway.pid"))
	}
	ps = append(ps, mk("nats-server", "nats", "nats.pid"))
	var out []proc
	for _, p := range ps {
		if _, err := os.Stat(p.pidPath); err == nil {
			p.mark = n.serviceMark(p)
			out = append(out, p)
		}
	}
	return out
}

// serviceMark recovers the mark a service process was started with from
// its PID file's neighbour, so Down can check the PID is still ours.
func (n *Net) serviceMark(p proc) string {
	b, err := os.ReadFile(p.pidPath + ".mark")
	if err != nil {
		return "\x00" // matches no argument: the process is not signalled
	}
	return string(b)
}

// StartServices starts NATS, the gateways and the indexer against the
// running validators and waits until each listens. On failure it stops
// what it started.
func (n *Net) StartServices(ctx context.Context, s Services, progress io.Writer) error {
	if err := s.Validate(); err != nil {
		return err
	}
	if err := portsFree(s); err != nil {
		return err
	}
	if err := n.ensureTLS(); err != nil {
		return err
	}
	if s.KafkaPort != 0 {
		if err := n.writeKafkaUsers(); err != nil {
			return fmt.Errorf("kafka users: %w", err)
		}
	}
	if !s.GatewaysOnly {
		if err := n.writeNATSConfig(s); err != nil {
			return fmt.Errorf("NATS configuration: %w", err)
		}
	}
	type step struct {
		p    proc
		addr string
	}
	var steps []step
	if !s.GatewaysOnly {
		steps = append(steps, step{n.natsProc(s), fmt.Sprintf("127.0.0.1:%d", s.NATSPort)})
	}
	for g := 0; g < s.Gateways; g++ {
		steps = append(steps, step{n.gatewayProc(s, g), s.GatewayAddr(g)})
	}
	if !s.GatewaysOnly {
		steps = append(steps, step{n.indexerProc(s), s.IndexerAddr()})
	}
	for _, st := range steps {
		if err := os.MkdirAll(filepath.Dir(st.p.pidPath), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(st.p.pidPath+".mark", []byte(st.p.mark), 0o644); err != nil {
			return err
		}
		if err := n.startProc(st.p); err != nil {
			_ = n.StopServices(io.Discard)
			return err
		}
		if err := waitListening(ctx, st.addr, time.Minute, n.exited(st.p)); err != nil {
			_ = n.StopServices(io.Discard)
			return fmt.Errorf("%s did not listen on %s: %w\nlast lines of %s:\n%s", st.p.name, st.addr, err, st.p.logPath, st.p.tail(15))
		}
		fmt.Fprintf(progress, "started %s on %s\n", st.p.name, st.addr)
	}
	return nil
}

// StopServices stops the indexer, gateways and NATS (SIGTERM, then SIGKILL
// after a grace period) and reports each it stopped.
func (n *Net) StopServices(progress io.Writer) error {
	return n.stopAll(n.serviceProcs(), progress)
}

func portsFree(s Services) error {
	ports := []int{s.NATSPort, s.IndexerPort}
	if s.NATSMonitor {
		ports = append(ports, s.MonitorPort())
	}
	for g := 0; g < s.Gateways; g++ {
		ports = append(ports, s.GatewayPort+2*g, s.GatewayPort+2*g+1)
		if s.KafkaPort != 0 {
			ports = append(ports, s.KafkaPort+g)
		}
	}
	for _, port := range ports {
		if err := portFree(port); err != nil {
			return fmt.Errorf("port %d is in use, perhaps by another byzlog run: %w", port, err)
		}
	}
	return nil
}

// portFree reports whether port can be listened on, waiting up to 10 s: a
// port in the ephemeral range (NATS's monitoring port often is) can be
// held for a moment as the source port of some outgoing connection.
func portFree(port int) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			return ln.Close()
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(500 * time.Millisecond)
	}
}
