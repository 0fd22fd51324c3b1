package nodes

import "testing"

// TestAgreedHeight: issue 14's second finding. The pool took the highest
// height any node reported, so one liar marked every honest node as
// lagging and drew all the traffic. The agreed height is what f+1 reached.
func TestAgreedHeight(t *testing.T) {
	for _, tc := range []struct {
		heights []int64
		n       int
		want    int64
	}{
		{[]int64{10, 10, 10, 10}, 4, 10},
		{[]int64{10, 10, 10, 1_000_000}, 4, 10}, // one liar high
		{[]int64{10, 11, 12, 1_000_000}, 4, 12},
		{[]int64{10, 10, 10, 0}, 4, 10}, // one liar (or laggard) low
		{[]int64{10, 1_000_000}, 4, 10}, // two answers, f+1 = 2
		{[]int64{7}, 4, 7},
		{nil, 4, 0},
		{[]int64{5, 9, 9, 9, 9, 9, 1 << 40}, 7, 9}, // f = 2: two liars
		{[]int64{5, 9, 9, 9, 9, 1 << 40, 1 << 40}, 7, 9},
	} {
		if got := AgreedHeight(tc.heights, tc.n); got != tc.want {
			t.Errorf("AgreedHeight(%v, %d nodes) = %d, want %d", tc.heights, tc.n, got, tc.want)
		}
	}
}
