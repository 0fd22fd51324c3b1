package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/byzlog/byzlog/gateway/kafka"
	"github.com/byzlog/byzlog/gateway/pipeline"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

// startAdminFace serves a Kafka face whose anonymous principal is the test
// chain's admin, and returns a franz-go admin client of it.
func startAdminFace(t *testing.T, topics ...*byzlogv1.TopicState) *kadm.Client {
	t.Helper()
	g := pipeline.StartTestGateway(t, topics...)
	addr := serveKafkaFace(t, g, func(c *kafka.Config) { c.AnonymousKey, c.AnonymousAdmin = pipeline.TestAdminKey, true })
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// configs reads topic's configs as kadm describes them.
func configs(t *testing.T, ctx context.Context, adm *kadm.Client, topic string) map[string]kadm.Config {
	t.Helper()
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rcs.On(topic, nil)
	if err != nil || rc.Err != nil {
		t.Fatalf("describe %s: %v %v", topic, err, rc.Err)
	}
	out := map[string]kadm.Config{}
	for _, c := range rc.Configs {
		out[c.Key] = c
	}
	return out
}

// TestKafkaFaceTopicConfigs: a topic's configs are created, described and
// altered (incrementally and the legacy way) through Kafka's APIs, as an
// admin client does; partitions grow; bad input gets Kafka's error codes
// and changes nothing on the chain.
func TestKafkaFaceTopicConfigs(t *testing.T) {
	adm := startAdminFace(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := kadm.StringPtr
	created, err := adm.CreateTopic(ctx, 2, -1, map[string]*string{"retention.ms": s("3600000"), "message.timestamp.type": s("LogAppendTime"), "segment.bytes": s("1048576")}, "c")
	if err != nil || created.Err != nil {
		t.Fatalf("create: %v %v", err, created.Err)
	}
	got := configs(t, ctx, adm, "c")
	for name, want := range map[string]string{"retention.ms": "3600000", "message.timestamp.type": "LogAppendTime", "compression.type": "producer", "cleanup.policy": "delete", "retention.bytes": "-1"} {
		if c, ok := got[name]; !ok || c.Value == nil || *c.Value != want {
			t.Errorf("%s = %v, want %s", name, c.Value, want)
		}
	}
	if got["retention.ms"].Source != 1 || got["compression.type"].Source != 5 {
		t.Errorf("sources: retention.ms %d (want 1, dynamic topic), compression.type %d (want 5, default)", got["retention.ms"].Source, got["compression.type"].Source)
	}
	if _, ok := got["segment.bytes"]; ok {
		t.Error("segment.bytes is described, though ignored")
	}

	// Incremental: set one, delete one (back to its default), leave the rest.
	alter := []kadm.AlterConfig{{Name: "compression.type", Value: s("zstd")}, {Op: kadm.DeleteConfig, Name: "message.timestamp.type"}, {Name: "message.timestamp.after.max.ms", Value: s("60000")}}
	if rs, err := adm.AlterTopicConfigs(ctx, alter, "c"); err != nil || rs[0].Err != nil {
		t.Fatalf("incremental alter: %v %v", err, rs)
	}
	got = configs(t, ctx, adm, "c")
	for name, want := range map[string]string{"compression.type": "zstd", "message.timestamp.type": "CreateTime", "retention.ms": "3600000", "message.timestamp.after.max.ms": "60000"} {
		if c := got[name]; c.Value == nil || *c.Value != want {
			t.Errorf("after the incremental alter, %s = %v, want %s", name, c.Value, want)
		}
	}
	// Legacy: the named ones set, every other back to its default.
	if rs, err := adm.AlterTopicConfigsState(ctx, []kadm.AlterConfig{{Name: "retention.bytes", Value: s("1000000")}}, "c"); err != nil || rs[0].Err != nil {
		t.Fatalf("legacy alter: %v %v", err, rs)
	}
	got = configs(t, ctx, adm, "c")
	for name, want := range map[string]string{"retention.bytes": "1000000", "retention.ms": "-1", "compression.type": "producer"} {
		if c := got[name]; c.Value == nil || *c.Value != want {
			t.Errorf("after the legacy alter, %s = %v, want %s", name, c.Value, want)
		}
	}

	if rs, err := adm.UpdatePartitions(ctx, 5, "c"); err != nil || rs["c"].Err != nil {
		t.Fatalf("grow to 5 partitions: %v %v", err, rs)
	}
	if td, err := adm.ListTopics(ctx, "c"); err != nil || len(td["c"].Partitions) != 5 {
		t.Fatalf("after growing, metadata lists %d partitions (%v), want 5", len(td["c"].Partitions), err)
	}

	// Bad input: Kafka's codes, messages that say what is wrong, nothing
	// changed.
	before := configs(t, ctx, adm, "c")
	for _, tc := range []struct {
		name string
		do   func() error
		want *kerr.Error
		msg  string
	}{
		{"an unknown config", func() error {
			rs, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "retention.msec", Value: s("1")}}, "c")
			return errors.Join(err, rs[0].Err)
		}, kerr.InvalidConfig, ""},
		{"an out-of-range value", func() error {
			rs, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "retention.ms", Value: s("-5")}}, "c")
			return errors.Join(err, rs[0].Err)
		}, kerr.InvalidConfig, ""},
		{"a cleanup policy Kafka has not", func() error {
			rs, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "cleanup.policy", Value: s("compress")}}, "c")
			return errors.Join(err, rs[0].Err)
		}, kerr.InvalidConfig, ""},
		{"an empty cleanup policy", func() error {
			rs, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SubtractConfig, Name: "cleanup.policy", Value: s("delete")}}, "c")
			return errors.Join(err, rs[0].Err)
		}, kerr.InvalidConfig, ""},
		{"a negative compaction lag", func() error {
			rs, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "min.compaction.lag.ms", Value: s("-1")}}, "c")
			return errors.Join(err, rs[0].Err)
		}, kerr.InvalidConfig, ""},
		{"a bad codec at creation", func() error {
			r, err := adm.CreateTopic(ctx, 1, -1, map[string]*string{"compression.type": s("brotli")}, "d")
			return errors.Join(err, r.Err)
		}, kerr.InvalidConfig, ""},
		{"shrinking", func() error {
			rs, err := adm.UpdatePartitions(ctx, 2, "c")
			return errors.Join(err, rs["c"].Err)
		}, kerr.InvalidPartitions, ""},
		{"an unknown topic", func() error {
			rs, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "retention.ms", Value: s("1")}}, "nope")
			return errors.Join(err, rs[0].Err)
		}, kerr.UnknownTopicOrPartition, ""},
	} {
		if err := tc.do(); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.want.Message)
		}
	}
	after := configs(t, ctx, adm, "c")
	for name, c := range before {
		if a := after[name]; a.Value == nil || c.Value == nil || *a.Value != *c.Value {
			t.Errorf("bad input changed %s from %v to %v", name, c.Value, a.Value)
		}
	}
	if td, err := adm.ListTopics(ctx); err != nil || td.Has("d") {
		t.Errorf("a refused create made topic d (%v)", err)
	}
	// The messages say what is wrong.
	rs, _ := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "retention.msec", Value: s("1")}}, "c")
	if !strings.Contains(rs[0].ErrMessage, "retention.msec") {
		t.Errorf("unknown config message %q does not name it", rs[0].ErrMessage)
	}
}

// TestKafkaFaceCompactedTopicConfigs: a compacted topic's configs as a
// Kafka admin client sets and reads them: cleanup.policy compact at
// creation with its tombstone retention and lags, then compact,delete by
// an APPEND and back to delete by a SUBTRACT.
func TestKafkaFaceCompactedTopicConfigs(t *testing.T) {
	adm := startAdminFace(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := kadm.StringPtr
	created, err := adm.CreateTopic(ctx, 1, -1, map[string]*string{"cleanup.policy": s("compact"), "delete.retention.ms": s("1000"), "min.compaction.lag.ms": s("500")}, "table")
	if err != nil || created.Err != nil {
		t.Fatalf("create a compacted topic: %v %v", err, created.Err)
	}
	want := map[string]string{"cleanup.policy": "compact", "delete.retention.ms": "1000", "min.compaction.lag.ms": "500", "max.compaction.lag.ms": "9223372036854775807"}
	check := func(when string) {
		t.Helper()
		got := configs(t, ctx, adm, "table")
		for name, v := range want {
			if c := got[name]; c.Value == nil || *c.Value != v {
				t.Errorf("%s: %s = %v, want %s", when, name, c.Value, v)
			}
		}
	}
	check("created")
	if rs, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.AppendConfig, Name: "cleanup.policy", Value: s("delete")}}, "table"); err != nil || rs[0].Err != nil {
		t.Fatalf("append delete: %v %v", err, rs)
	}
	want["cleanup.policy"] = "compact,delete"
	check("after appending delete")
	if rs, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SubtractConfig, Name: "cleanup.policy", Value: s("compact")}, {Op: kadm.DeleteConfig, Name: "delete.retention.ms"}}, "table"); err != nil || rs[0].Err != nil {
		t.Fatalf("subtract compact: %v %v", err, rs)
	}
	want["cleanup.policy"], want["delete.retention.ms"] = "delete", "86400000"
	check("after subtracting compact")
}

// TestKafkaFaceGroupAdmin: the consumer-groups flows of Kafka's tools, as
// franz-go's admin client runs them: list and describe groups with lag,
// refuse to delete a group or offsets its live members use, reset offsets,
// delete offsets and the group; delete records before an offset; describe
// the cluster and its log dirs.
func TestKafkaFaceGroupAdmin(t *testing.T) {
	adm := startAdminFace(t, &byzlogv1.TopicState{Name: "k", Config: &byzlogv1.TopicConfig{Partitions: 2}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	produce := func(n int) {
		t.Helper()
		var recs []*kgo.Record
		for i := range n {
			recs = append(recs, &kgo.Record{Topic: "k", Partition: int32(i % 2), Value: []byte(fmt.Sprint(i))})
		}
		cl, err := kgo.NewClient(kgo.SeedBrokers(adminAddr(t, adm)), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	produce(10)
	member, err := kgo.NewClient(kgo.SeedBrokers(adminAddr(t, adm)), kgo.ConsumerGroup("grp"), kgo.ConsumeTopics("k"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	if err != nil {
		t.Fatal(err)
	}
	defer member.Close()
	for read := 0; read < 10 && ctx.Err() == nil; {
		fs := member.PollFetches(ctx)
		read += fs.NumRecords()
	}
	if err := member.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatal(err)
	}
	produce(4) // two more a partition: the group lags by 4

	listed, err := adm.ListGroups(ctx)
	if err != nil || listed["grp"].State != "Stable" {
		t.Fatalf("ListGroups = %v, %v; want grp Stable", listed, err)
	}
	lags, err := adm.Lag(ctx, "grp")
	if err != nil {
		t.Fatal(err)
	}
	lag := lags["grp"]
	if lag.Error() != nil || lag.State != "Stable" || len(lag.Members) != 1 || lag.Lag.Total() != 4 {
		t.Fatalf("grp: state %s, %d members, lag %d (%v); want Stable, 1, 4", lag.State, len(lag.Members), lag.Lag.Total(), lag.Error())
	}
	if dg, err := adm.DescribeGroups(ctx, "grp"); err != nil || len(dg["grp"].Members) != 1 || dg["grp"].Members[0].ClientID == "" || dg["grp"].Members[0].ClientHost == "" {
		t.Fatalf("DescribeGroups members = %+v (%v), want one with its client id and host", dg["grp"].Members, err)
	}
	if r, _ := adm.DeleteGroup(ctx, "grp"); !errors.Is(r.Err, kerr.NonEmptyGroup) {
		t.Fatalf("deleting a group with a member = %v %v, want NON_EMPTY_GROUP", r.Err, err)
	}
	ds, err := adm.DeleteOffsets(ctx, "grp", kadm.TopicsSet{"k": {0: {}}})
	if !errors.Is(ds.Error(), kerr.GroupSubscribedToTopic) {
		t.Fatalf("deleting offsets a member reads = %v %v, want GROUP_SUBSCRIBED_TO_TOPIC", ds.Error(), err)
	}
	member.Close() // leaves the group

	// Reset to the start, as --reset-offsets --to-earliest does.
	reset := kadm.Offsets{}
	reset.Add(kadm.Offset{Topic: "k", Partition: 0, At: 0})
	reset.Add(kadm.Offset{Topic: "k", Partition: 1, At: 0})
	if rs, err := adm.CommitOffsets(ctx, "grp", reset); err != nil || rs.Error() != nil {
		t.Fatalf("reset offsets: %v %v", err, rs.Error())
	}
	lags, err = adm.Lag(ctx, "grp")
	if err != nil || lags["grp"].State != "Empty" || lags["grp"].Lag.Total() != 14 {
		t.Fatalf("after the reset: state %s lag %d (%v), want Empty and 14", lags["grp"].State, lags["grp"].Lag.Total(), err)
	}
	if ds, err := adm.DeleteOffsets(ctx, "grp", kadm.TopicsSet{"k": {0: {}}}); err != nil || ds.Error() != nil {
		t.Fatalf("delete offsets of k/0: %v %v", err, ds.Error())
	}
	fetched, err := adm.FetchOffsets(ctx, "grp")
	if _, ok := fetched.Lookup("k", 0); err != nil || ok {
		t.Fatalf("k/0's offset after deleting it: %v %v", fetched, err)
	}
	if _, ok := fetched.Lookup("k", 1); !ok {
		t.Fatalf("k/1's offset went with k/0's: %v", fetched)
	}
	if r, err := adm.DeleteGroup(ctx, "grp"); err != nil || r.Err != nil {
		t.Fatalf("delete group: %v %v", err, r.Err)
	}
	if listed, err := adm.ListGroups(ctx); err != nil || listed["grp"].Group != "" {
		t.Fatalf("ListGroups after deleting grp = %v, %v", listed, err)
	}
	if dg, err := adm.DescribeGroups(ctx, "grp"); err != nil || dg["grp"].State != "Dead" {
		t.Fatalf("a deleted group is described as %q (%v), want Dead", dg["grp"].State, err)
	}
	if r, _ := adm.DeleteGroup(ctx, "grp"); !errors.Is(r.Err, kerr.GroupIDNotFound) {
		t.Fatalf("deleting it again = %v %v, want GROUP_ID_NOT_FOUND", r.Err, err)
	}

	// Delete records before offset 3 of k/0; past the high watermark is
	// refused and changes nothing.
	del := kadm.Offsets{}
	del.Add(kadm.Offset{Topic: "k", Partition: 0, At: 3})
	if rs, err := adm.DeleteRecords(ctx, del); err != nil || rs.Error() != nil {
		t.Fatalf("delete records: %v %v", err, rs.Error())
	} else if r, _ := rs.Lookup("k", 0); r.LowWatermark != 3 {
		t.Fatalf("delete records low watermark = %d, want 3", r.LowWatermark)
	}
	past := kadm.Offsets{}
	past.Add(kadm.Offset{Topic: "k", Partition: 1, At: 100})
	if rs, _ := adm.DeleteRecords(ctx, past); !errors.Is(rs.Error(), kerr.OffsetOutOfRange) {
		t.Fatalf("delete records past the high watermark = %v, want OFFSET_OUT_OF_RANGE", rs.Error())
	}
	starts, err := adm.ListStartOffsets(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if s0, _ := starts.Lookup("k", 0); s0.Offset != 3 {
		t.Errorf("k/0 starts at %d, want 3", s0.Offset)
	}
	if s1, _ := starts.Lookup("k", 1); s1.Offset != 0 {
		t.Errorf("k/1 starts at %d, want 0", s1.Offset)
	}

	// DescribeCluster and OffsetForLeaderEpoch, raw: the brokers, and a
	// log that never truncates (epoch 0 ends at the high watermark).
	raw, err := kgo.NewClient(kgo.SeedBrokers(adminAddr(t, adm)))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	dc, err := kmsg.NewPtrDescribeClusterRequest().RequestWith(ctx, raw)
	if err != nil || dc.ErrorCode != 0 || len(dc.Brokers) != 1 || dc.ClusterID == "" {
		t.Fatalf("DescribeCluster = %+v, %v", dc, err)
	}
	ol := kmsg.NewPtrOffsetForLeaderEpochRequest()
	ol.ReplicaID = -1
	ol.Topics = []kmsg.OffsetForLeaderEpochRequestTopic{{Topic: "k", Partitions: []kmsg.OffsetForLeaderEpochRequestTopicPartition{{Partition: 1, CurrentLeaderEpoch: -1, LeaderEpoch: 0}}}}
	olr, err := ol.RequestWith(ctx, raw)
	if err != nil || olr.Topics[0].Partitions[0].ErrorCode != 0 || olr.Topics[0].Partitions[0].EndOffset != 7 {
		t.Fatalf("OffsetForLeaderEpoch of k/1 = %+v, %v; want end offset 7", olr, err)
	}

	dirs, err := adm.DescribeAllLogDirs(ctx, nil)
	if err != nil {
		t.Fatalf("describe log dirs: %v", err)
	}
	var size int64
	dirs.Each(func(d kadm.DescribedLogDir) {
		d.Topics.Each(func(p kadm.DescribedLogDirPartition) { size += p.Size })
	})
	if size <= 0 {
		t.Errorf("log dirs describe %d bytes for k", size)
	}
}

// adminAddr is the address adm's client bootstraps from.
func adminAddr(t *testing.T, adm *kadm.Client) string {
	t.Helper()
	brokers, err := adm.ListBrokers(context.Background())
	if err != nil || len(brokers) == 0 {
		t.Fatalf("list brokers: %v %v", brokers, err)
	}
	return fmt.Sprintf("%s:%d", brokers[0].Host, brokers[0].Port)
}

// TestKafkaFaceAutoCreate: with an auto-create key, a producer that lets
// Metadata create topics writes to a topic the chain did not have, as with
// Kafka's default; without one (byzlog's default) the topic stays unknown.
func TestKafkaFaceAutoCreate(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("auto-create=%v", on), func(t *testing.T) {
			g := pipeline.StartTestGateway(t)
			addr := serveKafkaFace(t, g, func(c *kafka.Config) {
				if on {
					c.AutoCreateKey, c.AutoCreatePartitions = pipeline.TestAdminKey, 3
				}
			})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.AllowAutoTopicCreation(), kgo.DefaultProduceTopic("fresh"),
				kgo.RecordDeliveryTimeout(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			err = cl.ProduceSync(ctx, &kgo.Record{Value: []byte("v")}).FirstErr()
			if on && err != nil {
				t.Fatalf("produce to a new topic: %v", err)
			}
			if !on && err == nil {
				t.Fatal("produced to an unknown topic without auto-creation")
			}
			td, err := kadm.NewClient(cl).ListTopics(ctx, "fresh")
			if err != nil {
				t.Fatal(err)
			}
			if got := len(td["fresh"].Partitions); (on && got != 3) || (!on && got != 0) {
				t.Fatalf("topic fresh has %d partitions, want %d", got, map[bool]int{true: 3, false: 0}[on])
			}
		})
	}
}

// TestKafkaFaceCreatesManyTopicsAtOnce: a CreateTopics of 100 topics (as
// librdkafka's test 0045 sends) does not wait for a block a topic;
// one that exists already is answered TOPIC_ALREADY_EXISTS without holding
// the others up; DeleteTopics of them all likewise.
func TestKafkaFaceCreatesManyTopicsAtOnce(t *testing.T) {
	c := pipeline.NewTestChain(t, &byzlogv1.TopicState{Name: "t50", Config: &byzlogv1.TopicConfig{Partitions: 1}})
	pipeline.RunTestChain(t, c)
	g := pipeline.StartGatewayOn(t, c, nil)
	addr := serveKafkaFace(t, g, func(c *kafka.Config) { c.AnonymousKey, c.AnonymousAdmin = pipeline.TestAdminKey, true })
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var names []string
	for i := range 100 {
		names = append(names, fmt.Sprintf("t%d", i))
	}
	before, txs := c.Height(), c.CommittedTxs()
	rs, err := adm.CreateTopics(ctx, 2, -1, nil, names...)
	if err != nil {
		t.Fatal(err)
	}
	blocks, txs := c.Height()-before, c.CommittedTxs()-txs
	for _, name := range names {
		r := rs[name]
		if want := map[bool]error{true: kerr.TopicAlreadyExists, false: nil}[name == "t50"]; !errors.Is(r.Err, want) && r.Err != want {
			t.Errorf("%s: %v, want %v", name, r.Err, want)
		}
	}
	td, err := adm.ListTopics(ctx, names...)
	if err != nil || len(td) != 100 {
		t.Fatalf("listed %d of 100 topics (%v)", len(td), err)
	}
	t.Logf("100 topics created in %d transactions, %d blocks", txs, blocks)
	// One at a time, each waits for its block: 100 blocks at least. Each
	// in its own transaction at once: 100 transactions, in as many blocks
	// as signing them takes (5 here, 63 under the race detector). Now one
	// transaction (the test chain makes a block every 20 ms, so the
	// blocks counted are the time it took, 1 here, 6 under the race
	// detector).
	if txs != 1 {
		t.Errorf("100 topics took %d transactions, want 1", txs)
	}
	ds, err := adm.DeleteTopics(ctx, names...)
	if err != nil || ds.Error() != nil {
		t.Fatalf("delete 100 topics: %v %v", err, ds.Error())
	}
	// A topic named twice in one request: INVALID_REQUEST for both, as in
	// Kafka, and the other topics are created.
	req := kmsg.NewPtrCreateTopicsRequest()
	for _, n := range []string{"dup", "other", "dup"} {
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = n, 1, -1
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil || len(resp.Topics) != 3 {
		t.Fatalf("CreateTopics dup, other, dup: %v, %d answers", err, len(resp.Topics))
	}
	for i, want := range []int16{kerr.InvalidRequest.Code, 0, kerr.InvalidRequest.Code} {
		if rt := resp.Topics[i]; rt.ErrorCode != want {
			t.Errorf("CreateTopics dup, other, dup: %s answered %d (%v), want %d", rt.Topic, rt.ErrorCode, rt.ErrorMessage, want)
		}
	}
	if td, err := adm.ListTopics(ctx, "dup", "other"); err != nil || td.Has("dup") || !td.Has("other") {
		t.Fatalf("after CreateTopics dup, other, dup: %v; want other and not dup", td.Names())
	}
}

// TestKafkaFaceTwoGatewaysSignForOneKey: two gateways sign for one key
// (an admin user's topic creations through both, in turn; in the chaos
// runs, a user's group commits and transaction steps through the gateways
// that coordinate them): each request finds its gateway's next nonce
// taken by the other's, and is tried again with the chain's, not failed.
func TestKafkaFaceTwoGatewaysSignForOneKey(t *testing.T) {
	gs := pipeline.StartTestGateways(t, 2)
	var adms []*kadm.Client
	for _, g := range gs {
		addr := serveKafkaFace(t, g, func(c *kafka.Config) { c.AnonymousKey, c.AnonymousAdmin = pipeline.TestAdminKey, true })
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		adms = append(adms, kadm.NewClient(cl))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range 6 {
		name := fmt.Sprintf("t%d", i)
		r, err := adms[i%2].CreateTopic(ctx, 1, -1, nil, name)
		if err != nil || r.Err != nil {
			t.Fatalf("create %s through gateway %d: %v %v", name, i%2, err, r.Err)
		}
	}
}
