//go:build e2e && bench

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/byzlog/byzlog/protos/wire"
	"github.com/byzlog/byzlog/services/internal/localnet"
)

// TestBenchJoin measures how long a wiped validator takes to reach the
// tip of a chain with BYZLOG_JOIN_BLOCKS blocks of history (default
// 1000,20000), by replaying every block from its peers and by state sync
// (snapshots every 100 blocks), in the same run, with records flowing.
// Both are printed with each node's disk; the ratio is the figure. Then,
// under the same load, node0 restarts keeping only the last
// BYZLOG_JOIN_RETAIN blocks (default 1000): its disk is printed before
// pruning, once pruned (after the registered indexer, started then, has
// published the blocks), and after a minute more of load, beside node1's,
// which keeps every block.
func TestBenchJoin(t *testing.T) {
	var heights []int64
	spec := os.Getenv("BYZLOG_JOIN_BLOCKS")
	if spec == "" {
		spec = "1000,20000"
	}
	for _, s := range strings.Split(spec, ",") {
		h, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil || h < 200 {
			t.Fatalf("BYZLOG_JOIN_BLOCKS=%q: want heights of 200 or more, comma-separated", spec)
		}
		heights = append(heights, h)
	}
	retain := int64(1000)
	if v := os.Getenv("BYZLOG_JOIN_RETAIN"); v != "" {
		r, err := strconv.ParseInt(v, 10, 64)
		if err != nil || r < 100 {
			t.Fatalf("BYZLOG_JOIN_RETAIN=%q: want a block count of 100 or more", v)
		}
		retain = r
	}
	budget := 15 * time.Minute
	for _, h := range heights {
		// ~4.5 blocks/s to build the chain, then ~12 blocks/s to replay it
		budget += time.Duration(h) * 350 * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	n, chainID := startNetWith(ctx, t, 9000, func(c *localnet.Config) {
		c.TimeoutCommit = localnet.Duration(20 * time.Millisecond)
	})
	adminKey, err := n.AdminKey()
	if err != nil {
		t.Fatal(err)
	}
	p := &producer{signer: wire.NewSigner(adminKey, chainID), topic: "log"}
	c, err := n.Client(1) // node1 is never stopped
	if err != nil {
		t.Fatal(err)
	}
	lctx, stopLoad := context.WithCancel(ctx)
	var load sync.WaitGroup
	load.Add(1)
	go func() { // ~100 records/s, a record a transaction
		defer load.Done()
		for lctx.Err() == nil {
			if _, err := c.BroadcastTxSync(lctx, p.tx(t)); err != nil && lctx.Err() == nil {
				t.Errorf("load: %v", err)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	defer func() { stopLoad(); load.Wait() }()

	// join wipes node3 and times it to the height the others had when it
	// started.
	join := func(stateSync bool) time.Duration {
		t.Helper()
		if err := n.KillNode(3); err != nil {
			t.Fatal(err)
		}
		if err := n.ResetNode(ctx, 3); err != nil {
			t.Fatal(err)
		}
		if stateSync {
			if err := n.StateSyncNode(ctx, 3); err != nil {
				t.Fatal(err)
			}
		}
		tip := maxHeight(ctx, n, []int{0, 1, 2})
		start := time.Now()
		if err := n.StartNode(ctx, 3); err != nil {
			t.Fatal(err)
		}
		for maxHeight(ctx, n, []int{3}) < tip {
			if ctx.Err() != nil {
				t.Fatalf("node3 did not reach %d (state sync %v)", tip, stateSync)
			}
			time.Sleep(100 * time.Millisecond)
		}
		return time.Since(start)
	}
	for _, h := range heights {
		if err := waitHeightWithin(ctx, n, []int{0, 1, 2, 3}, h); err != nil {
			t.Fatal(err)
		}
		replay := join(false)
		synced := join(true)
		t.Logf("history %d blocks (%d records): replay from genesis %s, state sync %s, %.1fx; stores node0 %s, node3 after state sync %s",
			h, p.seq, replay.Round(100*time.Millisecond), synced.Round(100*time.Millisecond), float64(replay)/float64(synced),
			dirSize(stores(n, 0)...), dirSize(stores(n, 3)...))
	}

	// Pruning, with the load still flowing. The registered indexer holds
	// every block until it has published it: it starts now, from height 1.
	before, beforeAt := diskOf(n, 0), maxHeight(ctx, n, []int{0})
	base := n.Config().BasePort
	natsURL := startNATS(t, base+50, t.TempDir())
	startProc(t, "byzlog-indexer", fmt.Sprintf("127.0.0.1:%d", base+60), indexerArgs(n, natsURL, base+60)...)
	n.SetRetainBlocks(retain)
	if err := n.KillNode(0); err != nil {
		t.Fatal(err)
	}
	if err := n.StartNode(ctx, 0); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for {
		tip := maxHeight(ctx, n, []int{1, 2})
		if e := earliestOf(ctx, n, 0); e > 1 && e >= tip-2*retain {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("node0 did not prune to the last %d blocks", retain)
		}
		time.Sleep(time.Second)
	}
	pruned := time.Since(start)
	t.Logf("pruning: node0 before, blocks 1-%d: %s", beforeAt, before)
	t.Logf("pruning: node0 pruned in %s to blocks %d-%d: %s; node1 keeping every block: %s",
		pruned.Round(100*time.Millisecond), earliestOf(ctx, n, 0), maxHeight(ctx, n, []int{0}), diskOf(n, 0), diskOf(n, 1))
	select {
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	case <-time.After(time.Minute):
	}
	t.Logf("pruning: a minute on, node0 blocks %d-%d: %s; node1: %s",
		earliestOf(ctx, n, 0), maxHeight(ctx, n, []int{0}), diskOf(n, 0), diskOf(n, 1))
	assertAgree(ctx, t, n, []int{0, 1, 2, 3})
}

// stores are the directories of node i that hold its data: CometBFT's,
// the app's state and its snapshots (not the process logs beside them).
func stores(n *localnet.Net, i int) []string {
	home := n.Home(i)
	return []string{filepath.Join(home, "data"), filepath.Join(home, "app"), filepath.Join(home, "app.snapshots")}
}

// diskOf is node i's stores in total and those that hold most of it.
func diskOf(n *localnet.Net, i int) string {
	home := n.Home(i)
	return fmt.Sprintf("%s (blockstore %s, state %s, tx_index %s, app %s, snapshots %s)", dirSize(stores(n, i)...),
		dirSize(filepath.Join(home, "data", "blockstore.db")), dirSize(filepath.Join(home, "data", "state.db")),
		dirSize(filepath.Join(home, "data", "tx_index.db")), dirSize(filepath.Join(home, "app")), dirSize(filepath.Join(home, "app.snapshots")))
}

// waitHeightWithin waits, without waitHeight's step bound, until nodes
// reach h.
func waitHeightWithin(ctx context.Context, n *localnet.Net, nodes []int, h int64) error {
	for maxHeight(ctx, n, nodes) < h {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	return nil
}
