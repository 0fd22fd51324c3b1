package main

import (
	"strings"
	"testing"
	"time"

	"github.com/byzlog/byzlog/indexer/consumer"
)

func TestCheckReads(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	acked := map[string]placed{
		"a": {0, 0, t0}, "b": {0, 1, t0}, "c": {1, 0, t0},
	}
	read := func(v string, p uint32, o uint64) got {
		return got{&consumer.Record{Value: []byte(v), Partition: p, Offset: o}, t0.Add(time.Second)}
	}
	for _, tc := range []struct {
		name  string
		reads []got
		want  string // "" = passes
	}{
		{"all once in order", []got{read("a", 0, 0), read("c", 1, 0), read("b", 0, 1)}, ""},
		{"missing", []got{read("a", 0, 0), read("c", 1, 0)}, `"b" was acknowledged but never read`},
		{"twice", []got{read("a", 0, 0), read("a", 0, 0)}, `"a" read twice`},
		{"wrong offset", []got{read("a", 0, 0), read("b", 0, 2)}, "its receipt said 0@1"},
		{"out of order", []got{read("b", 0, 1), read("a", 0, 0)}, "read offset 1, expected 0"},
		{"forged", []got{read("x", 0, 0)}, "never acknowledged"},
	} {
		lat, err := checkReads(tc.reads, acked)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want == "" && len(lat) != 3:
			t.Errorf("%s: %d latencies, want 3", tc.name, len(lat))
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: err = %v, want one saying %q", tc.name, err, tc.want)
		}
	}
}
