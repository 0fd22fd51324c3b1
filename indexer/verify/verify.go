package verify

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/cometbft/cometbft/light/provider"
	lighthttp "github.com/cometbft/cometbft/light/provider/http"
	cmttypes "github.com/cometbft/cometbft/types"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/abciapp/core"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/chain"
	"github.com/byzlog/byzlog/protos/chain/lightclient"
	"github.com/byzlog/byzlog/protos/chain/receipt"
	"github.com/byzlog/byzlog/protos/chain/rpcnode"
	"github.com/byzlog/byzlog/protos/wire"
	"github.com/prometheus/client_golang/prometheus"
)

// Block is one committed block, checked against headers the light client
// verified, with the records it appended.
type Block struct {
	Height int64
	Time   time.Time
	Hash   []byte
	// AppHash is the app hash after the block (from the next header).
	AppHash  []byte
	Appended core.Appended
}

// node is one CometBFT node: an RPC client for data and a light provider.
type Node struct {
	Addr string
	RPC  *rpcnode.Client
	prov provider.Provider
}

// NewNodes connects to CometBFT RPC addresses (host:port or a URL) over
// link, with responses bounded by DefaultMaxResponseBytes.
func NewNodes(chainID string, addrs []string, link NodeLink) ([]provider.Provider, []*Node, error) {
	return newNodes(chainID, addrs, nil, link, DefaultMaxResponseBytes, zerolog.Nop())
}

// Connect connects to cfg's nodes and their data services.
func Connect(cfg Config, log zerolog.Logger) ([]*Node, error) {
	_, nodes, err := newNodes(cfg.ChainID, cfg.Nodes, cfg.NodeData, cfg.Link, cfg.MaxResponseBytes, log)
	return nodes, err
}

// newNodes connects to the nodes (rpcnode: a response body over
// maxResponse bytes fails its call, and each call has 10 s), and to their
// data services when data (one per address, or none) names them.
func newNodes(chainID string, addrs, data []string, link NodeLink, maxResponse int64, log zerolog.Logger) ([]provider.Provider, []*Node, error) {
	urls, err := link.urls(addrs)
	if err != nil {
		return nil, nil, err
	}
	var provs []provider.Provider
	var nodes []*Node
	for i, a := range addrs {
		u := urls[i]
		o := rpcnode.Options{TLS: link.TLS, Timeout: 10 * time.Second, MaxResponseBytes: maxResponse, InsecureData: link.Insecure}
		if len(data) > 0 {
			o.Data = data[i]
			o.OnDataError = func(err error) {
				log.Warn().Err(err).Str("node", a).Msg("node data service failed; using the node's RPC for a while")
			}
		}
		c, err := rpcnode.New(u, o)
		if err != nil {
			return nil, nil, fmt.Errorf("node %s: %w", a, err)
		}
		p := lighthttp.NewWithClient(chainID, c)
		provs = append(provs, p)
		nodes = append(nodes, &Node{Addr: a, RPC: c, prov: p})
	}
	return provs, nodes, nil
}

// Verifier hands out verified blocks by height: headers from the light
// client (lightclient.Headers, every node a primary in turn and the others
// witnesses), block data round-robin from the nodes, skipping a node whose
// data does not match the verified headers.
type Verifier struct {
	cfg     Config
	log     zerolog.Logger
	m       Metrics
	nodes   []*Node
	headers *lightclient.Headers
	lastTip int64
}

// Metrics are the verifier's counters, registered by its owner.
type Metrics struct {
	// Failures counts blocks a node served that did not match the
	// verified headers, by the check that caught it.
	Failures *prometheus.CounterVec
	// LightErrors counts the light client's errors and dropped providers.
	LightErrors prometheus.Counter
}

// unregistered is Metrics that nobody reads (a Headers of the SDK's).
func unregistered() Metrics {
	return Metrics{
		Failures:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "unused"}, []string{"check"}),
		LightErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "unused"}),
	}
}

// New verifies cfg's chain from its root of trust through nodes (cfg is
// validated: New panics on a root the light client refuses).
func New(cfg Config, nodes []*Node, m Metrics, log zerolog.Logger) *Verifier {
	provs := make([]provider.Provider, len(nodes))
	for i, n := range nodes {
		provs[i] = n.prov
	}
	h, err := lightclient.NewHeaders(lightclient.Config{
		Root:           receipt.Root{ChainID: cfg.ChainID, Height: cfg.Trust.Height, Hash: cfg.Trust.Hash},
		TrustingPeriod: cfg.TrustingPeriod, Sequential: true, CrossCheck: true, Log: log, Errors: m.LightErrors,
	}, provs...)
	if err != nil {
		// Config.Validate checked the root and the nodes.
		panic(fmt.Sprintf("indexer: light client of a validated config: %v", err))
	}
	return &Verifier{cfg: cfg, log: log, m: m, nodes: nodes, headers: h}
}

// Nodes are the nodes it reads from.
func (v *Verifier) Nodes() []*Node { return v.nodes }

// LastTip is the chain height Tip last found (0 before it has).
func (v *Verifier) LastTip() int64 { return v.lastTip }

// Header verifies the header at h with the light client.
func (v *Verifier) Header(ctx context.Context, h int64) (*cmttypes.LightBlock, error) {
	lb, err := v.headers.Verify(ctx, h)
	if err != nil {
		v.m.Failures.WithLabelValues("header").Inc()
		return nil, err
	}
	return lb, nil
}

// Tip is the highest height every healthy node has committed. The light
// client compares each header with every witness, and a witness without
// the height stalls it (CometBFT waits 2×clock drift + block lag for it),
// so the indexer asks only for heights all of them have. A node more than
// two blocks below the quorum's height (2f+1 nodes) is not waited for: it
// is catching up or lying, and the light client drops it.
func (v *Verifier) Tip(ctx context.Context) (int64, error) {
	// The nodes are asked at once: one after another, each poll waited
	// for every busy node in turn before the indexer saw a new block.
	all := make([]int64, len(v.nodes))
	var wg sync.WaitGroup
	for i, n := range v.nodes {
		wg.Go(func() {
			all[i] = -1
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			if st, err := n.RPC.Status(cctx); err == nil {
				all[i] = st.SyncInfo.LatestBlockHeight
			}
		})
	}
	wg.Wait()
	var heights []int64
	for _, h := range all {
		if h >= 0 {
			heights = append(heights, h)
		}
	}
	if len(heights) == 0 {
		return 0, fmt.Errorf("no CometBFT node of %d answered", len(v.nodes))
	}
	sort.Slice(heights, func(i, j int) bool { return heights[i] > heights[j] })
	v.lastTip = heights[0]
	quorum := heights[min(len(heights)-1, 2*len(v.nodes)/3)]
	tip := quorum
	for _, h := range heights {
		if h >= quorum-2 {
			tip = min(tip, h)
		}
	}
	return tip, nil
}

// HeaderPair verifies headers h and h+1, in order: the light client is
// sequential, so one goroutine at a time calls it.
func (v *Verifier) HeaderPair(ctx context.Context, h int64) (lb, next *cmttypes.LightBlock, err error) {
	if lb, err = v.Header(ctx, h); err != nil {
		return nil, nil, err
	}
	if next, err = v.Header(ctx, h+1); err != nil {
		return nil, nil, err
	}
	return lb, next, nil
}

// Data fetches the block lb names, its results and digest, and checks
// them against the verified headers lb and next (one above). It takes
// early's account first, if one was read (readEarly), and asks the nodes
// in turn, starting with the one the height picks (so blocks fetched at
// once spread over the nodes), until one serves data that checks. It is
// safe to call from several goroutines.
func (v *Verifier) Data(ctx context.Context, lb, next *cmttypes.LightBlock, early *Reading) (*Block, error) {
	h := lb.Height
	var errs []error
	tried := func(n *Node, kind string, err error) {
		if kind != "" {
			v.m.Failures.WithLabelValues(kind).Inc()
			v.log.Warn().Str("node", n.Addr).Int64("height", h).Str("check", kind).Err(err).Msg("node served data that does not match the verified headers; asking another")
		}
		errs = append(errs, fmt.Errorf("%s: %w", n.Addr, err))
	}
	var wrong *Node // the node whose early account did not check
	if early != nil {
		select {
		case <-early.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		b, kind, err := v.check(early.account, lb, next)
		if err == nil {
			return b, nil
		}
		if kind != "" {
			wrong = early.n
		}
		tried(early.n, kind, err)
	}
	for i := range v.nodes {
		n := v.nodes[(int(h%int64(len(v.nodes)))+i)%len(v.nodes)]
		if n == wrong {
			continue
		}
		b, kind, err := v.check(v.read(ctx, n, lb), lb, next)
		if err == nil {
			return b, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		tried(n, kind, err)
	}
	return nil, fmt.Errorf("block %d: no node served data matching the verified headers: %w", h, errors.Join(errs...))
}

// account is one node's block, results, records and digest for a height,
// as read, before its results are checked against the next verified
// header; err and kind say why there is none (kind, as in check, when the
// node's data is wrong; empty when it did not answer).
type account struct {
	b      *chain.Block
	app    core.Appended
	appErr error // building the records, reported only if the block checks
	// rebuild builds the records again under an older rules version (see
	// check).
	rebuild func(rules uint64) (core.Appended, error)
	d       *byzlogv1.BlockDigest
	kind    string
	err     error
}

// read reads block h, its results and its digest from n, checks the block
// against its verified header lb, and only then builds its records: what
// building them costs (inflating batches) is bounded by the chain's limits
// on its own transactions, not by whatever a node sends. The results are
// checked against the next header later (check).
func (v *Verifier) read(ctx context.Context, n *Node, lb *cmttypes.LightBlock) *account {
	h := lb.Height
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	b, kind, err := chain.ReadBlock(cctx, n.RPC, h)
	if err != nil {
		return &account{kind: kind, err: err}
	}
	if kind, err := b.CheckHeader(lb); err != nil {
		return &account{kind: kind, err: err}
	}
	txs := make([][]byte, len(b.Block.Txs))
	for i, tx := range b.Block.Txs {
		txs[i] = tx
	}
	results := make([]core.TxResult, len(b.Results))
	for i, r := range b.Results {
		results[i] = core.TxResult{Code: r.Code, Data: r.Data}
	}
	a := &account{b: b}
	a.app, a.appErr = core.BlockRecords(h, lb.Time.UnixNano(), txs, results, core.MaxRulesVersion)
	a.rebuild = func(rules uint64) (core.Appended, error) {
		return core.BlockRecords(h, lb.Time.UnixNano(), txs, results, rules)
	}
	req, _ := proto.Marshal(&byzlogv1.DigestRequest{Height: h})
	q, err := n.RPC.ABCIQuery(cctx, wire.PathDigest, req)
	if err != nil {
		return &account{err: err}
	}
	if q.Response.Code != 0 {
		return &account{err: fmt.Errorf("digest of %d: %s", h, q.Response.Log)}
	}
	var d byzlogv1.BlockDigest
	if err := proto.Unmarshal(q.Response.Value, &d); err != nil {
		return &account{kind: "digest", err: fmt.Errorf("digest of %d does not decode: %w", h, err)}
	}
	a.d = &d
	return a
}

// check checks a node's account against the verified headers of its
// height and the next. kind names the failed check when the node's data is
// wrong (empty when the node just did not answer).
func (v *Verifier) check(a *account, lb, next *cmttypes.LightBlock) (*Block, string, error) {
	if a.err != nil {
		return nil, a.kind, a.err
	}
	h := lb.Height
	if kind, err := a.b.Check(lb, next); err != nil {
		return nil, kind, err
	}
	if a.appErr != nil {
		return nil, "records", a.appErr
	}
	if err := core.CheckDigest(a.app, a.d, h, lb.AppHash, next.AppHash); err != nil {
		// The indexer does not know the rules version of the height: a
		// block of a chain before core.KafkaTopicsRulesVersion stored no
		// Kafka codec with its records, and one before
		// core.KafkaRulesVersion stored empty keys and values as null.
		// Every build is the block's own signed transactions read another
		// way, and the app hash confirms one at most; they differ only
		// where a record holds a codec or something empty.
		confirmed := false
		for _, rules := range olderRules {
			old, oldErr := a.rebuild(rules)
			if oldErr == nil && core.CheckDigest(old, a.d, h, lb.AppHash, next.AppHash) == nil {
				a.app, confirmed = old, true
				break
			}
		}
		if !confirmed {
			return nil, "digest", err
		}
	}
	return &Block{Height: h, Time: lb.Time, Hash: lb.Hash(), AppHash: next.AppHash, Appended: a.app}, "", nil
}

// olderRules are the rules versions whose stored records differ from the
// newest's, newest first: check builds a block again under each when the
// newest's build does not match its app hash.
var olderRules = []uint64{core.TxnRulesVersion - 1, core.KafkaTopicsRulesVersion - 1, core.KafkaRulesVersion - 1}

// Reading is a node's account of a block being read before its headers
// are verified: done closes when account is set.
type Reading struct {
	n       *Node
	done    chan struct{}
	account *account
}

// ReadEarly starts reading block lb.Height, whose header the light client
// verified, from the node the height picks, as soon as the block is
// committed: its results and app hash are signed only in the next header, a
// block interval later, and the read (the block is the bulk of the bytes)
// need not wait for it. Only data then checks the results against it.
func (v *Verifier) ReadEarly(ctx context.Context, lb *cmttypes.LightBlock, wg *sync.WaitGroup) *Reading {
	r := &Reading{n: v.nodes[int(lb.Height%int64(len(v.nodes)))], done: make(chan struct{})}
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(r.done)
		r.account = v.read(ctx, r.n, lb)
	}()
	return r
}
