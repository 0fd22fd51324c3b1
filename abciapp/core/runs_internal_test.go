package core

import (
	"bytes"
	"testing"
)

// TestAppendRuns: records split into runs of at most MaxRunBytes, each
// under its last offset, a run of one stored as the record itself, and
// every run decodes to its records in order.
func TestAppendRuns(t *testing.T) {
	rec := func(n int, b byte) []byte { return append([]byte{0x0a}, bytes.Repeat([]byte{b}, n-1)...) }
	tests := []struct {
		name  string
		sizes []int
		want  []int // records a run
	}{
		{"one", []int{100}, []int{1}},
		{"small", []int{100, 100, 100}, []int{3}},
		{"exactly full", []int{MaxRunBytes / 2, MaxRunBytes / 2, 1}, []int{2, 1}},
		{"larger than a run", []int{10, MaxRunBytes + 1, 10}, []int{1, 1, 1}},
		{"many", append(make([]int, 0, 1000), repeat(1000, 200)...), []int{327, 327, 327, 19}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var records [][]byte
			for i, n := range tt.sizes {
				records = append(records, rec(n, byte(i)))
			}
			const first = 40
			next := uint64(first)
			var got []int
			appendRuns(first, records, func(last uint64, v []byte) {
				n, err := decodeRun(v, func(i int, r []byte) bool {
					if o := int(next) - first + i; !bytes.Equal(r, records[o]) {
						t.Fatalf("run ending at %d: record %d is not record %d", last, i, o)
					}
					return true
				})
				if err != nil {
					t.Fatal(err)
				}
				if n == 1 && !bytes.Equal(v, records[int(next)-first]) {
					t.Fatal("a run of one is not stored as the record itself")
				}
				if want := next + uint64(n) - 1; last != want {
					t.Fatalf("run of %d from %d keyed at %d, want its last offset %d", n, next, last, want)
				}
				if size := len(v); n > 1 && size > MaxRunBytes+16+8*n {
					t.Fatalf("a run of %d records is %d bytes, past MaxRunBytes", n, size)
				}
				next += uint64(n)
				got = append(got, n)
			})
			if !equalInts(got, tt.want) {
				t.Errorf("runs of %v records, want %v", got, tt.want)
			}
		})
	}
}

func repeat(n, v int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// FuzzDecodeRun: decodeRun takes any bytes without panicking; what it
// accepts it reads as whole, non-empty records that runLen counts, and a
// malformed value gives no record at all.
func FuzzDecodeRun(f *testing.F) {
	f.Add([]byte{0x0a, 1, 't'})
	f.Add(encodeRun([][]byte{{0x0a, 1, 't'}, {0x0a, 1, 'u', 0x10, 1}}))
	f.Add([]byte{0, 2, 1, 8, 1, 8})
	f.Add([]byte{0, 2, 1, 8, 5, 8})
	f.Add([]byte{0, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, v []byte) {
		var recs [][]byte
		n, err := decodeRun(v, func(_ int, rec []byte) bool {
			recs = append(recs, bytes.Clone(rec))
			return true
		})
		if err != nil {
			if len(recs) != 0 {
				t.Fatalf("a malformed run gave %d records", len(recs))
			}
			return
		}
		if n != len(recs) || n == 0 {
			t.Fatalf("decodeRun = %d records, called fn %d times", n, len(recs))
		}
		if m, err := runLen(v); err != nil || m != n {
			t.Fatalf("runLen = %d, %v; decodeRun = %d", m, err, n)
		}
		for _, r := range recs {
			if len(r) == 0 {
				t.Fatal("an empty record")
			}
		}
		if n > 1 {
			if again := encodeRun(recs); len(again) > len(v) {
				t.Fatalf("%d records re-encode to %d bytes, more than the %d read", n, len(again), len(v))
			}
		}
	})
}
