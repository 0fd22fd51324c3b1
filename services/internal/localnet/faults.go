package localnet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	cmtcfg "github.com/cometbft/cometbft/config"
	"github.com/cometbft/cometbft/p2p"
)

// Process-level faults for tests and `byzlog-lab chaos`: each acts on one named
// process of this network, found by its PID file and checked to be ours
// (pid plus its marking argument), so nothing else is ever signalled.

// CometBFTName and AppName are the process names of node i's halves.
func CometBFTName(i int) string { return fmt.Sprintf("node%d/cometbft", i) }

// AppName is node i's byzlog-app process name.
func AppName(i int) string { return fmt.Sprintf("node%d/byzlog-app", i) }

// GatewayName is gateway g's process name.
func GatewayName(g int) string { return fmt.Sprintf("gateway%d", g) }

// Names of the single service processes.
const (
	IndexerName = "indexer"
	NATSName    = "nats-server"
)

// named finds the process called name among the nodes' and s's processes.
func (n *Net) named(s Services, name string) (proc, bool) {
	for i := 0; i < n.cfg.Validators; i++ {
		if name == CometBFTName(i) {
			return n.cometbft(i), true
		}
		if name == AppName(i) && !n.cfg.Builtin() {
			return n.app(i), true
		}
	}
	if name == NATSName {
		return n.natsProc(s), true
	}
	if name == IndexerName {
		return n.indexerProc(s), true
	}
	for g := 0; g < s.Gateways; g++ {
		if name == GatewayName(g) {
			return n.gatewayProc(s, g), true
		}
	}
	return proc{}, false
}

// Kill sends SIGKILL to the named process (a crash, not a stop) and waits
// until it is gone. Killing a process that is not running is an error.
func (n *Net) Kill(s Services, name string) error {
	p, ok := n.named(s, name)
	if !ok {
		return fmt.Errorf("kill %s: no such process in this network", name)
	}
	was, err := p.signal(syscall.SIGKILL, 10*time.Second)
	if err != nil {
		return err
	}
	if !was {
		return fmt.Errorf("kill %s: it is not running", name)
	}
	if done := n.exited(p); done != nil {
		<-done
	}
	_ = os.Remove(p.pidPath)
	return nil
}

// Pause stops the named process with SIGSTOP; Resume continues it. A
// paused process keeps its sockets: peers see a node that stopped
// answering, not one that left.
func (n *Net) Pause(s Services, name string) error { return n.send(s, name, syscall.SIGSTOP) }

// Resume continues a process stopped by Pause.
func (n *Net) Resume(s Services, name string) error { return n.send(s, name, syscall.SIGCONT) }

func (n *Net) send(s Services, name string, sig syscall.Signal) error {
	p, ok := n.named(s, name)
	if !ok {
		return fmt.Errorf("signal %s: no such process in this network", name)
	}
	pid := p.pid()
	if pid == 0 {
		return fmt.Errorf("signal %s: it is not running", name)
	}
	if err := syscall.Kill(pid, sig); err != nil {
		return fmt.Errorf("signal %s (pid %d) with %s: %w", name, pid, sig, err)
	}
	return nil
}

// IsRunning reports whether the named process is alive.
func (n *Net) IsRunning(s Services, name string) bool {
	p, ok := n.named(s, name)
	return ok && p.pid() != 0
}

// Start starts the named process again, as it was configured, and waits
// until it listens (a cometbft node: its RPC port; an app: its ABCI port).
// A node's app must be running before its cometbft is started.
func (n *Net) Start(ctx context.Context, s Services, name string) error {
	p, ok := n.named(s, name)
	if !ok {
		return fmt.Errorf("start %s: no such process in this network", name)
	}
	return n.startListening(ctx, p, n.listenAddr(s, name))
}

// StartApp starts node i's app alone with another binary and extra
// environment (a failpoints build), and waits for its ABCI port.
func (n *Net) StartApp(ctx context.Context, i int, appBin string, env []string) error {
	a := n.app(i)
	a.bin, a.env = appBin, env
	return n.startListening(ctx, a, n.cfg.ABCIAddr(i))
}

func (n *Net) startListening(ctx context.Context, p proc, addr string) error {
	if err := n.startProc(p); err != nil {
		return err
	}
	if addr == "" {
		return nil
	}
	if err := waitListening(ctx, addr, time.Minute, n.exited(p)); err != nil {
		return fmt.Errorf("%s did not listen on %s: %w\nlast lines of %s:\n%s", p.name, addr, err, p.logPath, p.tail(15))
	}
	return nil
}

// listenAddr is the address that shows the named process is up.
func (n *Net) listenAddr(s Services, name string) string {
	for i := 0; i < n.cfg.Validators; i++ {
		switch name {
		case CometBFTName(i):
			return fmt.Sprintf("127.0.0.1:%d", n.cfg.RPCPort(i))
		case AppName(i):
			return n.cfg.ABCIAddr(i)
		}
	}
	switch name {
	case NATSName:
		return fmt.Sprintf("127.0.0.1:%d", s.NATSPort)
	case IndexerName:
		return s.IndexerAddr()
	}
	for g := 0; g < s.Gateways; g++ {
		if name == GatewayName(g) {
			return s.GatewayAddr(g)
		}
	}
	return ""
}

// ResetNode wipes stopped node i's chain data and app state, as an
// operator rebuilds a validator whose state is damaged (docs/operating.md,
// "Rebuilding a validator"): `cometbft reset-state` (blocks, state, WAL,
// evidence, tx index; the keys and the signing state kept) and the app's
// data directory. The signing state is then moved to two heights past the
// highest block its peers report (or written there if it is unreadable):
// never back to genesis, as `unsafe-reset-all` would, which lets the key
// sign again a height it signed before it stopped, a double sign. Started
// again, the node syncs every block from its peers and then signs only
// heights it cannot have signed.
func (n *Net) ResetNode(ctx context.Context, i int) error {
	if c, a := n.Alive(i); c || a {
		return fmt.Errorf("reset node%d: stop it first (cometbft running: %v, app running: %v)", i, c, a)
	}
	var tip int64
	for _, s := range n.Status(ctx) {
		if s.Node != i && s.Err == nil {
			tip = max(tip, s.Height)
		}
	}
	if tip == 0 {
		return fmt.Errorf("reset node%d: no peer answers its height; a validator is rebuilt from running peers", i)
	}
	out, err := exec.Command(n.cfg.CometBFT, "reset-state", "--home", n.cfg.home(i)).CombinedOutput()
	if err != nil {
		return fmt.Errorf("reset node%d: cometbft reset-state: %w\n%s", i, err, out)
	}
	for _, d := range []string{"app", "app.snapshots"} {
		if err := os.RemoveAll(filepath.Join(n.cfg.home(i), d)); err != nil {
			return fmt.Errorf("reset node%d: remove the app's data: %w", i, err)
		}
	}
	// A node state-synced before (StateSyncNode) replays from its peers now.
	if err := n.writeNodeConfig(i, nil); err != nil {
		return err
	}
	return RaiseSignState(filepath.Join(n.cfg.home(i), "data", "priv_validator_state.json"), tip+2)
}

// RaiseSignState makes the validator signing state in path no lower than
// height (round 0, step 0), so its key refuses to sign any height below:
// an unreadable state is written anew. CometBFT's FilePV reads the height
// as a decimal string.
func RaiseSignState(path string, height int64) error {
	var st struct {
		Height string `json:"height"`
	}
	if b, err := os.ReadFile(path); err == nil && json.Unmarshal(b, &st) == nil {
		if h, err := strconv.ParseInt(st.Height, 10, 64); err == nil && h >= height {
			return nil
		}
	}
	b := fmt.Sprintf("{\n  \"height\": \"%d\",\n  \"round\": 0,\n  \"step\": 0\n}", height)
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err == nil {
		_, err = f.WriteString(b)
		err = errors.Join(err, f.Sync(), f.Close())
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		return fmt.Errorf("write signing state %s: %w", path, err)
	}
	return nil
}

// StateSyncNode makes node i, reset and stopped (ResetNode), join by state
// sync when it starts: its config gets [statesync] with two other nodes'
// RPC and a root of trust (a recent header both report the same hash for).
// The node then fetches a snapshot from its peers, its app checks it
// against the light-client-verified app hash, and it blocksyncs from the
// snapshot's height on, instead of replaying every block.
func (n *Net) StateSyncNode(ctx context.Context, i int) error {
	var others []int
	for j := 0; j < n.cfg.Validators && len(others) < 2; j++ {
		if j != i {
			others = append(others, j)
		}
	}
	if len(others) < 2 {
		return fmt.Errorf("state sync node%d: two other nodes are needed for the root of trust", i)
	}
	var height int64
	var hash string
	for _, j := range others {
		c, err := n.Client(j)
		if err != nil {
			return err
		}
		if height == 0 {
			st, err := c.Status(ctx)
			if err != nil {
				return fmt.Errorf("state sync node%d: node%d status: %w", i, j, err)
			}
			height = max(st.SyncInfo.LatestBlockHeight-2, 1)
		}
		hdr, err := c.Header(ctx, &height)
		if err != nil {
			return fmt.Errorf("state sync node%d: node%d header %d: %w", i, j, height, err)
		}
		h := hdr.Header.Hash().String()
		if hash != "" && h != hash {
			return fmt.Errorf("state sync node%d: node%d and node%d disagree on header %d", i, others[0], j, height)
		}
		hash = h
	}
	return n.writeNodeConfig(i, func(cfg *cmtcfg.Config) {
		cfg.StateSync.Enable = true
		cfg.StateSync.RPCServers = []string{n.cfg.RPCAddr(others[0]), n.cfg.RPCAddr(others[1])}
		cfg.StateSync.TrustHeight, cfg.StateSync.TrustHash = height, hash
		cfg.StateSync.DiscoveryTime = 5 * time.Second
	})
}

// writeNodeConfig writes node i's config.toml as the network makes it,
// changed by edit (nil: as made).
func (n *Net) writeNodeConfig(i int, edit func(*cmtcfg.Config)) error {
	ids := make([]p2p.ID, n.cfg.Validators)
	for j := range ids {
		key, err := p2p.LoadNodeKey(filepath.Join(n.cfg.home(j), "config", "node_key.json"))
		if err != nil {
			return fmt.Errorf("read node %d key: %w", j, err)
		}
		ids[j] = key.ID()
	}
	cfg := n.cfg.nodeConfig(i, ids)
	if edit != nil {
		edit(cfg)
	}
	cmtcfg.WriteConfigFile(filepath.Join(n.cfg.home(i), "config", "config.toml"), cfg)
	return nil
}

// AddNode makes a new node beside the validators, node Validators+k: its
// keys from cometbft init, the network's genesis, the validators as
// persistent peers (directly, not through peer proxies) and [statesync]
// from two of them (StateSyncNode). StartNode starts it: it joins by state
// sync, as a full node until a SetValidator gives its key power. Status,
// WaitHeight and Down count it until RemoveNode. A node added, removed and
// added again is wiped (ResetNode) and state-syncs again.
func (n *Net) AddNode(ctx context.Context) (int, error) {
	i := n.nodes()
	home := n.cfg.home(i)
	if _, err := os.Stat(filepath.Join(home, "config", "priv_validator_key.json")); err != nil {
		if out, err := exec.Command(n.cfg.CometBFT, "init", "--home", home).CombinedOutput(); err != nil {
			return 0, fmt.Errorf("add node%d: cometbft init: %w\n%s", i, err, out)
		}
		gen, err := os.ReadFile(filepath.Join(n.cfg.home(0), "config", "genesis.json"))
		if err != nil {
			return 0, fmt.Errorf("add node%d: %w", i, err)
		}
		if err := os.WriteFile(filepath.Join(home, "config", "genesis.json"), gen, 0o644); err != nil {
			return 0, fmt.Errorf("add node%d: %w", i, err)
		}
	}
	n.joined++
	if err := n.ResetNode(ctx, i); err != nil {
		n.joined--
		return 0, err
	}
	if err := n.StateSyncNode(ctx, i); err != nil {
		n.joined--
		return 0, err
	}
	return i, nil
}

// RemoveNode stops node i, the last one AddNode made, and leaves it out of
// Status and Down again (its files stay).
func (n *Net) RemoveNode(i int) error {
	if i != n.nodes()-1 || i < n.cfg.Validators {
		return fmt.Errorf("remove node%d: only the last added node (node%d) can be removed", i, n.nodes()-1)
	}
	if err := n.kill(i, false); err != nil {
		return err
	}
	n.joined--
	return nil
}

// ValidatorKey is node i's ed25519 consensus public key (from its
// priv_validator_key.json).
func (n *Net) ValidatorKey(i int) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(n.cfg.home(i), "config", "priv_validator_key.json"))
	if err != nil {
		return nil, err
	}
	var f struct {
		PubKey struct {
			Value []byte `json:"value"`
		} `json:"pub_key"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("node%d priv_validator_key.json: %w", i, err)
	}
	return f.PubKey.Value, nil
}
