package consumer_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/byzlog/byzlog/indexer/consumer"
	"github.com/byzlog/byzlog/indexer/layout"
)

func TestFromBeginningAllPartitions(t *testing.T) {
	e := newEnv(t)
	e.stream("orders.eu", false)
	e.fill("orders.eu", 3, 0, 10)
	s := e.subscribe(e.consumer(), "orders.eu")
	rs := read(t, s, 30)
	quiet(t, s)
	got := byPartition(rs)
	for p := uint32(0); p < 3; p++ {
		if want := span(0, 10); !reflect.DeepEqual(got[p], want) {
			t.Errorf("partition %d offsets = %v, want %v", p, got[p], want)
		}
	}
	// Every field survives the trip.
	want := rec("orders.eu", 1, 4, 5)
	r := rs[3*4+1]
	if r.Topic != want.Topic || r.Partition != 1 || r.Offset != 4 || r.Height != 5 || string(r.Key) != "k4" || string(r.Value) != "v1-4" ||
		!r.Timestamp.Equal(base.Add(4*time.Second)) || r.CreateTime.UnixNano() != want.CreateTimeUnixNano ||
		!bytes.Equal(r.Producer, want.ProducerKey) || r.Sequence != 4 || len(r.Headers) != 1 || r.Headers[0].Key != "h" || !bytes.Equal(r.Headers[0].Value, []byte{1}) {
		t.Errorf("record 1@4 = %+v, want the fields of %v", r, want)
	}
	if got := s.Positions(); len(got) != 3 || got[2] != (consumer.Offset{Topic: "orders.eu", Partition: 2, Offset: 10}) {
		t.Errorf("Positions() = %v, want offset 10 in each of 3 partitions", got)
	}
}

func TestStartPositions(t *testing.T) {
	// Partition 0: offsets 0..9, the first five trimmed by retention.
	// Partition 1: offsets 0..9. Partition 2: offsets 0..2 only.
	// Offset o of every partition is at height o+1, so at base + o seconds.
	setup := func(e *env, direct bool) {
		st := e.stream("t", direct)
		e.fill("t", 2, 0, 10)
		e.publish(rec("t", 2, 0, 1), rec("t", 2, 1, 2), rec("t", 2, 2, 3))
		m, err := st.GetMsg(context.Background(), 1, jetstream.WithGetMsgSubject(layout.Subject("t", 0)))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 5; i++ {
			m, err = st.GetMsg(context.Background(), m.Sequence+1, jetstream.WithGetMsgSubject(layout.Subject("t", 0)))
			if err != nil {
				t.Fatal(err)
			}
		}
		if err := st.Purge(context.Background(), jetstream.WithPurgeSubject(layout.Subject("t", 0)), jetstream.WithPurgeSequence(m.Sequence)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		opts []consumer.SubscribeOption
		want map[uint32][]uint64
		// later is published after subscribing; wantLater is what arrives of it.
		later     [][3]uint64 // partition, offset, height
		wantLater map[uint32][]uint64
	}{
		{"beginning", nil, map[uint32][]uint64{0: span(5, 10), 1: span(0, 10), 2: span(0, 3)}, nil, nil},
		{"offset 2 below the trimmed start", []consumer.SubscribeOption{consumer.FromOffset(2)},
			map[uint32][]uint64{0: span(5, 10), 1: span(2, 10), 2: {2}}, nil, nil},
		{"offset 7", []consumer.SubscribeOption{consumer.FromOffset(7)},
			map[uint32][]uint64{0: span(7, 10), 1: span(7, 10)},
			[][3]uint64{{2, 3, 11}, {2, 7, 12}, {2, 8, 13}}, map[uint32][]uint64{2: {7, 8}}},
		{"offset past the end waits", []consumer.SubscribeOption{consumer.FromOffset(12)}, nil,
			[][3]uint64{{0, 10, 11}, {0, 11, 12}, {0, 12, 13}, {1, 10, 11}, {1, 12, 13}, {0, 13, 14}}, map[uint32][]uint64{0: {12, 13}, 1: {12}}},
		{"offset 9 of partition 1 only", []consumer.SubscribeOption{consumer.FromOffset(9), consumer.WithPartitions(1)},
			map[uint32][]uint64{1: {9}}, [][3]uint64{{0, 10, 11}, {1, 10, 11}}, map[uint32][]uint64{1: {10}}},
		{"time between heights", []consumer.SubscribeOption{consumer.FromTime(base.Add(2500 * time.Millisecond))},
			map[uint32][]uint64{0: span(5, 10), 1: span(3, 10)}, nil, nil},
		{"time of a height exactly", []consumer.SubscribeOption{consumer.FromTime(base.Add(8 * time.Second))},
			map[uint32][]uint64{0: {8, 9}, 1: {8, 9}}, nil, nil},
		{"time before everything", []consumer.SubscribeOption{consumer.FromTime(base.Add(-time.Hour))},
			map[uint32][]uint64{0: span(5, 10), 1: span(0, 10), 2: span(0, 3)}, nil, nil},
		{"time in the future waits", []consumer.SubscribeOption{consumer.FromTime(base.Add(20 * time.Second))}, nil,
			[][3]uint64{{2, 3, 20}, {2, 4, 21}, {1, 10, 22}}, map[uint32][]uint64{2: {4}, 1: {10}}},
		{"partitions 0 and 2", []consumer.SubscribeOption{consumer.WithPartitions(2, 0)},
			map[uint32][]uint64{0: span(5, 10), 2: span(0, 3)}, [][3]uint64{{1, 10, 11}, {2, 3, 11}}, map[uint32][]uint64{2: {3}}},
	} {
		for _, direct := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/direct=%v", tc.name, direct), func(t *testing.T) {
				e := newEnv(t)
				setup(e, direct)
				s := e.subscribe(e.consumer(), "t", tc.opts...)
				n := 0
				for _, o := range tc.want {
					n += len(o)
				}
				if got := byPartition(read(t, s, n)); n > 0 && !reflect.DeepEqual(got, tc.want) {
					t.Errorf("records = %v, want %v", got, tc.want)
				}
				quiet(t, s)
				if tc.later == nil {
					return
				}
				for _, l := range tc.later {
					e.publish(rec("t", uint32(l[0]), l[1], int64(l[2])))
				}
				n = 0
				for _, o := range tc.wantLater {
					n += len(o)
				}
				if got := byPartition(read(t, s, n)); !reflect.DeepEqual(got, tc.wantLater) {
					t.Errorf("records published later = %v, want %v", got, tc.wantLater)
				}
				quiet(t, s)
			})
		}
	}
}

func TestMalformedMessages(t *testing.T) {
	good := func(o uint64) *nats.Msg { return layout.Message(rec("t", 0, o, int64(o)+1)) }
	noOffset := good(7)
	noOffset.Header.Del(layout.HeaderOffset)
	badTime := good(7)
	badTime.Header.Set(layout.HeaderTimestamp, "yesterday")
	for _, tc := range []struct {
		name  string
		bad   *nats.Msg
		wants []string
	}{
		{"no headers", &nats.Msg{Subject: layout.Subject("t", 0), Data: []byte("raw")}, []string{"byzlog.t.0", layout.HeaderOffset}},
		{"offset missing", noOffset, []string{"byzlog.t.0", layout.HeaderOffset}},
		{"timestamp unreadable", badTime, []string{"byzlog.t.0", layout.HeaderTimestamp, "yesterday"}},
		{"partition not a number", &nats.Msg{Subject: "byzlog.t.x", Data: []byte("raw")}, []string{"byzlog.t.x", "partition"}},
	} {
		for _, group := range []string{"", "g"} {
			t.Run(fmt.Sprintf("%s/group=%q", tc.name, group), func(t *testing.T) {
				e := newEnv(t)
				e.stream("t", false)
				for _, m := range []*nats.Msg{good(0), tc.bad, good(1)} {
					if _, err := e.js.PublishMsg(context.Background(), m); err != nil {
						t.Fatal(err)
					}
				}
				var opts []consumer.SubscribeOption
				if group != "" {
					opts = append(opts, consumer.WithGroup(group))
				}
				s := e.subscribe(e.consumer(), "t", opts...)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if r, err := s.Next(ctx); err != nil || r.Offset != 0 {
					t.Fatalf("Next = %s, %v, want offset 0", desc(r), err)
				}
				_, err := s.Next(ctx)
				if !errors.Is(err, consumer.ErrMalformed) {
					t.Fatalf("Next = %v, want ErrMalformed", err)
				}
				for _, w := range append(tc.wants, "sequence 2") {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not name %q", err, w)
					}
				}
				if r, err := s.Next(ctx); err != nil || r.Offset != 1 {
					t.Fatalf("Next after the malformed message = %s, %v, want offset 1", desc(r), err)
				}
				quiet(t, s)
			})
		}
	}
}

func TestGapsAndDuplicates(t *testing.T) {
	e := newEnv(t)
	e.stream("t", false)
	e.publish(rec("t", 0, 0, 1), rec("t", 0, 1, 2), rec("t", 1, 0, 2))
	// Published again by someone not expecting a sequence: a second copy
	// in the stream.
	again := layout.Message(rec("t", 0, 1, 2))
	if _, err := e.js.PublishMsg(context.Background(), again); err != nil {
		t.Fatal(err)
	}
	e.publish(rec("t", 0, 4, 3), rec("t", 0, 5, 3))
	s := e.subscribe(e.consumer(), "t")
	if got := desc(read(t, s, 3)...); got != "0@0 0@1 1@0" {
		t.Fatalf("records = %s, want 0@0 0@1 1@0", got)
	}
	_, err := s.Next(context.Background())
	if !errors.Is(err, consumer.ErrGap) || !strings.Contains(err.Error(), "t/0 offsets 2 to 3") {
		t.Fatalf("Next = %v, want ErrGap naming t/0 offsets 2 to 3", err)
	}
	if got := desc(read(t, s, 2)...); got != "0@4 0@5" {
		t.Fatalf("records after the gap = %s, want 0@4 0@5", got)
	}
	quiet(t, s)
}

func TestGroupMembersShareAndResume(t *testing.T) {
	e := newEnv(t)
	e.stream("t", false)
	e.fill("t", 3, 0, 20)
	const total = 60
	// Two members read concurrently until the group has delivered every
	// record; each is a little slow, so both have a fetch waiting.
	var mu sync.Mutex
	seen := map[string]int{}
	var got [2][]*consumer.Record
	subs := [2]*consumer.Subscription{}
	for i := range subs {
		subs[i] = e.subscribe(e.consumer(), "t", consumer.WithGroup("billing team"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i, s := range subs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				done := len(seen) == total
				mu.Unlock()
				if done {
					return
				}
				rctx, rcancel := context.WithTimeout(ctx, 200*time.Millisecond)
				r, err := s.Next(rctx)
				rcancel()
				if errors.Is(err, context.DeadlineExceeded) {
					continue
				}
				if err != nil {
					t.Errorf("member %d: Next = %v", i, err)
					return
				}
				mu.Lock()
				seen[desc(r)]++
				mu.Unlock()
				got[i] = append(got[i], r)
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	if len(seen) != total {
		t.Fatalf("the group delivered %d distinct records, want %d", len(seen), total)
	}
	for k, n := range seen {
		if n != 1 {
			t.Errorf("record %s delivered %d times", k, n)
		}
	}
	for i, rs := range got {
		if len(rs) == 0 {
			t.Errorf("member %d got no records: the members did not share the work", i)
		}
		for p, offs := range byPartition(rs) {
			for j := 1; j < len(offs); j++ {
				if offs[j] < offs[j-1] {
					t.Errorf("member %d got partition %d out of order: %v", i, p, offs)
				}
			}
		}
	}
	for _, s := range subs {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}

	// A new member resumes after what the group acknowledged: only new records.
	e.fill("t", 3, 20, 22)
	s := e.subscribe(e.consumer(), "t", consumer.WithGroup("billing team"), consumer.FromOffset(0))
	if got := byPartition(read(t, s, 6)); !reflect.DeepEqual(got, map[uint32][]uint64{0: {20, 21}, 1: {20, 21}, 2: {20, 21}}) {
		t.Errorf("after the members closed, a new one read %v, want offsets 20 and 21 of each partition", got)
	}
	quiet(t, s)
}

func TestGroupCloseHandsBackBufferedRecords(t *testing.T) {
	e := newEnv(t)
	e.stream("t", false)
	e.fill("t", 1, 0, 50)
	opts := []consumer.SubscribeOption{consumer.WithGroup("g"), consumer.WithMaxAckPending(100), consumer.WithAckWait(time.Minute)}
	a := e.subscribe(e.consumer(), "t", opts...)
	if got := desc(read(t, a, 3)...); got != "0@0 0@1 0@2" {
		t.Fatalf("first member read %s, want 0@0 0@1 0@2", got)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Next(context.Background()); !errors.Is(err, consumer.ErrClosed) {
		t.Errorf("Next after Close = %v, want ErrClosed", err)
	}
	// The rest comes at once, though the first member had fetched it and
	// the ack wait is a minute.
	b := e.subscribe(e.consumer(), "t", opts...)
	start := time.Now()
	rs := read(t, b, 47)
	got := byPartition(rs)[0]
	slices.Sort(got) // with more than one record pending, order is not promised
	if !reflect.DeepEqual(got, span(3, 50)) {
		t.Errorf("second member read %v, want offsets 3..49", got)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("second member waited %s for records the first had fetched", d)
	}
}

func TestGroupMembersMustAgree(t *testing.T) {
	e := newEnv(t)
	e.stream("t", false)
	e.fill("t", 2, 0, 1)
	c := e.consumer()
	e.subscribe(c, "t", consumer.WithGroup("g"), consumer.WithPartitions(0))
	ctx := context.Background()
	for _, tc := range []struct {
		opts []consumer.SubscribeOption
		want string
	}{
		{[]consumer.SubscribeOption{consumer.WithGroup("g")}, "same WithPartitions"},
		{[]consumer.SubscribeOption{consumer.WithGroup("g"), consumer.WithPartitions(0), consumer.WithMaxAckPending(5)}, "same WithMaxAckPending"},
	} {
		if _, err := c.Subscribe(ctx, "t", tc.opts...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Subscribe with a different config = %v, want an error saying %q", err, tc.want)
		}
	}
}

func TestCloseUnblocksNext(t *testing.T) {
	e := newEnv(t)
	e.stream("t", false)
	for _, group := range []string{"", "g"} {
		var opts []consumer.SubscribeOption
		if group != "" {
			opts = append(opts, consumer.WithGroup(group))
		}
		s := e.subscribe(e.consumer(), "t", opts...)
		errc := make(chan error, 1)
		go func() {
			_, err := s.Next(context.Background())
			errc <- err
		}()
		time.Sleep(100 * time.Millisecond)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-errc:
			if !errors.Is(err, consumer.ErrClosed) {
				t.Errorf("group %q: Next during Close = %v, want ErrClosed", group, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("group %q: Next still blocked after Close", group)
		}
	}
}

func TestSubscribeErrors(t *testing.T) {
	e := newEnv(t)
	c := e.consumer()
	ctx := context.Background()
	if _, err := c.Subscribe(ctx, "nope"); !errors.Is(err, consumer.ErrTopicNotIndexed) || !strings.Contains(err.Error(), "byzlog-nope") {
		t.Errorf("Subscribe(unknown topic) = %v, want ErrTopicNotIndexed naming stream byzlog-nope", err)
	}
	for _, tc := range []struct {
		opts []consumer.SubscribeOption
		want string
	}{
		{[]consumer.SubscribeOption{consumer.FromOffset(1), consumer.FromBeginning()}, "choose one"},
		{[]consumer.SubscribeOption{consumer.WithPartitions(1, 1)}, "listed twice"},
		{[]consumer.SubscribeOption{consumer.FromCommitted()}, "needs WithGroup"},
		{[]consumer.SubscribeOption{consumer.FromCommitted(), consumer.WithGroup("g")}, "needs WithGateway"},
		{[]consumer.SubscribeOption{consumer.WithGroup("a\x00b")}, "WithGroup"},
		{[]consumer.SubscribeOption{consumer.WithBuffer(0)}, "WithBuffer(0)"},
		{[]consumer.SubscribeOption{consumer.WithMaxAckPending(20000)}, "WithMaxAckPending(20000)"},
		{[]consumer.SubscribeOption{consumer.WithAckWait(time.Millisecond)}, "WithAckWait(1ms)"},
	} {
		if _, err := c.Subscribe(ctx, "t", tc.opts...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Subscribe = %v, want an error saying %q", err, tc.want)
		}
	}
	if _, err := consumer.New(e.nc, consumer.WithKey(make([]byte, 5))); err == nil || !strings.Contains(err.Error(), "WithKey") {
		t.Errorf("New(WithKey(5 bytes)) = %v, want an error naming WithKey", err)
	}
	if _, err := c.Commit(ctx, "g", consumer.Offset{Topic: "t"}); err == nil || !strings.Contains(err.Error(), "WithGateway and WithKey") {
		t.Errorf("Commit without a gateway = %v, want an error naming WithGateway and WithKey", err)
	}
}

func TestGroupConsumerName(t *testing.T) {
	for _, tc := range []struct{ group, want string }{
		{"billing", "g-billing"},
		{"billing team", "g-billing_20team"},
		{"a_b.c", "g-a__b_2ec"},
		{"é", "g-_c3_a9"},
		{strings.Repeat("x", 255), "g-_h"},
	} {
		if got := consumer.GroupConsumerName(nil, tc.group); !strings.HasPrefix(got, tc.want) || len(got) > 200 || strings.ContainsAny(got, " .*>/\\\t") {
			t.Errorf("GroupConsumerName(%q) = %q, want %q", tc.group, got, tc.want)
		}
	}
	names := map[string]string{}
	for _, g := range []string{"a b", "a_20b", "a__b", "a_b", "a.b", "a_2eb", "A", "a"} {
		n := consumer.GroupConsumerName(nil, g)
		if o, ok := names[n]; ok {
			t.Errorf("groups %q and %q share consumer %q", o, g, n)
		}
		names[n] = g
	}
	// With a key the name is the key's secret: the same for every member
	// (one key), another for another key or group, and nothing of the
	// group's name shows.
	alice, bob := ed25519.NewKeyFromSeed(make([]byte, 32)), ed25519.NewKeyFromSeed(append(make([]byte, 31), 1))
	a := consumer.GroupConsumerName(alice, "billing")
	for _, other := range []string{consumer.GroupConsumerName(bob, "billing"), consumer.GroupConsumerName(alice, "billing2"), consumer.GroupConsumerName(nil, "billing")} {
		if other == a {
			t.Errorf("keyed name %q shared with another key, group or the keyless form", a)
		}
	}
	if a != consumer.GroupConsumerName(alice, "billing") || !strings.HasPrefix(a, "g-_k") || len(a) != 44 || strings.Contains(a, "billing") {
		t.Errorf("GroupConsumerName(alice, billing) = %q: want g-_k and 40 hex digits, stable", a)
	}
}
