package consumer

import (
	"testing"
)

func FuzzDecodeFloor(f *testing.F) {
	for _, s := range []string{"", `{}`, `{"offset":5}`, `{"offsets":{"0":3,"7":9},"time_nano":1}`, `{"time_nano":-1}`, `{"offsets":{"x":1}}`, `[`, `null`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fl, err := decodeFloor(s)
		if err != nil {
			return
		}
		if fl.TimeNano < 0 {
			t.Fatalf("decodeFloor(%q) accepted a negative time", s)
		}
		back, err := decodeFloor(fl.encode())
		if err != nil || back.encode() != fl.encode() {
			t.Fatalf("decodeFloor(encode(decodeFloor(%q))) = %+v, %v, want %+v", s, back, err, fl)
		}
	})
}

func TestFloorAdmits(t *testing.T) {
	f := floor{Offset: 10, Offsets: map[uint32]uint64{1: 3}, TimeNano: 100}
	for _, tc := range []struct {
		p      uint32
		offset uint64
		ts     int64
		want   bool
	}{
		{0, 9, 200, false}, {0, 10, 200, true}, {0, 10, 99, false},
		{1, 2, 200, false}, {1, 3, 100, true},
	} {
		if got := f.admits(tc.p, tc.offset, tc.ts); got != tc.want {
			t.Errorf("admits(%d, %d, %d) = %v, want %v", tc.p, tc.offset, tc.ts, got, tc.want)
		}
	}
}
