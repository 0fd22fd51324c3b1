package core_test

import (
	"encoding/hex"
	"fmt"
	"testing"

	"github.com/byzlog/byzlog/abciapp/core"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

func progress(t *testing.T, s *wire.Signer, height int64) []byte {
	t.Helper()
	tx, err := s.ProgressTx(height)
	if err != nil {
		t.Fatal(err)
	}
	return tx
}

func (c *testChain) indexers() *byzlogv1.IndexerSet {
	var set byzlogv1.IndexerSet
	c.query(wire.PathIndexers, nil, &set)
	return &set
}

func TestIndexerRegistryAndProgress(t *testing.T) {
	c, a := governedChain(t, 3, 2, 4)
	ix := wire.NewSigner(key("indexer"), chainID)
	other := wire.NewSigner(key("indexer2"), "another-chain")
	reg := &byzlogv1.SetIndexer{PubKey: ix.PublicKey(), Name: "main"}

	c.run("progress before registering", progress(t, ix, 1), ix, wire.CodeNotIndexer)
	c.run("register with a bad name", c.signed(&byzlogv1.SetIndexer{PubKey: ix.PublicKey(), Name: "a b"}, a[0]), a[0], wire.CodeBadIndexerChange)
	c.run("register a short key", c.signed(&byzlogv1.SetIndexer{PubKey: []byte{1}, Name: "x"}, a[0]), a[0], wire.CodeBadIndexerChange)
	c.run("register with one signature", c.signed(reg, a[0]), a[0], wire.CodeOK)
	c.run("register again", c.signed(reg, a[1]), a[1], wire.CodeBadIndexerChange)

	h := c.state.Height // the next block is h+1
	c.run("report the block that carries it", progress(t, ix, h+1), ix, wire.CodeBadProgress)
	c.run("report height 0", progress(t, ix, 0), ix, wire.CodeBadProgress)
	first := progress(t, ix, h-1)
	c.run("report", first, ix, wire.CodeOK)
	c.run("the same report again", first, ix, wire.CodeBadProgress)
	c.run("an earlier height", progress(t, ix, h-2), ix, wire.CodeBadProgress)
	c.run("another chain's report", progress(t, other, h), other, wire.CodeWrongChain)
	c.run("a later height", progress(t, ix, h+1), ix, wire.CodeOK)

	set := c.indexers()
	if len(set.Indexers) != 1 || set.Indexers[0].Name != "main" || set.Indexers[0].PublishedHeight != h+1 || set.Indexers[0].ReportedHeight != c.state.Height {
		t.Fatalf("/indexers = %v, want main at published %d reported %d", set, h+1, c.state.Height)
	}

	unreg := &byzlogv1.SetIndexer{PubKey: ix.PublicKey(), Remove: true}
	c.run("unregister with one signature", c.signed(unreg, a[0]), a[0], wire.CodeBelowThreshold)
	c.run("unregister", c.signed(unreg, a[0], a[1]), a[0], wire.CodeOK)
	c.run("unregister again", c.signed(unreg, a[0], a[1]), a[0], wire.CodeBadIndexerChange)
	c.run("progress after unregistering", progress(t, ix, c.state.Height-1), ix, wire.CodeNotIndexer)
	if n := len(c.indexers().Indexers); n != 0 {
		t.Fatalf("%d indexers after unregistering, want 0", n)
	}
}

func TestGenesisIndexers(t *testing.T) {
	k := hex.EncodeToString(pub("indexer"))
	params, _, err := core.ParseGenesis(chainID, fmt.Appendf(nil, `{"indexers": [{"name": "main", "pub_key": %q}]}`, k))
	if err != nil {
		t.Fatal(err)
	}
	if len(params.Indexers) != 1 || params.Indexers[0].Name != "main" {
		t.Fatalf("genesis indexers = %v", params.Indexers)
	}
	for _, bad := range []string{
		`{"indexers": [{"name": "main", "pub_key": "00"}]}`,
		fmt.Sprintf(`{"indexers": [{"name": "", "pub_key": %q}]}`, k),
		fmt.Sprintf(`{"indexers": [{"name": "a", "pub_key": %q}, {"name": "b", "pub_key": %q}]}`, k, k),
	} {
		if _, _, err := core.ParseGenesis(chainID, []byte(bad)); err == nil {
			t.Errorf("genesis %s accepted", bad)
		}
	}
}

func TestRetainHeight(t *testing.T) {
	idx := func(published ...int64) *byzlogv1.IndexerSet {
		s := &byzlogv1.IndexerSet{}
		for i, p := range published {
			s.Indexers = append(s.Indexers, &byzlogv1.Indexer{Name: fmt.Sprintf("i%d", i), PublishedHeight: p})
		}
		return s
	}
	for _, tc := range []struct {
		name                         string
		height, retainBlocks, oldest int64
		indexers                     *byzlogv1.IndexerSet
		want                         int64
		heldBy                       string
	}{
		{"off", 1000, 0, 900, idx(), 0, "off"},
		{"retain blocks", 1000, 100, 950, idx(), 901, "retain_blocks"},
		{"no snapshot yet", 1000, 100, 0, idx(), 0, "snapshot"},
		{"oldest snapshot", 1000, 100, 800, idx(), 800, "snapshot"},
		{"an indexer behind", 1000, 100, 950, idx(990, 500), 500, "indexer i1"},
		{"an indexer that never reported", 1000, 100, 950, idx(0), 0, "indexer i0"},
		{"young chain", 50, 100, 40, idx(), 0, "retain_blocks"},
	} {
		p := core.RetainHeight(tc.height, tc.retainBlocks, tc.oldest, tc.indexers)
		if p.RetainHeight != tc.want || p.HeldBy != tc.heldBy {
			t.Errorf("%s: retain %d held by %q, want %d by %q", tc.name, p.RetainHeight, p.HeldBy, tc.want, tc.heldBy)
		}
	}
}
