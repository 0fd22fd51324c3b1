package consumer_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/byzlog/byzlog/indexer/consumer"
	"github.com/byzlog/byzlog/indexer/layout"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

// table makes topic's stream as the indexer makes a compacted topic's
// (layout.FormatKey) and fills it: partition 0 offsets 0..9 with keys
// k0, k1, k2 in turn but k1 at 9 (offset 8, k2's latest, a tombstone),
// partition 1 offsets 0..3 with keys a, b, c, b. The stream keeps 0@6 0@8
// 0@9 and 1@0 1@2 1@3: holes between records.
func (e *env) table(topic string) jetstream.Stream {
	e.t.Helper()
	st, err := e.js.CreateStream(context.Background(), jetstream.StreamConfig{
		Name: layout.StreamName(topic), Subjects: []string{layout.KeyTopicSubjects(topic)},
		Storage: jetstream.FileStorage, MaxMsgsPerSubject: 1, AllowMsgTTL: true,
		Metadata: map[string]string{layout.FormatMetadata: layout.FormatKey},
	})
	if err != nil {
		e.t.Fatal(err)
	}
	keys1 := []string{"a", "b", "c", "b"}
	for o := uint64(0); o < 10; o++ {
		r := rec(topic, 0, o, int64(o)+1)
		r.Key = []byte{'k', byte('0' + o%3)}
		if o == 9 {
			r.Key = []byte("k1")
		}
		if o == 8 {
			r.Value = nil
		}
		e.publishKeyed(r)
		if o < 4 {
			r := rec(topic, 1, o, int64(o)+1)
			r.Key = []byte(keys1[o])
			e.publishKeyed(r)
		}
	}
	return st
}

func (e *env) publishKeyed(r *byzlogv1.StoredRecord) {
	e.t.Helper()
	var enc layout.Encoder
	if _, err := e.js.PublishMsg(context.Background(), enc.KeyMessage(r)); err != nil {
		e.t.Fatalf("publish %s/%d@%d: %v", r.Topic, r.Partition, r.Offset, err)
	}
}

// TestReadATable: a compacted topic's stream is read from the beginning,
// from an offset (a hole, and a record) and in a group, with its holes
// reported as no gap, and a record published again is dropped.
func TestReadATable(t *testing.T) {
	e := newEnv(t)
	e.table("kv")
	c := e.consumer()
	for _, tc := range []struct {
		name string
		opts []consumer.SubscribeOption
		want map[uint32][]uint64
	}{
		{"from the beginning", nil, map[uint32][]uint64{0: {6, 8, 9}, 1: {0, 2, 3}}},
		{"from a hole", []consumer.SubscribeOption{consumer.FromOffset(7)}, map[uint32][]uint64{0: {8, 9}}},
		{"from a record", []consumer.SubscribeOption{consumer.FromOffset(2), consumer.WithPartitions(1)}, map[uint32][]uint64{1: {2, 3}}},
		{"from a time", []consumer.SubscribeOption{consumer.FromTime(base.Add(8 * time.Second))}, map[uint32][]uint64{0: {8, 9}}},
		{"in a group", []consumer.SubscribeOption{consumer.WithGroup("g")}, map[uint32][]uint64{0: {6, 8, 9}, 1: {0, 2, 3}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := 0
			for _, offs := range tc.want {
				n += len(offs)
			}
			s := e.subscribe(c, "kv", tc.opts...)
			got := read(t, s, n)
			if b := byPartition(got); !reflect.DeepEqual(b, tc.want) {
				t.Errorf("read %v, want %v", b, tc.want)
			}
			for _, r := range got {
				if r.Partition == 0 && r.Offset == 8 && r.Value != nil {
					t.Errorf("0@8 (a tombstone) has value %q, want null", r.Value)
				}
			}
			quiet(t, s)
		})
	}
	// A record published again (here an older one of a key, which the
	// stream takes as the key's latest) comes after what a reader has
	// read, and is dropped.
	s := e.subscribe(c, "kv", consumer.WithPartitions(0))
	read(t, s, 3)
	old := rec("kv", 0, 3, 4)
	old.Key = []byte("k0")
	e.publishKeyed(old)
	quiet(t, s)
}
