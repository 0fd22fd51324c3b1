package nodes

import (
	"context"
	"errors"
	"github.com/byzlog/byzlog/protos/wire"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/byzlog/byzlog/protos/chain/rpcnode"
)

// TestRPCResponseSizeLimit: the pool's node clients (rpcnode) and its
// submission client are bounded: a node that answers with a huge body
// makes the call fail with an error naming the URL and the limit, after
// reading no more than the limit; honest answers under it still work.
func TestRPCResponseSizeLimit(t *testing.T) {
	const limit = wire.MinReaderResponseBytes
	status := `{"jsonrpc":"2.0","id":%ID%,"result":{"node_info":{"network":"c","protocol_version":{"p2p":"0","block":"0","app":"0"},"id":"","listen_addr":"","version":"","channels":"","moniker":"` + "%PAD%" + `","other":{"tx_index":"","rpc_address":""}},"sync_info":{"latest_block_height":"7","catching_up":false},"validator_info":{"address":"","pub_key":null,"voting_power":"0"}}}`
	for _, tc := range []struct {
		name    string
		pad     int
		chunked bool // no Content-Length: the limit must hold while reading
		call    func(n *Node) error
		wantErr bool
	}{
		{"status under the limit", limit / 2, false, statusCall, false},
		{"status over the limit", 3 * limit, false, statusCall, true},
		{"status over the limit, chunked", 3 * limit, true, statusCall, true},
		{"broadcast form over its limit", 5 * limit, true, func(n *Node) error {
			_, err := n.BroadcastTxSync(context.Background(), []byte("tx"))
			return err
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var written int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				id := "-1"
				if r.URL.Path == "/" {
					body, _ := io.ReadAll(r.Body)
					if i := strings.Index(string(body), `"id":`); i >= 0 {
						id = strings.SplitN(string(body[i+5:]), ",", 2)[0]
					}
				}
				resp := strings.Replace(strings.Replace(status, "%ID%", id, 1), "%PAD%", strings.Repeat("x", tc.pad), 1)
				if !tc.chunked {
					w.Header().Set("Content-Length", itoa(len(resp)))
				}
				for i := 0; i < len(resp); i += 64 << 10 {
					n, err := io.WriteString(w, resp[i:min(i+64<<10, len(resp))])
					written += int64(n)
					if err != nil {
						return
					}
					if tc.chunked {
						w.(http.Flusher).Flush()
					}
				}
			}))
			defer srv.Close()
			cfg := DefaultConfig()
			cfg.Addrs, cfg.MaxResponseBytes = []string{srv.URL}, limit
			p, err := New(cfg, zerolog.Nop())
			if err != nil {
				t.Fatal(err)
			}
			err = tc.call(p.nodes[0])
			if !tc.wantErr {
				if err != nil {
					t.Fatalf("call = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("call = nil after the node wrote %d bytes, want an error naming max_response_bytes", written)
			}
			if !errors.Is(err, rpcnode.ErrResponseTooLarge) && !strings.Contains(err.Error(), "max_response_bytes") {
				t.Fatalf("call = %v, want an error naming max_response_bytes", err)
			}
			if !strings.Contains(err.Error(), srv.URL) {
				t.Errorf("call = %v, want the error to name %s", err, srv.URL)
			}
		})
	}
}

func statusCall(n *Node) error {
	_, err := n.Client.Status(context.Background())
	return err
}

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		if n /= 10; n == 0 {
			return string(b[i:])
		}
	}
}
