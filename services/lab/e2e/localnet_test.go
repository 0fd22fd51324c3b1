//go:build e2e

// Package e2e holds byzlog's end-to-end tests. They run the real binaries
// (stock cometbft, byzlog-app, the byzlog CLI and byzlog-lab) on loopback, never stand-ins,
// and stop every process they start, even when they fail. Run them with
// `make e2e`, which builds the binaries first and points BYZLOG_BIN at them.
package e2e

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	coretypes "github.com/cometbft/cometbft/rpc/core/types"
	cmttypes "github.com/cometbft/cometbft/types"
	"google.golang.org/protobuf/proto"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/chain"
	"github.com/byzlog/byzlog/protos/wire"
	"github.com/byzlog/byzlog/services/internal/localnet"
)

// binDir finds the built binaries; a missing one fails the test, it never skips.
func binDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("BYZLOG_BIN")
	if dir == "" {
		dir = filepath.Join("..", "..", "..", "bin")
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"byzlog", "byzlog-app", "cometbft"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Fatalf("%s not found in %s (BYZLOG_BIN): run `make build` first: %v", name, dir, err)
		}
	}
	return dir
}

// basePort lets two checkouts run the e2e tests side by side. The default,
// 16656, keeps every test port (base..base+6000) below Linux's ephemeral
// range (32768 and up), where an outgoing connection's source port could
// take a port a test is about to listen on.
func basePort(t *testing.T) int {
	if s := os.Getenv("BYZLOG_E2E_BASE_PORT"); s != "" {
		p, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("BYZLOG_E2E_BASE_PORT=%q: %v", s, err)
		}
		return p
	}
	return 16656
}

// producer signs one batch per transaction to one topic-partition, with
// consecutive sequences, the way the producer SDK will.
type producer struct {
	signer *wire.Signer
	topic  string
	seq    uint64
}

func (p *producer) tx(t *testing.T) []byte {
	t.Helper()
	b, err := p.signer.Batch(p.topic, 0, p.seq, byzlogv1.Codec_CODEC_NONE,
		[]*byzlogv1.Record{{Key: []byte("k"), Value: []byte(fmt.Sprintf("record %d", p.seq))}})
	if err != nil {
		t.Fatal(err)
	}
	p.seq++
	tx, err := wire.BundleTx(b)
	if err != nil {
		t.Fatal(err)
	}
	return tx
}

// submit sends n transactions to node i and returns their hashes; each must
// pass CheckTx.
func submit(ctx context.Context, t *testing.T, n *localnet.Net, i int, p *producer, count int) [][]byte {
	t.Helper()
	c, err := n.Client(i)
	if err != nil {
		t.Fatal(err)
	}
	var hashes [][]byte
	for k := 0; k < count; k++ {
		tx := p.tx(t)
		res, err := c.BroadcastTxSync(ctx, tx)
		if err != nil {
			t.Fatalf("broadcast to node%d: %v", i, err)
		}
		if res.Code != 0 {
			t.Fatalf("broadcast to node%d: CheckTx code %d: %s", i, res.Code, res.Log)
		}
		hashes = append(hashes, cmttypes.Tx(tx).Hash())
	}
	return hashes
}

// assertAgree checks every app in nodes against the agreed chain: the app
// hash each app reports for its last committed height h must be the one in
// the header of block h+1, which 2/3+ of the validators signed.
func assertAgree(ctx context.Context, t *testing.T, n *localnet.Net, nodes []int) {
	t.Helper()
	ref, err := n.Client(nodes[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range nodes {
		c, err := n.Client(i)
		if err != nil {
			t.Fatal(err)
		}
		info, err := c.ABCIInfo(ctx)
		if err != nil {
			t.Fatalf("node%d abci_info: %v", i, err)
		}
		h, appHash := info.Response.LastBlockHeight, info.Response.LastBlockAppHash
		if h < 1 {
			t.Fatalf("node%d: app has committed no block", i)
		}
		if err := waitHeight(ctx, t, n, nodes[:1], h+1); err != nil {
			t.Fatal(err)
		}
		next := h + 1
		commit, err := ref.Commit(ctx, &next)
		if err != nil {
			t.Fatalf("node%d commit %d: %v", nodes[0], next, err)
		}
		if want := commit.SignedHeader.Header.AppHash; !bytes.Equal(appHash, want) {
			t.Fatalf("node%d's app hash after height %d is %X; the chain agreed on %X", i, h, appHash, want)
		}
		t.Logf("node%d: app at height %d, app hash %X matches the signed header of block %d", i, h, appHash, next)
	}
}

func maxHeight(ctx context.Context, n *localnet.Net, nodes []int) int64 {
	st := n.Status(ctx)
	var h int64
	for _, i := range nodes {
		h = max(h, st[i].Height)
	}
	return h
}

// stepTimeout bounds each wait, so a node that never catches up fails the
// test in minutes with the nodes' last log lines, not at the overall deadline.
const stepTimeout = 2 * time.Minute

func waitHeight(ctx context.Context, t *testing.T, n *localnet.Net, nodes []int, h int64) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	return n.WaitHeight(ctx, nodes, h, testWriter{t})
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	if s := strings.TrimSpace(string(p)); s != "" {
		w.t.Log(s)
	}
	return len(p), nil
}

// TestLocalnetCrashAndCatchUp runs four validators, checks they agree, kills
// one validator's cometbft and app with SIGKILL, checks the other three keep
// committing, restarts the dead one and checks it catches up to the same
// height and app hash, with the blocks it missed replayed into its app.
func TestLocalnetCrashAndCatchUp(t *testing.T) {
	bin := binDir(t)
	dir := t.TempDir()
	// Well inside go test's -timeout, so the cleanups below always run.
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	cli := func(args ...string) (string, error) {
		// Its own deadline: the cleanup's `down` runs after ctx is cancelled.
		cctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(cctx, filepath.Join(bin, "byzlog"), args...).CombinedOutput()
		return string(out), err
	}
	n, err := localnet.Open(localnet.Config{Dir: dir, CometBFT: filepath.Join(bin, "cometbft"), App: filepath.Join(bin, "byzlog-app")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		out, err := cli("localnet", "down", "--dir", dir)
		t.Logf("localnet down: %v\n%s", err, out)
		// Whatever the CLI could not stop, stop from here: nothing outlives the test.
		if err := n.Down(testWriter{t}); err != nil {
			t.Errorf("stop localnet: %v", err)
		}
		if running := n.Running(); len(running) > 0 {
			t.Errorf("processes still running after down: %v", running)
		}
	})

	start := time.Now()
	out, err := cli("localnet", "up", "--dir", dir, "--base-port", strconv.Itoa(basePort(t)))
	if err != nil {
		t.Fatalf("localnet up: %v\n%s", err, out)
	}
	t.Logf("localnet up in %s:\n%s", time.Since(start).Round(time.Millisecond), out)
	// Open again now that `up` has written the network's shape.
	if n, err = localnet.Open(n.Config()); err != nil {
		t.Fatal(err)
	}

	t.Run("second up is refused", func(t *testing.T) {
		out, err := cli("localnet", "up", "--dir", dir)
		if err == nil || !strings.Contains(out, "already running") {
			t.Fatalf("second localnet up = %v, output %q; want an error saying it is already running", err, out)
		}
	})

	t.Run("bad transaction is rejected with a reason", func(t *testing.T) {
		c, err := n.Client(0)
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.BroadcastTxSync(ctx, []byte("not a byzlog transaction"))
		if err != nil {
			t.Fatal(err)
		}
		if wire.Code(res.Code) != wire.CodeMalformedTx || res.Codespace != wire.Codespace || res.Log == "" {
			t.Fatalf("CheckTx(junk) = code %d codespace %q log %q, want %s with a reason", res.Code, res.Codespace, res.Log, wire.CodeMalformedTx)
		}
	})

	chainID := n.Config().ChainID
	adminKey, err := n.AdminKey()
	if err != nil {
		t.Fatal(err)
	}
	createTopic(ctx, t, n, wire.NewSigner(adminKey, chainID), "e2e", 2)

	t.Run("bundle committed and read back identically from every validator", func(t *testing.T) {
		bundleReadBack(ctx, t, n, chainID)
	})

	seed := sha256.Sum256([]byte(t.Name()))
	p := &producer{signer: wire.NewSigner(ed25519.NewKeyFromSeed(seed[:ed25519.SeedSize]), chainID), topic: "e2e"}
	all, survivors := []int{0, 1, 2, 3}, []int{0, 1, 2}

	submit(ctx, t, n, 0, p, 10)
	if err := waitHeight(ctx, t, n, all, maxHeight(ctx, n, all)+2); err != nil {
		t.Fatal(err)
	}
	assertAgree(ctx, t, n, all)

	// Crash node 3: SIGKILL to its cometbft and its app.
	if err := n.KillNode(3); err != nil {
		t.Fatal(err)
	}
	killedAt := maxHeight(ctx, n, survivors)
	t.Logf("killed node3 at height %d", killedAt)
	missed := submit(ctx, t, n, 1, p, 20)
	waitStart := time.Now()
	if err := waitHeight(ctx, t, n, survivors, killedAt+5); err != nil {
		t.Fatalf("the three surviving validators stopped committing: %v", err)
	}
	t.Logf("3 of 4 validators committed 5 blocks in %s", time.Since(waitStart).Round(time.Millisecond))
	assertAgree(ctx, t, n, survivors)

	// Restart node 3: it must catch up to the same height and app hash.
	if err := n.StartNode(ctx, 3); err != nil {
		t.Fatal(err)
	}
	target := maxHeight(ctx, n, survivors)
	catchStart := time.Now()
	if err := waitHeight(ctx, t, n, []int{3}, target); err != nil {
		t.Fatalf("node3 did not catch up: %v", err)
	}
	t.Logf("node3 caught up from height %d to %d in %s", killedAt, target, time.Since(catchStart).Round(time.Millisecond))
	if err := waitHeight(ctx, t, n, all, target+2); err != nil {
		t.Fatalf("the network did not keep committing with node3 back: %v", err)
	}
	assertAgree(ctx, t, n, append([]int{3}, survivors...))

	// Every node holds the same app hash at every height (each header's
	// app_hash is what that node's chain agreed on after the previous block).
	top := maxHeight(ctx, n, []int{0})
	for h := int64(1); h <= top; h++ {
		var want []byte
		for _, i := range all {
			c, err := n.Client(i)
			if err != nil {
				t.Fatal(err)
			}
			hh := h
			res, err := c.Commit(ctx, &hh)
			if err != nil {
				t.Fatalf("node%d commit %d: %v", i, h, err)
			}
			got := res.SignedHeader.Header.AppHash
			if want == nil {
				want = got
			} else if !bytes.Equal(got, want) {
				t.Fatalf("height %d: node%d has app hash %X, node0 %X", h, i, got, want)
			}
		}
	}
	t.Logf("all 4 nodes hold the same app hash at each of heights 1..%d", top)

	// The blocks node 3 missed are in its own store, executed by its own
	// app: its app says where each transaction committed (wire.PathTx; the
	// nodes run without CometBFT's transaction index), and node3's block
	// and results there agree.
	c3, err := n.Client(3)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range missed {
		q, err := c3.ABCIQuery(ctx, wire.PathTx, h)
		if err != nil {
			t.Fatalf("node3 /tx %X: %v", h, err)
		}
		if q.Response.Code != 0 {
			t.Fatalf("node3's app does not know tx %X submitted while it was down: %s", h, q.Response.Log)
		}
		at, i := q.Response.Height, q.Response.Index
		blk, _, err := chain.ReadBlock(ctx, c3, at) // references resolved
		if err != nil || i >= int64(len(blk.Block.Txs)) || !bytes.Equal(blk.Block.Txs[i].Hash(), h) {
			t.Fatalf("node3's block %d does not hold tx %X at %d: %v", at, h, i, err)
		}
		res, err := c3.BlockResults(ctx, &at)
		if err != nil || i >= int64(len(res.TxsResults)) || res.TxsResults[i].Code != 0 {
			t.Fatalf("tx %X at height %d on node3: results %v %v", h, at, err, res)
		}
	}

	out, err = cli("localnet", "status", "--dir", dir)
	if err != nil {
		t.Fatalf("localnet status: %v\n%s", err, out)
	}
	for _, node := range []string{"node0", "node1", "node2", "node3"} {
		if !strings.Contains(out, node+" ") || strings.Contains(out, "stopped") {
			t.Fatalf("localnet status does not show %s running:\n%s", node, out)
		}
	}
	t.Logf("localnet status:\n%s", out)
}

// commitTx sends tx to node i with broadcast_tx_commit and requires it to
// pass CheckTx and be committed with code 0.
func commitTx(ctx context.Context, t *testing.T, n *localnet.Net, i int, tx []byte) *coretypes.ResultBroadcastTxCommit {
	t.Helper()
	c, err := n.Client(i)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.BroadcastTxCommit(ctx, tx)
	if err != nil {
		t.Fatalf("broadcast_tx_commit to node%d: %v", i, err)
	}
	if res.CheckTx.Code != 0 || res.TxResult.Code != 0 {
		t.Fatalf("broadcast_tx_commit to node%d: CheckTx %d %q, FinalizeBlock %d %q", i, res.CheckTx.Code, res.CheckTx.Log, res.TxResult.Code, res.TxResult.Log)
	}
	return res
}

func createTopic(ctx context.Context, t *testing.T, n *localnet.Net, admin *wire.Signer, name string, partitions uint32) {
	t.Helper()
	req, err := admin.Admin(0, &byzlogv1.CreateTopic{Name: name, Config: &byzlogv1.TopicConfig{Partitions: partitions}})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := wire.AdminTx(req)
	if err != nil {
		t.Fatal(err)
	}
	res := commitTx(ctx, t, n, 0, tx)
	// Other nodes learn of the topic when they commit the block too.
	if err := waitHeight(ctx, t, n, []int{0, 1, 2, 3}, res.Height); err != nil {
		t.Fatal(err)
	}
	t.Logf("created topic %s with %d partitions at height %d", name, partitions, res.Height)
}

// bundleReadBack commits a bundle of several producers' batches with
// broadcast_tx_commit, then reads the records back from every validator:
// the same offsets, the same bytes, everywhere.
func bundleReadBack(ctx context.Context, t *testing.T, n *localnet.Net, chain string) {
	var batches []*byzlogv1.SignedBatch
	for i := 0; i < 3; i++ {
		s := wire.NewSigner(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{byte(i + 1)}, ed25519.SeedSize)), chain)
		var recs []*byzlogv1.Record
		for j := 0; j < 4; j++ {
			recs = append(recs, &byzlogv1.Record{Key: []byte(fmt.Sprintf("p%d", i)), Value: []byte(fmt.Sprintf("producer %d record %d", i, j))})
		}
		b, err := s.Batch("e2e", 1, 0, byzlogv1.Codec_CODEC_ZSTD, recs)
		if err != nil {
			t.Fatal(err)
		}
		batches = append(batches, b)
	}
	tx, err := wire.BundleTx(batches...)
	if err != nil {
		t.Fatal(err)
	}
	res := commitTx(ctx, t, n, 2, tx)
	var out byzlogv1.TxOutcome
	if err := proto.Unmarshal(res.TxResult.Data, &out); err != nil {
		t.Fatalf("tx result data: %v", err)
	}
	for i, b := range out.Batches {
		if b.BaseOffset != uint64(4*i) || b.RecordCount != 4 || b.Partition != 1 {
			t.Fatalf("batch %d landed at %v, want offsets %d..%d of e2e/1", i, b, 4*i, 4*i+3)
		}
	}
	t.Logf("bundle of 3 batches committed at height %d: offsets 0..11 of e2e/1", res.Height)
	if err := waitHeight(ctx, t, n, []int{0, 1, 2, 3}, res.Height); err != nil {
		t.Fatal(err)
	}
	req, err := proto.Marshal(&byzlogv1.RecordsRequest{Topic: "e2e", Partition: 1})
	if err != nil {
		t.Fatal(err)
	}
	var first [][]byte
	for i := 0; i < 4; i++ {
		c, err := n.Client(i)
		if err != nil {
			t.Fatal(err)
		}
		q, err := c.ABCIQuery(ctx, wire.PathRecords, req)
		if err != nil {
			t.Fatalf("node%d abci_query: %v", i, err)
		}
		if q.Response.Code != 0 {
			t.Fatalf("node%d abci_query %s: code %d %s", i, wire.PathRecords, q.Response.Code, q.Response.Log)
		}
		var recs byzlogv1.RecordsResponse
		if err := proto.Unmarshal(q.Response.Value, &recs); err != nil {
			t.Fatal(err)
		}
		if len(recs.Records) != 12 || recs.NextOffset != 12 {
			t.Fatalf("node%d holds %d records of e2e/1 (next offset %d), want 12", i, len(recs.Records), recs.NextOffset)
		}
		for j, b := range recs.Records {
			var r byzlogv1.StoredRecord
			if err := proto.Unmarshal(b, &r); err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf("producer %d record %d", j/4, j%4); r.Offset != uint64(j) || string(r.Value) != want || r.Height != res.Height {
				t.Fatalf("node%d record %d = offset %d %q height %d, want offset %d %q height %d", i, j, r.Offset, r.Value, r.Height, j, want, res.Height)
			}
			if first != nil && !bytes.Equal(b, first[j]) {
				t.Fatalf("node%d's record %d differs from node0's", i, j)
			}
		}
		if first == nil {
			first = recs.Records
		}
	}
}
