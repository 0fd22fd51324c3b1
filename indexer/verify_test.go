package indexer

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/byzlog/byzlog/indexer/rpcnode"
)

// TestNodesLimitResponses: the indexer's node clients are rpcnode's, with
// max_response_bytes applied (rpcnode's tests cover the limit itself).
func TestNodesLimitResponses(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for range 48 { // 3 MiB, no declared length
			if _, err := w.Write([]byte(strings.Repeat("x", 64<<10))); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
	}))
	defer srv.Close()
	_, nodes, err := newNodes("c", []string{srv.URL}, NodeLink{}, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nodes[0].rpc.Status(context.Background()); !errors.Is(err, rpcnode.ErrResponseTooLarge) && (err == nil || !strings.Contains(err.Error(), "max_response_bytes")) {
		t.Fatalf("Status from a node answering 3 MiB = %v, want an error naming max_response_bytes", err)
	}
}
