package nodes

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// answer is a node's reply to its call-th broadcast (from 0): a CheckTx
// code, or an RPC error's data when err is set, or an HTTP failure.
type answer struct {
	code uint32
	err  string
	http bool
}

func accept() answer              { return answer{} }
func refuse(code uint32) answer   { return answer{code: code} }
func rpcError(data string) answer { return answer{err: data} }

// TestBroadcast: how Broadcast ends, for nodes that all answer alike
// (the order it asks them in is round-robin), and how many calls it made.
func TestBroadcast(t *testing.T) {
	const behind = 8
	pol := Policy{
		Timeout: time.Second, Quorum: 2,
		Stands: func(code uint32) bool { return code == 9 },
		Behind: func(code uint32) bool { return code == behind },
	}
	for _, tc := range []struct {
		name      string
		node      func(i, call int) answer // node i's answer to its call-th broadcast
		catchUp   bool
		want      Outcome
		wantCalls int64
		wantErr   string
	}{
		{"accepted", func(int, int) answer { return accept() }, false, Accepted, 1, ""},
		{"refused by f+1", func(int, int) answer { return refuse(7) }, false, Refused, 2, ""},
		{"refusals that differ do not stand", func(i, _ int) answer { return refuse(uint32(10 + i)) }, false, Failed, 4, "fewer than 2 nodes confirm"},
		{"a refusal that stands alone", func(int, int) answer { return refuse(9) }, false, Refused, 1, ""},
		{"already held", func(int, int) answer { return rpcError("tx already exists in cache") }, false, Held, 1, ""},
		{"mempool full", func(int, int) answer { return rpcError("mempool is full: number of txs 1 (max: 1)") }, false, Full, 1, ""},
		{"every node broken", func(int, int) answer { return answer{http: true} }, false, Failed, 4, "broadcast_tx_sync"},
		{"behind, caught up: asked again", func(_, call int) answer {
			if call == 0 {
				return refuse(behind)
			}
			return accept()
		}, true, Accepted, 2, ""},
		{"behind, not caught up: a refusal like any", func(int, int) answer { return refuse(behind) }, false, Refused, 2, ""},
		{"behind: waited for once per broadcast", func(int, int) answer { return refuse(behind) }, true, Refused, 3, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int64
			var addrs []string
			for i := range 4 {
				var mine atomic.Int64
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					_, _ = io.ReadAll(r.Body)
					calls.Add(1)
					a := tc.node(i, int(mine.Add(1)-1))
					switch {
					case a.http:
						http.Error(w, "down", http.StatusBadGateway)
					case a.err != "":
						fmt.Fprintf(w, `{"jsonrpc":"2.0","id":-1,"error":{"code":-32603,"message":"Internal error","data":%q}}`, a.err)
					default:
						fmt.Fprintf(w, `{"jsonrpc":"2.0","id":-1,"result":{"code":%d,"data":"","log":"no","codespace":"","hash":"AB"}}`, a.code)
					}
				}))
				t.Cleanup(srv.Close)
				addrs = append(addrs, srv.URL)
			}
			cfg := DefaultConfig()
			cfg.Addrs = addrs
			p, err := New(cfg, zerolog.Nop())
			if err != nil {
				t.Fatal(err)
			}
			pol := pol
			var waits int
			pol.CatchUp = func(context.Context, *Node) bool { waits++; return tc.catchUp }
			sub := p.Broadcast(context.Background(), []byte("tx"), pol)
			if sub.Outcome != tc.want || calls.Load() != tc.wantCalls {
				t.Errorf("Broadcast = outcome %d after %d calls, want %d after %d (err %v)", sub.Outcome, calls.Load(), tc.want, tc.wantCalls, sub.Err)
			}
			if tc.wantErr != "" && (sub.Err == nil || !strings.Contains(sub.Err.Error(), tc.wantErr)) {
				t.Errorf("Broadcast error = %v, want one naming %q", sub.Err, tc.wantErr)
			}
			if waits > 1 {
				t.Errorf("CatchUp called %d times, want at most once", waits)
			}
		})
	}
}
