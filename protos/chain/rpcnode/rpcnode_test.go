package rpcnode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestResponseSizeLimit: a node answering with a body over the limit
// fails the call with an error naming the URL and max_response_bytes,
// whether or not it declares the length; an answer under it is read.
func TestResponseSizeLimit(t *testing.T) {
	const limit = 1 << 20
	for _, tc := range []struct {
		name    string
		pad     int
		chunked bool
		wantErr bool
	}{
		{"under the limit", limit / 2, false, false},
		{"over the limit", 3 * limit, false, true},
		{"over the limit, no length", 3 * limit, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				resp := fmt.Sprintf(`{"jsonrpc":"2.0","id":0,"result":{"node_info":{"protocol_version":{"p2p":"0","block":"0","app":"0"},"network":"c","moniker":%q},"sync_info":{"latest_block_height":"7"},"validator_info":{"voting_power":"0"}}}`,
					strings.Repeat("x", tc.pad))
				if !tc.chunked {
					w.Header().Set("Content-Length", fmt.Sprint(len(resp)))
				}
				for i := 0; i < len(resp); i += 64 << 10 {
					if _, err := w.Write([]byte(resp[i:min(i+64<<10, len(resp))])); err != nil {
						return
					}
					if tc.chunked {
						w.(http.Flusher).Flush()
					}
				}
			}))
			defer srv.Close()
			c, err := New(srv.URL, Options{MaxResponseBytes: limit})
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Status(context.Background())
			switch {
			case !tc.wantErr && err != nil:
				t.Fatalf("Status = %v, want nil", err)
			case tc.wantErr && err == nil:
				t.Fatal("Status = nil, want an error naming max_response_bytes")
			case tc.wantErr && (!errors.Is(err, ErrResponseTooLarge) && !strings.Contains(err.Error(), "max_response_bytes") || !strings.Contains(err.Error(), srv.URL)):
				t.Fatalf("Status = %v, want an error naming %s and max_response_bytes", err, srv.URL)
			}
		})
	}
}

// TestTimeout: Options.Timeout bounds a call to a node that never
// answers; without it the call waits for its context.
func TestTimeout(t *testing.T) {
	hold := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hold:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(hold)
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		ctx     time.Duration
		within  time.Duration
	}{
		{"client timeout", 100 * time.Millisecond, time.Minute, 2 * time.Second},
		{"no client timeout: the context's", 0, 200 * time.Millisecond, 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(srv.URL, Options{Timeout: tc.timeout, MaxResponseBytes: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), tc.ctx)
			defer cancel()
			start := time.Now()
			if _, err := c.Status(ctx); err == nil || time.Since(start) > tc.within {
				t.Errorf("Status = %v after %s, want an error within %s", err, time.Since(start), tc.within)
			}
		})
	}
}

// TestConnectionsAreReused: calls made many at a time reuse the
// connections of the calls before them. With net/http's default of 2 idle
// connections a host, all but 2 of each round's were closed and dialled
// again (and, over https, paid a TLS handshake each).
func TestConnectionsAreReused(t *testing.T) {
	const concurrent, rounds = 16, 5
	var mu sync.Mutex
	opened := 0
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(20 * time.Millisecond) // so a round's calls overlap
		var req struct {
			ID json.RawMessage `json:"id"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"node_info":{"protocol_version":{"p2p":"0","block":"0","app":"0"},"network":"c"},"sync_info":{"latest_block_height":"7"},"validator_info":{"voting_power":"0"}}}`, req.ID)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			mu.Lock()
			opened++
			mu.Unlock()
		}
	}
	srv.Start()
	defer srv.Close()
	c, err := New(srv.URL, Options{MaxResponseBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	for range rounds {
		var wg sync.WaitGroup
		errs := make(chan error, concurrent)
		for range concurrent {
			wg.Go(func() {
				if _, err := c.Status(context.Background()); err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if opened > concurrent {
		t.Errorf("%d rounds of %d calls at once opened %d connections, want at most %d (reused)", rounds, concurrent, opened, concurrent)
	}
}
