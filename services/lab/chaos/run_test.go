package chaos

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestLookup(t *testing.T) {
	all, err := Lookup([]string{"all"})
	closed := 0
	for _, n := range Nemeses {
		if n.Open == "" {
			closed++
		}
	}
	if err != nil || len(all) != closed {
		t.Fatalf("Lookup(all) = %d nemeses, %v; want the %d with no open finding", len(all), err, closed)
	}
	for _, n := range all {
		if n.Open != "" {
			t.Errorf("Lookup(all) has %s, whose finding is open: %s", n.Name, n.Open)
		}
	}
	for _, n := range Nemeses {
		if got, err := Lookup([]string{n.Name}); err != nil || len(got) != 1 || got[0].Name != n.Name {
			t.Errorf("Lookup(%s) = %v, %v; want it, named (in all or not)", n.Name, got, err)
		}
	}
	got, err := Lookup([]string{"kill-nats", "pause-proposer"})
	if err != nil || len(got) != 2 || got[0].Name != "kill-nats" || got[1].Name != "pause-proposer" {
		t.Fatalf("Lookup(kill-nats, pause-proposer) = %v, %v", got, err)
	}
	got, err = Lookup([]string{"all", "-txn-pause", "-kill-nats"})
	if err != nil || len(got) != closed-2 || slices.ContainsFunc(got, func(n Nemesis) bool { return n.Name == "txn-pause" || n.Name == "kill-nats" }) {
		t.Fatalf("Lookup(all, -txn-pause, -kill-nats) = %d nemeses, %v; want the %d others", len(got), err, closed-2)
	}
	for _, names := range [][]string{{"-kill-nats"}, {"kill-nats", "-kill-nats"}, {"all", "-all"}, {"all", "-kill-everything"}} {
		if got, err := Lookup(names); err == nil {
			t.Errorf("Lookup(%v) = %d nemeses, want an error", names, len(got))
		}
	}
	if _, err := Lookup([]string{"kill-everything"}); err == nil || !strings.Contains(err.Error(), `unknown nemesis "kill-everything"`) || !strings.Contains(err.Error(), "kill-node") {
		t.Fatalf("Lookup(kill-everything) = %v, want an error listing the nemeses", err)
	}
}

func TestStalls(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	for _, tc := range []struct {
		name           string
		acks           []time.Time
		end, heal      time.Time
		stall, recover time.Duration
	}{
		{"steady", []time.Time{at(1), at(2), at(3)}, at(4), time.Time{}, time.Second, 0},
		{"a 5 s hole, recovered 0.5 s after the heal", []time.Time{at(1), at(6), at(7)}, at(8), at(5.5), 5 * time.Second, 500 * time.Millisecond},
		{"nothing after the heal", []time.Time{at(1)}, at(10), at(5), 9 * time.Second, -1},
		{"acks after the load's end don't count as stalls", []time.Time{at(1), at(20)}, at(2), time.Time{}, time.Second, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stall, rec := stalls(tc.acks, t0, tc.end, tc.heal)
			if stall != tc.stall || rec != tc.recover {
				t.Fatalf("stalls = %s, %s; want %s, %s", stall, rec, tc.stall, tc.recover)
			}
		})
	}
}

func TestPercentile(t *testing.T) {
	ms := func(ns ...int) []time.Duration {
		var out []time.Duration
		for _, n := range ns {
			out = append(out, time.Duration(n)*time.Millisecond)
		}
		return out
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = 100 - i // unsorted on purpose
	}
	for _, tc := range []struct {
		name string
		in   []time.Duration
		q    float64
		want time.Duration
	}{
		{"none", nil, 0.99, 0},
		{"one", ms(7), 0.99, 7 * time.Millisecond},
		{"median of three", ms(3, 1, 2), 0.5, 2 * time.Millisecond},
		{"p99 of 1..100", ms(hundred...), 0.99, 99 * time.Millisecond},
		{"p100 is the max", ms(hundred...), 1, 100 * time.Millisecond},
	} {
		if got := Percentile(tc.in, tc.q); got != tc.want {
			t.Errorf("%s: Percentile(%v, %v) = %s, want %s", tc.name, tc.in, tc.q, got, tc.want)
		}
	}
}

// TestMeasureAckedShifted: an open-loop load of 100 records/s for 10 s.
// A cluster that keeps up at any latency has every record acknowledged in
// the window shifted by the median receipt time, though fewer land inside
// the load itself; one that falls behind (receipts spaced wider than the
// sends) loses the shortfall in both.
func TestMeasureAckedShifted(t *testing.T) {
	start := time.Unix(1_000_000, 0)
	load := loadTimes{start: start, end: start.Add(10 * time.Second)}
	for _, tc := range []struct {
		name         string
		ack          func(i int, sent time.Time) time.Time
		under, shift int
	}{
		{"2 s receipts", func(_ int, sent time.Time) time.Time { return sent.Add(2 * time.Second) }, 801, 1000},
		{"5 s receipts", func(_ int, sent time.Time) time.Time { return sent.Add(5 * time.Second) }, 501, 1000},
		{"half the rate, falling behind", func(i int, _ time.Time) time.Time {
			return start.Add(time.Second + time.Duration(i)*20*time.Millisecond)
		}, 451, 0},
	} {
		rec := newRecorder()
		for i := range 1000 {
			sent := start.Add(time.Duration(i) * 10 * time.Millisecond)
			rec.send(Send{Outcome: Acked}, sent, tc.ack(i, sent))
		}
		var row Row
		load.measure(&row, rec, false)
		if row.AckedUnderLoad != tc.under {
			t.Errorf("%s: AckedUnderLoad = %d; want %d", tc.name, row.AckedUnderLoad, tc.under)
		}
		if tc.shift > 0 && row.AckedShifted != tc.shift {
			t.Errorf("%s: AckedShifted = %d; want %d (every record: the cluster kept up)", tc.name, row.AckedShifted, tc.shift)
		}
		if tc.shift == 0 && row.AckedShifted > 800 {
			t.Errorf("%s: AckedShifted = %d; want the shortfall of a cluster at half the offered rate to show (≤ 800 of 1000)", tc.name, row.AckedShifted)
		}
	}
}

// TestKafkaGroupDeliveries: the group records each offset once, in order
// per partition, and counts what a rebalance delivered again.
func TestKafkaGroupDeliveries(t *testing.T) {
	rec := newRecorder()
	g := &kafkaGroup{next: map[int32]int64{}}
	for _, d := range []struct {
		p int32
		o int64
	}{{0, 0}, {0, 1}, {1, 0}, {0, 2}, {0, 1}, {0, 2}, {0, 3}, {1, 1}} {
		g.deliver(rec, &kgo.Record{Partition: d.p, Offset: d.o, Value: []byte(fmt.Sprintf("%d@%d", d.p, d.o))})
	}
	var got []string
	for _, o := range rec.h.Observations {
		got = append(got, o.Value)
	}
	if want := "0@0 0@1 1@0 0@2 0@3 1@1"; strings.Join(got, " ") != want || g.redelivered != 2 {
		t.Errorf("recorded %v with %d redelivered, want %s and 2", got, g.redelivered, want)
	}
	rec.h.Consumers = []string{kafkaGroupObserver}
	if !caughtUp(rec, map[uint32]uint64{0: 4, 1: 2}) || caughtUp(rec, map[uint32]uint64{0: 5}) {
		t.Error("caughtUp: want true at the ends delivered, false one past them")
	}
}
