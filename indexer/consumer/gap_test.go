package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/byzlog/byzlog/indexer/consumer"
	"github.com/byzlog/byzlog/indexer/layout"
)

// notRecord is a message on t/0 that is not a byzlog record.
const notRecord = -1

// TestGroupGaps: a group member reports records missing before the one it
// was delivered, though another member was delivered the record before.
// Partition 1 has a record after each of partition 0's messages, outside
// the group's partitions, so the messages of t/0 are not next to each other.
func TestGroupGaps(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stream []int    // t/0's messages in stream order: offsets, or notRecord
		delete []uint64 // offsets of t/0 deleted from the stream
		purge  uint64   // when positive, retention removes t/0's offsets below it, then the first member leaves
		first  int      // records the first member reads
		want   string   // what the second member's Next returns
	}{
		{name: "indexer skipped 3 and 4", stream: []int{0, 1, 2, 5, 6}, first: 3, want: "gap 3-4 0@5 0@6"},
		{name: "one member", stream: []int{0, 1, 2, 5, 6}, first: 0, want: "0@0 0@1 0@2 gap 3-4 0@5 0@6"},
		{name: "deleted from the middle", stream: []int{0, 1, 2, 3, 4, 5, 6}, delete: []uint64{3, 4}, first: 3, want: "gap 3-4 0@5 0@6"},
		{name: "no gap", stream: []int{0, 1, 2, 3, 4}, first: 2, want: "0@2 0@3 0@4"},
		{name: "not a record in between", stream: []int{0, 1, 2, notRecord, 3}, first: 3, want: "malformed 0@3"},
		{name: "gap behind a message that is not a record", stream: []int{0, 1, 2, notRecord, 5}, first: 3, want: "malformed gap 3-4 0@5"},
		// Retention removed records the first member read: nothing left
		// before 5 to compare with, and no false alarm.
		{name: "retention dropped read records", stream: []int{0, 1, 2, 3, 4, 5, 6}, purge: 5, first: 5, want: "0@5 0@6"},
		// The limit: records retention dropped before anyone read them
		// cannot be told from those, so a group does not report them.
		{name: "retention dropped unread records", stream: []int{0, 1, 2, 3, 4, 5, 6}, purge: 5, first: 3, want: "0@5 0@6"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			st := e.stream("t", false)
			ctx := context.Background()
			seqs := map[uint64]uint64{} // t/0 offset -> stream sequence
			for i, o := range tc.stream {
				m := &nats.Msg{Subject: layout.Subject("t", 0), Data: []byte("not a record")}
				if o != notRecord {
					m = layout.Message(rec("t", 0, uint64(o), int64(o)+1))
				}
				ack, err := e.js.PublishMsg(ctx, m)
				if err != nil {
					t.Fatal(err)
				}
				if o != notRecord {
					seqs[uint64(o)] = ack.Sequence
				}
				e.publish(rec("t", 1, uint64(i), int64(i)+1))
			}
			for _, o := range tc.delete {
				if err := st.DeleteMsg(ctx, seqs[o]); err != nil {
					t.Fatal(err)
				}
			}
			opts := []consumer.SubscribeOption{consumer.WithGroup("g"), consumer.WithPartitions(0)}
			a := e.subscribe(e.consumer(), "t", opts...)
			read(t, a, tc.first)
			if tc.purge > 0 {
				if err := st.Purge(ctx, jetstream.WithPurgeSubject(layout.Subject("t", 0)), jetstream.WithPurgeSequence(seqs[tc.purge])); err != nil {
					t.Fatal(err)
				}
			}
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			b := e.subscribe(e.consumer(), "t", opts...)
			if got := drain(t, b); got != tc.want {
				t.Errorf("second member's Next = %s, want %s", got, tc.want)
			}
		})
	}
}

// TestGroupGapNamesTheStream: the report says where in the stream the
// records are missing.
func TestGroupGapNamesTheStream(t *testing.T) {
	e := newEnv(t)
	e.stream("t", false)
	e.publish(rec("t", 0, 0, 1), rec("t", 1, 0, 1), rec("t", 0, 3, 2))
	s := e.subscribe(e.consumer(), "t", consumer.WithGroup("g"))
	read(t, s, 2)
	_, err := s.Next(context.Background())
	for _, w := range []string{"t/0 offsets 1 to 2", "stream byzlog-t", "offset 0", "byzlog.t.0", "sequence 1, then 3"} {
		if !errors.Is(err, consumer.ErrGap) || !strings.Contains(err.Error(), w) {
			t.Errorf("Next = %v, want ErrGap naming %q", err, w)
		}
	}
	if got := desc(read(t, s, 1)...); got != "0@3" {
		t.Errorf("Next after the gap = %s, want 0@3", got)
	}
}

// TestStartNotSteeredByMessagesThatAreNotRecords: a message on a partition
// that is not a record, with an offset header that would send the search
// for FromOffset past records it must deliver, only makes it start earlier.
func TestStartNotSteeredByMessagesThatAreNotRecords(t *testing.T) {
	for _, group := range []string{"", "g"} {
		t.Run(fmt.Sprintf("group=%q", group), func(t *testing.T) {
			e := newEnv(t)
			e.stream("t", false)
			for o := uint64(0); o < 8; o++ {
				e.publish(rec("t", 0, o, int64(o)+1))
			}
			junk := nats.NewMsg(layout.Subject("t", 0))
			junk.Header.Set(layout.HeaderOffset, "0")
			if _, err := e.js.PublishMsg(context.Background(), junk); err != nil {
				t.Fatal(err)
			}
			e.publish(rec("t", 0, 8, 9), rec("t", 0, 9, 10))
			opts := []consumer.SubscribeOption{consumer.FromOffset(6)}
			if group != "" {
				opts = append(opts, consumer.WithGroup(group))
			}
			s := e.subscribe(e.consumer(), "t", opts...)
			if got, want := drain(t, s), "0@6 0@7 malformed 0@8 0@9"; got != want {
				t.Errorf("Next from offset 6 = %s, want %s", got, want)
			}
		})
	}
}

var gapOffsets = regexp.MustCompile(`offsets (\d+) to (\d+)`)

// drain calls Next until nothing comes for a moment, and writes what it
// returned: records as "p@offset", ErrGap as "gap from-to", ErrMalformed as
// "malformed".
func drain(t *testing.T, s *consumer.Subscription) string {
	t.Helper()
	var out []string
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		r, err := s.Next(ctx)
		cancel()
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			return strings.Join(out, " ")
		case errors.Is(err, consumer.ErrGap):
			m := gapOffsets.FindStringSubmatch(err.Error())
			if m == nil {
				t.Fatalf("ErrGap %q names no offsets", err)
			}
			out = append(out, "gap "+m[1]+"-"+m[2])
		case errors.Is(err, consumer.ErrMalformed):
			out = append(out, "malformed")
		case err != nil:
			t.Fatalf("Next after %v = %v", out, err)
		default:
			out = append(out, desc(r))
		}
	}
}
