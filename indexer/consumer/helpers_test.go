package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/byzlog/byzlog/indexer/consumer"
	"github.com/byzlog/byzlog/indexer/layout"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

// env is a real NATS server with JetStream and a connection to it.
type env struct {
	t   *testing.T
	url string
	nc  *nats.Conn
	js  jetstream.JetStream
}

func newEnv(t *testing.T) *env {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	e := &env{t: t, url: s.ClientURL()}
	e.nc = e.conn()
	if e.js, err = jetstream.New(e.nc); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) conn() *nats.Conn {
	nc, err := nats.Connect(e.url)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(nc.Close)
	return nc
}

// stream creates topic's stream as the indexer does (direct gets optional).
func (e *env) stream(topic string, direct bool) jetstream.Stream {
	e.t.Helper()
	st, err := e.js.CreateStream(context.Background(), jetstream.StreamConfig{
		Name: layout.StreamName(topic), Subjects: []string{layout.TopicSubjects(topic)},
		Storage: jetstream.FileStorage, AllowDirect: direct,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return st
}

// base is the block time of height 1 in the tests; height h is h seconds later.
var base = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// rec is a record of the tests: committed at height (its timestamp follows).
func rec(topic string, p uint32, offset uint64, height int64) *byzlogv1.StoredRecord {
	return &byzlogv1.StoredRecord{
		Topic: topic, Partition: p, Offset: offset, Height: height,
		TimestampUnixNano:  base.Add(time.Duration(height-1) * time.Second).UnixNano(),
		CreateTimeUnixNano: base.Add(-time.Millisecond).UnixNano(),
		Key:                []byte(fmt.Sprintf("k%d", offset)), Value: []byte(fmt.Sprintf("v%d-%d", p, offset)),
		ProducerKey: make([]byte, 32), Sequence: offset,
		Headers: []*byzlogv1.RecordHeader{{Key: "h", Value: []byte{byte(p)}}},
	}
}

func (e *env) publish(rs ...*byzlogv1.StoredRecord) {
	e.t.Helper()
	for _, r := range rs {
		if _, err := e.js.PublishMsg(context.Background(), layout.Message(r)); err != nil {
			e.t.Fatalf("publish %s/%d@%d: %v", r.Topic, r.Partition, r.Offset, err)
		}
	}
}

// fill publishes offsets from..to-1 of partitions 0..parts-1, interleaved,
// one height per offset.
func (e *env) fill(topic string, parts uint32, from, to uint64) {
	e.t.Helper()
	for o := from; o < to; o++ {
		for p := uint32(0); p < parts; p++ {
			e.publish(rec(topic, p, o, int64(o)+1))
		}
	}
}

func (e *env) consumer(opts ...consumer.Option) *consumer.Consumer {
	e.t.Helper()
	c, err := consumer.New(e.conn(), opts...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = c.Close() })
	return c
}

func (e *env) subscribe(c *consumer.Consumer, topic string, opts ...consumer.SubscribeOption) *consumer.Subscription {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := c.Subscribe(ctx, topic, opts...)
	if err != nil {
		e.t.Fatalf("Subscribe(%s) = %v", topic, err)
	}
	e.t.Cleanup(func() { _ = s.Close() })
	return s
}

// read takes n records from s, failing on any error.
func read(t *testing.T, s *consumer.Subscription, n int) []*consumer.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []*consumer.Record
	for len(out) < n {
		r, err := s.Next(ctx)
		if err != nil {
			t.Fatalf("Next after %d of %d records = %v", len(out), n, err)
		}
		out = append(out, r)
	}
	return out
}

// quiet checks that s delivers nothing more for a moment.
func quiet(t *testing.T, s *consumer.Subscription) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if r, err := s.Next(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next = %v, %v, want nothing more", desc(r), err)
	}
}

// desc writes records as "p@offset".
func desc(rs ...*consumer.Record) string {
	out := ""
	for i, r := range rs {
		if i > 0 {
			out += " "
		}
		if r == nil {
			out += "<nil>"
			continue
		}
		out += fmt.Sprintf("%d@%d", r.Partition, r.Offset)
	}
	return out
}

// byPartition groups offsets by partition, in delivery order.
func byPartition(rs []*consumer.Record) map[uint32][]uint64 {
	m := map[uint32][]uint64{}
	for _, r := range rs {
		m[r.Partition] = append(m[r.Partition], r.Offset)
	}
	return m
}

func span(from, to uint64) []uint64 {
	var s []uint64
	for o := from; o < to; o++ {
		s = append(s, o)
	}
	return s
}
