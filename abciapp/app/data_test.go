package app_test

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"strconv"
	"strings"
	"testing"
	"time"

	abci "github.com/cometbft/cometbft/abci/types"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/abciapp/app"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// serveData serves a's data service in plaintext on loopback until the
// test ends, and returns a client of it.
func serveData(t *testing.T, a *app.App, c app.DataConfig) byzlogv1.NodeDataClient {
	t.Helper()
	listen := "127.0.0.1:" + strconv.Itoa(freePort(t))
	c.Listen = listen
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- app.ServeData(ctx, c, a) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-served:
			if err != nil {
				t.Errorf("ServeData() = %v after cancel, want nil", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("ServeData() did not return within 10 s of cancel")
		}
	})
	// WaitForReady: the server starts listening in its goroutine, maybe
	// after the first call dials (a refused dial failed the first call
	// at once: CI of 0c49e45).
	conn, err := grpc.NewClient("passthrough:///"+listen, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(8<<20), grpc.WaitForReady(true)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return byzlogv1.NewNodeDataClient(conn)
}

// TestServeData: the data service answers what the app's own ABCI calls
// answer, queries and CheckTx alike, and refuses what no transaction can
// be before reading it whole.
func TestServeData(t *testing.T) {
	a := open(t, t.TempDir())
	defer a.Close()
	c := serveData(t, a, app.DataConfig{MaxTxBytes: 1 << 20})
	cctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// A query: the same answer as ABCI's Query.
	want, err := a.Query(cctx, &abci.RequestQuery{Path: wire.PathTopics})
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Query(cctx, &byzlogv1.NodeQueryRequest{Path: wire.PathTopics})
	if err != nil {
		t.Fatal(err)
	}
	if got.Code != want.Code || string(got.Value) != string(want.Value) || got.Height != want.Height || len(got.Value) == 0 {
		t.Errorf("Query(%s) = code %d, %d bytes at %d; ABCI's Query = code %d, %d bytes at %d", wire.PathTopics, got.Code, len(got.Value), got.Height, want.Code, len(want.Value), want.Height)
	}
	// A query the app refuses says why, as abci_query would.
	bad, err := c.Query(cctx, &byzlogv1.NodeQueryRequest{Path: wire.PathBundles, Data: []byte("not a request")})
	if err != nil {
		t.Fatal(err)
	}
	if bad.Code == 0 || !strings.Contains(bad.Log, "BundlesRequest") {
		t.Errorf("Query(%s, garbage) = code %d %q, want a refusal naming BundlesRequest", wire.PathBundles, bad.Code, bad.Log)
	}
	// A pooled transaction is served back by hash, as /bundles does.
	tx := validTx(t, 0)
	sub, err := c.Submit(cctx, &byzlogv1.NodeSubmitRequest{Tx: tx})
	if err != nil {
		t.Fatal(err)
	}
	if sub.Code != 0 {
		t.Fatalf("Submit(a valid batch) = code %d %q, want 0", sub.Code, sub.Log)
	}
	if again, err := c.Submit(cctx, &byzlogv1.NodeSubmitRequest{Tx: tx}); err != nil || again.Code != 0 {
		t.Errorf("Submit(the same batch again) = %v, %v; want code 0 (already held)", again, err)
	}
	sum := sha256.Sum256(tx)
	req, err := proto.Marshal(&byzlogv1.BundlesRequest{Hashes: [][]byte{sum[:]}})
	if err != nil {
		t.Fatal(err)
	}
	held, err := c.Query(cctx, &byzlogv1.NodeQueryRequest{Path: wire.PathBundles, Data: req})
	if err != nil {
		t.Fatal(err)
	}
	var bundles byzlogv1.Bundles
	if err := proto.Unmarshal(held.Value, &bundles); err != nil || held.Code != 0 || len(bundles.Bundles) != 1 || string(bundles.Bundles[0]) != string(tx) {
		t.Errorf("Query(%s) of the submitted batch = code %d %q, %d entries, %v; want the batch back from the pool", wire.PathBundles, held.Code, held.Log, len(bundles.Bundles), err)
	}
	// Garbage gets CheckTx's refusal, with its reason.
	g, err := c.Submit(cctx, &byzlogv1.NodeSubmitRequest{Tx: []byte("garbage")})
	if err != nil {
		t.Fatal(err)
	}
	if g.Code == 0 || g.Log == "" {
		t.Errorf("Submit(garbage) = code %d %q, want a refusal with a reason", g.Code, g.Log)
	}
	r, err := a.CheckTx(cctx, &abci.RequestCheckTx{Tx: []byte("garbage")})
	if err != nil || r.Code != g.Code || r.Log != g.Log {
		t.Errorf("CheckTx(garbage) = %v, %v; the data service said code %d %q", r, err, g.Code, g.Log)
	}
	if _, err := c.Submit(cctx, &byzlogv1.NodeSubmitRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("Submit(nothing) = %v, want InvalidArgument", err)
	}
	// Over what the node's mempool takes: refused as its RPC would.
	large, err := c.Submit(cctx, &byzlogv1.NodeSubmitRequest{Tx: make([]byte, 1<<20+1)})
	if err != nil {
		t.Fatal(err)
	}
	if wire.Code(large.Code) != wire.CodeTxTooLarge || !strings.Contains(large.Log, "--data-max-tx-bytes") {
		t.Errorf("Submit(1 MiB + 1) = code %d %q, want %s naming --data-max-tx-bytes", large.Code, large.Log, wire.CodeTxTooLarge)
	}
	// Over the largest transaction plus framing: refused unread.
	big := &byzlogv1.NodeSubmitRequest{Tx: make([]byte, wire.MaxTxBytes+8<<10)}
	if _, err := c.Submit(cctx, big); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("Submit(%d bytes) = %v, want ResourceExhausted", proto.Size(big), err)
	}
}

func TestDataConfigValidate(t *testing.T) {
	for _, c := range []struct {
		cfg app.DataConfig
		ok  bool
	}{
		{app.DataConfig{}, true}, // not served
		{app.DataConfig{Listen: "127.0.0.1:26659"}, true},
		{app.DataConfig{Listen: "localhost:26659"}, true},
		{app.DataConfig{Listen: "[::1]:26659"}, true},
		{app.DataConfig{Listen: "26659"}, false},
		// Records in the clear beyond loopback: only with TLS, or when told.
		{app.DataConfig{Listen: "0.0.0.0:26659"}, false},
		{app.DataConfig{Listen: ":26659"}, false},
		{app.DataConfig{Listen: "10.0.0.5:26659", TLS: &tls.Config{}}, true},
		{app.DataConfig{Listen: "10.0.0.5:26659", Insecure: true}, true},
		{app.DataConfig{Listen: "127.0.0.1:26659", MaxTxBytes: -1}, false},
	} {
		if err := c.cfg.Validate(); (err == nil) != c.ok {
			t.Errorf("%+v.Validate() = %v, want ok=%v", c.cfg, err, c.ok)
		}
	}
}
