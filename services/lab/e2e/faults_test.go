//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/abciapp/failpoint"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
	"github.com/byzlog/byzlog/services/internal/localnet"
)

// startNet brings up a fresh 4-validator network on its own ports with a
// topic "log", and stops it when the test ends.
func startNet(ctx context.Context, t *testing.T, portOffset int) (*localnet.Net, string) {
	return startNetWith(ctx, t, portOffset, nil)
}

// startNetWith is startNet with the network's config changed by shape
// (nil: the default shape) before it is created.
func startNetWith(ctx context.Context, t *testing.T, portOffset int, shape func(*localnet.Config)) (*localnet.Net, string) {
	t.Helper()
	bin := binDir(t)
	cfg := localnet.Default()
	cfg.Dir, cfg.BasePort = t.TempDir(), basePort(t)+portOffset
	cfg.CometBFT, cfg.App = filepath.Join(bin, "cometbft"), filepath.Join(bin, "byzlog-app")
	if shape != nil {
		shape(&cfg)
	}
	n, err := localnet.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Down(testWriter{t}); err != nil {
			t.Errorf("stop localnet: %v", err)
		}
	})
	upCtx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	if err := n.Up(upCtx, testWriter{t}); err != nil {
		t.Fatal(err)
	}
	adminKey, err := n.AdminKey()
	if err != nil {
		t.Fatal(err)
	}
	createTopic(ctx, t, n, wire.NewSigner(adminKey, cfg.ChainID), "log", 1)
	return n, cfg.ChainID
}

// failpointApp is the failpoints test build of byzlog-app (`make e2e` builds it).
func failpointApp(t *testing.T) string {
	t.Helper()
	p := filepath.Join(binDir(t), "byzlog-app-failpoints")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s not found: `make e2e` builds it with -tags failpoints: %v", p, err)
	}
	return p
}

// ackProducer writes one record per batch with broadcast_tx_commit to nodes
// 0..2 in turn, as a producer that waits for commit would, and retries a
// failed send with the same sequence: retries never duplicate. It records
// every sequence whose commit was acknowledged.
type ackProducer struct {
	n      *localnet.Net
	signer *wire.Signer
	mu     sync.Mutex
	acked  []uint64
	errs   []string
}

func (p *ackProducer) run(ctx context.Context, t *testing.T, maxBatches int) {
	for seq := uint64(0); seq < uint64(maxBatches) && ctx.Err() == nil; {
		b, err := p.signer.Batch("log", 0, seq, byzlogv1.Codec_CODEC_NONE, []*byzlogv1.Record{{Value: []byte(fmt.Sprintf("v%d", seq))}})
		if err != nil {
			t.Error(err)
			return
		}
		tx, err := wire.BundleTx(b)
		if err != nil {
			t.Error(err)
			return
		}
		c, err := p.n.Client(int(seq % 3))
		if err != nil {
			t.Error(err)
			return
		}
		cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		res, err := c.BroadcastTxCommit(cctx, tx)
		cancel()
		switch {
		case err == nil && res.CheckTx.Code == 0 && res.TxResult.Code == 0,
			err == nil && wire.Code(res.CheckTx.Code) == wire.CodeDuplicate: // committed by an earlier try
			p.mu.Lock()
			p.acked = append(p.acked, seq)
			p.mu.Unlock()
			seq++
		default:
			p.mu.Lock()
			p.errs = append(p.errs, fmt.Sprintf("seq %d: %v %+v", seq, err, res))
			p.mu.Unlock()
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// startProducer runs an ackProducer (at most 2,000 batches) until the
// returned stop is called; stop returns the acknowledged sequences and the
// failed sends, and may be called more than once.
func startProducer(ctx context.Context, t *testing.T, n *localnet.Net, chain string) (stop func() ([]uint64, []string)) {
	p := &ackProducer{n: n, signer: wire.NewSigner(ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)), chain)}
	pctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); p.run(pctx, t, 2000) }()
	return func() ([]uint64, []string) {
		cancel()
		wg.Wait()
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.acked, p.errs
	}
}

// readLog returns the records of log/0 on node i.
func readLog(ctx context.Context, t *testing.T, n *localnet.Net, i int) [][]byte {
	t.Helper()
	c, err := n.Client(i)
	if err != nil {
		t.Fatal(err)
	}
	req, err := proto.Marshal(&byzlogv1.RecordsRequest{Topic: "log"})
	if err != nil {
		t.Fatal(err)
	}
	q, err := c.ABCIQuery(ctx, wire.PathRecords, req)
	if err != nil || q.Response.Code != 0 {
		t.Fatalf("node%d records query: %v %s", i, err, q.Response.Log)
	}
	var resp byzlogv1.RecordsResponse
	if err := proto.Unmarshal(q.Response.Value, &resp); err != nil {
		t.Fatal(err)
	}
	return resp.Records
}

// settledLog returns log/0 once all four nodes hold the same records. A
// bundle the stopped producer sent last may still commit, and the nodes apply
// each block a moment apart, so one read of each node can see two heights;
// logs of different lengths are read again until they agree or 30 seconds
// pass. Records that differ at the same offset fail at once.
func settledLog(ctx context.Context, t *testing.T, n *localnet.Net) [][]byte {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ref := readLog(ctx, t, n, 0)
		diff := ""
		for i := 1; i < 4 && diff == ""; i++ {
			got := readLog(ctx, t, n, i)
			for j := range min(len(got), len(ref)) {
				if string(got[j]) != string(ref[j]) {
					t.Fatalf("node%d's record %d differs from node0's", i, j)
				}
			}
			if len(got) != len(ref) {
				diff = fmt.Sprintf("node%d holds %d records, node0 %d", i, len(got), len(ref))
			}
		}
		if diff == "" {
			return ref
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s the nodes still disagree: %s", diff)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// checkLog requires every node to hold the same records, dense from offset
// 0, each sequence exactly once and in order, and every acknowledged one.
func checkLog(ctx context.Context, t *testing.T, n *localnet.Net, acked []uint64) {
	t.Helper()
	ref := settledLog(ctx, t, n)
	for j, b := range ref {
		var r byzlogv1.StoredRecord
		if err := proto.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		if r.Offset != uint64(j) || r.Sequence != uint64(j) || string(r.Value) != fmt.Sprintf("v%d", j) {
			t.Fatalf("record %d = offset %d sequence %d %q: want dense offsets, one record per sequence, in order", j, r.Offset, r.Sequence, r.Value)
		}
	}
	for _, seq := range acked {
		if seq >= uint64(len(ref)) {
			t.Fatalf("acknowledged sequence %d is missing: the log holds %d records", seq, len(ref))
		}
	}
	t.Logf("all 4 validators hold the same %d records; %d acknowledged, none lost or doubled", len(ref), len(acked))
}

// TestCrashReplay crashes node 3's app at each crash point of Commit while
// records are being written, restarts it, and checks that it converges to
// the others' app hash with no record lost or doubled.
func TestCrashReplay(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	fpApp := failpointApp(t)
	n, chain := startNet(ctx, t, 1000)
	stop := startProducer(ctx, t, n, chain)
	defer stop()

	all := []int{0, 1, 2, 3}
	for _, point := range []string{failpoint.CommitBeforeWrite, failpoint.CommitAfterWrite, failpoint.FinalizeStart} {
		if err := n.KillNode(3); err != nil {
			t.Fatal(err)
		}
		at := maxHeight(ctx, n, []int{0, 1, 2}) + 4
		env := []string{fmt.Sprintf("%s=%s@%d", failpoint.EnvVar, point, at)}
		if err := n.StartNodeWith(ctx, 3, fpApp, env); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(90 * time.Second)
		for {
			if _, appAlive := n.Alive(3); !appAlive {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node3's app did not crash at %s@%d within 90 s", point, at)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err := n.KillRest(3); err != nil {
			t.Fatal(err)
		}
		t.Logf("node3's app crashed at %s, height %d", point, at)
		if err := n.StartNode(ctx, 3); err != nil {
			t.Fatal(err)
		}
		target := maxHeight(ctx, n, []int{0, 1, 2})
		if err := waitHeight(ctx, t, n, all, target+1); err != nil {
			t.Fatalf("node3 did not recover from a crash at %s: %v", point, err)
		}
		assertAgree(ctx, t, n, []int{3, 0})
	}
	acked, errs := stop()
	if len(acked) < 10 {
		t.Fatalf("only %d records acknowledged during the crashes (errors: %v)", len(acked), errs)
	}
	t.Logf("%d failed sends retried with the same sequence", len(errs))
	if err := waitHeight(ctx, t, n, all, maxHeight(ctx, n, all)+2); err != nil {
		t.Fatal(err)
	}
	assertAgree(ctx, t, n, all)
	checkLog(ctx, t, n, acked)
}

// rejections counts the proposals node i's app rejected, from its log.
func rejections(t *testing.T, n *localnet.Net, i int) int {
	t.Helper()
	f, err := os.Open(filepath.Join(n.Config().Dir, fmt.Sprintf("node%d", i), "app.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	count := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), "rejecting proposal with an invalid transaction") {
			count++
		}
	}
	return count
}

// TestByzantineProposer makes node 0 propose an invalid transaction of each
// kind: honest validators reject every such proposal, the chain keeps
// committing, nothing invalid is ever committed and all app hashes agree.
func TestByzantineProposer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	fpApp := failpointApp(t)
	n, chain := startNet(ctx, t, 2000)
	stop := startProducer(ctx, t, n, chain)
	defer stop()

	all := []int{0, 1, 2, 3}
	for _, kind := range []string{"forged", "replay", "oversized", "unknown-topic"} {
		before := rejections(t, n, 1) + rejections(t, n, 2) + rejections(t, n, 3)
		if err := n.KillNode(0); err != nil {
			t.Fatal(err)
		}
		env := []string{fmt.Sprintf("%s=%s=%s", failpoint.EnvVar, failpoint.ByzantineProposer, kind)}
		if err := n.StartNodeWith(ctx, 0, fpApp, env); err != nil {
			t.Fatal(err)
		}
		start := maxHeight(ctx, n, []int{1, 2, 3})
		deadline := time.Now().Add(2 * time.Minute)
		for rejections(t, n, 1)+rejections(t, n, 2)+rejections(t, n, 3) <= before {
			if time.Now().After(deadline) {
				t.Fatalf("%s: no honest validator rejected a proposal of node0 within 2 minutes", kind)
			}
			time.Sleep(250 * time.Millisecond)
		}
		if err := waitHeight(ctx, t, n, all, start+4); err != nil {
			t.Fatalf("%s: the chain stopped committing with a Byzantine proposer: %v", kind, err)
		}
		after := rejections(t, n, 1) + rejections(t, n, 2) + rejections(t, n, 3)
		t.Logf("%s: honest validators rejected %d proposals; the chain went from height %d to %d", kind, after-before, start, maxHeight(ctx, n, all))
		assertAgree(ctx, t, n, all)
	}
	acked, _ := stop()
	checkLog(ctx, t, n, acked)
	for _, b := range readLog(ctx, t, n, 1) {
		if strings.Contains(string(b), "FORGED") {
			t.Fatal("a record of the Byzantine proposer was committed")
		}
	}
	// No invalid transaction ever got into a block: the honest producer only
	// sends valid ones, so every committed result must be code 0.
	c, err := n.Client(1)
	if err != nil {
		t.Fatal(err)
	}
	top := maxHeight(ctx, n, []int{1})
	for h := int64(1); h <= top; h++ {
		hh := h
		res, err := c.BlockResults(ctx, &hh)
		if err != nil {
			t.Fatalf("block_results %d: %v", h, err)
		}
		for i, r := range res.TxsResults {
			if r.Code != 0 {
				t.Fatalf("height %d tx %d was committed with code %d (%s): a Byzantine proposal got through", h, i, r.Code, r.Log)
			}
		}
	}
	t.Logf("heights 1..%d hold only valid transactions", top)
}
