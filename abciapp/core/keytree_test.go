package core_test

import (
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/abciapp/core"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/chain/stateproof"
	"github.com/byzlog/byzlog/protos/wire"
)

// latest asks for key's latest record in topic/p and verifies the answer
// against the chain's app hash.
func (c *testChain) latest(topic string, p uint32, key string) (*stateproof.Latest, *byzlogv1.LatestProof) {
	c.t.Helper()
	var lp byzlogv1.LatestProof
	c.query(wire.PathLatest, &byzlogv1.LatestRequest{Topic: topic, Partition: p, Key: []byte(key)}, &lp)
	l, err := stateproof.VerifyLatest(&lp, c.state.AppHash, topic, p, []byte(key))
	if err != nil {
		c.t.Fatalf("latest of %s in %s/%d: %v", key, topic, p, err)
	}
	return l, &lp
}

func latestValue(l *stateproof.Latest) string {
	switch {
	case l.Tombstone:
		return "tombstone"
	case l.Removed:
		return "removed"
	case l.Record == nil:
		return "none"
	}
	return fmt.Sprintf("%d:%s", l.Offset, l.Record.Value)
}

// TestLatestProof: the latest record of each key of a compacted topic, as
// far as compaction has passed, proves against the app hash, and so does
// a producer's sequence; a proof of an older value, of an absent key where
// the key is present, of another key or against another app hash fails.
func TestLatestProof(t *testing.T) {
	c := newChain(t, "")
	c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 2, CleanupPolicy: byzlogv1.CleanupPolicy_CLEANUP_COMPACT, DeleteRetentionMs: ms(2500)})
	p := wire.NewSigner(key("p"), chainID)
	c.must(bundle(t, batch(t, p, "t", 0, 0, kv("a=1", "b=1", "a=2"))))
	if l, _ := c.latest("t", 0, "a"); latestValue(l) != "none" || l.CleanOffset != 0 || l.NextOffset != 3 {
		t.Fatalf("latest of a before compaction passed it = %s, clean %d of %d; want none, clean 0 of 3", latestValue(l), l.CleanOffset, l.NextOffset)
	}
	c.block()
	old, oldProof := c.latest("t", 0, "a")
	if latestValue(old) != "2:2" || old.CleanOffset != 3 {
		t.Fatalf("latest of a = %s (clean %d), want 2:2 (clean 3)", latestValue(old), old.CleanOffset)
	}
	c.must(bundle(t, batch(t, p, "t", 0, 1, kv("a=3", "b="))))
	c.block()
	for key, want := range map[string]string{"a": "3:3", "b": "tombstone", "c": "none"} {
		if l, _ := c.latest("t", 0, key); latestValue(l) != want {
			t.Errorf("latest of %s = %s, want %s", key, latestValue(l), want)
		}
	}
	for range 3 {
		c.block() // the tombstone of b expires
	}
	if l, _ := c.latest("t", 0, "b"); latestValue(l) != "none" {
		t.Errorf("latest of b after delete_retention_ms = %s, want none", latestValue(l))
	}

	// Lies.
	_, now := c.latest("t", 0, "a")
	_, absent := c.latest("t", 0, "c")
	lies := map[string]func() (*byzlogv1.LatestProof, []byte){
		"an older proof, against today's app hash": func() (*byzlogv1.LatestProof, []byte) { return oldProof, []byte("a") },
		"the older record in today's proof": func() (*byzlogv1.LatestProof, []byte) {
			lp := proto.Clone(now).(*byzlogv1.LatestProof)
			lp.Record = oldProof.Record
			return lp, []byte("a")
		},
		"no entry: the key absent": func() (*byzlogv1.LatestProof, []byte) {
			lp := proto.Clone(now).(*byzlogv1.LatestProof)
			lp.State.Entries[2].Value = nil
			return lp, []byte("a")
		},
		"an absent key's proof for a present key": func() (*byzlogv1.LatestProof, []byte) { return absent, []byte("a") },
		"another key's proof":                     func() (*byzlogv1.LatestProof, []byte) { return now, []byte("c") },
		"another clean offset": func() (*byzlogv1.LatestProof, []byte) {
			lp := proto.Clone(now).(*byzlogv1.LatestProof)
			var ps byzlogv1.PartitionState
			_ = proto.Unmarshal(lp.State.Entries[1].Value, &ps)
			ps.CleanOffset--
			lp.State.Entries[1].Value, _ = proto.Marshal(&ps)
			return lp, []byte("a")
		},
		"a key tree root of its own": func() (*byzlogv1.LatestProof, []byte) {
			lp := proto.Clone(now).(*byzlogv1.LatestProof)
			lp.State.KeyRoot[0] ^= 1
			return lp, []byte("a")
		},
	}
	for name, lie := range lies {
		lp, k := lie()
		if l, err := stateproof.VerifyLatest(lp, c.state.AppHash, "t", 0, k); err == nil {
			t.Errorf("%s: verified as %s", name, latestValue(l))
		}
	}
	if _, err := stateproof.VerifyLatest(now, c.state.AppHash, "t", 1, []byte("a")); err == nil {
		t.Error("a proof of partition 0 verified for partition 1")
	}

	// The producer's sequence.
	req := &byzlogv1.ProducerRequest{ProducerKey: p.PublicKey(), Topic: "t", Partition: 0}
	var sp byzlogv1.StateProof
	c.query(wire.PathProducerProof, req, &sp)
	ps, err := stateproof.VerifyProducerState(&sp, c.state.AppHash, req)
	if err != nil || ps.NextSequence != 2 {
		t.Fatalf("producer state = %v, %v; want next sequence 2, verified", ps, err)
	}
	other := proto.Clone(req).(*byzlogv1.ProducerRequest)
	other.Partition = 1
	if ps, err := stateproof.VerifyProducerState(&sp, c.state.AppHash, other); err == nil {
		t.Errorf("partition 0's producer proof verified for partition 1 as %v", ps)
	}
	c.query(wire.PathProducerProof, other, &sp)
	if ps, err := stateproof.VerifyProducerState(&sp, c.state.AppHash, other); err != nil || ps.NextSequence != 0 {
		t.Errorf("a producer that never wrote to partition 1 = %v, %v; want next sequence 0, verified", ps, err)
	}
}

// TestLatestRefusals: a query that cannot be answered says why.
func TestLatestRefusals(t *testing.T) {
	c := newChain(t, "")
	c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 1, CleanupPolicy: byzlogv1.CleanupPolicy_CLEANUP_COMPACT})
	for _, tc := range []struct {
		req  *byzlogv1.LatestRequest
		code wire.Code
		says string
	}{
		{&byzlogv1.LatestRequest{Topic: "nope", Key: []byte("a")}, wire.CodeUnknownTopic, "nope"},
		{&byzlogv1.LatestRequest{Topic: "t", Partition: 3, Key: []byte("a")}, wire.CodeUnknownPartition, "0..0"},
		{&byzlogv1.LatestRequest{Topic: "t"}, wire.CodeBadQuery, "no key"},
	} {
		_, r, err := core.Query(c.store, c.state, wire.PathLatest, mustMarshal(t, tc.req))
		if err != nil || r.Code != tc.code || !strings.Contains(r.Log, tc.says) {
			t.Errorf("Query(/latest %v) = %s %q %v, want %s naming %q", tc.req, r.Code, r.Log, err, tc.code, tc.says)
		}
	}
	old := newChain(t, fmt.Sprintf(`{"admins": [%q], "rules_version": 9}`, hex.EncodeToString(c.admin.PublicKey())))
	old.block()
	_, r, err := core.Query(old.store, old.state, wire.PathLatest, mustMarshal(t, &byzlogv1.LatestRequest{Topic: "t", Key: []byte("a")}))
	if err != nil || r.Code != wire.CodeNotFound || !strings.Contains(r.Log, "rules version 10") {
		t.Errorf("/latest on a rules 9 chain = %s %q %v, want %s naming rules version 10", r.Code, r.Log, err, wire.CodeNotFound)
	}
}

// TestKeyTreeTopicDeleted: a compacted topic deleted and created again in
// one block leaves nothing of its keys in the key tree (the harness checks
// the tree against one built afresh after every block).
func TestKeyTreeTopicDeleted(t *testing.T) {
	c := newChain(t, "")
	cfg := &byzlogv1.TopicConfig{Partitions: 1, CleanupPolicy: byzlogv1.CleanupPolicy_CLEANUP_COMPACT}
	c.createTopic("t", cfg)
	p := wire.NewSigner(key("p"), chainID)
	c.must(bundle(t, batch(t, p, "t", 0, 0, kv("a=1", "b=1"))))
	c.block()
	if l, _ := c.latest("t", 0, "a"); latestValue(l) != "0:1" {
		t.Fatalf("latest of a = %s, want 0:1", latestValue(l))
	}
	del := c.adminTx(c.admin, c.nextNonce(c.admin), &byzlogv1.DeleteTopic{Name: "t"})
	create := c.adminTx(c.admin, c.nextNonce(c.admin), &byzlogv1.CreateTopic{Name: "t", Config: cfg})
	for i, r := range c.block(del, create) {
		if !r.OK() {
			t.Fatalf("tx %d: %s %s", i, r.Code, r.Log)
		}
	}
	if l, _ := c.latest("t", 0, "a"); latestValue(l) != "none" || l.NextOffset != 0 {
		t.Fatalf("latest of a in the new topic = %s (next offset %d), want none at 0", latestValue(l), l.NextOffset)
	}
	c.block(c.adminTx(c.admin, c.nextNonce(c.admin), &byzlogv1.DeleteTopic{Name: "t"}))
	fresh, stored, err := core.KeyTreeFromScratch(c.store)
	if err != nil || string(fresh) != string(stored) {
		t.Fatalf("after the topic went: %X vs %X, %v", fresh, stored, err)
	}
}

// TestKeyTreeMigration: a chain that switches to rules version 10 with
// compacted keys and producers takes them into the key tree a few a block
// (three here), refuses proofs until it has them all, then proves them;
// the key index entries written before carry their records' leaf hashes
// from then on.
func TestKeyTreeMigration(t *testing.T) {
	defer core.SetKeyTreeMigrationStep(3)()
	admin := wire.NewSigner(key("admin"), chainID)
	c := newChain(t, fmt.Sprintf(`{"admins": [%q], "rules_version": 9}`, hex.EncodeToString(admin.PublicKey())))
	c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 1, CleanupPolicy: byzlogv1.CleanupPolicy_CLEANUP_COMPACT})
	p := wire.NewSigner(key("p"), chainID)
	c.must(bundle(t, batch(t, p, "t", 0, 0, kv("a=1", "b=1", "c=1", "d=1", "a=2"))))
	c.createTopic("u", &byzlogv1.TopicConfig{Partitions: 2, CleanupPolicy: byzlogv1.CleanupPolicy_CLEANUP_COMPACT})
	c.must(bundle(t, batch(t, p, "u", 1, 0, kv("x=1", "y=1", "x=", "z=1"))))
	c.block()
	at := c.state.Height + 1 + wire.MinUpgradeLead
	c.must(c.adminTx(c.admin, c.nextNonce(c.admin), &byzlogv1.ScheduleUpgrade{RulesVersion: core.KeyTreeRulesVersion, Height: at}))
	for c.state.Height < at {
		c.block()
	}
	refused := 0
	for {
		_, r, err := core.Query(c.store, c.state, wire.PathLatest, mustMarshal(t, &byzlogv1.LatestRequest{Topic: "t", Key: []byte("a")}))
		if err != nil {
			t.Fatal(err)
		}
		if r.OK() {
			break
		}
		if r.Code != wire.CodeNotFound || !strings.Contains(r.Log, "still taking") || refused > 10 {
			t.Fatalf("/latest while the key tree is built = %s %q (after %d refusals)", r.Code, r.Log, refused)
		}
		refused++
		switch refused {
		case 1: // t's entries are behind the cursor: a change to one
			c.must(bundle(t, batch(t, p, "t", 0, 1, kv("c=2"))))
		case 2: // u is deleted while its entries are being taken
			c.must(c.adminTx(c.admin, c.nextNonce(c.admin), &byzlogv1.DeleteTopic{Name: "u"}))
		default:
			c.block()
		}
	}
	// Index entries (4 of t, 3 of u), partitions (1 + 2), topics (2) and
	// producers (2): 14 entries, three a block.
	if refused < 4 {
		t.Errorf("the key tree was built after %d blocks, want 5 or more (14 entries, 3 a block)", refused+1)
	}
	for key, want := range map[string]string{"a": "4:2", "b": "1:1", "c": "5:2", "e": "none"} {
		if l, _ := c.latest("t", 0, key); latestValue(l) != want {
			t.Errorf("latest of %s after the migration = %s, want %s", key, latestValue(l), want)
		}
	}
	c.must(bundle(t, batch(t, p, "t", 0, 2, kv("b=2"))))
	c.block()
	if l, _ := c.latest("t", 0, "b"); latestValue(l) != "6:2" {
		t.Errorf("latest of b = %s, want 6:2", latestValue(l))
	}
}

// TestCompactedPartitionFull: a compact-only topic's retention_bytes
// bounds its live records (rules version 10): a batch past it is refused
// (partition_full) and writes nothing, tombstones still pass, and once
// compaction removed what they deleted, writes pass again.
func TestCompactedPartitionFull(t *testing.T) {
	c := newChain(t, "")
	c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 1, CleanupPolicy: byzlogv1.CleanupPolicy_CLEANUP_COMPACT, RetentionBytes: 300, DeleteRetentionMs: ms(500)})
	p := wire.NewSigner(key("p"), chainID)
	big := strings.Repeat("v", 100)
	c.must(bundle(t, batch(t, p, "t", 0, 0, kv("a="+big, "b="+big))))
	r := c.block(bundle(t, batch(t, p, "t", 0, 1, kv("c="+big))))[0]
	if r.Code != wire.CodePartitionFull || !strings.Contains(r.Log, "retention_bytes (300)") {
		t.Fatalf("a batch past retention_bytes = %s %q, want partition_full naming the bound", r.Code, r.Log)
	}
	if n := c.partition("t", 0).NextOffset; n != 2 {
		t.Fatalf("the refused batch moved the log end to %d", n)
	}
	c.must(bundle(t, batch(t, p, "t", 0, 1, kv("a=", "b="))))
	for range 3 {
		c.block() // the tombstones are passed, then expire
	}
	if b := outcome(t, c.must(bundle(t, batch(t, p, "t", 0, 2, kv("c="+big))))).Batches[0]; b.Code != 0 {
		t.Fatalf("a batch once the tombstones freed the partition = %s %q", wire.Code(b.Code), b.Log)
	}
}

// TestLatestProofOfBigRecords: compaction hashes a record over
// maxDeferredLeaf at once and a smaller one when its pass ends; either
// way, whichever version of a key is its latest, its entry names that
// record's leaf, so the proof of the latest value holds.
func TestLatestProofOfBigRecords(t *testing.T) {
	c := newChain(t, "")
	c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 1, CleanupPolicy: byzlogv1.CleanupPolicy_CLEANUP_COMPACT})
	p := wire.NewSigner(key("p"), chainID)
	big := strings.Repeat("x", 3000)
	c.must(bundle(t, batch(t, p, "t", 0, 0, kv("a=small", "a="+big, "b="+big, "b=small", "c="+big))))
	c.block()
	for key, want := range map[string]string{"a": "1:" + big, "b": "3:small", "c": "4:" + big} {
		if l, _ := c.latest("t", 0, key); latestValue(l) != want {
			t.Errorf("latest of %s = %.12s…, want %.12s…", key, latestValue(l), want)
		}
	}
}
