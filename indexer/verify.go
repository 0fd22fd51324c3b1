package indexer

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/cometbft/cometbft/light/provider"
	lighthttp "github.com/cometbft/cometbft/light/provider/http"
	cmttypes "github.com/cometbft/cometbft/types"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/abciapp/core"
	"github.com/byzlog/byzlog/indexer/chain"
	"github.com/byzlog/byzlog/indexer/rpcnode"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
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
type node struct {
	addr string
	rpc  *rpcnode.Client
	prov provider.Provider
}

// NewNodes connects to CometBFT RPC addresses (host:port or a URL) over
// link, with responses bounded by DefaultMaxResponseBytes.
func NewNodes(chainID string, addrs []string, link NodeLink) ([]provider.Provider, []*node, error) {
	return newNodes(chainID, addrs, link, DefaultMaxResponseBytes)
}

// newNodes connects to the nodes (rpcnode: a response body over
// maxResponse bytes fails its call, and each call has 10 s).
func newNodes(chainID string, addrs []string, link NodeLink, maxResponse int64) ([]provider.Provider, []*node, error) {
	urls, err := link.urls(addrs)
	if err != nil {
		return nil, nil, err
	}
	var provs []provider.Provider
	var nodes []*node
	for i, a := range addrs {
		u := urls[i]
		c, err := rpcnode.New(u, rpcnode.Options{TLS: link.TLS, Timeout: 10 * time.Second, MaxResponseBytes: maxResponse})
		if err != nil {
			return nil, nil, fmt.Errorf("node %s: %w", a, err)
		}
		p := lighthttp.NewWithClient(chainID, c)
		provs = append(provs, p)
		nodes = append(nodes, &node{addr: a, rpc: c, prov: p})
	}
	return provs, nodes, nil
}

// verifier hands out verified blocks by height: headers from the light
// client (chain.Headers, every node a primary in turn and the others
// witnesses), block data round-robin from the nodes, skipping a node whose
// data does not match the verified headers.
type verifier struct {
	cfg     Config
	log     zerolog.Logger
	m       *Metrics
	nodes   []*node
	headers *chain.Headers
	lastTip int64
}

func newVerifier(cfg Config, nodes []*node, m *Metrics, log zerolog.Logger) *verifier {
	provs := make([]provider.Provider, len(nodes))
	for i, n := range nodes {
		provs[i] = n.prov
	}
	h, err := chain.NewHeaders(chain.Config{
		Root:           chain.Root{ChainID: cfg.ChainID, Height: cfg.Trust.Height, Hash: cfg.Trust.Hash},
		TrustingPeriod: cfg.TrustingPeriod, Sequential: true, CrossCheck: true, Log: log, Errors: m.lightErrors,
	}, provs...)
	if err != nil {
		// Config.Validate checked the root and the nodes.
		panic(fmt.Sprintf("indexer: light client of a validated config: %v", err))
	}
	return &verifier{cfg: cfg, log: log, m: m, nodes: nodes, headers: h}
}

// header verifies the header at h with the light client.
func (v *verifier) header(ctx context.Context, h int64) (*cmttypes.LightBlock, error) {
	lb, err := v.headers.Verify(ctx, h)
	if err != nil {
		v.m.verifyFailures.WithLabelValues("header").Inc()
		return nil, err
	}
	return lb, nil
}

// tip is the highest height every healthy node has committed. The light
// client compares each header with every witness, and a witness without
// the height stalls it (CometBFT waits 2×clock drift + block lag for it),
// so the indexer asks only for heights all of them have. A node more than
// two blocks below the quorum's height (2f+1 nodes) is not waited for: it
// is catching up or lying, and the light client drops it.
func (v *verifier) tip(ctx context.Context) (int64, error) {
	var heights []int64
	for _, n := range v.nodes {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := n.rpc.Status(cctx)
		cancel()
		if err == nil {
			heights = append(heights, st.SyncInfo.LatestBlockHeight)
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

// block returns block h verified. It needs header h+1, which carries the
// app hash and results hash of block h.
func (v *verifier) block(ctx context.Context, h int64) (*Block, error) {
	lb, next, err := v.headerPair(ctx, h)
	if err != nil {
		return nil, err
	}
	return v.data(ctx, lb, next)
}

// headerPair verifies headers h and h+1, in order: the light client is
// sequential, so one goroutine at a time calls it.
func (v *verifier) headerPair(ctx context.Context, h int64) (lb, next *cmttypes.LightBlock, err error) {
	if lb, err = v.header(ctx, h); err != nil {
		return nil, nil, err
	}
	if next, err = v.header(ctx, h+1); err != nil {
		return nil, nil, err
	}
	return lb, next, nil
}

// data fetches the block lb names, its results and digest, and checks
// them against the verified headers lb and next (one above). It asks the
// nodes in turn, starting with the one the height picks (so blocks fetched
// at once spread over the nodes), until one serves data that checks. It is
// safe to call from several goroutines.
func (v *verifier) data(ctx context.Context, lb, next *cmttypes.LightBlock) (*Block, error) {
	h := lb.Height
	var errs []error
	for i := range v.nodes {
		n := v.nodes[(int(h%int64(len(v.nodes)))+i)%len(v.nodes)]
		b, kind, err := v.fetch(ctx, n, lb, next)
		if err == nil {
			return b, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if kind != "" {
			v.m.verifyFailures.WithLabelValues(kind).Inc()
			v.log.Warn().Str("node", n.addr).Int64("height", h).Str("check", kind).Err(err).Msg("node served data that does not match the verified headers; asking another")
		}
		errs = append(errs, fmt.Errorf("%s: %w", n.addr, err))
	}
	return nil, fmt.Errorf("block %d: no node served data matching the verified headers: %w", h, errors.Join(errs...))
}

// fetch reads block h, its results and its digest from n and checks each
// against the verified headers of h and h+1. kind names the failed check
// when the node's data is wrong (empty when the node just did not answer).
func (v *verifier) fetch(ctx context.Context, n *node, lb, next *cmttypes.LightBlock) (*Block, string, error) {
	h := lb.Height
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	b, kind, err := chain.ReadBlock(cctx, n.rpc, h)
	if err != nil {
		return nil, kind, err
	}
	if kind, err := b.Check(lb, next); err != nil {
		return nil, kind, err
	}
	txs := make([][]byte, len(b.Block.Txs))
	for i, tx := range b.Block.Txs {
		txs[i] = tx
	}
	results := make([]core.TxResult, len(b.Results))
	for i, r := range b.Results {
		results[i] = core.TxResult{Code: r.Code, Data: r.Data}
	}
	app, err := core.BlockRecords(h, lb.Time.UnixNano(), txs, results)
	if err != nil {
		return nil, "records", err
	}
	req, _ := proto.Marshal(&byzlogv1.DigestRequest{Height: h})
	q, err := n.rpc.ABCIQuery(cctx, wire.PathDigest, req)
	if err != nil {
		return nil, "", err
	}
	if q.Response.Code != 0 {
		return nil, "", fmt.Errorf("digest of %d: %s", h, q.Response.Log)
	}
	var d byzlogv1.BlockDigest
	if err := proto.Unmarshal(q.Response.Value, &d); err != nil {
		return nil, "digest", fmt.Errorf("digest of %d does not decode: %w", h, err)
	}
	if err := core.CheckDigest(app, &d, h, lb.AppHash, next.AppHash); err != nil {
		return nil, "digest", err
	}
	return &Block{Height: h, Time: lb.Time, Hash: lb.Hash(), AppHash: next.AppHash, Appended: app}, "", nil
}
