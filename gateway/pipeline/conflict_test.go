package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	abci "github.com/cometbft/cometbft/abci/types"
	ctypes "github.com/cometbft/cometbft/rpc/core/types"
	cmttypes "github.com/cometbft/cometbft/types"
	"google.golang.org/protobuf/proto"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// jumpQueue puts tx at the front of the test node's mempool, as if another
// gateway's (or an attacker's) bundle reached the proposer first.
func (c *testChain) jumpQueue(t *testing.T, tx []byte) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mempool = append([][]byte{tx}, c.mempool...)
	c.cache[string(tx)] = true
}

// TestBatchCommittedElsewhereSettlesAtOnce is issue 13's double-bundle
// attack: someone re-wraps a pending batch into a bundle of their own, which
// commits first. The gateway's bundle can then never commit; it used to
// wait out commit_timeout for every such bundle. Now the block that
// commits the other copy settles it: the same batch gets that commit's
// receipt, a different batch under the same sequence is refused (its
// records were not written), and the bundle's other batches commit.
func TestBatchCommittedElsewhereSettlesAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		same bool
	}{{"the same batch", true}, {"another batch under its sequence", false}} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestChain(t, testTopics()...)
			c.freeze(true)
			runChain(t, c)
			g := startGateway(t, c, func(cfg *Config) {
				cfg.CommitTimeout, cfg.PendingTimeout, cfg.Linger = 20*time.Second, 40*time.Second, 200*time.Millisecond
			})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			victim, bystander := newTestProducer("victim"), newTestProducer("bystander")
			b := victim.batch(t, "t", 0, "v")
			mine := produceAsync(ctx, g, b)
			other := produceAsync(ctx, g, bystander.batch(t, "t", 0, "w"))
			if !waitFor(2*time.Second, func() bool { return c.mempoolLen() == 1 }) {
				t.Fatal("the gateway's bundle never reached the node")
			}
			copied := b
			if !tc.same {
				copied = victim.batch(t, "t", 0, "forged under the same sequence")
			}
			tx, err := wire.BundleTx(newTestProducer("rewrapper").batch(t, "t", 0, "x"), copied)
			if err != nil {
				t.Fatal(err)
			}
			c.jumpQueue(t, tx)
			c.freeze(false)
			a := await(t, mine, 3*time.Second, "the batch the other bundle committed")
			if tc.same {
				if a.err != nil || !a.receipt.Duplicate || a.receipt.BaseOffset != 1 || a.receipt.RecordCount != 1 {
					t.Errorf("Produce(batch committed by another bundle) = %v, %v; want the other commit's receipt at offset 1, marked duplicate", a.receipt, a.err)
				}
			} else if status.Code(a.err) != codes.FailedPrecondition {
				t.Errorf("Produce(batch whose sequence another batch took) = %v, %v; want FAILED_PRECONDITION (its records were not written)", a.receipt, a.err)
			}
			if a := await(t, other, 3*time.Second, "the bundle's other batch"); a.err != nil || a.receipt.Ack != byzlogv1.Ack_ACK_COMMIT {
				t.Errorf("Produce(the bundle's other batch) = %v, %v; want a commit receipt", a.receipt, a.err)
			}
			if !waitFor(time.Second, func() bool { return len(g.inflight) == 0 && g.queued.Load() == 0 }) {
				t.Errorf("%d bundles in flight, %d bytes queued; want 0, 0", len(g.inflight), g.queued.Load())
			}
		})
	}
}

// TestLyingDuplicateIsNotAcknowledged is issue 14's first finding: a node's
// CheckTx "duplicate" answer, with offsets of its choosing, became a commit
// receipt, so a lying node could acknowledge a batch that was never
// written. Now the block the answer names must hold the batch, as f+1
// nodes report it; otherwise the producer is told to retry, and the retry
// through an honest node commits it.
func TestLyingDuplicateIsNotAcknowledged(t *testing.T) {
	c := newTestChain(t, testTopics()...)
	runChain(t, c)
	g := startGateway(t, c, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if !waitFor(2*time.Second, func() bool { return c.height() >= 2 }) {
		t.Fatal("the chain made no blocks")
	}
	c.mu.Lock()
	c.lieDuplicate = true
	c.mu.Unlock()
	b := newTestProducer("victim").batch(t, "t", 0, "never written")
	a := await(t, produceAsync(ctx, g, b), 5*time.Second, "a batch a node lied about")
	if a.err == nil || status.Code(a.err) != codes.Unavailable {
		t.Fatalf("Produce(batch the node calls a duplicate at offset 7) = %v, %v; want UNAVAILABLE (not confirmed), never a receipt", a.receipt, a.err)
	}
	c.mu.Lock()
	c.lieDuplicate = false
	c.mu.Unlock()
	a = await(t, produceAsync(ctx, g, b), 5*time.Second, "the retry")
	if a.err != nil || a.receipt.Duplicate || a.receipt.BaseOffset != 0 {
		t.Errorf("retry = %v, %v; want the batch committed at offset 0", a.receipt, a.err)
	}
	// A true duplicate is still acknowledged, from the block. (The node
	// forgets the tx bytes, so CheckTx answers, not its cache.)
	c.mu.Lock()
	c.cache = map[string]bool{}
	c.mu.Unlock()
	committedAt := a.receipt.Height
	a = await(t, produceAsync(ctx, g, b), 5*time.Second, "a true duplicate")
	if a.err != nil || !a.receipt.Duplicate || a.receipt.BaseOffset != 0 || a.receipt.Height != committedAt {
		t.Errorf("true duplicate = %v, %v; want the original receipt at offset 0", a.receipt, a.err)
	}
}

// lowAndHigh is a node that claims a height far ahead of the chain and
// answers every producer-state query with next sequence 0.
func lowAndHigh(method string, params json.RawMessage, res any) any {
	switch r := res.(type) {
	case *ctypes.ResultStatus:
		if r != nil {
			lied := *r
			lied.SyncInfo.LatestBlockHeight += 1_000_000
			return &lied
		}
	case *ctypes.ResultABCIQuery:
		if r != nil && strings.Contains(string(params), wire.PathProducer) {
			lied := *r
			lied.Response.Value, _ = proto.Marshal(&byzlogv1.ProducerState{NextSequence: 0})
			return &lied
		}
	}
	return res
}

// TestOneNodeCannotSteer is issue 14's second finding: the pool took the
// highest height any node reported and read producer sequences from the
// freshest node, so one liar drew every read, made honest nodes look
// lagging, and with a low sequence made an honest batch a gap the gateway
// refused. Heights and sequences are now what f+1 nodes say.
func TestOneNodeCannotSteer(t *testing.T) {
	c := newTestChain(t, testTopics()...)
	runChain(t, c)
	nodes := []string{c.srv.URL, c.node(t, nil), c.node(t, nil), c.node(t, lowAndHigh)}
	first := startGateway(t, c, func(cfg *Config) { cfg.Nodes.Addrs = nodes })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p := newTestProducer("honest")
	for seq := uint64(0); seq < 3; seq++ {
		if a := await(t, produceAsync(ctx, first, p.batch(t, "t", seq, "v")), 5*time.Second, "honest batch"); a.err != nil {
			t.Fatalf("Produce(seq %d) = %v", seq, a.err)
		}
	}
	// A second gateway knows nothing of the producer: it must read the
	// sequence from the nodes, one of which lies.
	second := startGateway(t, c, func(cfg *Config) { cfg.Nodes.Addrs = nodes })
	if a := await(t, produceAsync(ctx, second, p.batch(t, "t", 3, "v")), 5*time.Second, "batch through a fresh gateway"); a.err != nil || a.receipt.BaseOffset != 3 {
		t.Errorf("Produce(seq 3 through a gateway with a lying node) = %v, %v; want it committed at offset 3", a.receipt, a.err)
	}
	hs, top := second.Health()
	if top > c.height()+5 {
		t.Errorf("gateway height %d, the chain's %d: one node's claim was taken", top, c.height())
	}
	for _, h := range hs[:3] {
		if !h.Healthy {
			t.Errorf("honest node %s unhealthy (%s): the liar's height made it look lagging", h.Addr, h.Err)
		}
	}
}

// topicLiar answers every topic query with a topic of 99 partitions.
func topicLiar(method string, params json.RawMessage, res any) any {
	if r, ok := res.(*ctypes.ResultABCIQuery); ok && r != nil && strings.Contains(string(params), wire.PathTopic) {
		var info byzlogv1.TopicInfo
		if proto.Unmarshal(r.Response.Value, &info) == nil && info.Config != nil {
			info.Config.Partitions = 99
			lied := *r
			lied.Response.Value, _ = proto.Marshal(&info)
			return &lied
		}
	}
	return res
}

// TestOneNodeCannotAnswerQueries is issue 14's second finding for queries:
// a query was answered by the freshest node alone, so one liar chose a
// consumer group's offsets or a topic's shape. Answers are now what f+1
// nodes say byte for byte.
func TestOneNodeCannotAnswerQueries(t *testing.T) {
	c := newTestChain(t, testTopics()...)
	runChain(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	g := startGateway(t, c, func(cfg *Config) {
		cfg.Nodes.Addrs = []string{c.node(t, topicLiar), c.srv.URL, c.node(t, nil), c.node(t, nil)}
	})
	for range 5 {
		var info byzlogv1.TopicInfo
		if err := g.Query(ctx, wire.PathTopic, &byzlogv1.TopicRequest{Name: "t"}, &info); err != nil || info.Config.GetPartitions() == 99 {
			t.Fatalf("topic query with one liar = %v partitions, %v; want the honest answer", info.Config.GetPartitions(), err)
		}
	}
}

// refuser refuses every transaction in CheckTx with bad_signature.
func refuser(method string, _ json.RawMessage, res any) any {
	if r, ok := res.(*ctypes.ResultBroadcastTx); ok && r != nil && method == "broadcast_tx_sync" {
		lied := *r
		lied.Code, lied.Log, lied.Data = uint32(wire.CodeBadSignature), "bad_signature: a lie", nil
		return &lied
	}
	return res
}

// TestOneNodeCannotRefuse is the other CheckTx lie of issue 14: one node's
// refusal failed the batch, so a liar could refuse every producer's
// batches. A refusal now stands only when f+1 nodes give it: here two
// liars of seven validators (f = 2) refuse everything.
func TestOneNodeCannotRefuse(t *testing.T) {
	c := newTestChain(t, testTopics()...)
	runChain(t, c)
	var refused atomic.Int64
	lie := func(m string, p json.RawMessage, res any) any {
		if m == "broadcast_tx_sync" {
			refused.Add(1)
		}
		return refuser(m, p, res)
	}
	addrs := []string{c.node(t, lie), c.node(t, lie), c.srv.URL}
	for range 4 {
		addrs = append(addrs, c.node(t, nil))
	}
	g := startGateway(t, c, func(cfg *Config) { cfg.Nodes.Addrs = addrs })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := newTestProducer("refused")
	const n = 40
	for seq := uint64(0); seq < n; seq++ {
		if a := await(t, produceAsync(ctx, g, p.batch(t, "t", seq, "v")), 5*time.Second, "batch"); a.err != nil {
			t.Fatalf("Produce(seq %d) with two refusing nodes of seven = %v (after %d refusals); want it committed", seq, a.err, refused.Load())
		}
	}
	if refused.Load() == 0 {
		t.Fatal("the refusing nodes were never asked: the test proves nothing")
	}
	// A real refusal, which every node gives, still comes back.
	bad := p.batch(t, "t", n, "v")
	bad.Signature[0] ^= 1
	if a := await(t, produceAsync(ctx, g, bad), 5*time.Second, "bad batch"); a.err == nil {
		t.Fatal("a batch with a bad signature was committed")
	}
	t.Logf("%d batches committed through %d refusals", n, refused.Load())
}

// TestOldBlockFromWhicheverNodeHasIt: a node that joined by state sync (or
// prunes) has no old blocks. A block the gateway must read (the one that
// used an admin key's nonce, a duplicate's) was read from the first node
// picked, and failed when that node lacked it: chaos join-validator's
// topic creation failed right after statesync-one wiped node0. Whichever
// node is picked first, the block comes from those that have it.
func TestOldBlockFromWhicheverNodeHasIt(t *testing.T) {
	c := newTestChain(t, testTopics()...)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	synced := func(method string, params json.RawMessage, res any) any {
		switch method {
		case "block", "block_results", "header":
			return errors.New("height 2 is not available, lowest height is 5")
		case "abci_query":
			if strings.Contains(string(params), `"`+wire.PathTx+`"`) {
				return &ctypes.ResultABCIQuery{Response: abci.ResponseQuery{Code: uint32(wire.CodeNotFound), Log: "not committed since it started"}}
			}
		}
		return res
	}
	g := startGateway(t, c, func(cfg *Config) {
		cfg.Nodes.Addrs = []string{c.node(t, synced), c.srv.URL, c.node(t, nil), c.node(t, nil)}
	})
	tx, err := wire.BundleTx(newTestProducer("old").batch(t, "t", 0, "v"))
	if err != nil {
		t.Fatal(err)
	}
	for h := range 4 {
		if h == 1 {
			if _, err := c.broadcast(tx); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.makeBlock(); err != nil {
			t.Fatal(err)
		}
	}
	hash := cmttypes.Tx(tx).Hash()
	for _, n := range g.pool.All() { // each node asked first in turn
		if _, err := g.confirmedBlock(ctx, n, 2); err != nil {
			t.Fatalf("block 2 read first from %s, with one node lacking it: %v", n.Addr, err)
		}
		if at, ok := g.committedTx(ctx, n, hash); !ok || at.height() != 2 {
			t.Fatalf("tx of block 2 looked up first at %s, with one node lacking it: found %v, want height 2", n.Addr, ok)
		}
	}
}

// TestCommittedBeforeTracked: a client sends the same transaction again,
// through this gateway, after it committed (its first gateway timed out,
// say). Every node answers "already seen", so no block this gateway
// follows will name it: the gateway asks the apps where it committed
// (wire.PathTx; nodes run without CometBFT's transaction index). A node
// that places it in the wrong block is passed over, and a block f+1 nodes
// confirm decides.
func TestCommittedBeforeTracked(t *testing.T) {
	c := newTestChain(t, testTopics()...)
	c.seenMsg = "tx already seen"
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var lies atomic.Int64
	misplaces := func(method string, params json.RawMessage, res any) any {
		if r, ok := res.(*ctypes.ResultABCIQuery); ok && strings.Contains(string(params), `"`+wire.PathTx+`"`) {
			lies.Add(1)
			return &ctypes.ResultABCIQuery{Response: abci.ResponseQuery{Key: r.Response.Key, Height: 1, Index: 0}}
		}
		return res
	}
	tx, err := wire.BundleTx(newTestProducer("early").batch(t, "t", 0, "v"))
	if err != nil {
		t.Fatal(err)
	}
	first, err := wire.BundleTx(newTestProducer("first").batch(t, "t", 0, "v"))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range [][]byte{first, tx} { // block 1 holds another transaction, block 2 tx
		if _, err := c.broadcast(b); err != nil {
			t.Fatal(err)
		}
		if err := c.makeBlock(); err != nil {
			t.Fatal(err)
		}
	}
	g := startGateway(t, c, func(cfg *Config) {
		cfg.Nodes.Addrs = []string{c.node(t, misplaces), c.node(t, nil), c.node(t, nil), c.node(t, nil)}
	})
	runChain(t, c)
	start := time.Now()
	got, err := g.SubmitTx(ctx, tx)
	if err != nil {
		t.Fatalf("SubmitTx of a transaction committed before = %v", err)
	}
	if got.Height != 2 || got.TxIndex != 0 {
		t.Errorf("SubmitTx = height %d index %d, want block 2, index 0", got.Height, got.TxIndex)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Errorf("the answer took %v: it waited for a timeout instead of looking the transaction up", waited)
	}
	hash := cmttypes.Tx(tx).Hash()
	for _, n := range g.pool.All() { // each node asked first in turn, the liar too
		if at, ok := g.committedTx(ctx, n, hash); !ok || at.height() != 2 || at.i != 0 {
			t.Fatalf("/tx asked first at %s: found %v, want block 2 index 0", n.Addr, ok)
		}
	}
	if lies.Load() == 0 {
		t.Fatal("the misplacing node was never asked")
	}
}
