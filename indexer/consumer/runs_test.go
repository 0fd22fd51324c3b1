package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/byzlog/byzlog/indexer/consumer"
	"github.com/byzlog/byzlog/indexer/layout"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

// Run messages: the indexer's --records-per-message above 1 puts a
// block's consecutive records of a partition in one message.

// publishRun publishes offsets from..to-1 of topic/p, committed at height,
// as one run message, and returns its stream sequence.
func (e *env) publishRun(topic string, p uint32, from, to uint64, height int64) uint64 {
	e.t.Helper()
	var rs []*byzlogv1.StoredRecord
	for o := from; o < to; o++ {
		rs = append(rs, rec(topic, p, o, height))
	}
	var enc layout.Encoder
	m, err := enc.Run(rs)
	if err != nil {
		e.t.Fatal(err)
	}
	ack, err := e.js.PublishMsg(context.Background(), m)
	if err != nil {
		e.t.Fatalf("publish the run %s/%d@%d..%d: %v", topic, p, from, to-1, err)
	}
	return ack.Sequence
}

// TestRunsInOrder: an ordered subscription reads runs record by record,
// in offset order per partition; records published again in a later run
// come once, and offsets missing between runs are a gap.
func TestRunsInOrder(t *testing.T) {
	e := newEnv(t)
	e.stream("t", false)
	e.publishRun("t", 0, 0, 5, 1)
	e.publishRun("t", 1, 0, 3, 1)
	e.publish(rec("t", 0, 5, 2)) // a one-record message among runs
	e.publishRun("t", 0, 6, 10, 2)
	e.publishRun("t", 0, 8, 12, 3) // 8 and 9 again
	e.publishRun("t", 0, 14, 16, 4)
	s := e.subscribe(e.consumer(), "t")
	want := "0@0 0@1 0@2 0@3 0@4 1@0 1@1 1@2 0@5 0@6 0@7 0@8 0@9 0@10 0@11"
	rs := read(t, s, 15)
	if got := desc(rs...); got != want {
		t.Fatalf("records = %s, want %s", got, want)
	}
	if rs[3].Height != 1 || string(rs[3].Value) != "v0-3" || string(rs[3].Key) != "k3" || len(rs[3].Headers) != 1 || !rs[3].Timestamp.Equal(base) {
		t.Errorf("record 0@3 = height %d value %q key %q headers %v time %s", rs[3].Height, rs[3].Value, rs[3].Key, rs[3].Headers, rs[3].Timestamp)
	}
	_, err := s.Next(context.Background())
	if !errors.Is(err, consumer.ErrGap) || !strings.Contains(err.Error(), "t/0 offsets 12 to 13") {
		t.Fatalf("Next = %v, want ErrGap naming t/0 offsets 12 to 13", err)
	}
	if got := desc(read(t, s, 2)...); got != "0@14 0@15" {
		t.Fatalf("records after the gap = %s, want 0@14 0@15", got)
	}
	quiet(t, s)
}

// TestRunsStartInside: a start position inside a run starts at that record.
func TestRunsStartInside(t *testing.T) {
	e := newEnv(t)
	e.stream("t", false)
	for i := uint64(0); i < 20; i++ {
		e.publishRun("t", 0, i*10, i*10+10, int64(i)+1)
	}
	for _, c := range []struct {
		opt  consumer.SubscribeOption
		want string
	}{
		{consumer.FromOffset(123), "0@123 0@124"},
		{consumer.FromOffset(130), "0@130 0@131"},
		{consumer.FromTime(base.Add(7 * time.Second)), "0@70 0@71"},
	} {
		s := e.subscribe(e.consumer(), "t", c.opt)
		if got := desc(read(t, s, 2)...); got != c.want {
			t.Errorf("first records = %s, want %s", got, c.want)
		}
	}
}

// TestRunsGroupAckWithTheLastRecord: a group acknowledges a run once each
// of its records is done, and a member that leaves in the middle of one
// hands it back whole.
func TestRunsGroupAckWithTheLastRecord(t *testing.T) {
	for _, c := range []struct {
		name string
		read int
		want []uint64 // what the next member reads
	}{
		{"in the middle of a run", 3, span(0, 10)},
		{"at a run's end", 5, span(5, 10)},
		{"inside the next run", 6, span(5, 10)}, // 5 again: its run goes back whole
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			e.stream("t", false)
			e.publishRun("t", 0, 0, 5, 1)
			e.publishRun("t", 0, 5, 10, 2)
			opts := []consumer.SubscribeOption{consumer.WithGroup("g"), consumer.WithMaxAckPending(100), consumer.WithAckWait(time.Minute)}
			a := e.subscribe(e.consumer(), "t", opts...)
			read(t, a, c.read)
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			b := e.subscribe(e.consumer(), "t", opts...)
			got := byPartition(read(t, b, len(c.want)))[0]
			slices.Sort(got)
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("after the first member read %d records, the next read %v, want %v", c.read, got, c.want)
			}
			quiet(t, b)
		})
	}
}

// TestRunsGroupGaps: a group member checks the offsets before a run's
// first record against the message before it.
func TestRunsGroupGaps(t *testing.T) {
	e := newEnv(t)
	e.stream("t", false)
	e.publishRun("t", 0, 0, 3, 1)
	e.publishRun("t", 1, 0, 3, 1)
	e.publishRun("t", 0, 5, 7, 2)
	bad := nats.NewMsg(layout.Subject("t", 0))
	bad.Header.Set(layout.HeaderRecords, "2")
	bad.Header.Set(layout.HeaderOffset, "7")
	bad.Data = []byte("not a run")
	if _, err := e.js.PublishMsg(context.Background(), bad); err != nil {
		t.Fatal(err)
	}
	e.publishRun("t", 0, 7, 9, 3)
	s := e.subscribe(e.consumer(), "t", consumer.WithGroup("g"), consumer.WithPartitions(0))
	if got, want := drain(t, s), "0@0 0@1 0@2 gap 3-4 0@5 0@6 malformed 0@7 0@8"; got != want {
		t.Errorf("Next = %s, want %s", got, want)
	}
}

// TestRunsLongRunStaysWithItsMember: a member working through a run for
// longer than the ack wait keeps it (Next reports it in progress), so no
// other member gets it meanwhile.
func TestRunsLongRunStaysWithItsMember(t *testing.T) {
	e := newEnv(t)
	e.stream("t", false)
	e.publishRun("t", 0, 0, 6, 1)
	opts := []consumer.SubscribeOption{consumer.WithGroup("g"), consumer.WithAckWait(time.Second)}
	a := e.subscribe(e.consumer(), "t", opts...)
	if r := read(t, a, 1)[0]; r.Offset != 0 {
		t.Fatalf("first member's first record is %s", desc(r))
	}
	b := e.subscribe(e.consumer(), "t", opts...)
	got := make(chan string, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3500*time.Millisecond)
		defer cancel()
		r, err := b.Next(ctx)
		got <- fmt.Sprint(desc(r), " ", err)
	}()
	for i := 1; i < 6; i++ {
		time.Sleep(500 * time.Millisecond) // 2.5 s in all, past the 1 s ack wait
		if r := read(t, a, 1)[0]; r.Offset != uint64(i) {
			t.Fatalf("first member's record %d is %s", i, desc(r))
		}
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if g := <-got; !strings.Contains(g, context.DeadlineExceeded.Error()) {
		t.Fatalf("second member got %s while the first worked through the run, want nothing", g)
	}
}

// refuseOffset is a RecordVerifier that refuses one offset and counts what
// it is asked.
type refuseOffset struct {
	bad   uint64
	asked []uint64
}

func (v *refuseOffset) VerifyRecord(_ context.Context, r *byzlogv1.StoredRecord) error {
	v.asked = append(v.asked, r.Offset)
	if r.Offset == v.bad {
		return errors.New("no proof")
	}
	return nil
}

// TestRunsVerifyEachRecord: verify mode checks a run's records one by one,
// from the start position on, and refuses only the one that fails.
func TestRunsVerifyEachRecord(t *testing.T) {
	e := newEnv(t)
	e.stream("t", false)
	e.publishRun("t", 0, 0, 5, 1)
	v := &refuseOffset{bad: 2}
	s := e.subscribe(e.consumer(consumer.WithVerifier(v)), "t")
	var out []string
	for range 6 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		r, err := s.Next(ctx)
		cancel()
		switch {
		case errors.Is(err, consumer.ErrUnverified):
			out = append(out, "unverified")
		case errors.Is(err, consumer.ErrGap):
			out = append(out, "gap")
		case err != nil:
			t.Fatal(err)
		default:
			out = append(out, desc(r))
		}
	}
	if got, want := strings.Join(out, " "), "0@0 0@1 unverified gap 0@3 0@4"; got != want {
		t.Errorf("Next = %s, want %s", got, want)
	}
	v2 := &refuseOffset{bad: 100}
	s2 := e.subscribe(e.consumer(consumer.WithVerifier(v2)), "t", consumer.FromOffset(3))
	if got := desc(read(t, s2, 2)...); got != "0@3 0@4" || !reflect.DeepEqual(v2.asked, []uint64{3, 4}) {
		t.Errorf("from offset 3: read %s, verified %v; want 0@3 0@4, verified [3 4]", got, v2.asked)
	}
}
