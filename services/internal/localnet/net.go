package localnet

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	cmtcfg "github.com/cometbft/cometbft/config"
	"github.com/cometbft/cometbft/p2p"
	rpchttp "github.com/cometbft/cometbft/rpc/client/http"
	cmttypes "github.com/cometbft/cometbft/types"
	"github.com/mattn/go-isatty"

	"github.com/byzlog/byzlog/abciapp/core"
	"github.com/byzlog/byzlog/protos/wire"
	"github.com/byzlog/byzlog/services/internal/keyfile"
)

// ErrRunning is returned by Up when processes of the network still run.
var ErrRunning = errors.New("localnet is already running")

// Net is a local network in a run directory.
type Net struct {
	cfg      Config
	existing bool

	mu       sync.Mutex
	children map[string]<-chan struct{} // pidPath -> exit of a process this Net started
	// joined counts the nodes AddNode made beside the validators (nodes
	// Validators.. Validators+joined-1): Status and Down include them.
	joined int
}

// nodes is how many nodes Status and Down cover: the validators of genesis
// and the nodes added since.
func (n *Net) nodes() int { return n.cfg.Validators + n.joined }

// Open returns the network in cfg.Dir. When the directory already holds one,
// its saved shape (validators, ports, transport, chain) wins over cfg's and
// Existing reports true; cfg's binary paths are used either way.
func Open(cfg Config) (*Net, error) {
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("run directory %s: %w", cfg.Dir, err)
	}
	cfg.Dir = dir
	saved, ok, err := load(dir)
	if err != nil {
		return nil, err
	}
	if ok {
		saved.CometBFT, saved.App = cfg.CometBFT, cfg.App
		cfg = saved
	}
	return &Net{cfg: cfg, existing: ok, children: map[string]<-chan struct{}{}}, nil
}

// Config returns the network's shape.
func (n *Net) Config() Config { return n.cfg }

// Existing reports whether the run directory held a network when opened.
func (n *Net) Existing() bool { return n.existing }

func (n *Net) cometbft(i int) proc {
	home := n.cfg.home(i)
	p := proc{
		name: CometBFTName(i), bin: n.cfg.CometBFT,
		args: []string{"start", "--home", home}, mark: home,
		logPath: filepath.Join(home, "cometbft.log"), pidPath: filepath.Join(home, "cometbft.pid"),
	}
	if !n.cfg.InsecureRPC {
		// State sync's light client reads peers' https RPC: it must trust
		// the network's CA.
		p.env = []string{"SSL_CERT_FILE=" + n.cfg.tls().CA()}
	}
	return p
}

func (n *Net) app(i int) proc {
	home := n.cfg.home(i)
	data := filepath.Join(home, "app")
	args := []string{
		"--listen", n.cfg.ABCIAddr(i), "--transport", n.cfg.Transport,
		"--data-dir", data, "--log-format", "json",
	}
	if n.cfg.RetainBlocks > 0 {
		args = append(args, "--retain-blocks", strconv.FormatInt(n.cfg.RetainBlocks, 10))
	}
	if n.cfg.SnapshotKeep > 0 {
		args = append(args, "--snapshot-keep", strconv.Itoa(n.cfg.SnapshotKeep))
	}
	if n.cfg.PprofPort != 0 {
		args = append(args, "--pprof-listen", fmt.Sprintf("127.0.0.1:%d", n.cfg.PprofPort+i))
	}
	args = append(args, n.peerArgs(i)...)
	args = append(args, "--data-listen", fmt.Sprintf("127.0.0.1:%d", n.cfg.DataPort(i)))
	if !n.cfg.InsecureRPC {
		f := n.cfg.tls().Party(nodeParty)
		args = append(args, "--data-tls-cert", f.Cert, "--data-tls-key", f.Key)
	}
	return proc{
		name: AppName(i), bin: n.cfg.App,
		args:    args,
		mark:    data,
		logPath: filepath.Join(home, "app.log"), pidPath: filepath.Join(home, "app.pid"),
	}
}

// peerArgs are app i's flags for the other nodes' RPC, where it fetches
// a bundle a block references and it lacks (rules version 3): every
// validator of genesis but i, as the gateways name them, and the CA their
// https certificates are checked against. A node AddNode made is nobody's
// peer: it may be gone when a validator needs a bundle.
func (n *Net) peerArgs(i int) []string {
	if n.cfg.Builtin() {
		return nil
	}
	var rpcs []string
	for j := 0; j < n.cfg.Validators; j++ {
		if j != i {
			rpcs = append(rpcs, n.cfg.RPCAddr(j))
		}
	}
	if len(rpcs) == 0 {
		return nil
	}
	args := []string{"--peer-rpc", strings.Join(rpcs, ",")}
	if !n.cfg.InsecureRPC {
		args = append(args, "--peer-tls-ca", n.TLS().CA())
	}
	return args
}

// procs lists every process of the network, nodes' cometbft first: they are
// stopped before the apps they depend on.
func (n *Net) procs() []proc {
	var ps []proc
	for i := 0; i < n.nodes(); i++ {
		ps = append(ps, n.cometbft(i))
	}
	for i := 0; i < n.nodes() && !n.cfg.Builtin(); i++ {
		ps = append(ps, n.app(i))
	}
	return ps
}

// Running lists the processes of the network that are alive, as "name (pid N)".
func (n *Net) Running() []string {
	var out []string
	for _, p := range append(n.serviceProcs(), n.procs()...) {
		if pid := p.pid(); pid != 0 {
			out = append(out, fmt.Sprintf("%s (pid %d)", p.name, pid))
		}
	}
	return out
}

// Process is a running process of the network.
type Process struct {
	Name string
	PID  int
}

// Processes lists the network's running processes, services included.
func (n *Net) Processes() []Process {
	var out []Process
	for _, p := range append(n.serviceProcs(), n.procs()...) {
		if pid := p.pid(); pid != 0 {
			out = append(out, Process{Name: p.name, PID: pid})
		}
	}
	return out
}

// Create makes the network's files (keys, genesis, configs, TLS) without
// starting anything, unless the run directory holds a network already: a
// caller can then put the nodes' homes on another file system (the chaos
// harness's powerfs) before Up starts them.
func (n *Net) Create(ctx context.Context) error {
	if n.existing {
		return nil
	}
	if err := n.cfg.Validate(); err != nil {
		return err
	}
	if err := n.create(ctx); err != nil {
		return err
	}
	n.existing = true
	return nil
}

// Home is validator i's directory: its CometBFT home, with the app's data
// in app/.
func (n *Net) Home(i int) string { return n.cfg.home(i) }

// Up creates the network if the directory holds none, starts every node and
// waits until each has committed height 3 and one block more than the
// highest any had (a resumed chain is live). It refuses a second copy.
func (n *Net) Up(ctx context.Context, progress io.Writer) error {
	if err := n.cfg.Validate(); err != nil {
		return err
	}
	if running := n.Running(); len(running) > 0 {
		return fmt.Errorf("%w in %s: %s; stop it with `byzlog localnet down --dir %s`",
			ErrRunning, n.cfg.Dir, strings.Join(running, ", "), n.cfg.Dir)
	}
	if err := n.portsFree(); err != nil {
		return err
	}
	if !n.existing {
		fmt.Fprintf(progress, "creating a %d-validator network in %s\n", n.cfg.Validators, n.cfg.Dir)
		if err := n.create(ctx); err != nil {
			return err
		}
		n.existing = true
	} else {
		fmt.Fprintf(progress, "resuming the %d-validator network in %s\n", n.cfg.Validators, n.cfg.Dir)
	}
	for i := 0; i < n.cfg.Validators; i++ {
		if err := n.StartNode(ctx, i); err != nil {
			_ = n.Down(io.Discard)
			return err
		}
	}
	all := make([]int, n.cfg.Validators)
	for i := range all {
		all[i] = i
	}
	if err := n.WaitHeight(ctx, all, 3, progress); err != nil {
		_ = n.Down(io.Discard)
		return err
	}
	// A resumed chain is past height 3 at once; wait until every node has
	// committed a block after the highest one any of them had, so the
	// chain is live and none is still catching up.
	var top int64
	for _, st := range n.Status(ctx) {
		top = max(top, st.Height)
	}
	if err := n.WaitHeight(ctx, all, top+1, progress); err != nil {
		_ = n.Down(io.Discard)
		return err
	}
	return nil
}

// portsFree fails when a port of the network is taken, so that a second
// network on the same ports is refused instead of silently talking to the
// first one's nodes.
func (n *Net) portsFree() error {
	for i := 0; i < n.cfg.Validators; i++ {
		for _, port := range []int{n.cfg.P2PPort(i), n.cfg.RPCPort(i), n.cfg.ABCIPort(i)} {
			ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
			if err != nil {
				return fmt.Errorf("port %d (node %d) is in use, perhaps by another network: choose another --base-port: %w", port, i, err)
			}
			ln.Close()
		}
	}
	return nil
}

// SetRetainBlocks changes the apps' --retain-blocks from the next time each
// starts (the saved config keeps the one the network was made with).
func (n *Net) SetRetainBlocks(b int64) { n.cfg.RetainBlocks = b }

// SetSnapshotKeep changes the apps' --snapshot-keep from the next time each
// starts.
func (n *Net) SetSnapshotKeep(k int) { n.cfg.SnapshotKeep = k }

// StartNode starts node i's app, waits for its ABCI port, then starts its
// cometbft node.
func (n *Net) StartNode(ctx context.Context, i int) error {
	return n.StartNodeWith(ctx, i, n.cfg.App, nil)
}

// StartNodeWith starts node i with another byzlog-app binary and extra
// environment, such as a failpoints test build and its BYZLOG_FAILPOINTS.
// appBin gets the same flags as the network's app (--peer-rpc included),
// so it must be a build of this tree. No caller runs an older release:
// the upgrade tests play one with the failpoints build's max-rules
// failpoint, which knows every flag; a real old binary would need a start
// without the peer flags.
func (n *Net) StartNodeWith(ctx context.Context, i int, appBin string, env []string) error {
	if n.cfg.Builtin() {
		return n.startProc(n.cometbft(i))
	}
	a := n.app(i)
	a.bin, a.env = appBin, env
	if err := n.startProc(a); err != nil {
		return err
	}
	addr := n.cfg.ABCIAddr(i)
	if err := waitListening(ctx, addr, 15*time.Second, n.exited(a)); err != nil {
		return fmt.Errorf("%s did not listen on %s: %w\nlast lines of %s:\n%s", a.name, addr, err, a.logPath, a.tail(15))
	}
	return n.startProc(n.cometbft(i))
}

func (n *Net) startProc(p proc) error {
	if pid := p.pid(); pid != 0 {
		return fmt.Errorf("%w: %s has pid %d", ErrRunning, p.name, pid)
	}
	done, err := p.start()
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.children[p.pidPath] = done
	n.mu.Unlock()
	return nil
}

// exited returns a channel that closes when p, started by this Net, exits;
// nil (never ready) for a process started elsewhere.
func (n *Net) exited(p proc) <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.children[p.pidPath]
}

// KillNode sends SIGKILL to node i's cometbft and app: a crash, not a stop.
// Both must be running.
func (n *Net) KillNode(i int) error { return n.kill(i, true) }

// KillRest sends SIGKILL to whichever of node i's processes still run, as
// after one of them crashed.
func (n *Net) KillRest(i int) error { return n.kill(i, false) }

// Alive reports whether node i's cometbft and app are running.
func (n *Net) Alive(i int) (cometbft, app bool) {
	return n.cometbft(i).pid() != 0, n.app(i).pid() != 0
}

func (n *Net) kill(i int, mustRun bool) error {
	for _, p := range []proc{n.cometbft(i), n.app(i)} {
		was, err := p.signal(syscall.SIGKILL, 10*time.Second)
		if err != nil {
			return err
		}
		if !was && mustRun {
			return fmt.Errorf("kill %s: it is not running", p.name)
		}
		if done := n.exited(p); done != nil {
			<-done
		}
		_ = os.Remove(p.pidPath)
	}
	return nil
}

// Down stops every process of the network (SIGTERM, then SIGKILL after a
// grace period): services (StartServices) first, then nodes before apps,
// and reports each one it stopped.
func (n *Net) Down(progress io.Writer) error {
	return errors.Join(n.StopServices(progress), n.stopAll(n.procs(), progress))
}

// stopAll stops ps in order (SIGTERM, then SIGKILL after a grace period)
// and reports each one it stopped.
func (n *Net) stopAll(ps []proc, progress io.Writer) error {
	var errs []error
	for _, p := range ps {
		was, err := p.stop(10 * time.Second)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if done := n.exited(p); done != nil {
			<-done
		}
		if was {
			fmt.Fprintf(progress, "stopped %s\n", p.name)
		}
	}
	return errors.Join(errs...)
}

// Client returns a CometBFT RPC client for node i.
func (n *Net) Client(i int) (*rpchttp.HTTP, error) {
	hc, err := n.RPCHTTPClient(0)
	if err != nil {
		return nil, err
	}
	c, err := rpchttp.NewWithClient(n.cfg.RPCAddr(i), "/websocket", hc)
	if err != nil {
		return nil, fmt.Errorf("rpc client for node %d: %w", i, err)
	}
	return c, nil
}

// NodeStatus is one validator's processes and chain position.
type NodeStatus struct {
	Node        int
	CometBFTPID int // 0 when not running
	AppPID      int
	Height      int64 // CometBFT's latest block (stored, perhaps not yet applied)
	AppHeight   int64 // the app's committed height: queries see this state
	AppHash     string
	CatchingUp  bool
	Err         error // why the RPC status could not be read
}

// Status reads every node's processes and RPC status.
func (n *Net) Status(ctx context.Context) []NodeStatus {
	out := make([]NodeStatus, n.nodes())
	for i := range out {
		s := NodeStatus{Node: i, CometBFTPID: n.cometbft(i).pid(), AppPID: n.app(i).pid()}
		c, err := n.Client(i)
		if err == nil {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			res, serr := c.Status(cctx)
			cancel()
			if serr != nil {
				err = serr
			} else {
				s.Height = res.SyncInfo.LatestBlockHeight
				s.AppHash = res.SyncInfo.LatestAppHash.String()
				s.CatchingUp = res.SyncInfo.CatchingUp
			}
			// CometBFT stores a block before its app applies and commits
			// it, so /status can be one block ahead of what a query sees.
			s.AppHeight, err = n.appHeight(ctx, c, s.Height, err)
		}
		s.Err = err
		out[i] = s
	}
	return out
}

// appHeight asks node c's app for its committed height. A built-in app
// (kvstore, noop: benchmarks) has no /state; its height is CometBFT's.
func (n *Net) appHeight(ctx context.Context, c *rpchttp.HTTP, height int64, err error) (int64, error) {
	if n.cfg.Builtin() {
		return height, err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	q, qerr := c.ABCIQuery(ctx, wire.PathState, nil)
	switch {
	case qerr != nil:
		return 0, errors.Join(err, fmt.Errorf("app state query: %w", qerr))
	case q.Response.Code != 0:
		return 0, errors.Join(err, fmt.Errorf("app state query: %s", q.Response.Log))
	}
	return q.Response.Height, err
}

// Committed is the height whose state the node serves: its block stored by
// CometBFT and applied and committed by the app.
func (s NodeStatus) Committed() int64 { return min(s.Height, s.AppHeight) }

// WaitHeight waits until every node in nodes has committed height h (app
// included, so queries see it), writing
// a status line to progress as heights move (rewritten in place on a
// terminal, one line per change otherwise).
func (n *Net) WaitHeight(ctx context.Context, nodes []int, h int64, progress io.Writer) error {
	show := StatusLine(progress)
	for {
		st := n.Status(ctx)
		done := true
		var b strings.Builder
		for _, i := range nodes {
			if st[i].Committed() < h {
				done = false
			}
			fmt.Fprintf(&b, " node%d=%d", i, st[i].Committed())
		}
		show(fmt.Sprintf("waiting for height %d:%s", h, b.String()), done)
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			show("", true)
			return fmt.Errorf("waiting for height %d:%s: %w%s", h, b.String(), ctx.Err(), n.tails(st, nodes, h))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// StatusLine returns a function that shows a changing one-line status on w;
// final ends the line.
func StatusLine(w io.Writer) func(line string, final bool) {
	f, ok := w.(*os.File)
	tty := ok && isatty.IsTerminal(f.Fd())
	last := ""
	return func(line string, final bool) {
		switch {
		case tty && line != last:
			fmt.Fprintf(w, "\r\033[K%s", line)
		case !tty && line != last && line != "":
			fmt.Fprintln(w, line)
		}
		if tty && final {
			fmt.Fprintln(w)
		}
		last = line
	}
}

// tails collects the last log lines of the nodes that are behind.
func (n *Net) tails(st []NodeStatus, nodes []int, h int64) string {
	var b strings.Builder
	for _, i := range nodes {
		if st[i].Committed() >= h {
			continue
		}
		for _, p := range []proc{n.cometbft(i), n.app(i)} {
			fmt.Fprintf(&b, "\n--- last lines of %s ---\n%s", p.logPath, p.tail(8))
		}
	}
	return b.String()
}

func waitListening(ctx context.Context, addr string, timeout time.Duration, exited <-chan struct{}) error {
	deadline := time.Now().Add(timeout)
	for {
		network, a := "tcp", addr
		if p, ok := strings.CutPrefix(addr, "unix://"); ok {
			network, a = "unix", p
		}
		c, err := net.DialTimeout(network, a, 500*time.Millisecond)
		if err == nil {
			return c.Close()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not listening after %s: %w", timeout, err)
		}
		select {
		case <-exited:
			return errors.New("process exited")
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// create generates the network with `cometbft testnet` in a scratch folder,
// rewrites every node's config and the shared genesis, then moves the nodes
// into place and saves the shape; a failure leaves no half-made network.
func (n *Net) create(ctx context.Context) error {
	c := n.cfg
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return fmt.Errorf("create run directory: %w", err)
	}
	tmp, err := os.MkdirTemp(c.Dir, ".create-")
	if err != nil {
		return fmt.Errorf("create run directory: %w", err)
	}
	defer os.RemoveAll(tmp)
	if !c.InsecureRPC {
		if err := n.ensureTLS(); err != nil {
			return err
		}
	}
	out, err := exec.CommandContext(ctx, c.CometBFT, "testnet", "--v", strconv.Itoa(c.Validators), "--o", tmp,
		"--starting-ip-address", "127.0.0.1").CombinedOutput()
	if err != nil {
		return fmt.Errorf("cometbft testnet: %w\n%s", err, out)
	}
	ids, err := generatedNodeIDs(tmp, c.Validators)
	if err != nil {
		return err
	}
	gen, err := cmttypes.GenesisDocFromFile(filepath.Join(tmp, "node0", "config", "genesis.json"))
	if err != nil {
		return fmt.Errorf("read generated genesis: %w", err)
	}
	gen.ChainID = c.ChainID
	gen.ConsensusParams.Block.MaxBytes = c.BlockMaxBytes
	admins, indexer, err := c.generateKeys(tmp)
	if err != nil {
		return err
	}
	// Saved resolved: the saved shape says what genesis holds, whatever
	// the newest version of a later build.
	c.RulesVersion = c.rulesVersion()
	n.cfg.RulesVersion = c.RulesVersion
	appState := c.appState(admins, indexer)
	gen.AppState, err = json.Marshal(appState)
	if err != nil {
		return err
	}
	for i := 0; i < c.Validators; i++ {
		home := filepath.Join(tmp, fmt.Sprintf("node%d", i))
		if err := gen.SaveAs(filepath.Join(home, "config", "genesis.json")); err != nil {
			return fmt.Errorf("write node %d genesis: %w", i, err)
		}
		cmtcfg.WriteConfigFile(filepath.Join(home, "config", "config.toml"), c.nodeConfig(i, ids))
	}
	if err := c.moveIntoPlace(tmp, len(admins)); err != nil {
		return err
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(c.savedPath(), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("save localnet config: %w", err)
	}
	return nil
}

// generatedNodeIDs reads the p2p ids of the nodes `cometbft testnet`
// generated in tmp.
func generatedNodeIDs(tmp string, validators int) ([]p2p.ID, error) {
	ids := make([]p2p.ID, validators)
	for i := range ids {
		key, err := p2p.LoadNodeKey(filepath.Join(tmp, fmt.Sprintf("node%d", i), "config", "node_key.json"))
		if err != nil {
			return nil, fmt.Errorf("read node %d key: %w", i, err)
		}
		ids[i] = key.ID()
	}
	return ids, nil
}

// generateKeys writes the admins' keys (at least one) and the indexer's
// key into tmp and returns their public keys in hex.
func (c Config) generateKeys(tmp string) (admins []string, indexer string, err error) {
	admins = make([]string, max(c.Admins, 1))
	for i := range admins {
		admin, err := keyfile.Generate(filepath.Join(tmp, adminKeyName(i)))
		if err != nil {
			return nil, "", err
		}
		admins[i] = hex.EncodeToString(admin.Public().(ed25519.PublicKey))
	}
	key, err := keyfile.Generate(filepath.Join(tmp, indexerKeyFile))
	if err != nil {
		return nil, "", err
	}
	return admins, hex.EncodeToString(key.Public().(ed25519.PublicKey)), nil
}

// moveIntoPlace moves the nodes' homes and the keys (admins of them) made
// in tmp into the run directory.
func (c Config) moveIntoPlace(tmp string, admins int) error {
	for i := 0; i < c.Validators; i++ {
		if err := os.Rename(filepath.Join(tmp, fmt.Sprintf("node%d", i)), c.home(i)); err != nil {
			return fmt.Errorf("move node %d into place: %w", i, err)
		}
	}
	for _, k := range append(adminKeyNames(admins), indexerKeyFile) {
		if err := os.Rename(filepath.Join(tmp, k), filepath.Join(c.Dir, k)); err != nil {
			return fmt.Errorf("move key %s into place: %w", k, err)
		}
	}
	return nil
}

// appState is genesis app_state: the admins and the indexer's key (hex),
// in the app's own type so that what localnet writes is what it reads.
func (c Config) appState(admins []string, indexer string) core.GenesisState {
	g := core.GenesisState{
		Admins: admins, AdminThreshold: uint32(max(c.AdminThreshold, 1)),
		Indexers:     []core.GenesisIndexer{{Name: IndexerID, PubKey: indexer}},
		RulesVersion: c.rulesVersion(),
	}
	if c.SnapshotInterval > 0 {
		g.Limits = &core.GenesisLimits{SnapshotInterval: uint32(c.SnapshotInterval)}
	}
	return g
}

// nodeConfig is node i's config.toml: loopback ports, the app's address for
// the chosen transport, and the settings measured to matter on this kind of
// machine (see DESIGN.md, "Known traps").
func (c Config) nodeConfig(i int, ids []p2p.ID) *cmtcfg.Config {
	cfg := cmtcfg.DefaultConfig()
	cfg.SetRoot(c.home(i))
	cfg.Moniker = fmt.Sprintf("node%d", i)
	cfg.ABCI = c.Transport
	switch {
	case c.Builtin():
		cfg.ABCI, cfg.ProxyApp = "socket", c.Transport
	default:
		cfg.ProxyApp = c.proxyApp(i)
	}
	cfg.RPC.ListenAddress = fmt.Sprintf("tcp://127.0.0.1:%d", c.RPCPort(i))
	if !c.InsecureRPC {
		f := c.tls().Party(nodeParty)
		cfg.RPC.TLSCertFile, cfg.RPC.TLSKeyFile = f.Cert, f.Key // Dir is absolute (Open)
	}
	cfg.P2P.ListenAddress = fmt.Sprintf("tcp://127.0.0.1:%d", c.P2PPort(i))
	var peers []string
	for j, id := range ids {
		switch {
		case j == i:
		case c.PeerProxies && i < c.Validators:
			peers = append(peers, fmt.Sprintf("%s@127.0.0.1:%d", id, c.PeerProxyPort(i, j)))
		default:
			peers = append(peers, fmt.Sprintf("%s@127.0.0.1:%d", id, c.P2PPort(j)))
		}
	}
	cfg.P2P.PersistentPeers = strings.Join(peers, ",")
	cfg.P2P.AllowDuplicateIP = true
	cfg.P2P.AddrBookStrict = false
	cfg.P2P.PexReactor = false
	cfg.P2P.SendRate = 100 << 20 // the 5 MB/s default throttles large blocks
	cfg.P2P.RecvRate = 100 << 20
	cfg.Mempool.Recheck = false // races with the gRPC ABCI client under load
	if !c.Builtin() {
		// byzlog-app keeps the mempool (admission, order, limits, expiry)
		// and builds blocks from it; the node only gossips what it reaps.
		cfg.Mempool.Type = MempoolType
		cfg.Mempool.ReapInterval = MempoolReapInterval
	}
	// The 1,000,000-byte default refuses a JSON-RPC broadcast of a tx over
	// ~730 KiB (base64): gateway bundles go up to 1 MiB by default, 2 MiB
	// at most.
	cfg.RPC.MaxBodyBytes = RPCMaxBodyBytes
	if !c.Builtin() && !c.TxIndex {
		cfg.TxIndex.Indexer = "null"
	}
	if c.PprofPort != 0 {
		cfg.RPC.PprofListenAddress = fmt.Sprintf("127.0.0.1:%d", c.CometBFTPprofPort(i))
	}
	cfg.Consensus.TimeoutCommit = time.Duration(c.TimeoutCommit)
	cfg.Consensus.TimeoutPropose = 10 * time.Second // 3 s causes extra rounds with large blocks
	cfg.Consensus.PeerGossipSleepDuration = PeerGossipSleep
	return cfg
}

// PeerGossipSleep is the nodes' consensus.peer_gossip_sleep_duration: how
// long a node's gossip routine for a peer sleeps when it has no vote or
// block part to send. Votes reach peers only when that routine next wakes,
// so CometBFT's 100 ms default adds up to 100 ms to each of a height's
// proposal, prevote and precommit steps: measured on 4 validators on
// loopback, 500 ms empty blocks with timeout_commit 300 ms.
const PeerGossipSleep = 10 * time.Millisecond

// MempoolType is the nodes' mempool.type: the app's own mempool.
const MempoolType = "app"

// MempoolReapInterval is how often a node asks the app for transactions to
// gossip (mempool.reap_interval): CometBFT's 500 ms default would delay
// every bundle that reaches a node other than the next proposer by up to
// that much.
const MempoolReapInterval = 25 * time.Millisecond

// RPCMaxBodyBytes is the nodes' rpc.max_body_bytes: a 2 MiB bundle fits
// as JSON-RPC base64, a 2,097,144-byte one as a hex form.
const RPCMaxBodyBytes = 4 << 20

// adminKeyFile holds the localnet's first admin key (the hex ed25519 seed);
// genesis lists it in app_state admins, with the others (adminKeyName).
// They stay in the run directory.
const adminKeyFile = "admin.key"

// adminKeyName is admin key i's file: admin.key, admin2.key, ...
func adminKeyName(i int) string {
	if i == 0 {
		return adminKeyFile
	}
	return fmt.Sprintf("admin%d.key", i+1)
}

func adminKeyNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = adminKeyName(i)
	}
	return out
}

// indexerKeyFile is the key genesis registers the network's indexer with
// (app_state indexers, name IndexerID): its --progress-key.
const indexerKeyFile = "indexer.key"

// IndexerID is the network's indexer's --id and its registered name.
const IndexerID = "indexer"

// AdminKey reads the network's first admin key, which genesis lists as an
// admin.
func (n *Net) AdminKey() (ed25519.PrivateKey, error) {
	return keyfile.Read(filepath.Join(n.cfg.Dir, adminKeyFile))
}

// AdminKeys reads every admin key genesis lists, the first first.
func (n *Net) AdminKeys() ([]ed25519.PrivateKey, error) {
	keys := make([]ed25519.PrivateKey, max(n.cfg.Admins, 1))
	for i := range keys {
		k, err := keyfile.Read(n.AdminKeyPathOf(i))
		if err != nil {
			return nil, err
		}
		keys[i] = k
	}
	return keys, nil
}

// AdminKeyPathOf is admin key i's file (AdminKeyPath is key 0's).
func (n *Net) AdminKeyPathOf(i int) string { return filepath.Join(n.cfg.Dir, adminKeyName(i)) }

// GenesisPath is the chain's genesis file: clients' root of trust.
func (n *Net) GenesisPath() string { return filepath.Join(n.cfg.home(0), "config", "genesis.json") }

// AdminKeyPath is the admin key file of the network.
func (n *Net) AdminKeyPath() string { return filepath.Join(n.cfg.Dir, adminKeyFile) }
