package pipeline

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	abci "github.com/cometbft/cometbft/abci/types"
	cmtbytes "github.com/cometbft/cometbft/libs/bytes"
	cmtjson "github.com/cometbft/cometbft/libs/json"
	"github.com/cometbft/cometbft/p2p"
	ctypes "github.com/cometbft/cometbft/rpc/core/types"
	rpctypes "github.com/cometbft/cometbft/rpc/jsonrpc/types"
	cmttypes "github.com/cometbft/cometbft/types"
	"github.com/rs/zerolog"

	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/abciapp/core"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// testChain is one CometBFT node in a test: its RPC speaks the JSON-RPC
// calls a gateway makes, and behind it runs byzlog's real state machine
// (core.Check for CheckTx, core.Prepare to build a block from the mempool,
// core.Execute to commit it) on an in-memory store. Like a node with
// recheck off, a transaction that passed CheckTx and is invalid in every
// block stays in its mempool for good.
type testChain struct {
	chainID string
	srv     *httptest.Server

	mu      sync.Mutex
	store   *memStore
	state   core.State
	mempool [][]byte
	cache   map[string]bool // the node's tx cache: "tx already exists in cache"
	blocks  []*cmttypes.Block
	results [][]*abci.ExecTxResult
	index   map[string][2]int64 // tx hash -> height, index: byzlog-app's /tx
	frozen  bool                // CheckTx passes, but no block includes anything
	// broadcasts counts every broadcast_tx_sync received, by tx hash.
	broadcasts map[string]int
	// lieDuplicate makes CheckTx answer every produce bundle "duplicate",
	// with made-up offsets at height 1: a lying node.
	lieDuplicate bool
	// seenMsg is the error for a tx the node holds: CometBFT's flood
	// mempool says "tx already exists in cache", the app mempool "tx
	// already seen".
	seenMsg string
}

const testChainID = "test-chain"

// testAdminKey is the test chain's genesis admin.
var testAdminKey = func() ed25519.PrivateKey {
	seed := sha256.Sum256([]byte("test chain admin"))
	return ed25519.NewKeyFromSeed(seed[:])
}()

func newTestChain(t *testing.T, topics ...*byzlogv1.TopicState) *testChain {
	t.Helper()
	c := &testChain{chainID: testChainID, store: &memStore{m: map[string][]byte{}}, cache: map[string]bool{},
		index: map[string][2]int64{}, broadcasts: map[string]int{}, seenMsg: "tx already exists in cache"}
	params := &byzlogv1.ChainParams{ChainId: c.chainID, Limits: wire.DefaultLimits(), RulesVersion: core.MaxRulesVersion,
		Admins: [][]byte{testAdminKey.Public().(ed25519.PublicKey)}}
	c.store.apply(core.InitChain(params, topics))
	c.srv = httptest.NewServer(http.HandlerFunc(c.serve))
	t.Cleanup(c.srv.Close)
	return c
}

// run makes a block every interval until ctx is done.
func (c *testChain) run(ctx context.Context, t *testing.T, every time.Duration) {
	tk := time.NewTicker(every)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
		if err := c.makeBlock(); err != nil {
			t.Errorf("make block: %v", err)
			return
		}
	}
}

func (c *testChain) freeze(on bool) {
	c.mu.Lock()
	c.frozen = on
	c.mu.Unlock()
}

func (c *testChain) height() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state.Height
}

func (c *testChain) mempoolLen() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.mempool)
}

// makeBlock commits the next block: what a correct proposer picks.
func (c *testChain) makeBlock() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.state.Height + 1
	now := time.Now()
	b := core.Block{Height: h, TimeUnixNano: now.UnixNano(), Txs: c.mempool}
	var picked [][]byte
	if !c.frozen {
		var err error
		if picked, err = core.Prepare(c.store, b, 3<<20); err != nil {
			return err
		}
	}
	b.Txs = picked
	out, err := core.Execute(c.store, c.state, b)
	if err != nil {
		return err
	}
	c.store.apply(out.Changes)
	c.state = out.State
	in := map[string]bool{}
	txs := make(cmttypes.Txs, len(picked))
	results := make([]*abci.ExecTxResult, len(picked))
	for i, tx := range picked {
		txs[i] = tx
		in[string(tx)] = true
		r := out.Results[i]
		results[i] = &abci.ExecTxResult{Code: uint32(r.Code), Log: r.Log, Data: r.Data}
		c.index[hex.EncodeToString(txs[i].Hash())] = [2]int64{h, int64(i)}
	}
	var left [][]byte
	for _, tx := range c.mempool {
		if !in[string(tx)] {
			left = append(left, tx)
		}
	}
	c.mempool = left
	blk := cmttypes.MakeBlock(h, txs, &cmttypes.Commit{}, nil)
	blk.ChainID, blk.Time, blk.AppHash = c.chainID, now, out.State.AppHash
	blk.ValidatorsHash, blk.ProposerAddress = make([]byte, 32), make([]byte, 20)
	c.blocks = append(c.blocks, blk)
	c.results = append(c.results, results)
	return nil
}

func (c *testChain) serve(w http.ResponseWriter, r *http.Request) { c.serveAs(w, r, nil) }

// node serves the same chain at another address, each answer passed
// through lie (nil: an honest node), and returns its URL.
func (c *testChain) node(t *testing.T, lie liar) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { c.serveAs(w, r, lie) }))
	t.Cleanup(srv.Close)
	return srv.URL
}

// liar rewrites a node's answer to method (called with params); an error
// it returns is the node's RPC error.
type liar func(method string, params json.RawMessage, res any) any

func (c *testChain) serveAs(w http.ResponseWriter, r *http.Request, lie liar) {
	if lie == nil {
		lie = func(_ string, _ json.RawMessage, res any) any { return res }
	}
	body, _ := io.ReadAll(r.Body)
	if r.URL.Path == "/broadcast_tx_sync" { // the gateway's hex form
		form, _ := url.ParseQuery(string(body))
		tx, err := hex.DecodeString(strings.TrimPrefix(form.Get("tx"), "0x"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		res, err := c.broadcast(tx)
		resp := rpctypes.NewRPCSuccessResponse(rpctypes.JSONRPCIntID(-1), lie("broadcast_tx_sync", nil, res))
		if err != nil {
			resp = rpctypes.RPCInternalError(rpctypes.JSONRPCIntID(-1), err)
		}
		c.reply(w, resp)
		return
	}
	var req rpctypes.RPCRequest
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	res, err := c.call(req.Method, req.Params)
	out := lie(req.Method, req.Params, res)
	resp := rpctypes.NewRPCSuccessResponse(req.ID, out)
	if e, ok := out.(error); ok {
		err = e
	}
	if err != nil {
		resp = rpctypes.RPCInternalError(req.ID, err)
	}
	c.reply(w, resp)
}

func (c *testChain) reply(w http.ResponseWriter, resp rpctypes.RPCResponse) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

func (c *testChain) call(method string, params json.RawMessage) (any, error) {
	switch method {
	case "status":
		c.mu.Lock()
		defer c.mu.Unlock()
		return &ctypes.ResultStatus{NodeInfo: p2p.DefaultNodeInfo{Network: c.chainID},
			SyncInfo: ctypes.SyncInfo{LatestBlockHeight: c.state.Height}}, nil
	case "abci_query":
		var p struct {
			Path string            `json:"path"`
			Data cmtbytes.HexBytes `json:"data"`
		}
		if err := cmtjson.Unmarshal(params, &p); err != nil {
			return nil, err
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if p.Path == wire.PathTx { // answered by byzlog-app from what it committed
			loc, ok := c.index[hex.EncodeToString(p.Data)]
			if !ok {
				return &ctypes.ResultABCIQuery{Response: abci.ResponseQuery{Code: uint32(wire.CodeNotFound), Log: "not committed"}}, nil
			}
			return &ctypes.ResultABCIQuery{Response: abci.ResponseQuery{Key: p.Data, Height: loc[0], Index: loc[1]}}, nil
		}
		val, res, err := core.Query(c.store, c.state, p.Path, p.Data)
		if err != nil {
			return nil, err
		}
		return &ctypes.ResultABCIQuery{Response: abci.ResponseQuery{Code: uint32(res.Code), Log: res.Log, Value: val, Height: c.state.Height}}, nil
	case "broadcast_tx_sync":
		var p struct {
			Tx []byte `json:"tx"`
		}
		if err := cmtjson.Unmarshal(params, &p); err != nil {
			return nil, err
		}
		return c.broadcast(p.Tx)
	case "block", "block_results", "header":
		var p struct {
			Height *int64 `json:"height"`
		}
		if err := cmtjson.Unmarshal(params, &p); err != nil {
			return nil, err
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if p.Height == nil || *p.Height < 1 || *p.Height > int64(len(c.blocks)) {
			return nil, errors.New("height must be less than or equal to the current blockchain height")
		}
		h := *p.Height
		switch blk := c.blocks[h-1]; method {
		case "block":
			return &ctypes.ResultBlock{BlockID: cmttypes.BlockID{Hash: blk.Hash()}, Block: blk}, nil
		case "header":
			return &ctypes.ResultHeader{Header: &blk.Header}, nil
		}
		return &ctypes.ResultBlockResults{Height: h, TxsResults: c.results[h-1]}, nil
	}
	return nil, errors.New("method not found: " + method)
}

func (c *testChain) broadcast(tx []byte) (*ctypes.ResultBroadcastTx, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	hash := cmttypes.Tx(tx).Hash()
	c.broadcasts[hex.EncodeToString(hash)]++
	if c.cache[string(tx)] {
		return nil, errors.New(c.seenMsg)
	}
	if c.lieDuplicate {
		if lie, ok := fakeDuplicate(tx); ok {
			return &ctypes.ResultBroadcastTx{Code: uint32(wire.CodeDuplicate), Log: "duplicate (a lie)", Data: lie, Hash: hash}, nil
		}
	}
	res, err := core.Check(c.store, tx)
	if err != nil {
		return nil, err
	}
	if res.OK() {
		c.cache[string(tx)] = true
		c.mempool = append(c.mempool, tx)
	}
	return &ctypes.ResultBroadcastTx{Code: uint32(res.Code), Log: res.Log, Data: res.Data, Hash: hash}, nil
}

// memStore is committed state in memory, for the test chain.
type memStore struct {
	mu sync.Mutex
	m  map[string][]byte // by cf byte + key
}

func mkey(cf core.CF, key []byte) string { return string(append([]byte{byte(cf)}, key...)) }

func (s *memStore) Get(cf core.CF, key []byte) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[mkey(cf, key)], nil
}

func (s *memStore) Scan(cf core.CF, start, end []byte, fn func(key, value []byte) bool) error {
	s.mu.Lock()
	var keys []string
	for k := range s.m {
		if k[0] == byte(cf) && k[1:] >= string(start) && (end == nil || k[1:] < string(end)) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	vals := make([][]byte, len(keys))
	for i, k := range keys {
		vals[i] = s.m[k]
	}
	s.mu.Unlock()
	for i, k := range keys {
		if !fn([]byte(k[1:]), vals[i]) {
			return nil
		}
	}
	return nil
}

func (s *memStore) apply(cs core.ChangeSet) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, rd := range cs.RangeDeletes {
		for k := range s.m {
			if k[0] == byte(rd.CF) && k[1:] >= string(rd.Start) && k[1:] < string(rd.End) {
				delete(s.m, k)
			}
		}
	}
	for _, ch := range cs.Changes {
		if ch.Delete {
			delete(s.m, mkey(ch.CF, ch.Key))
		} else {
			s.m[mkey(ch.CF, ch.Key)] = bytes.Clone(ch.Value)
		}
	}
}

// testProducer signs batches of one record for a key derived from name.
type testProducer struct {
	*wire.Signer
}

func newTestProducer(name string) testProducer {
	seed := sha256.Sum256([]byte(name))
	return testProducer{wire.NewSigner(ed25519.NewKeyFromSeed(seed[:]), testChainID)}
}

func (p testProducer) batch(t *testing.T, topic string, seq uint64, value string) *byzlogv1.SignedBatch {
	t.Helper()
	b, err := p.Batch(topic, 0, seq, byzlogv1.Codec_CODEC_NONE, []*byzlogv1.Record{{Value: []byte(value)}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// testTopics are the topics of the test chain: "t" open to all, "acl"
// writable only by the producer named "allowed".
func testTopics() []*byzlogv1.TopicState {
	return []*byzlogv1.TopicState{
		{Name: "t", Config: &byzlogv1.TopicConfig{Partitions: 2}},
		{Name: "acl", Config: &byzlogv1.TopicConfig{Partitions: 1, AllowedProducers: [][]byte{newTestProducer("allowed").PublicKey()}}},
	}
}

// startGateway runs a gateway over c with test timings, changed by edit,
// until the test ends.
func startGateway(t *testing.T, c *testChain, edit func(*Config)) *Gateway {
	t.Helper()
	cfg := Default()
	cfg.Nodes.Addrs = []string{c.srv.URL}
	cfg.Nodes.HealthInterval = 50 * time.Millisecond
	cfg.Linger = time.Millisecond
	cfg.CommitTimeout = time.Second
	cfg.PollInterval = 10 * time.Millisecond
	cfg.TopicCacheTTL = 100 * time.Millisecond
	cfg.StartTimeout = 5 * time.Second
	if edit != nil {
		edit(&cfg)
	}
	g, err := New(cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := g.Start(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); g.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return g
}

// runChain makes blocks every 20 ms until the test ends.
func runChain(t *testing.T, c *testChain) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.run(ctx, t, 20*time.Millisecond) }()
	t.Cleanup(func() { cancel(); <-done })
}

// produceAsync sends b with ack commit and delivers the answer on the channel.
func produceAsync(ctx context.Context, g *Gateway, b *byzlogv1.SignedBatch) <-chan answer {
	ch := make(chan answer, 1)
	go func() {
		rc, err := g.Produce(ctx, b, byzlogv1.Ack_ACK_COMMIT)
		ch <- answer{rc, err}
	}()
	return ch
}

func await(t *testing.T, ch <-chan answer, within time.Duration, what string) answer {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(within):
		t.Fatalf("%s: no answer within %s", what, within)
	}
	return answer{}
}

// fakeDuplicate is the outcome a lying node gives a produce bundle: every
// batch a duplicate, committed at height 1 at offset 7.
func fakeDuplicate(tx []byte) ([]byte, bool) {
	var env byzlogv1.Tx
	if err := proto.Unmarshal(tx, &env); err != nil || env.GetProduceBundle() == nil {
		return nil, false
	}
	out := &byzlogv1.TxOutcome{}
	for range env.GetProduceBundle().Batches {
		out.Batches = append(out.Batches, &byzlogv1.BatchResult{Code: uint32(wire.CodeDuplicate), Duplicate: true, Height: 1, BaseOffset: 7, RecordCount: 1})
	}
	b, err := proto.Marshal(out)
	return b, err == nil
}
