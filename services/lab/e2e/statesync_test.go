//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/byzlog/byzlog/protos/wire"
	"github.com/byzlog/byzlog/services/internal/localnet"
)

// TestStateSyncJoin replaces a validator with a wiped node that joins by
// state sync with stock CometBFT: the apps hash their state every 20
// blocks and serve snapshots; node3 is stopped, wiped and started with
// [statesync] and a root of trust from two other nodes. Its app must
// restore a snapshot (checked against the verified app hash) rather than
// replay from height 1, then follow the chain with the same app hashes, and
// records written before and after are there.
func TestStateSyncJoin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	n, chainID := startNetWith(ctx, t, 2500, func(c *localnet.Config) { c.SnapshotInterval = 20 })
	adminKey, err := n.AdminKey()
	if err != nil {
		t.Fatal(err)
	}
	p := &producer{signer: wire.NewSigner(adminKey, chainID), topic: "log"}
	submit(ctx, t, n, 0, p, 50)

	// Snapshots of height 28 and 48 (states of 20 and 40) exist from 48 on.
	if err := waitHeight(ctx, t, n, []int{0, 1, 2, 3}, 50); err != nil {
		t.Fatal(err)
	}
	if err := n.KillNode(3); err != nil {
		t.Fatal(err)
	}
	if err := n.ResetNode(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if err := n.StateSyncNode(ctx, 3); err != nil {
		t.Fatal(err)
	}
	submit(ctx, t, n, 0, p, 50) // while node3 is away
	before, err := os.Stat(filepath.Join(n.Home(3), "app.log"))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := n.StartNode(ctx, 3); err != nil {
		t.Fatal(err)
	}
	top := maxHeight(ctx, n, []int{0, 1, 2}) + 3
	if err := waitHeight(ctx, t, n, []int{3}, top); err != nil {
		t.Fatal(err)
	}
	t.Logf("node3 reached height %d %s after it started", top, time.Since(start).Round(time.Millisecond))
	assertAgree(ctx, t, n, []int{0, 1, 2, 3})

	all, err := os.ReadFile(filepath.Join(n.Home(3), "app.log"))
	if err != nil {
		t.Fatal(err)
	}
	log := all[before.Size():] // what the app wrote since it started again
	if !strings.Contains(string(log), "snapshot restored") {
		t.Fatalf("node3's app did not restore a snapshot; its log:\n%s", lastLines(string(log), 20))
	}
	for _, line := range strings.Split(string(log), "\n") {
		if strings.Contains(line, "snapshot restored") || strings.Contains(line, "restoring a snapshot") {
			t.Logf("node3: %s", line)
		}
	}
	if strings.Contains(string(log), `"message":"genesis"`) {
		t.Fatal("node3's app ran InitChain: it replayed from genesis")
	}
	// Every record, written before the snapshot and after, reads back
	// from node3 as from node0.
	want := readPartition(ctx, t, n, 0, "log", 0)
	got := readPartition(ctx, t, n, 3, "log", 0)
	if len(got) != len(want) || len(got) < 100 {
		t.Fatalf("node3 holds %d records of log/0, node0 %d; want the same, at least 100", len(got), len(want))
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}
