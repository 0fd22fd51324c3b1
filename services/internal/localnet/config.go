// Package localnet runs a byzlog validator network on one machine: one stock
// cometbft node and one byzlog-app per validator, on loopback ports, with all
// data, logs and PID files under one run directory. It generates the network
// with `cometbft testnet`, rewrites each node's config for loopback, starts
// and stops the processes, and reads their status over CometBFT RPC. It only
// ever signals processes whose PID file it wrote and whose command line names
// its own run directory.
package localnet

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/byzlog/byzlog/abciapp/core"
)

// Config is the shape of a local network and where its binaries are.
type Config struct {
	// Dir is the run directory: node homes, app data, logs, PID files.
	Dir string `json:"-"`
	// Validators is the number of validators (3f+1 tolerates f faults).
	Validators int `json:"validators"`
	// BasePort is node 0's p2p port; node i uses BasePort+100i for p2p,
	// +1 for RPC and +2 for ABCI.
	BasePort int `json:"base_port"`
	// Transport is the ABCI transport between node and app: grpc or socket.
	// "kvstore" and "noop" run CometBFT's built-in apps instead of
	// byzlog-app, for benchmark baselines.
	Transport string `json:"transport"`
	// ChainID names the chain.
	ChainID string `json:"chain_id"`
	// Admins is how many admin keys genesis lists (DIR/admin.key, then
	// DIR/admin2.key, ...), and AdminThreshold how many of them must sign
	// a topic deletion or a change of the admins or the validators.
	// 0 reads as 1.
	Admins         int `json:"admins,omitempty"`
	AdminThreshold int `json:"admin_threshold,omitempty"`
	// SnapshotInterval is genesis limits.snapshot_interval: the apps hash
	// the state every this many blocks and serve snapshots of it, so a
	// wiped node can join by state sync (StateSyncNode). 0: never.
	SnapshotInterval int `json:"snapshot_interval,omitempty"`
	// RetainBlocks is every app's --retain-blocks: 0 keeps every block,
	// otherwise nodes prune what is older, the oldest snapshot and the
	// network's indexer (registered in genesis) permitting.
	RetainBlocks int64 `json:"retain_blocks,omitempty"`
	// SnapshotKeep is every app's --snapshot-keep: how many hashed
	// checkpoints stay (0: the app's default, 2). The oldest kept holds
	// pruning back.
	SnapshotKeep int `json:"snapshot_keep,omitempty"`
	// RulesVersion is genesis app_state rules_version: the rules version
	// the chain starts with. 0 is the newest this build executes
	// (core.MaxRulesVersion), resolved and saved when the network is made;
	// tests of the upgrade path start older and schedule the switch. A
	// network saved before the field reads as 1, what its genesis (no
	// rules_version) started with.
	RulesVersion uint64 `json:"rules_version,omitempty"`
	// TimeoutCommit is how long a node waits after a commit before the next
	// height: the floor of the block interval.
	TimeoutCommit Duration `json:"timeout_commit"`
	// BlockMaxBytes is genesis block.max_bytes. With the gRPC transport it
	// must stay under 4 MiB: CometBFT's gRPC ABCI client keeps gRPC's default
	// message cap and halts on a larger block.
	BlockMaxBytes int64 `json:"block_max_bytes"`
	// PeerProxies makes node i reach node j through 127.0.0.1:
	// PeerProxyPort(i, j) instead of j's p2p port, so a Links process in
	// the middle can cut links (partitions, for chaos runs). Without a
	// running Links the nodes cannot reach each other. At most 10 nodes.
	PeerProxies bool `json:"peer_proxies,omitempty"`
	// InsecureRPC serves the nodes' CometBFT RPC in plaintext. By default
	// it is https (rpc.tls_cert_file) with a certificate from the
	// network's CA (DIR/tls/node.pem): the RPC carries every record.
	InsecureRPC bool `json:"insecure_rpc,omitempty"`
	// TxIndex keeps CometBFT's transaction index on byzlog's nodes
	// (tx_index.indexer = "kv"; off: "null").
	TxIndex bool `json:"tx_index,omitempty"`
	// PprofPort, when not 0, makes app i serve Go runtime profiles on
	// PprofPort+i and node i's cometbft on PprofPort+20+i (set when the
	// network is created; not saved with it).
	PprofPort int `json:"-"`
	// CometBFT and App are the paths of the cometbft and byzlog-app binaries.
	CometBFT string `json:"-"`
	App      string `json:"-"`
}

// Duration is a time.Duration that reads and writes as "300ms" in JSON.
type Duration time.Duration

// MarshalJSON writes the duration as a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a Go duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	*d = Duration(v)
	return err
}

const grpcMessageCap = 4 << 20

// DefaultSnapshotInterval is a new network's snapshot_interval: a state
// root and a snapshot every 100 blocks (30 s at the default block time).
const DefaultSnapshotInterval = 100

// Default returns a 4-validator gRPC network on ports 26656.. in ./run/localnet.
func Default() Config {
	return Config{
		Dir:           filepath.Join("run", "localnet"),
		Validators:    4,
		BasePort:      26656,
		Transport:     "grpc",
		ChainID:       "byzlog-localnet",
		TimeoutCommit: Duration(300 * time.Millisecond),
		BlockMaxBytes: 3 << 20,

		SnapshotInterval: DefaultSnapshotInterval,
	}
}

// Validate says which field is wrong and how to fix it.
func (c Config) Validate() error {
	if c.Dir == "" {
		return errors.New("dir: a run directory is required")
	}
	if c.Validators < 1 || c.Validators > 50 {
		return fmt.Errorf("validators (%d): must be between 1 and 50", c.Validators)
	}
	if c.BasePort < 1024 || c.BasePort+100*(c.Validators-1)+3 > 65535 {
		return fmt.Errorf("base_port (%d): with %d validators the ports must fit in 1024..65535", c.BasePort, c.Validators)
	}
	if c.PeerProxies && c.Validators > 10 {
		return fmt.Errorf("peer_proxies with %d validators: at most 10 (each ordered pair has a port in base_port+1000..+1099)", c.Validators)
	}
	switch c.Transport {
	case "grpc":
		if c.BlockMaxBytes >= grpcMessageCap-64<<10 {
			return fmt.Errorf("block_max_bytes (%d) must stay below 4 MiB minus headroom (%d) with the grpc transport, or the chain halts on a large block",
				c.BlockMaxBytes, grpcMessageCap-64<<10)
		}
	case "socket", "kvstore", "noop":
	default:
		return fmt.Errorf("transport %q: must be grpc or socket (or kvstore or noop: CometBFT's built-in apps, for baselines)", c.Transport)
	}
	if c.BlockMaxBytes < 1<<16 {
		return fmt.Errorf("block_max_bytes (%d): must be at least 64 KiB", c.BlockMaxBytes)
	}
	if c.ChainID == "" {
		return errors.New("chain_id: must not be empty")
	}
	if c.Admins < 0 || c.Admins > 64 {
		return fmt.Errorf("admins (%d): must be between 1 and 64", c.Admins)
	}
	if c.RetainBlocks != 0 && c.RetainBlocks < 100 {
		return fmt.Errorf("retain_blocks (%d): 0 (keep every block) or at least 100", c.RetainBlocks)
	}
	if c.SnapshotKeep < 0 || c.SnapshotKeep > 100 {
		return fmt.Errorf("snapshot_keep (%d): 0 (the app's default) or between 1 and 100", c.SnapshotKeep)
	}
	if c.SnapshotInterval != 0 && c.SnapshotInterval < 16 {
		return fmt.Errorf("snapshot_interval (%d): 0 (no snapshots) or at least 16", c.SnapshotInterval)
	}
	if c.RulesVersion > core.MaxRulesVersion {
		return fmt.Errorf("rules_version (%d): 0 (the newest) or 1 to %d, the versions this build executes", c.RulesVersion, core.MaxRulesVersion)
	}
	if c.AdminThreshold < 0 || c.AdminThreshold > max(c.Admins, 1) {
		return fmt.Errorf("admin_threshold (%d): must be between 1 and admins (%d)", c.AdminThreshold, max(c.Admins, 1))
	}
	if d := time.Duration(c.TimeoutCommit); d < 10*time.Millisecond || d > time.Minute {
		return fmt.Errorf("timeout_commit (%s): must be between 10ms and 1m", d)
	}
	for _, b := range []struct{ name, path string }{{"cometbft", c.CometBFT}, {"byzlog-app", c.App}} {
		if b.path == "" {
			return fmt.Errorf("%s binary: path is empty", b.name)
		}
		if st, err := os.Stat(b.path); err != nil || st.IsDir() {
			return fmt.Errorf("%s binary %s: not found (run `make build`, or pass its path)", b.name, b.path)
		}
	}
	return nil
}

// P2PPort, RPCPort and ABCIPort are node i's loopback ports.
func (c Config) P2PPort(i int) int  { return c.BasePort + 100*i }
func (c Config) RPCPort(i int) int  { return c.BasePort + 100*i + 1 }
func (c Config) ABCIPort(i int) int { return c.BasePort + 100*i + 2 }

// DataPort is where node i's app serves the node data service.
func (c Config) DataPort(i int) int { return c.BasePort + 100*i + 3 }

// DataAddr is node i's data service for clients (--node-data): https
// with the RPC's certificate, or plaintext with InsecureRPC.
func (c Config) DataAddr(i int) string {
	scheme := "https"
	if c.InsecureRPC {
		scheme = "http"
	}
	return fmt.Sprintf("%s://127.0.0.1:%d", scheme, c.DataPort(i))
}

// PeerProxyPort is where node i reaches node j with PeerProxies.
func (c Config) PeerProxyPort(i, j int) int { return c.BasePort + 1000 + 10*i + j }

// CometBFTPprofPort is node i's cometbft profile port when PprofPort is set.
func (c Config) CometBFTPprofPort(i int) int { return c.PprofPort + 20 + i }

// RPCAddr is node i's CometBFT RPC address for clients: https, or http
// with InsecureRPC.
func (c Config) RPCAddr(i int) string {
	scheme := "https"
	if c.InsecureRPC {
		scheme = "http"
	}
	return fmt.Sprintf("%s://127.0.0.1:%d", scheme, c.RPCPort(i))
}

// ABCIAddr is where node i's app serves ABCI, as byzlog-app's --listen
// takes it: a unix socket in the node's home, which only processes that
// may enter the home reach and no packet capture on loopback sees (ABCI
// has neither authentication nor encryption); loopback TCP on ABCIPort
// when the socket's path would be too long for one (108 bytes).
func (c Config) ABCIAddr(i int) string {
	if p, err := filepath.Abs(filepath.Join(c.home(i), "abci.sock")); err == nil && len(p) < maxSocketPath {
		return "unix://" + p
	}
	return fmt.Sprintf("127.0.0.1:%d", c.ABCIPort(i))
}

// maxSocketPath is below Linux's 108-byte sun_path.
const maxSocketPath = 100

// proxyApp is node i's proxy_app: ABCIAddr as CometBFT's client for the
// transport dials it. Its gRPC client hands the address, resolved by gRPC,
// to a dialer that knows tcp:// and unix://: "passthrough:///" keeps gRPC's
// own unix resolver from stripping the scheme.
func (c Config) proxyApp(i int) string {
	a := c.ABCIAddr(i)
	switch {
	case c.Transport == "grpc" && strings.HasPrefix(a, "unix://"):
		return "passthrough:///" + a
	case c.Transport == "grpc":
		return a // no tcp:// with gRPC
	case strings.HasPrefix(a, "unix://"):
		return a
	}
	return "tcp://" + a
}

func (c Config) home(i int) string { return filepath.Join(c.Dir, fmt.Sprintf("node%d", i)) }

// rulesVersion is the rules version genesis starts the chain with.
func (c Config) rulesVersion() uint64 {
	if c.RulesVersion == 0 {
		return core.MaxRulesVersion
	}
	return c.RulesVersion
}

// Builtin reports whether the nodes run a CometBFT built-in app, without
// byzlog-app processes.
func (c Config) Builtin() bool { return c.Transport == "kvstore" || c.Transport == "noop" }

func (c Config) savedPath() string { return filepath.Join(c.Dir, "localnet.json") }

// load reads the shape saved by a previous Init in c.Dir; ok is false when
// the directory holds no network yet.
func load(dir string) (saved Config, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, "localnet.json"))
	if errors.Is(err, os.ErrNotExist) {
		return Config{}, false, nil
	}
	if err != nil {
		return Config{}, false, fmt.Errorf("read localnet config: %w", err)
	}
	if err := json.Unmarshal(b, &saved); err != nil {
		return Config{}, false, fmt.Errorf("read localnet config %s: %w", filepath.Join(dir, "localnet.json"), err)
	}
	saved.Dir = dir
	if saved.RulesVersion == 0 {
		saved.RulesVersion = 1 // saved before the field: genesis named no version
	}
	return saved, true, nil
}
