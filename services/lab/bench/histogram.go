package bench

import (
	"math/bits"
	"time"
)

// subBits sets a Histogram's resolution: each power of two is cut into
// 2^subBits buckets, so a percentile is off by at most 1/2^(subBits+1) of
// its value (0.8%).
const subBits = 6

const (
	subBuckets = 1 << subBits
	// Durations below subBuckets ns get a bucket each; each power of two
	// above, subBuckets of them, up to 2^63 ns.
	histBuckets = (64 - subBits) * subBuckets
)

// Histogram is a latency distribution in fixed memory (29 KiB), however
// many samples it takes: a soak of ten million records must not grow the
// load generator, which shares the cores and the RSS figures with what it
// measures (it kept every sample and grew from 454 to 1,090 MiB in ten
// minutes). Log-linear buckets, as HdrHistogram's; the zero value is
// empty and ready.
type Histogram struct {
	counts   [histBuckets]int64
	n        int64
	min, max time.Duration
}

// bucketOf is the bucket of a duration of v ns.
func bucketOf(v uint64) int {
	if v < subBuckets {
		return int(v)
	}
	e := bits.Len64(v) - 1 // v's top bit, at least subBits
	return (e-subBits+1)*subBuckets + int(v>>(e-subBits)&(subBuckets-1))
}

// bucketMid is the middle of bucket i's durations.
func bucketMid(i int) time.Duration {
	if i < subBuckets {
		return time.Duration(i)
	}
	e := i/subBuckets + subBits - 1
	low := uint64(subBuckets+i%subBuckets) << (e - subBits)
	return time.Duration(low + (uint64(1)<<(e-subBits))/2)
}

// Add counts one latency (a negative one as 0).
func (h *Histogram) Add(d time.Duration) {
	d = max(d, 0)
	if h.n == 0 || d < h.min {
		h.min = d
	}
	h.max = max(h.max, d)
	h.n++
	h.counts[bucketOf(uint64(d))]++
}

// Count is how many latencies h holds.
func (h *Histogram) Count() int64 { return h.n }

// Reset empties h.
func (h *Histogram) Reset() { *h = Histogram{} }

// Latency summarises h. A percentile q is the sample of rank q×(n−1) in
// sorted order, as the middle of its bucket (within h's smallest and
// largest sample); Max is exact.
func (h *Histogram) Latency() Latency {
	if h.n == 0 {
		return Latency{}
	}
	at := func(q float64) time.Duration {
		rank := int64(q * float64(h.n-1))
		var seen int64
		for i, c := range h.counts {
			if seen += c; seen > rank {
				return min(max(bucketMid(i), h.min), h.max)
			}
		}
		return h.max
	}
	return Latency{Count: h.n, P50: at(0.5), P90: at(0.9), P99: at(0.99), Max: h.max}
}
