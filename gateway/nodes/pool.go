// Package nodes keeps a gateway's view of its CometBFT nodes: which are
// healthy (reachable, not catching up, not lagging), the chain they serve,
// and which to use next. It picks nodes round-robin among the healthy ones
// and never trusts a node beyond availability: what one node says about
// committed state is confirmed with others (Others) before it is used.
package nodes

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"github.com/byzlog/byzlog/protos/wire"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/byzlog/byzlog/protos/chain/rpcnode"
	"github.com/byzlog/byzlog/protos/chain/tlsconf"
)

// Config says which nodes to use and how to judge them.
type Config struct {
	// Addrs are CometBFT RPC addresses, e.g. https://10.0.0.5:26657;
	// plaintext (http://, host:port) only on loopback unless Insecure.
	Addrs []string
	// TLS checks https nodes' certificates (their CA); nil uses the
	// system's roots.
	TLS *tls.Config
	// DataAddrs are the nodes' data services (byzlog-app --data-listen),
	// one per address of Addrs in the same order, in the same forms:
	// queries and submissions go there, without JSON-RPC's base64 and
	// hex. Empty: everything goes over the RPC.
	DataAddrs []string
	// Insecure allows plaintext RPC to nodes beyond loopback.
	Insecure bool
	// HealthInterval is how often every node's status is read.
	HealthInterval time.Duration
	// MaxLag is how many blocks behind the highest node a node may be and
	// still be used.
	MaxLag int64
	// Timeout bounds one status call.
	Timeout time.Duration
	// HexSubmitMaxBytes is the largest transaction submitted as a hex form
	// (cheaper for the node to decode than JSON-RPC's base64): twice it
	// plus 16 must fit the nodes' rpc.max_body_bytes. 0 always uses
	// JSON-RPC.
	HexSubmitMaxBytes int
	// MaxResponseBytes bounds every RPC response body read from a node, so
	// a lying node cannot make the gateway read a huge one; the largest
	// honest ones are a block or its results (the chain's blocks are under
	// 4 MiB, results under 3 MiB; JSON grows them by up to 4/3 and more
	// for results' escaping).
	MaxResponseBytes int64
}

// DefaultConfig returns 1 s health checks, 3 blocks of allowed lag, 2 s
// timeout, hex submission up to what stock CometBFT's 1,000,000-byte
// rpc.max_body_bytes takes, and responses up to DefaultMaxResponseBytes.
func DefaultConfig() Config {
	return Config{HealthInterval: time.Second, MaxLag: 3, Timeout: 2 * time.Second, HexSubmitMaxBytes: (1_000_000 - formOverhead) / 2,
		MaxResponseBytes: DefaultMaxResponseBytes}
}

// DefaultMaxResponseBytes is 16 MiB: four times the 4 MiB block limit, room
// for a block or its results in JSON.
const DefaultMaxResponseBytes = 16 << 20

// Validate names the field that is wrong.
func (c Config) Validate() error {
	switch {
	case len(c.Addrs) == 0:
		return errors.New("nodes: at least one CometBFT RPC address is required")
	case c.HealthInterval <= 0 || c.Timeout <= 0:
		return fmt.Errorf("nodes: health_interval (%s) and timeout (%s) must be positive", c.HealthInterval, c.Timeout)
	case c.MaxLag < 0:
		return fmt.Errorf("nodes: max_lag (%d) must not be negative", c.MaxLag)
	case c.HexSubmitMaxBytes < 0 || c.HexSubmitMaxBytes > 64<<20:
		return fmt.Errorf("nodes: hex_submit_max_bytes (%d) must be between 0 and 64 MiB", c.HexSubmitMaxBytes)
	case c.MaxResponseBytes < wire.MinReaderResponseBytes:
		return fmt.Errorf("nodes: max_response_bytes (%d) must be at least %d (8 MiB): a block's bundles are read in answers of up to 3 MiB, ~4 MiB in JSON", c.MaxResponseBytes, wire.MinReaderResponseBytes)
	}
	if err := rpcnode.CheckDataAddrs(c.DataAddrs, len(c.Addrs), c.Insecure); err != nil {
		return fmt.Errorf("nodes: data_addrs: %w", err)
	}
	for _, a := range c.Addrs {
		if _, err := tlsconf.NodeURL(a, true); err != nil {
			return fmt.Errorf("nodes: addrs: %w", err)
		}
		// tlsconf's own message names the CLI flag; this one names the setting.
		if _, err := tlsconf.NodeURL(a, c.Insecure); err != nil {
			return fmt.Errorf("nodes: addrs: node %q: plaintext RPC to a host other than loopback carries every record in the clear; give an https:// address (the node's rpc.tls_cert_file, rpc.tls_key_file) or set insecure", a)
		}
	}
	return nil
}

// Node is one CometBFT node.
type Node struct {
	Addr   string
	Client *rpcnode.Client
	base   string // Addr as an http(s):// URL
	hexMax int    // largest tx submitted as a hex form
	submit *http.Client

	mu      sync.Mutex
	healthy bool
	height  int64
	lastErr string
}

// Health is a snapshot of a node's state.
type Health struct {
	Addr    string
	Healthy bool
	Height  int64
	Err     string
}

// Healthy reports whether the last health check found n usable.
func (n *Node) Healthy() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.healthy
}

func (n *Node) snapshot() Health {
	n.mu.Lock()
	defer n.mu.Unlock()
	return Health{Addr: n.Addr, Healthy: n.healthy, Height: n.height, Err: n.lastErr}
}

// Pool is a gateway's nodes.
type Pool struct {
	cfg   Config
	log   zerolog.Logger
	nodes []*Node
	next  atomic.Uint64

	mu      sync.Mutex
	chainID string
	agreed  int64 // AgreedHeight at the last check
}

// AgreedHeight is the height at least f+1 of n nodes reported (f = (n-1)/3):
// the (f+1)-th highest of heights. One lying node (up to f) cannot raise it,
// so it cannot mark honest nodes as lagging and draw the traffic to itself;
// with fewer answers than f+1 it is the lowest answer.
func AgreedHeight(heights []int64, n int) int64 {
	if len(heights) == 0 {
		return 0
	}
	hs := slices.Clone(heights)
	slices.Sort(hs)
	slices.Reverse(hs)
	k := (n-1)/3 + 1
	if k > len(hs) {
		k = len(hs)
	}
	return hs[k-1]
}

// Height is the height f+1 nodes had reached at the last check
// (AgreedHeight).
func (p *Pool) Height() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.agreed
}

// New returns a pool; call Check or Run before using it.
func New(cfg Config, log zerolog.Logger) (*Pool, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Pool{cfg: cfg, log: log}
	submit := newSubmitClient(cfg.TLS)
	for i, a := range cfg.Addrs {
		u, err := tlsconf.NodeURL(a, cfg.Insecure)
		if err != nil {
			return nil, err
		}
		o := rpcnode.Options{TLS: cfg.TLS, MaxResponseBytes: cfg.MaxResponseBytes, InsecureData: cfg.Insecure}
		if len(cfg.DataAddrs) > 0 {
			o.Data = cfg.DataAddrs[i]
			o.OnDataError = func(err error) {
				log.Warn().Err(err).Str("node", a).Msg("node data service failed; using the node's RPC for a while")
			}
		}
		c, err := rpcnode.New(u, o)
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", a, err)
		}
		p.nodes = append(p.nodes, &Node{Addr: a, Client: c, base: u, hexMax: cfg.HexSubmitMaxBytes, submit: submit})
	}
	return p, nil
}

// Run checks every node's health until ctx is done.
func (p *Pool) Run(ctx context.Context) {
	t := time.NewTicker(p.cfg.HealthInterval)
	defer t.Stop()
	for {
		p.Check(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Check reads every node's status once and updates health; it returns an
// error when no node is healthy.
func (p *Pool) Check(ctx context.Context) error {
	var wg sync.WaitGroup
	type status struct {
		height     int64
		catchingUp bool
		network    string
		err        error
	}
	st := make([]status, len(p.nodes))
	for i, n := range p.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
			defer cancel()
			res, err := n.Client.Status(cctx)
			if err != nil {
				st[i].err = err
				return
			}
			st[i] = status{height: res.SyncInfo.LatestBlockHeight, catchingUp: res.SyncInfo.CatchingUp, network: res.NodeInfo.Network}
		}()
	}
	wg.Wait()
	var heights []int64
	for _, s := range st {
		if s.err == nil {
			heights = append(heights, s.height)
		}
	}
	top := AgreedHeight(heights, len(p.nodes))
	p.mu.Lock()
	p.agreed = top
	p.mu.Unlock()
	healthy := 0
	for i, n := range p.nodes {
		s := st[i]
		n.mu.Lock()
		was := n.healthy
		switch {
		case s.err != nil:
			n.healthy, n.lastErr = false, s.err.Error()
		case s.catchingUp:
			n.healthy, n.lastErr, n.height = false, "catching up", s.height
		case top-s.height > p.cfg.MaxLag:
			n.healthy, n.lastErr, n.height = false, fmt.Sprintf("%d blocks behind", top-s.height), s.height
		default:
			n.healthy, n.lastErr, n.height = true, "", s.height
		}
		if was != n.healthy {
			p.log.Info().Str("node", n.Addr).Bool("healthy", n.healthy).Str("reason", n.lastErr).Msg("node health changed")
		}
		if n.healthy {
			healthy++
			p.mu.Lock()
			if p.chainID == "" {
				p.chainID = s.network
			} else if p.chainID != s.network {
				n.healthy, n.lastErr = false, fmt.Sprintf("serves chain %q, the pool serves %q", s.network, p.chainID)
				healthy--
			}
			p.mu.Unlock()
		}
		n.mu.Unlock()
	}
	if healthy == 0 {
		return fmt.Errorf("no healthy CometBFT node among %v", p.cfg.Addrs)
	}
	return nil
}

// ChainID is the chain the healthy nodes serve ("" before the first check).
func (p *Pool) ChainID() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.chainID
}

// Pick returns the next healthy node, round-robin; with none healthy, the
// next node at all (a call may still succeed and report why not).
func (p *Pool) Pick() *Node {
	start := p.next.Add(1)
	for i := range p.nodes {
		n := p.nodes[(start+uint64(i))%uint64(len(p.nodes))]
		n.mu.Lock()
		ok := n.healthy
		n.mu.Unlock()
		if ok {
			return n
		}
	}
	return p.nodes[start%uint64(len(p.nodes))]
}

// Freshest returns a healthy node with the highest height at the last
// check, counting no height above the agreed one (round-robin among
// equals), for reads that should see recent commits; with none healthy,
// Pick's choice.
func (p *Pool) Freshest() *Node {
	start := p.next.Add(1)
	agreed := p.Height()
	var best *Node
	var top int64 = -1
	for i := range p.nodes {
		n := p.nodes[(start+uint64(i))%uint64(len(p.nodes))]
		n.mu.Lock()
		// A height above what f+1 nodes reached is one node's claim: it
		// counts as the agreed height, so a liar cannot draw every read.
		ok, h := n.healthy, min(n.height, agreed)
		n.mu.Unlock()
		if ok && h > top {
			best, top = n, h
		}
	}
	if best == nil {
		return p.Pick()
	}
	return best
}

// Others returns every node but n, healthy ones first, each group in
// round-robin order: whom to ask to confirm what n said.
func (p *Pool) Others(n *Node) []*Node {
	start := p.next.Add(1)
	var healthy, rest []*Node
	for i := range p.nodes {
		m := p.nodes[(start+uint64(i))%uint64(len(p.nodes))]
		if m == n {
			continue
		}
		m.mu.Lock()
		ok := m.healthy
		m.mu.Unlock()
		if ok {
			healthy = append(healthy, m)
		} else {
			rest = append(rest, m)
		}
	}
	return append(healthy, rest...)
}

// All returns every node, in configuration order.
func (p *Pool) All() []*Node { return slices.Clone(p.nodes) }

// Len is the number of nodes.
func (p *Pool) Len() int { return len(p.nodes) }

// MarkDown takes a node out of rotation until the next health check finds
// it well, after a call to it failed.
func (p *Pool) MarkDown(n *Node, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.healthy {
		p.log.Warn().Str("node", n.Addr).Err(err).Msg("node failed a call; out of rotation until it checks healthy")
	}
	n.healthy, n.lastErr = false, err.Error()
}

// Health returns every node's state and the height f+1 nodes agree on
// (Height): never what one node alone claims.
func (p *Pool) Health() ([]Health, int64) {
	out := make([]Health, len(p.nodes))
	for i, n := range p.nodes {
		out[i] = n.snapshot()
	}
	return out, p.Height()
}
