package core_test

import (
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/byzlog/byzlog/abciapp/core"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// deleteOffsetsTx deletes a group's offsets in partitions (none: the
// group), signed by s with its next nonce.
func deleteOffsetsTx(t testing.TB, c *testChain, s *wire.Signer, group string, partitions ...*byzlogv1.PartitionOffset) []byte {
	t.Helper()
	co, err := s.DeleteOffsets(c.nextNonce(s), group, partitions...)
	return mustOffsetsTx(t, co, err)
}

// TestDeleteRecords: DeleteRecords moves the log start at once, retention
// removes the records in the blocks after (a bounded number a block), the
// partition's size follows, and bad requests change nothing.
func TestDeleteRecords(t *testing.T) {
	c := newChain(t, "")
	c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 2})
	p := wire.NewSigner(key("p"), chainID)
	n := core.MaxRetentionDeletes + 500
	var recs []string
	for i := range n {
		recs = append(recs, fmt.Sprint(i))
	}
	for i := 0; i < n; i += 2000 {
		c.must(bundle(t, batch(t, p, "t", 0, uint64(i/2000), records(recs[i:min(i+2000, n)]...))))
	}
	c.must(bundle(t, batch(t, p, "t", 1, 0, records("a", "b"))))
	full := c.partition("t", 0).SizeBytes
	del := func(parts ...*byzlogv1.DeleteRecordsPartition) core.Result {
		return c.block(c.adminTx(c.admin, c.nextNonce(c.admin), &byzlogv1.DeleteRecords{Topic: "t", Partitions: parts}))[0]
	}
	for _, tc := range []struct {
		name  string
		parts []*byzlogv1.DeleteRecordsPartition
		want  wire.Code
		log   string
	}{
		{"past the high watermark", []*byzlogv1.DeleteRecordsPartition{{Partition: 1, BeforeOffset: 3}}, wire.CodeOffsetOutOfRange, "high watermark 2"},
		{"an unknown partition", []*byzlogv1.DeleteRecordsPartition{{Partition: 7, BeforeOffset: 0}}, wire.CodeUnknownPartition, ""},
		{"no partition", nil, wire.CodeMalformedTx, "names no partition"},
		{"a partition twice", []*byzlogv1.DeleteRecordsPartition{{Partition: 1, BeforeOffset: 1}, {Partition: 1, BeforeOffset: 2}}, wire.CodeMalformedTx, "twice"},
	} {
		r := del(tc.parts...)
		if r.Code != tc.want || !strings.Contains(r.Log, tc.log) {
			t.Errorf("%s: %s %q, want %s with %q", tc.name, r.Code, r.Log, tc.want, tc.log)
		}
		c.nonces[string(c.admin.PublicKey())]-- // a refused request does not use its nonce
	}
	if got := c.partition("t", 1).LogStartOffset; got != 0 {
		t.Fatalf("refused deletes moved partition 1's start to %d", got)
	}

	before := uint64(core.MaxRetentionDeletes + 100)
	if r := del(&byzlogv1.DeleteRecordsPartition{Partition: 0, BeforeOffset: before}, &byzlogv1.DeleteRecordsPartition{Partition: 1, BeforeOffset: 2}); r.Code != wire.CodeOK {
		t.Fatalf("delete records = %s %q", r.Code, r.Log)
	}
	// At once: the log starts there, and reads below it are refused.
	if got := c.partition("t", 0).LogStartOffset; got != before {
		t.Fatalf("log start after DeleteRecords = %d, want %d", got, before)
	}
	if _, r := queryRaw(t, c, wire.PathRecords, &byzlogv1.RecordsRequest{Topic: "t", Offset: before - 1}); r.Code != wire.CodeOffsetOutOfRange {
		t.Fatalf("a read below the new start = %s, want offset_out_of_range", r.Code)
	}
	// The next blocks remove them, MaxRetentionDeletes a block.
	c.block()
	if got := c.partition("t", 0).SizeBytes; got >= full {
		t.Fatalf("size after a block = %d, was %d: nothing removed", got, full)
	}
	c.block()
	c.block()
	if got := values(c.readAll("t", 0)); !strings.HasPrefix(got, fmt.Sprintf("%d:%d,", before, before)) {
		t.Fatalf("partition 0 reads %.40s..., want it to start at %d", got, before)
	}
	left := c.partition("t", 0)
	if left.LogStartOffset != before || left.SizeBytes == 0 || left.SizeBytes >= full/10 {
		t.Errorf("partition 0 after the purge: start %d size %d (of %d)", left.LogStartOffset, left.SizeBytes, full)
	}
	if p1 := c.partition("t", 1); p1.LogStartOffset != 2 || p1.SizeBytes != 0 {
		t.Errorf("partition 1 after deleting all: start %d size %d, want 2 and 0", p1.LogStartOffset, p1.SizeBytes)
	}
	// A delete below the start is a no-op; new records still append.
	if r := del(&byzlogv1.DeleteRecordsPartition{Partition: 0, BeforeOffset: 5}); r.Code != wire.CodeOK || c.partition("t", 0).LogStartOffset != before {
		t.Errorf("a delete below the start = %s, start %d", r.Code, c.partition("t", 0).LogStartOffset)
	}
	c.must(bundle(t, batch(t, p, "t", 1, 1, records("c"))))
	if got := values(c.readAll("t", 1)); got != "2:c" {
		t.Errorf("partition 1 = %s, want 2:c", got)
	}
}

// TestDeleteRecordsBeforeRules6: an older chain does not know the
// operation, as a version-5 build answers.
func TestDeleteRecordsBeforeRules6(t *testing.T) {
	admin := wire.NewSigner(key("admin"), chainID)
	c := newChain(t, fmt.Sprintf(`{"admins": [%q], "rules_version": %d}`, hex.EncodeToString(admin.PublicKey()), core.KafkaTopicsRulesVersion-1))
	c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 1})
	r := c.block(c.adminTx(c.admin, c.nextNonce(c.admin), &byzlogv1.DeleteRecords{Topic: "t", Partitions: []*byzlogv1.DeleteRecordsPartition{{}}}))[0]
	if r.Code != wire.CodeUnknownTxKind {
		t.Fatalf("DeleteRecords at rules 5 = %s %q, want unknown_tx_kind", r.Code, r.Log)
	}
}

// TestDeleteGroupOffsets: the owner deletes some of a group's offsets, then
// the group, whose name is free for another key after; /groups lists the
// groups in name order, a page at a time.
func TestDeleteGroupOffsets(t *testing.T) {
	f := newQueryFixture(t) // groups g (consumer: t/0, t/1) and gg (consumer2)
	c := f.c
	var list byzlogv1.GroupList
	c.query(wire.PathGroups, &byzlogv1.GroupsRequest{}, &list)
	if len(list.Groups) != 2 || list.Groups[0].Group != "g" || list.Groups[1].Group != "gg" || list.More {
		t.Fatalf("/groups = %v, want g and gg", list.Groups)
	}
	c.query(wire.PathGroups, &byzlogv1.GroupsRequest{Limit: 1}, &list)
	if len(list.Groups) != 1 || !list.More {
		t.Fatalf("/groups limit 1 = %v more %v", list.Groups, list.More)
	}
	c.query(wire.PathGroups, &byzlogv1.GroupsRequest{StartAfter: "g"}, &list)
	if len(list.Groups) != 1 || list.Groups[0].Group != "gg" {
		t.Fatalf("/groups after g = %v, want gg", list.Groups)
	}

	if r := c.block(deleteOffsetsTx(t, c, f.consumer2, "g"))[0]; r.Code != wire.CodeNotGroupOwner {
		t.Fatalf("another key deletes g: %s, want not_group_owner", r.Code)
	}
	c.nonces[string(f.consumer2.PublicKey())]--
	c.must(deleteOffsetsTx(t, c, f.consumer, "g", &byzlogv1.PartitionOffset{Topic: "t", Partition: 1}))
	var g byzlogv1.GroupOffsets
	c.query(wire.PathGroup, &byzlogv1.GroupRequest{Group: "g"}, &g)
	if len(g.Offsets) != 1 || g.Offsets[0].Partition != 0 {
		t.Fatalf("after deleting t/1, g holds %v", g.Offsets)
	}
	c.must(deleteOffsetsTx(t, c, f.consumer, "g"))
	if _, r := queryRaw(t, c, wire.PathGroup, &byzlogv1.GroupRequest{Group: "g"}); r.Code != wire.CodeNotFound {
		t.Fatalf("after deleting g, /group g = %s, want not_found", r.Code)
	}
	if r := c.block(deleteOffsetsTx(t, c, f.consumer, "g"))[0]; r.Code != wire.CodeNotFound {
		t.Fatalf("deleting g again = %s, want not_found", r.Code)
	}
	c.nonces[string(f.consumer.PublicKey())]--
	// The name is free: another key commits under it.
	c.must(offsetsTx(t, c, f.consumer2, "g", &byzlogv1.PartitionOffset{Topic: "t", Partition: 0, Offset: 1}))
	c.query(wire.PathGroup, &byzlogv1.GroupRequest{Group: "g"}, &g)
	if len(g.Offsets) != 1 || g.Offsets[0].Offset != 1 {
		t.Fatalf("g under its new owner holds %v", g.Offsets)
	}
}

// TestCreateTopics: many topics in one admin request, all or none; the
// block's appended topic changes list each; before rules version 7 the
// operation is unknown.
func TestCreateTopics(t *testing.T) {
	c := newChain(t, "")
	c.createTopic("exists", &byzlogv1.TopicConfig{Partitions: 1})
	topics := func(names ...string) *byzlogv1.CreateTopics {
		ct := &byzlogv1.CreateTopics{}
		for _, n := range names {
			ct.Topics = append(ct.Topics, &byzlogv1.CreateTopic{Name: n, Config: &byzlogv1.TopicConfig{Partitions: 2}})
		}
		return ct
	}
	many := make([]string, wire.MaxCreateTopics+1)
	for i := range many {
		many[i] = fmt.Sprintf("m%d", i)
	}
	badConfig := topics("x", "y")
	badConfig.Topics[1].Config.Partitions = 0
	for _, tc := range []struct {
		name string
		op   *byzlogv1.CreateTopics
		code wire.Code
		log  string
	}{
		{"one exists", topics("a", "exists", "b"), wire.CodeTopicExists, `topics[1]: topic "exists" exists`},
		{"listed twice", topics("a", "b", "a"), wire.CodeTopicExists, `topics[2]: topic "a" is listed twice`},
		{"bad name", topics("a", "b/c"), wire.CodeBadTopicName, "topics[1]: "},
		{"bad config", badConfig, wire.CodeBadTopicConfig, "topics[1]: "},
		{"none", topics(), wire.CodeMalformedTx, "1 to 1000 topics, this one 0"},
		{"too many", topics(many...), wire.CodeMalformedTx, "1 to 1000 topics, this one 1001"},
	} {
		r := c.block(c.adminTx(c.admin, c.nextNonce(c.admin), tc.op))[0]
		c.nonces[string(c.admin.PublicKey())]-- // a refused request takes no nonce
		if r.Code != tc.code || !strings.Contains(r.Log, tc.log) {
			t.Errorf("%s: %s %q, want %s containing %q", tc.name, r.Code, r.Log, tc.code, tc.log)
		}
	}
	var list byzlogv1.TopicList
	c.query(wire.PathTopics, nil, &list)
	if len(list.Topics) != 1 {
		t.Fatalf("after refused create_topics requests: %d topics, want only the one there before", len(list.Topics))
	}

	tx := c.adminTx(c.admin, c.nextNonce(c.admin), topics("a", "b", "c"))
	out := c.step(tx)
	if !out.Results[0].OK() {
		t.Fatalf("create_topics a, b, c: %s %q", out.Results[0].Code, out.Results[0].Log)
	}
	c.query(wire.PathTopics, nil, &list)
	if len(list.Topics) != 4 {
		t.Fatalf("after create_topics a, b, c: %d topics, want 4", len(list.Topics))
	}
	for _, n := range []string{"a", "b", "c"} {
		var ti byzlogv1.TopicInfo
		c.query(wire.PathTopic, &byzlogv1.TopicRequest{Name: n}, &ti)
		if ti.GetConfig().GetPartitions() != 2 || ti.CreatedHeight != c.state.Height {
			t.Fatalf("topic %s: %v at height %d, want 2 partitions at %d", n, ti.GetConfig(), ti.CreatedHeight, c.state.Height)
		}
	}
	a, err := core.BlockRecords(c.state.Height, c.time, [][]byte{tx}, []core.TxResult{{Code: uint32(wire.CodeOK)}}, core.MaxRulesVersion)
	if err != nil || len(a.Topics) != 3 || a.Topics[2].Name != "c" || a.Topics[2].Config.GetPartitions() != 2 {
		t.Fatalf("BlockRecords of the create_topics block: %v, topics %v; want a, b and c", err, a.Topics)
	}

	old := newChain(t, fmt.Sprintf(`{"admins": [%q], "rules_version": %d}`, hex.EncodeToString(c.admin.PublicKey()), core.CreateTopicsRulesVersion-1))
	if r := old.block(old.adminTx(old.admin, old.nextNonce(old.admin), topics("a")))[0]; r.Code != wire.CodeUnknownTxKind {
		t.Fatalf("create_topics at rules %d = %s %q, want unknown_tx_kind", core.CreateTopicsRulesVersion-1, r.Code, r.Log)
	}
}
