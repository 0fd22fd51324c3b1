package pipeline_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/byzlog/byzlog/gateway/grpcface"
	"github.com/byzlog/byzlog/gateway/httpface"
	"github.com/byzlog/byzlog/gateway/pipeline"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

// The HTTP face serves the gRPC face's service.
var _ httpface.Backend = (*grpcface.Service)(nil)

// httpGateway serves the HTTP face over a gateway on c, with edit applied.
func httpGateway(t *testing.T, c *pipeline.TestChain, edit func(*pipeline.HTTPConfig)) (*pipeline.Gateway, *httptest.Server) {
	t.Helper()
	g := pipeline.StartGatewayOn(t, c, func(cfg *pipeline.Config) { edit(&cfg.HTTP) })
	srv := httptest.NewServer(httpface.Handler(grpcface.NewService(grpcface.Over(g)), g.Config().HTTP))
	t.Cleanup(srv.Close)
	return g, srv
}

// TestHTTPConcurrencyLimit: past http.max_concurrent requests at once, a
// request is refused at once with 429 and Retry-After, not queued.
func TestHTTPConcurrencyLimit(t *testing.T) {
	c := pipeline.NewTestChain(t, pipeline.StartTopics()...)
	c.Freeze(true) // a produce with ack commit waits
	pipeline.RunTestChain(t, c)
	_, srv := httpGateway(t, c, func(h *pipeline.HTTPConfig) { h.MaxConcurrent = 1 })
	body, err := protojson.Marshal(&byzlogv1.ProduceRequest{Batch: pipeline.NewTestProducer("http").OneRecord(t, "t", 0, "v"), Ack: byzlogv1.Ack_ACK_COMMIT})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	held := make(chan struct{})
	go func() {
		defer close(held)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/produce", bytes.NewReader(body))
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	if !pipeline.WaitFor(2*time.Second, func() bool { return c.MempoolLen() == 1 }) {
		t.Fatal("the first request never reached the node")
	}
	start := time.Now()
	resp, err := http.Get(srv.URL + "/v1/topics")
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(msg), "http.max_concurrent") {
		t.Errorf("GET /v1/topics while one request is served = %d (Retry-After %q) %s after %s; want 429 with Retry-After naming http.max_concurrent",
			resp.StatusCode, resp.Header.Get("Retry-After"), msg, time.Since(start))
	}
	cancel()
	<-held
	if !pipeline.WaitFor(2*time.Second, func() bool {
		resp, err := http.Get(srv.URL + "/v1/topics")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}) {
		t.Errorf("after the first request ended, GET /v1/topics still refused")
	}
}

// TestHTTPBodyLimit: a body over http.max_body_bytes gets 413 and a
// message naming the limit.
func TestHTTPBodyLimit(t *testing.T) {
	c := pipeline.NewTestChain(t, pipeline.StartTopics()...)
	pipeline.RunTestChain(t, c)
	_, srv := httpGateway(t, c, func(h *pipeline.HTTPConfig) { h.MaxBodyBytes = 1 << 10 })
	for _, tc := range []struct {
		size int
		want int
	}{
		{100, http.StatusBadRequest}, // under: read, and not JSON
		{2 << 10, http.StatusRequestEntityTooLarge},
	} {
		resp, err := http.Post(srv.URL+"/v1/produce", "application/json", strings.NewReader(strings.Repeat("x", tc.size)))
		if err != nil {
			t.Fatal(err)
		}
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want || (tc.want == http.StatusRequestEntityTooLarge && !strings.Contains(string(msg), "http.max_body_bytes")) {
			t.Errorf("POST %d bytes = %d %s; want %d", tc.size, resp.StatusCode, msg, tc.want)
		}
	}
}

// TestHTTPSlowBody: a client that sends its headers and then trickles (or
// withholds) the body is cut off after http.read_timeout.
func TestHTTPSlowBody(t *testing.T) {
	c := pipeline.NewTestChain(t, pipeline.StartTopics()...)
	pipeline.RunTestChain(t, c)
	_, srv := httpGateway(t, c, func(h *pipeline.HTTPConfig) { h.ReadTimeout = 300 * time.Millisecond })
	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/produce HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"batch\":")
	start := time.Now()
	_ = conn.SetReadDeadline(time.Now().Add(3 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a stalled body within 3s: %v", err)
	}
	msg, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(msg), "http.read_timeout") {
		t.Errorf("stalled body: %d %s after %s; want 408 naming http.read_timeout", resp.StatusCode, msg, time.Since(start))
	}
}

func TestNewHTTPServerBounds(t *testing.T) {
	cfg := pipeline.Default().HTTP
	s := httpface.NewServer(cfg, http.NotFoundHandler())
	if s.ReadHeaderTimeout != cfg.ReadHeaderTimeout || s.ReadTimeout != cfg.ReadTimeout || s.WriteTimeout != cfg.WriteTimeout ||
		s.IdleTimeout != cfg.IdleTimeout || s.MaxHeaderBytes != cfg.MaxHeaderBytes {
		t.Errorf("httpface.NewServer(%+v) = %+v; want every bound set", cfg, s)
	}
}
