package tlsconf

import (
	"strings"
	"testing"
)

func TestNodeURL(t *testing.T) {
	for _, tc := range []struct {
		in       string
		insecure bool
		want     string
		err      string
	}{
		{in: "http://127.0.0.1:26657", want: "http://127.0.0.1:26657"},
		{in: "http://127.0.0.1:26657/", want: "http://127.0.0.1:26657"},
		{in: "127.0.0.1:26657", want: "http://127.0.0.1:26657"},
		{in: "localhost:26657", want: "http://localhost:26657"},
		{in: "tcp://[::1]:26657", want: "http://[::1]:26657"},
		{in: "https://node.example:443", want: "https://node.example:443"},
		{in: "https://10.0.0.1:26657", want: "https://10.0.0.1:26657"},
		{in: "tcp://10.0.0.1:26657", err: "plaintext RPC"},
		{in: "http://node0:26657", err: "plaintext RPC"},
		{in: "10.0.0.1:26657", err: "plaintext RPC"},
		{in: "http://node0:26657", insecure: true, want: "http://node0:26657"},
		{in: "ftp://node0:21", err: `scheme "ftp"`},
		{in: "https://", err: "want host:port"},
	} {
		got, err := NodeURL(tc.in, tc.insecure)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("NodeURL(%q, %v) = %q, %v; want an error with %q", tc.in, tc.insecure, got, err, tc.err)
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("NodeURL(%q, %v) = %q, %v; want %q", tc.in, tc.insecure, got, err, tc.want)
		}
	}
}
