//go:build e2e

package e2e

import (
	"context"
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

// TestRollingUpgrade switches the rules from version 1 to 2 (an admin
// request signed twice by one admin: duplicate_signer, not malformed_tx)
// at a height scheduled on-chain, on stock CometBFT under load. node3 runs
// an old byzlog-app that knows only version 1 (the failpoints build with
// max-rules=1); node1 and node2 are restarted one by one before the
// height. At the height node3 stops instead of executing the block
// differently while the others go on; with its binary replaced it catches
// up, and every app hash agrees throughout. The chain starts at version 1
// (a new localnet starts at the newest) to have an upgrade to schedule.
func TestRollingUpgrade(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	n, chainID := startNetWith(ctx, t, 8000, func(c *localnet.Config) { c.RulesVersion = 1 })
	old := []string{failpoint.EnvVar + "=" + failpoint.MaxRules + "=1"}
	if err := n.KillNode(3); err != nil {
		t.Fatal(err)
	}
	if err := n.StartNodeWith(ctx, 3, failpointApp(t), old); err != nil {
		t.Fatal(err)
	}
	adminKey, err := n.AdminKey()
	if err != nil {
		t.Fatal(err)
	}
	admin := wire.NewSigner(adminKey, chainID)
	c, err := n.Client(0)
	if err != nil {
		t.Fatal(err)
	}
	// dupSigned is an admin request signed twice by the one admin, for its
	// next nonce (2: the topic took 0, the schedule 1); CheckTx judges it
	// by the rules of the next block.
	dupSigned := func() uint32 {
		req, err := admin.Admin(2, &byzlogv1.CreateTopic{Name: "never", Config: &byzlogv1.TopicConfig{Partitions: 1}})
		if err != nil {
			t.Fatal(err)
		}
		admin.Cosign(req)
		tx, err := wire.AdminTx(req)
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.BroadcastTxSync(ctx, tx)
		if err != nil {
			t.Fatal(err)
		}
		return res.Code
	}
	if code := dupSigned(); code != uint32(wire.CodeMalformedTx) {
		t.Fatalf("signed twice under rules 1: code %d, want malformed_tx", code)
	}

	// Load: records to node0 in rounds until the test ends.
	p := &producer{signer: admin, topic: "log"}
	lctx, stopLoad := context.WithCancel(ctx)
	var load sync.WaitGroup
	load.Add(1)
	go func() {
		defer load.Done()
		for lctx.Err() == nil {
			for k := 0; k < 10 && lctx.Err() == nil; k++ {
				if _, err := c.BroadcastTxSync(lctx, p.tx(t)); err != nil && lctx.Err() == nil {
					t.Errorf("load: %v", err)
					return
				}
			}
			time.Sleep(300 * time.Millisecond)
		}
	}()
	defer func() { stopLoad(); load.Wait() }()

	at := maxHeight(ctx, n, []int{0, 1, 2, 3}) + 40
	req, err := admin.Admin(1, &byzlogv1.ScheduleUpgrade{RulesVersion: 2, Height: at})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := wire.AdminTx(req)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := c.BroadcastTxSync(ctx, tx); err != nil || res.Code != 0 {
		t.Fatalf("schedule the upgrade at %d: %v %v", at, err, res)
	}
	t.Logf("rules version 2 scheduled at height %d", at)

	// The rolling restart, before the height, under load.
	for _, i := range []int{1, 2} {
		if err := n.KillNode(i); err != nil {
			t.Fatal(err)
		}
		if err := n.StartNode(ctx, i); err != nil {
			t.Fatal(err)
		}
		if err := waitHeight(ctx, t, n, []int{i}, maxHeight(ctx, n, []int{0})); err != nil {
			t.Fatal(err)
		}
		if h := maxHeight(ctx, n, []int{0}); h >= at {
			t.Fatalf("node%d back at height %d, past the upgrade height %d: schedule it later", i, h, at)
		}
	}
	if err := waitHeight(ctx, t, n, []int{0, 1, 2}, at+10); err != nil {
		t.Fatal(err)
	}
	if code := dupSigned(); code != uint32(wire.CodeDuplicateSigner) {
		t.Fatalf("signed twice under rules 2: code %d, want duplicate_signer", code)
	}
	st := n.Status(ctx)
	if st[3].AppHeight != at-1 {
		t.Fatalf("the old node3's app is at height %d, want it stopped at %d, before the upgrade height", st[3].AppHeight, at-1)
	}
	log, err := os.ReadFile(filepath.Join(n.Home(3), "app.log"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "replace it with a build that knows version 2") {
		t.Fatalf("node3's app did not say why it stopped:\n%s", lastLines(string(log), 10))
	}
	t.Logf("node3 (rules 1) stopped at height %d; nodes 0-2 at %d", st[3].AppHeight, maxHeight(ctx, n, []int{0}))

	// Its binary replaced, it executes the upgrade height as the others did.
	if err := n.KillRest(3); err != nil {
		t.Fatal(err)
	}
	if err := n.StartNode(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if err := waitHeight(ctx, t, n, []int{3}, maxHeight(ctx, n, []int{0})+2); err != nil {
		t.Fatal(err)
	}
	stopLoad()
	load.Wait()
	assertAgree(ctx, t, n, []int{0, 1, 2, 3})
	var rules byzlogv1.Rules
	res, err := c.ABCIQuery(ctx, wire.PathRules, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := proto.Unmarshal(res.Response.Value, &rules); err != nil || rules.Version != 2 || rules.Since != at {
		t.Fatalf("/rules = %v (%v), want version 2 since %d", &rules, err, at)
	}
}
