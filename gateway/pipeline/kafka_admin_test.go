package pipeline_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

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
		{"compaction", func() error {
			rs, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "cleanup.policy", Value: s("compact")}}, "c")
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
