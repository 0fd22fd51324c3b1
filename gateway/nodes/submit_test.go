package nodes

import (
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

// TestBroadcastHexForm checks what the node receives for a small and a
// large transaction, and that results and JSON-RPC errors come back as the
// JSON-RPC client would give them.
func TestBroadcastHexForm(t *testing.T) {
	var gotForm, gotJSON []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch {
		case r.URL.Path == "/broadcast_tx_sync" && r.Header.Get("Content-Type") == "application/x-www-form-urlencoded":
			gotForm = append(gotForm, string(body))
			if strings.HasSuffix(string(body), hex.EncodeToString([]byte("dup"))) {
				_, _ = io.WriteString(w, `{"jsonrpc":"2.0","id":-1,"error":{"code":-32603,"message":"Internal error","data":"tx already exists in cache"}}`)
				return
			}
			_, _ = io.WriteString(w, `{"jsonrpc":"2.0","id":-1,"result":{"code":7,"data":"","log":"bad","codespace":"","hash":"AB"}}`)
		case r.URL.Path == "/":
			gotJSON = append(gotJSON, string(body))
			_, _ = io.WriteString(w, `{"jsonrpc":"2.0","id":0,"result":{"code":0,"data":"","log":"","codespace":"","hash":"CD"}}`)
		default:
			http.Error(w, "unexpected "+r.URL.Path, http.StatusNotFound)
		}
	}))
	defer srv.Close()
	cfg := DefaultConfig()
	cfg.Addrs, cfg.HexSubmitMaxBytes = []string{srv.URL}, 8
	p, err := New(cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	n := p.nodes[0]
	ctx := context.Background()

	res, err := n.BroadcastTxSync(ctx, []byte("small"))
	if err != nil || res.Code != 7 || res.Log != "bad" {
		t.Fatalf("small tx: %+v %v", res, err)
	}
	if want := "tx=0x" + hex.EncodeToString([]byte("small")); len(gotForm) != 1 || gotForm[0] != want {
		t.Fatalf("form bodies %q, want [%q]", gotForm, want)
	}
	if _, err := n.BroadcastTxSync(ctx, []byte("dup")); err == nil || !strings.Contains(err.Error(), "tx already exists in cache") {
		t.Fatalf("duplicate: %v, want the node's error text", err)
	}
	res, err = n.BroadcastTxSync(ctx, []byte("larger than eight bytes"))
	if err != nil || res.Code != 0 || len(gotJSON) != 1 || !strings.Contains(gotJSON[0], `"broadcast_tx_sync"`) {
		t.Fatalf("large tx: %+v %v; JSON-RPC bodies %q", res, err, gotJSON)
	}
	if len(gotForm) != 2 {
		t.Fatalf("the large tx went as a form: %q", gotForm)
	}
}
