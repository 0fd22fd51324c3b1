package bench

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestHistogram: percentiles within half a bucket (1/128) of the exact
// sorted-sample figure, whatever the distribution; Count and Max exact.
func TestHistogram(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		name string
		draw func() time.Duration
		n    int
	}{
		{"one sample", func() time.Duration { return 1234567 * time.Nanosecond }, 1},
		{"all the same", func() time.Duration { return time.Second }, 1000},
		{"below 64 ns", func() time.Duration { return time.Duration(rng.IntN(64)) }, 1000},
		{"uniform 1-100 ms", func() time.Duration { return time.Millisecond + time.Duration(rng.Int64N(int64(99*time.Millisecond))) }, 10000},
		{"exponential, mean 300 ms", func() time.Duration { return time.Duration(rng.ExpFloat64() * float64(300*time.Millisecond)) }, 100000},
		{"long tail to hours", func() time.Duration { return time.Duration(rng.Int64N(1 << uint(rng.IntN(44)))) }, 100000},
		{"negative counts as 0", func() time.Duration { return -time.Second }, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h Histogram
			d := make([]time.Duration, tc.n)
			for i := range d {
				d[i] = tc.draw()
				h.Add(d[i])
				d[i] = max(d[i], 0)
			}
			slices.Sort(d)
			exact := func(q float64) time.Duration { return d[int(q*float64(len(d)-1))] }
			got := h.Latency()
			if got.Count != int64(tc.n) || got.Max != d[len(d)-1] {
				t.Fatalf("count %d max %s, want %d and %s", got.Count, got.Max, tc.n, d[len(d)-1])
			}
			for _, p := range []struct {
				q   float64
				got time.Duration
			}{{0.5, got.P50}, {0.9, got.P90}, {0.99, got.P99}} {
				want := exact(p.q)
				if diff := (p.got - want).Abs(); float64(diff) > float64(want)/128 {
					t.Errorf("p%v = %s, exact %s: off by %s, more than 1/128", p.q*100, p.got, want, diff)
				}
			}
		})
	}
	var empty Histogram
	if l := empty.Latency(); l.Count != 0 || l.String() != "none" {
		t.Errorf("empty histogram: %+v %q", l, l.String())
	}
}

// TestHistogramBuckets: every bucket's middle falls in it, and buckets
// follow in order, up to the largest duration.
func TestHistogramBuckets(t *testing.T) {
	prev := -1
	for _, v := range []uint64{0, 1, 63, 64, 65, 127, 128, 129, 1000, 1 << 20, 1<<20 + 1, 1<<40 - 1, 1 << 62, 1<<63 - 1} {
		i := bucketOf(v)
		if i < prev || i >= histBuckets {
			t.Fatalf("bucketOf(%d) = %d after %d (of %d)", v, i, prev, histBuckets)
		}
		prev = i
		if bucketOf(uint64(bucketMid(i))) != i {
			t.Errorf("bucket %d (of %d): its middle %d falls in bucket %d", i, v, bucketMid(i), bucketOf(uint64(bucketMid(i))))
		}
	}
}
