package core_test

import (
	"bytes"
	"encoding/hex"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/byzlog/byzlog/abciapp/core"
	"github.com/byzlog/byzlog/abciapp/internal/workload"
	"github.com/byzlog/byzlog/protos/wire"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

// runWorkload executes blocks of a seeded workload from genesis and returns
// the app hash after each block and the count of accepted and rejected txs.
func runWorkload(t testing.TB, seed int64, blocks, txsPerBlock int) (hashes [][]byte, ok, rejected int) {
	t.Helper()
	g := workload.New(seed, chainID)
	c := newChain(t, string(g.Genesis()))
	for i := 0; i < blocks; i++ {
		for _, r := range c.block(g.Block(txsPerBlock)...) {
			if r.OK() {
				ok++
			} else {
				rejected++
			}
		}
		hashes = append(hashes, c.state.AppHash)
	}
	return hashes, ok, rejected
}

// TestDeterminism applies the same seeded blocks to two fresh stores and
// compares app hashes at every height. Go randomizes map iteration on
// every range, so the two runs differ wherever the core's result would
// depend on map order; the core starts no goroutines, so the scheduler
// (GOMAXPROCS) has nothing to vary.
func TestDeterminism(t *testing.T) {
	for _, seed := range []int64{1, 2, 3} {
		a, ok, rejected := runWorkload(t, seed, 30, 12)
		b, _, _ := runWorkload(t, seed, 30, 12)
		for h := range a {
			if !bytes.Equal(a[h], b[h]) {
				t.Fatalf("seed %d height %d: app hash %X then %X from the same blocks", seed, h+1, a[h], b[h])
			}
		}
		if ok < 100 || rejected < 30 {
			t.Errorf("seed %d: %d accepted, %d rejected: the workload must exercise both", seed, ok, rejected)
		}
	}
	other, _, _ := runWorkload(t, 4, 30, 12)
	first, _, _ := runWorkload(t, 1, 30, 12)
	if bytes.Equal(other[29], first[29]) {
		t.Error("different workloads reached the same app hash")
	}
}

// TestAppHashGolden pins the app hash function and the state machine's
// rules on a fixed workload: a change here changes what every validator
// computes, so it must be deliberate (go test ./core -run Golden -update).
func TestAppHashGolden(t *testing.T) {
	hashes, _, _ := runWorkload(t, 42, 10, 8)
	var b strings.Builder
	for _, h := range hashes {
		b.WriteString(hex.EncodeToString(h) + "\n")
	}
	path := filepath.Join("testdata", "apphash.golden")
	if *update {
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file (create it with -update): %v", err)
	}
	if b.String() != string(want) {
		t.Errorf("app hashes =\n%s\nwant (from %s)\n%s", b.String(), path, want)
	}
}

// TestAppHashCoversContentAndOrder: reordering, dropping or altering what a
// block appends changes its app hash, and the chain carries it forward.
func TestAppHashCoversContentAndOrder(t *testing.T) {
	p, q := wire.NewSigner(key("p"), chainID), wire.NewSigner(key("q"), chainID)
	run := func(txs ...[]byte) []byte {
		c := newChain(t, `{"topics": [{"name": "t", "partitions": 2}]}`)
		c.block(txs...)
		c.block()
		return c.state.AppHash
	}
	a := bundle(t, batch(t, p, "t", 0, 0, records("a")))
	b := bundle(t, batch(t, q, "t", 0, 0, records("b")))
	b1 := bundle(t, batch(t, q, "t", 1, 0, records("b")))
	bX := bundle(t, batch(t, q, "t", 0, 0, records("X")))
	base := run(a, b)
	for name, h := range map[string][]byte{"swapped": run(b, a), "dropped": run(a), "altered": run(a, bX), "other partition": run(a, b1), "empty": run()} {
		if bytes.Equal(h, base) {
			t.Errorf("%s block: app hash unchanged (%X)", name, h)
		}
	}
	if !bytes.Equal(run(a, b), base) {
		t.Error("the same block gave two app hashes")
	}
}

func TestDigestRecordsRoot(t *testing.T) {
	c := newChain(t, `{"topics": [{"name": "t", "partitions": 2}]}`)
	p := wire.NewSigner(key("p"), chainID)
	out, err := core.Execute(c.store, c.state, core.Block{Height: 1, TimeUnixNano: 5, Txs: [][]byte{
		bundle(t, batch(t, p, "t", 1, 0, records("x")), batch(t, p, "t", 0, 0, records("a", "b"))),
	}})
	if err != nil {
		t.Fatal(err)
	}
	d := out.Digest
	if len(d.Partitions) != 2 || d.Partitions[0].Partition != 0 || d.Partitions[0].Count != 2 || d.Partitions[1].Count != 1 {
		t.Fatalf("digest partitions = %+v, want t/0 (2 records) then t/1 (1)", d.Partitions)
	}
	if !bytes.Equal(d.AppHash(), out.State.AppHash) || d.Height != 1 || len(d.RecordsRoot) != 32 || len(d.MetaRoot) != 32 {
		t.Errorf("digest %+v does not reproduce the app hash %X", d, out.State.AppHash)
	}
}
