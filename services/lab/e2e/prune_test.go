//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
	"github.com/byzlog/byzlog/services/internal/localnet"
)

// TestPruning runs stock CometBFT nodes whose apps prune (--retain-blocks
// 100, snapshots every 20 blocks) with the network's indexer registered at
// genesis and reporting its progress. The nodes drop old blocks; then the
// indexer is stopped and the nodes keep every block it has not published
// however far the chain moves on, so when it comes back (from the root it
// saved: height 1 is gone) it publishes every record, and pruning goes on.
func TestPruning(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	n, chainID := startNetWith(ctx, t, 5500, func(c *localnet.Config) {
		c.SnapshotInterval, c.RetainBlocks = 20, 100
		c.TimeoutCommit = localnet.Duration(20 * time.Millisecond)
	})
	base := n.Config().BasePort
	natsURL := startNATS(t, base+50, t.TempDir())
	ix := startProc(t, "byzlog-indexer", fmt.Sprintf("127.0.0.1:%d", base+60), indexerArgs(n, natsURL, base+60)...)
	adminKey, err := n.AdminKey()
	if err != nil {
		t.Fatal(err)
	}
	p := &producer{signer: wire.NewSigner(adminKey, chainID), topic: "log"}
	nodes := []int{0, 1, 2, 3}

	// produce sends records in rounds until every node reaches height h.
	produce := func(h int64) {
		t.Helper()
		for maxHeight(ctx, n, nodes) < h {
			submit(ctx, t, n, 0, p, 20)
			time.Sleep(200 * time.Millisecond)
		}
		if err := waitHeight(ctx, t, n, nodes, h); err != nil {
			t.Fatal(err)
		}
	}
	produce(160)
	for _, i := range nodes {
		pr := pruningOf(ctx, t, n, i)
		earliest := earliestBlock(ctx, t, n, i)
		t.Logf("node%d at %d: retain height %d (held by %s), earliest block %d, blockstore %s", i, pr.Height, pr.RetainHeight, pr.HeldBy, earliest, blockstoreSize(t, n, i))
		if pr.RetainHeight <= 1 || earliest <= 1 {
			t.Fatalf("node%d has pruned nothing at height %d: %v, earliest block %d", i, pr.Height, pr, earliest)
		}
	}

	// The indexer stops; the chain moves 150 blocks on.
	ix.stop(syscall.SIGTERM)
	stoppedAt := maxHeight(ctx, n, nodes)
	produce(stoppedAt + 150)
	// Its last report may have committed after it stopped: read it now.
	published := pruningOf(ctx, t, n, 0).GetIndexers()[0].GetPublishedHeight()
	if published > stoppedAt {
		t.Fatalf("the stopped indexer's published height moved to %d, past %d where it stopped", published, stoppedAt)
	}
	for _, i := range nodes {
		pr := pruningOf(ctx, t, n, i)
		earliest := earliestBlock(ctx, t, n, i)
		t.Logf("node%d at %d with the indexer stopped at %d: retain height %d (held by %s), earliest block %d, blockstore %s",
			i, pr.Height, published, pr.RetainHeight, pr.HeldBy, earliest, blockstoreSize(t, n, i))
		if pr.HeldBy != "indexer "+localnet.IndexerID || pr.RetainHeight != published || earliest > published {
			t.Fatalf("node%d pruned past the stopped indexer's height %d: %v, earliest block %d", i, published, pr, earliest)
		}
	}

	// It comes back without height 1 and publishes every record.
	ix = startProc(t, "byzlog-indexer", fmt.Sprintf("127.0.0.1:%d", base+60), indexerArgs(n, natsURL, base+60)...)
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	want := p.seq
	deadline := time.Now().Add(2 * time.Minute)
	for streamRecords(ctx, js, "log") < want && time.Now().Before(deadline) {
		time.Sleep(500 * time.Millisecond)
	}
	if got := streamRecords(ctx, js, "log"); got != want {
		t.Fatalf("the stream holds %d records after the indexer came back, %d were written", got, want)
	}
	logBytes, err := os.ReadFile(ix.log)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(logBytes), `"trust_height":1,`) {
		t.Fatalf("the restarted indexer took height 1 as its root, not the root it saved:\n%s", lastLines(string(logBytes), 10))
	}
	// Its reports move the retain height past where it stopped.
	top := maxHeight(ctx, n, nodes)
	produce(top + 20)
	deadline = time.Now().Add(time.Minute)
	for pruningOf(ctx, t, n, 0).RetainHeight <= published && time.Now().Before(deadline) {
		submit(ctx, t, n, 0, p, 5)
		time.Sleep(500 * time.Millisecond)
	}
	pr := pruningOf(ctx, t, n, 0)
	if pr.RetainHeight <= published {
		t.Fatalf("after the indexer came back, node0's retain height is %d (held by %s), not past %d", pr.RetainHeight, pr.HeldBy, published)
	}
	t.Logf("node0 at %d after the indexer came back: retain height %d (held by %s), earliest block %d, blockstore %s",
		pr.Height, pr.RetainHeight, pr.HeldBy, earliestBlock(ctx, t, n, 0), blockstoreSize(t, n, 0))

	// A second indexer registered by the CLI holds pruning until it
	// reports; unregistered, it holds nothing.
	gw := startGateway(t, n, fmt.Sprintf("127.0.0.1:%d", base+70))
	second := filepath.Join(t.TempDir(), "second.key")
	cli := func(args ...string) string {
		t.Helper()
		out, err := exec.CommandContext(ctx, filepath.Join(binDir(t), "byzlog"), args...).CombinedOutput()
		if err != nil {
			t.Fatalf("byzlog %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	cli("keygen", second)
	start := time.Now()
	out, err := exec.CommandContext(ctx, filepath.Join(binDir(t), "byzlog"), "topic", "create", "x", "--admin-key", n.AdminKeyPath(),
		"--genesis="+n.GenesisPath(), "--gateway="+gw.addr, "--tls-ca="+n.TLS().CA()).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "pruned") {
		t.Fatalf("a client rooted at genesis on a pruned chain: %v\n%s\nwant an error that says height 1 is pruned", err, out)
	}
	t.Logf("a client rooted at genesis is refused in %s: %s", time.Since(start).Round(time.Millisecond), out)
	// Height 1 is gone: the CLI's root of trust is a recent header.
	c, err := n.Client(0)
	if err != nil {
		t.Fatal(err)
	}
	rootHeight := maxHeight(ctx, n, nodes) - 1
	root, err := c.Commit(ctx, &rootHeight)
	if err != nil {
		t.Fatal(err)
	}
	signed := []string{"--admin-key", n.AdminKeyPath(), "--chain-id", chainID, "--trust-height", fmt.Sprint(rootHeight),
		"--trust-hash", root.SignedHeader.Hash().String(), "--gateway=" + gw.addr, "--tls-ca=" + n.TLS().CA()}
	t.Log(cli(append([]string{"indexer", "register", second, "--name", "second"}, signed...)...))
	produce(maxHeight(ctx, n, nodes) + 3)
	if pr := pruningOf(ctx, t, n, 0); pr.HeldBy != "indexer second" || pr.RetainHeight != 0 {
		t.Fatalf("with an indexer that has not reported, node0's pruning is %v, want none, held by indexer second", pr)
	}
	list := cli(append([]string{"indexer", "list"}, nodeFlags(n, rpcAddrs(n, 0))...)...)
	t.Log(list)
	if !strings.Contains(list, "registered indexers: 2") || !strings.Contains(list, "indexer second") {
		t.Fatalf("byzlog indexer list:\n%s\nwant 2 indexers, pruning held by the second", list)
	}
	t.Log(cli(append([]string{"indexer", "unregister", second}, signed...)...))
	produce(maxHeight(ctx, n, nodes) + 3)
	if pr := pruningOf(ctx, t, n, 0); pr.RetainHeight <= published || len(pr.Indexers) != 1 {
		t.Fatalf("after unregistering the second indexer, node0's pruning is %v", pr)
	}
	assertAgree(ctx, t, n, nodes)
}

// indexerArgs runs the network's registered indexer (localnet.IndexerID),
// reporting its progress every second, with its HTTP on httpPort.
func indexerArgs(n *localnet.Net, natsURL string, httpPort int) []string {
	return append([]string{"--genesis", n.GenesisPath(), "--nats", natsURL, "--id", localnet.IndexerID,
		"--progress-key", filepath.Join(n.Config().Dir, "indexer.key"), "--progress-interval", "1s", "--progress-delay", "2s",
		"--http-listen", fmt.Sprintf("127.0.0.1:%d", httpPort), "--log-format", "json"}, nodeFlags(n, rpcAddrs(n, 0))...)
}

// pruningOf is node i's /pruning answer.
func pruningOf(ctx context.Context, t *testing.T, n *localnet.Net, i int) *byzlogv1.Pruning {
	t.Helper()
	c, err := n.Client(i)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.ABCIQuery(ctx, wire.PathPruning, nil)
	if err != nil || res.Response.Code != 0 {
		t.Fatalf("node%d %s: %v %v", i, wire.PathPruning, err, res)
	}
	var p byzlogv1.Pruning
	if err := proto.Unmarshal(res.Response.Value, &p); err != nil {
		t.Fatal(err)
	}
	return &p
}

// earliestBlock is the lowest height node i still serves.
func earliestBlock(ctx context.Context, t *testing.T, n *localnet.Net, i int) int64 {
	t.Helper()
	e := earliestOf(ctx, n, i)
	if e == 0 {
		t.Fatalf("node%d did not answer /status", i)
	}
	return e
}

// earliestOf is the lowest height node i serves, 0 if it does not answer
// (it may be restarting).
func earliestOf(ctx context.Context, n *localnet.Net, i int) int64 {
	c, err := n.Client(i)
	if err != nil {
		return 0
	}
	st, err := c.Status(ctx)
	if err != nil {
		return 0
	}
	return st.SyncInfo.EarliestBlockHeight
}

// blockstoreSize is node i's CometBFT block store on disk, in MiB.
func blockstoreSize(t *testing.T, n *localnet.Net, i int) string {
	t.Helper()
	return dirSize(filepath.Join(n.Home(i), "data", "blockstore.db"))
}

// dirSize is the bytes under dir, in MiB.
func dirSize(dirs ...string) string {
	var total int64
	for _, dir := range dirs {
		total += dirBytes(dir)
	}
	return fmt.Sprintf("%.1f MiB", float64(total)/(1<<20))
}

// dirBytes is the bytes of the files under dir.
func dirBytes(dir string) int64 {
	var total int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				total += info.Size()
			}
		}
		return nil
	})
	return total
}
