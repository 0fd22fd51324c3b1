package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestHealthcheck(t *testing.T) {
	healthy := true
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if !healthy {
			http.Error(w, "no healthy CometBFT node", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	}))
	defer srv.Close()
	if err := healthcheck(context.Background(), srv.Client(), srv.URL+"/healthz"); err != nil {
		t.Fatalf("healthy gateway: %v", err)
	}
	healthy = false
	err := healthcheck(context.Background(), srv.Client(), srv.URL+"/healthz")
	if err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "no healthy CometBFT node") {
		t.Fatalf("unhealthy gateway: %v; want the status and the reason", err)
	}
	if err := healthcheck(context.Background(), http.DefaultClient, srv.URL+"/healthz"); err == nil {
		t.Fatal("a certificate the client does not trust passed the check")
	}
}
