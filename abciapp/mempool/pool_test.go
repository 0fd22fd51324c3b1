package mempool_test

import (
	"crypto/ed25519"
	"crypto/sha256"
	"fmt"
	"sort"
	"testing"

	"github.com/byzlog/byzlog/abciapp/core"
	"github.com/byzlog/byzlog/abciapp/mempool"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

const chainID = "pool-test"

// chain is committed state in memory: enough to run blocks on.
type chain struct {
	t      *testing.T
	kv     map[string][]byte
	state  core.State
	params *byzlogv1.ChainParams
}

func (c *chain) Get(cf core.CF, key []byte) ([]byte, error) {
	return c.kv[string(append([]byte{byte(cf)}, key...))], nil
}

func (c *chain) Scan(cf core.CF, start, end []byte, fn func(k, v []byte) bool) error {
	var keys []string
	lo, hi := string(append([]byte{byte(cf)}, start...)), string(append([]byte{byte(cf)}, end...))
	for k := range c.kv {
		if k >= lo && (end == nil && k[0] == byte(cf) || k < hi) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !fn([]byte(k[1:]), c.kv[k]) {
			break
		}
	}
	return nil
}

func (c *chain) apply(cs core.ChangeSet) {
	for _, ch := range cs.Changes {
		k := string(append([]byte{byte(ch.CF)}, ch.Key...))
		if ch.Delete {
			delete(c.kv, k)
		} else {
			c.kv[k] = ch.Value
		}
	}
}

func newChain(t *testing.T) *chain {
	params, topics, err := core.ParseGenesis(chainID, []byte(`{"topics": [{"name": "t", "partitions": 1}]}`))
	if err != nil {
		t.Fatal(err)
	}
	c := &chain{t: t, kv: map[string][]byte{}, params: params}
	c.apply(core.InitChain(params, topics))
	return c
}

// commit executes txs as the next block and tells the pool.
func (c *chain) commit(p *mempool.Pool, txs [][]byte) []core.Result {
	c.t.Helper()
	out, err := core.Execute(c, c.state, core.Block{Height: c.state.Height + 1, TimeUnixNano: 1, Txs: txs})
	if err != nil {
		c.t.Fatal(err)
	}
	c.apply(out.Changes)
	c.state = out.State
	hashes := make([][sha256.Size]byte, len(txs))
	for i, tx := range txs {
		hashes[i] = sha256.Sum256(tx)
	}
	p.Committed(c.state.Height, hashes)
	return out.Results
}

func signer(name string) *wire.Signer {
	seed := sha256.Sum256([]byte(name))
	return wire.NewSigner(ed25519.NewKeyFromSeed(seed[:]), chainID)
}

func bundle(t *testing.T, s *wire.Signer, seqs ...uint64) []byte {
	t.Helper()
	var bs []*byzlogv1.SignedBatch
	for _, seq := range seqs {
		b, err := s.Batch("t", 0, seq, byzlogv1.Codec_CODEC_NONE, []*byzlogv1.Record{{Value: []byte(fmt.Sprint(seq))}})
		if err != nil {
			t.Fatal(err)
		}
		bs = append(bs, b)
	}
	tx, err := wire.BundleTx(bs...)
	if err != nil {
		t.Fatal(err)
	}
	return tx
}

func (c *chain) add(p *mempool.Pool, tx []byte) core.Result {
	c.t.Helper()
	r, err := p.Add(c, c.state.Height, core.Precheck(c.params, tx, false), true)
	if err != nil {
		c.t.Fatal(err)
	}
	return r
}

func (c *chain) proposal(p *mempool.Pool) [][]byte {
	c.t.Helper()
	cs, err := p.Proposal(c, c.state.Height)
	if err != nil {
		c.t.Fatal(err)
	}
	var out [][]byte
	for _, x := range cs {
		out = append(out, x.Tx)
	}
	return out
}

func newPool(t *testing.T, c *chain, cfg mempool.Config) *mempool.Pool {
	p, err := mempool.New(cfg, c.params)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestFutureSequencesNeverReachAProposal is issue 13's mempool jam: a flood
// of transactions from fresh keys with sequences ahead used to sit at the
// front of CometBFT's mempool. Here they wait apart, bounded, and expire;
// every proposal holds only what commits, so honest batches commit in the
// next block.
func TestFutureSequencesNeverReachAProposal(t *testing.T) {
	c := newChain(t)
	p := newPool(t, c, mempool.Config{MaxWaiting: 50})
	refused := 0
	for i := 0; i < 200; i++ {
		r := c.add(p, bundle(t, signer(fmt.Sprint("attacker", i)), uint64(1+i%wire.MaxLookahead)))
		if !r.OK() {
			refused++
		}
	}
	if st := p.Stats(); st.Waiting != 50 || st.Ready != 0 || refused != 150 {
		t.Fatalf("after 200 future-sequence txs with room for 50: %+v, %d refused; want 50 waiting, 0 ready, 150 refused", st, refused)
	}
	honest := bundle(t, signer("honest"), 0)
	if r := c.add(p, honest); !r.OK() {
		t.Fatalf("Add(honest next sequence) = %s %q", r.Code, r.Log)
	}
	prop := c.proposal(p)
	if len(prop) != 1 {
		t.Fatalf("Proposal() holds %d txs, want only the honest one", len(prop))
	}
	if res := c.commit(p, prop); !res[0].OK() {
		t.Fatalf("honest tx in the block = %s", res[0].Code)
	}
	// The waiting ones expire after WaitingHeights blocks.
	for i := 0; i < int(mempool.Default().WaitingHeights)+1; i++ {
		c.commit(p, nil)
	}
	c.proposal(p)
	if st := p.Stats(); st.Waiting != 0 || st.Expired != 50 {
		t.Errorf("after %d empty blocks: %+v, want nothing waiting and 50 expired", mempool.Default().WaitingHeights+1, st)
	}
}

// TestWaitingBecomesReadyInOrder: a transaction that arrives before the one
// it follows (two gateways, gossip) waits, and joins the proposal as soon
// as its predecessor is admitted.
func TestWaitingBecomesReadyInOrder(t *testing.T) {
	c := newChain(t)
	p := newPool(t, c, mempool.Config{})
	s := signer("p")
	second, first := bundle(t, s, 1), bundle(t, s, 0)
	if r := c.add(p, second); !r.OK() {
		t.Fatalf("Add(sequence 1 before 0) = %s %q, want it to wait", r.Code, r.Log)
	}
	if got := c.proposal(p); len(got) != 0 {
		t.Fatalf("Proposal() with only sequence 1 = %d txs, want 0", len(got))
	}
	c.add(p, first)
	got := c.proposal(p)
	if len(got) != 2 || string(got[0]) != string(first) || string(got[1]) != string(second) {
		t.Fatalf("Proposal() = %d txs, want sequence 0 then 1", len(got))
	}
	for i, r := range c.commit(p, got) {
		if !r.OK() {
			t.Errorf("tx %d = %s", i, r.Code)
		}
	}
	if st := p.Stats(); st.Ready+st.Waiting != 0 {
		t.Errorf("after commit: %+v, want empty", st)
	}
}

// TestLosingCopyIsEvicted: the SDK's failover can put one batch into two
// bundles. The second is refused as pending while the first waits; if
// another node commits the second, the first leaves the pool at once
// instead of holding its place for good.
func TestLosingCopyIsEvicted(t *testing.T) {
	c := newChain(t)
	p := newPool(t, c, mempool.Config{})
	a, b := signer("a"), signer("b")
	one := bundle(t, a, 0)
	sb, err := b.Batch("t", 0, 0, byzlogv1.Codec_CODEC_NONE, []*byzlogv1.Record{{Value: []byte("b")}})
	if err != nil {
		t.Fatal(err)
	}
	ab, err := a.Batch("t", 0, 0, byzlogv1.Codec_CODEC_NONE, []*byzlogv1.Record{{Value: []byte("0")}})
	if err != nil {
		t.Fatal(err)
	}
	two, err := wire.BundleTx(sb, ab) // b's batch and a copy of a's
	if err != nil {
		t.Fatal(err)
	}
	c.add(p, one)
	if r := c.add(p, two); r.Code != wire.CodePending {
		t.Fatalf("Add(bundle repeating a pending batch) = %s %q, want %s", r.Code, r.Log, wire.CodePending)
	}
	// Another node proposed the other copy; ours cannot commit any more.
	if res := c.commit(p, [][]byte{two}); !res[0].OK() {
		t.Fatalf("commit(two) = %s", res[0].Code)
	}
	if got := c.proposal(p); len(got) != 0 {
		t.Errorf("Proposal() after the other copy committed = %d txs, want 0", len(got))
	}
	if st := p.Stats(); st.Evicted != 1 {
		t.Errorf("Stats() = %+v, want 1 evicted", st)
	}
}

// TestReapGossipsLocalReadyOnce: ReapTxs returns what arrived by RPC, once;
// waiting transactions are not gossiped.
func TestReapGossipsLocalReadyOnce(t *testing.T) {
	c := newChain(t)
	p := newPool(t, c, mempool.Config{})
	s := signer("p")
	c.add(p, bundle(t, s, 0))
	c.add(p, bundle(t, signer("q"), 3))
	if got := p.Reap(0); len(got) != 1 {
		t.Fatalf("Reap() = %d txs, want 1 (the ready one)", len(got))
	}
	if got := p.Reap(0); len(got) != 0 {
		t.Fatalf("second Reap() = %d txs, want 0", len(got))
	}
}

// TestFullPoolRefuses: over MaxBytes, or MaxTxs, the pool refuses with a
// code that says so.
func TestFullPoolRefuses(t *testing.T) {
	c := newChain(t)
	counted := newPool(t, c, mempool.Config{MaxTxs: 100, MaxWaiting: 10})
	for i := 0; i < 100; i++ {
		if r := c.add(counted, bundle(t, signer(fmt.Sprint("n", i)), 0)); !r.OK() {
			t.Fatalf("Add %d of 100 = %s %q", i, r.Code, r.Log)
		}
	}
	if r := c.add(counted, bundle(t, signer("one too many"), 0)); r.Code != wire.CodeMempoolFull {
		t.Errorf("Add(the 101st, MaxTxs 100) = %s %q, want %s", r.Code, r.Log, wire.CodeMempoolFull)
	}
	p := newPool(t, c, mempool.Config{MaxBytes: wire.MaxTxBytes, MaxWaitingBytes: 1 << 20, MaxTxs: 1 << 20})
	for i := 0; ; i++ {
		r := c.add(p, bundle(t, signer(fmt.Sprint(i)), 0))
		if r.Code == wire.CodeMempoolFull {
			break
		}
		if !r.OK() || i > 100000 {
			t.Fatalf("Add %d = %s %q", i, r.Code, r.Log)
		}
	}
	if st := p.Stats(); st.ReadyBytes > wire.MaxTxBytes {
		t.Errorf("Stats() = %+v, over MaxBytes", st)
	}
}

// BenchmarkResync measures what a block costs the pool at its transaction
// bound: after a commit every held transaction is applied again (on the
// in-memory store here; RocksDB reads cost more).
func BenchmarkResync(b *testing.B) {
	t := &testing.T{}
	c := newChain(t)
	p, err := mempool.New(mempool.Config{}, c.params)
	if err != nil {
		b.Fatal(err)
	}
	n := mempool.Default().MaxTxs
	for i := 0; i < n; i++ {
		tx := bundle(t, signer(fmt.Sprint("bench", i)), 0)
		if r, err := p.Add(c, 0, core.Precheck(c.params, tx, false), true); err != nil || !r.OK() {
			b.Fatalf("Add %d: %v %s", i, err, r.Log)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p.Committed(int64(i+1), nil)
		if _, err := p.Proposal(c, int64(i+1)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/1000, "ms/resync")
}
