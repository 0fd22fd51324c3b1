package nodelink

import (
	"slices"
	"strings"
	"testing"
)

func TestParseNodes(t *testing.T) {
	for _, tc := range []struct {
		list     string
		insecure bool
		want     []string
		err      string // a substring of the error; "" for none
	}{
		{list: "https://127.0.0.1:26657,https://10.0.0.2:26657", want: []string{"https://127.0.0.1:26657", "https://10.0.0.2:26657"}},
		{list: " 127.0.0.1:26657 , ,http://127.0.0.1:26757,", want: []string{"127.0.0.1:26657", "http://127.0.0.1:26757"}},
		{list: "", want: nil},
		{list: "10.0.0.2:26657", err: "plaintext RPC to a host other than loopback"},
		{list: "http://node1:26657", err: "plaintext RPC to a host other than loopback"},
		{list: "http://node1:26657", insecure: true, want: []string{"http://node1:26657"}},
		{list: "ftp://127.0.0.1:21", err: "want http or https"},
	} {
		got, err := ParseNodes(tc.list, tc.insecure)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("ParseNodes(%q, %v) error %v; want one with %q", tc.list, tc.insecure, err, tc.err)
		case tc.err == "" && (err != nil || !slices.Equal(got, tc.want)):
			t.Errorf("ParseNodes(%q, %v) = %q, %v; want %q", tc.list, tc.insecure, got, err, tc.want)
		}
	}
}

func TestParseNodeData(t *testing.T) {
	for _, tc := range []struct {
		list string
		n    int
		want []string // nil with ok: none given
		ok   bool
	}{
		{"", 3, nil, true},
		{"  ", 3, nil, true},
		{"https://127.0.0.1:1, https://127.0.0.1:2", 2, []string{"https://127.0.0.1:1", "https://127.0.0.1:2"}, true},
		// Positional: the first node is reached over its RPC alone.
		{",https://127.0.0.1:2", 2, []string{"", "https://127.0.0.1:2"}, true},
		{"https://127.0.0.1:1", 2, nil, false},                       // one short
		{"https://127.0.0.1:1,https://127.0.0.1:1", 2, nil, false},   // one node twice
		{"http://10.0.0.5:26659,https://127.0.0.1:2", 2, nil, false}, // plaintext beyond loopback
	} {
		got, err := ParseNodeData(tc.list, tc.n, false)
		if (err == nil) != tc.ok || (tc.ok && !slices.Equal(got, tc.want)) {
			t.Errorf("ParseNodeData(%q, %d) = %q, %v; want %q, ok=%v", tc.list, tc.n, got, err, tc.want, tc.ok)
		}
	}
}
