package pipeline

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// bundlerEvent is one input to the bundler at a time in ms: add request
// id of size bytes, tick, or take (the driver takes the ready bundle, if
// any, and advances).
type bundlerEvent struct {
	op       string
	at       int
	id, size int
}

func add(id, size, at int) bundlerEvent { return bundlerEvent{op: "add", at: at, id: id, size: size} }
func tick(at int) bundlerEvent          { return bundlerEvent{op: "tick", at: at} }
func take(at int) bundlerEvent          { return bundlerEvent{op: "take", at: at} }

func TestBundler(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		maxBytes, maxBatches int
		events               []bundlerEvent
		want                 [][]int // bundles taken, by request id
		wantDue              int     // the open bundle's deadline after the events, in ms; -1 none
	}{
		{"linger closes", 100, 10, []bundlerEvent{add(1, 10, 0), add(2, 10, 1), tick(4), take(4), tick(5), take(5)}, [][]int{{1, 2}}, -1},
		{"open bundle waits for its linger", 100, 10, []bundlerEvent{add(1, 10, 2), add(2, 10, 3)}, nil, 7},
		{"full by count closes at once", 100, 2, []bundlerEvent{add(1, 10, 0), add(2, 10, 1), take(1), add(3, 10, 3)}, [][]int{{1, 2}}, 8},
		{"one batch per bundle", 100, 1, []bundlerEvent{add(1, 10, 0), take(0), add(2, 10, 1), take(1)}, [][]int{{1}, {2}}, -1},
		{"full by bytes carries the next", 25, 10, []bundlerEvent{add(1, 10, 0), add(2, 10, 1), add(3, 10, 2), tick(9), take(9)}, [][]int{{1, 2}}, 14},
		{"the carry's linger starts when taken", 25, 10, []bundlerEvent{add(1, 10, 0), add(2, 20, 1), take(9), tick(13), take(13), tick(14), take(14)}, [][]int{{1}, {2}}, -1},
		{"a carry fills a bundle of one", 25, 1, []bundlerEvent{add(1, 10, 0), take(0), add(2, 10, 1), take(1)}, [][]int{{1}, {2}}, -1},
		{"an oversized first batch goes alone", 25, 10, []bundlerEvent{add(1, 30, 0), add(2, 5, 1), take(1)}, [][]int{{1}}, 6},
		{"nothing open, nothing due", 25, 10, []bundlerEvent{tick(100), take(100)}, nil, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBundler(tc.maxBytes, tc.maxBatches, 5*time.Millisecond)
			t0 := time.Unix(0, 0)
			at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
			var got [][]int
			for _, e := range tc.events {
				switch e.op {
				case "add":
					b.add(&request{size: e.size, key: fmt.Sprint(e.id)}, at(e.at))
				case "tick":
					b.tick(at(e.at))
				case "take":
					if reqs := b.ready(); reqs != nil {
						got = append(got, ids(reqs))
						b.advance(at(e.at))
					}
				}
			}
			if !slices.EqualFunc(got, tc.want, slices.Equal) {
				t.Errorf("bundles(%v) = %v, want %v", tc.events, got, tc.want)
			}
			due, ok := b.deadline()
			gotDue := -1
			if ok {
				gotDue = int(due.Sub(t0) / time.Millisecond)
			}
			if gotDue != tc.wantDue {
				t.Errorf("deadline after %v = %d ms, want %d", tc.events, gotDue, tc.wantDue)
			}
		})
	}
}

// TestBundlerDrain: on shutdown every request held comes out, the closed
// bundle first, then the carry.
func TestBundlerDrain(t *testing.T) {
	b := newBundler(25, 10, 5*time.Millisecond)
	now := time.Unix(0, 0)
	for id, size := range []int{10, 10, 10} {
		b.add(&request{size: size, key: fmt.Sprint(id + 1)}, now)
	}
	if got, want := ids(b.drain()), []int{1, 2, 3}; !slices.Equal(got, want) {
		t.Errorf("drain() = %v, want %v", got, want)
	}
	if got := b.drain(); got != nil {
		t.Errorf("drain() again = %v, want nothing", ids(got))
	}
}

func ids(reqs []*request) []int {
	var out []int
	for _, r := range reqs {
		var id int
		fmt.Sscan(r.key, &id)
		out = append(out, id)
	}
	return out
}
