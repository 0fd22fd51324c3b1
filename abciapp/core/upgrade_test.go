package core_test

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"strings"
	"testing"

	"github.com/byzlog/byzlog/abciapp/core"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// TestRulesUpgrade: a rules change (version 2: duplicate_signer) gated on
// a height agreed on-chain. Up to that height a build that knows only
// version 1 and one that knows 2 execute every block alike (same app
// hashes, the old result code); at the height the old build refuses to
// execute and the new one runs the new rule.
func TestRulesUpgrade(t *testing.T) {
	c, a := governedChain(t, 3, 2, 4)
	create := &byzlogv1.CreateTopic{Name: "t", Config: &byzlogv1.TopicConfig{Partitions: 1}}
	c.run("signed twice by one admin, rules 1", c.signed(create, a[0], a[0]), a[0], wire.CodeMalformedTx)

	next := func() int64 { return c.state.Height + 1 }
	c.run("too soon", c.signed(&byzlogv1.ScheduleUpgrade{RulesVersion: 2, Height: next() + wire.MinUpgradeLead - 1}, a[0], a[1]), a[0], wire.CodeBadUpgrade)
	c.run("no later version", c.signed(&byzlogv1.ScheduleUpgrade{RulesVersion: 1, Height: next() + 50}, a[0], a[1]), a[0], wire.CodeBadUpgrade)
	c.run("one signature", c.signed(&byzlogv1.ScheduleUpgrade{RulesVersion: 2, Height: next() + 50}, a[0]), a[0], wire.CodeBelowThreshold)
	c.run("nothing to cancel", c.signed(&byzlogv1.ScheduleUpgrade{}, a[0], a[1]), a[0], wire.CodeBadUpgrade)
	c.run("schedule 3", c.signed(&byzlogv1.ScheduleUpgrade{RulesVersion: 3, Height: next() + 50}, a[0], a[1]), a[0], wire.CodeOK)
	c.run("cancel", c.signed(&byzlogv1.ScheduleUpgrade{}, a[0], a[1]), a[0], wire.CodeOK)
	at := next() + wire.MinUpgradeLead
	c.run("schedule 2", c.signed(&byzlogv1.ScheduleUpgrade{RulesVersion: 2, Height: at}, a[0], a[1]), a[0], wire.CodeOK)

	var rules byzlogv1.Rules
	c.query(wire.PathRules, nil, &rules)
	if rules.Version != 1 || rules.NextVersion != 2 || rules.NextHeight != at {
		t.Fatalf("/rules = %v, want 1 in force and 2 at %d", &rules, at)
	}
	// Each block runs on both builds; the old one's outcome must match
	// until the upgrade height, where it must refuse.
	for c.state.Height+1 <= at {
		h := c.state.Height + 1
		dup := c.signed(create, a[0], a[0])
		b := core.Block{Height: h, TimeUnixNano: c.time + 1_000_000_000, Txs: [][]byte{dup}}
		old := b
		old.MaxRules = 1
		oldOut, oldErr := core.Execute(c.store, c.state, old)
		newOut, err := core.Execute(c.store, c.state, b)
		if err != nil {
			t.Fatal(err)
		}
		want := wire.CodeMalformedTx
		if h == at {
			want = wire.CodeDuplicateSigner
			if oldErr == nil || !strings.Contains(oldErr.Error(), "replace it with a build that knows version 2") {
				t.Fatalf("a version-1 build at the upgrade height %d: %v, want it to refuse", h, oldErr)
			}
		} else if oldErr != nil || !bytes.Equal(oldOut.State.AppHash, newOut.State.AppHash) {
			t.Fatalf("height %d before the upgrade: the builds disagree (%v; %X vs %X)", h, oldErr, oldOut.State.AppHash, newOut.State.AppHash)
		}
		if got := newOut.Results[0].Code; got != want {
			t.Fatalf("height %d (upgrade at %d): signed twice = %s, want %s", h, at, got, want)
		}
		c.time += 1_000_000_000
		c.store.apply(newOut.Changes)
		c.state = newOut.State
	}
	c.query(wire.PathRules, nil, &rules)
	if rules.Version != 2 || rules.Since != at || rules.NextHeight != 0 {
		t.Fatalf("/rules after the upgrade = %v, want 2 since %d", &rules, at)
	}
	c.run("downgrade", c.signed(&byzlogv1.ScheduleUpgrade{RulesVersion: 1, Height: next() + 50}, a[0], a[1]), a[0], wire.CodeBadUpgrade)
}

// TestGenesisRulesVersion: a chain may start at a later rules version,
// and core never takes a bundle reference for a transaction: the app
// resolves references before a block reaches core, so one that gets here
// was submitted, or proposed where references are not allowed.
func TestGenesisRulesVersion(t *testing.T) {
	for _, v := range []uint64{1, 3} {
		c := newChain(t, fmt.Sprintf(`{"rules_version": %d}`, v))
		var rules byzlogv1.Rules
		c.query(wire.PathRules, nil, &rules)
		if rules.Version != v || rules.Since != 0 {
			t.Fatalf("genesis rules_version %d: /rules = %v", v, &rules)
		}
		ref := wire.NewBundleRef(sha256.Sum256([]byte("a bundle")))
		params, err := core.LoadParams(c.store)
		if err != nil {
			t.Fatal(err)
		}
		if r := core.Precheck(params, ref, false).Result(); r.Code != wire.CodeMalformedTx || !strings.Contains(r.Log, "never submitted") {
			t.Fatalf("rules %d: precheck of a reference = %s %q, want malformed_tx saying it is never submitted", v, r.Code, r.Log)
		}
		bad, r, err := core.Verify(c.store, core.Block{Height: c.state.Height + 1, TimeUnixNano: c.time + 1, Txs: [][]byte{ref}})
		if err != nil || bad != 0 || r.Code != wire.CodeMalformedTx {
			t.Fatalf("rules %d: Verify(block of a reference) = %d, %s, %v; want tx 0 malformed", v, bad, r.Code, err)
		}
	}
}
