package verify

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	cmttypes "github.com/cometbft/cometbft/types"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/byzlog/byzlog/protos/chain"
	"github.com/byzlog/byzlog/protos/chain/rpcnode"
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
	_, nodes, err := newNodes("c", []string{srv.URL}, nil, NodeLink{}, 1<<20, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nodes[0].RPC.Status(context.Background()); !errors.Is(err, rpcnode.ErrResponseTooLarge) && (err == nil || !strings.Contains(err.Error(), "max_response_bytes")) {
		t.Fatalf("Status from a node answering 3 MiB = %v, want an error naming max_response_bytes", err)
	}
}

// TestEarlyAccountThatDoesNotCheck: a block read early (before its headers
// are verified) from a node whose data then fails a check is counted as
// that node's lie, and that node is not asked again for the block; the
// others are, in turn.
func TestEarlyAccountThatDoesNotCheck(t *testing.T) {
	var asked [4]atomic.Int64
	urls := make([]string, len(asked))
	for i := range asked {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			asked[i].Add(1)
			http.Error(w, "down", http.StatusServiceUnavailable)
		}))
		defer srv.Close()
		urls[i] = srv.URL
	}
	_, nodes, err := newNodes("c", urls, nil, NodeLink{}, 1<<20, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	m := unregistered()
	v := &Verifier{cfg: Default(), log: zerolog.Nop(), m: m, nodes: nodes}
	lb := &cmttypes.LightBlock{SignedHeader: &cmttypes.SignedHeader{Header: &cmttypes.Header{Height: 5}}}
	next := &cmttypes.LightBlock{SignedHeader: &cmttypes.SignedHeader{Header: &cmttypes.Header{Height: 6}}}
	early := &Reading{n: nodes[1], done: make(chan struct{}), account: &account{kind: chain.KindBlock, err: errors.New("forged transactions")}}
	close(early.done)
	_, err = v.Data(context.Background(), lb, next, early)
	if err == nil || !strings.Contains(err.Error(), "forged transactions") {
		t.Fatalf("data = %v, want an error naming the early account's lie", err)
	}
	if got := testutil.ToFloat64(m.Failures.WithLabelValues(chain.KindBlock)); got != 1 {
		t.Errorf("block verification failures: %v, want 1 (the early account)", got)
	}
	for i := range asked {
		if n := asked[i].Load(); (i == 1) != (n == 0) {
			t.Errorf("node %d asked %d times; want the early account's node never asked again and each other node asked", i, n)
		}
	}
}
