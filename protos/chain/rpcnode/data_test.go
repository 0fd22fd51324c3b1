package rpcnode_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cmttypes "github.com/cometbft/cometbft/types"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/chain"
	"github.com/byzlog/byzlog/protos/chain/rpcnode"
	"github.com/byzlog/byzlog/protos/chain/tlsconf"
	"github.com/byzlog/byzlog/protos/wire"
)

// dataNode is a node data service that answers whatever the test says:
// a node that may lie.
type dataNode struct {
	byzlogv1.UnimplementedNodeDataServer
	value []byte // every query's answer
	paths []string
	txs   [][]byte
}

func (d *dataNode) Query(_ context.Context, req *byzlogv1.NodeQueryRequest) (*byzlogv1.NodeQueryResponse, error) {
	d.paths = append(d.paths, req.Path)
	return &byzlogv1.NodeQueryResponse{Value: d.value, Height: 7}, nil
}

func (d *dataNode) Submit(_ context.Context, req *byzlogv1.NodeSubmitRequest) (*byzlogv1.NodeSubmitResponse, error) {
	d.txs = append(d.txs, req.Tx)
	return &byzlogv1.NodeSubmitResponse{Code: 5, Log: "refused for the test"}, nil
}

// serveDataNode serves d over TLS with a certificate of a new CA for
// 127.0.0.1, until the test ends; it returns the address and the CA's files.
func serveDataNode(t *testing.T, d *dataNode) (addr string, local tlsconf.Local) {
	t.Helper()
	local = tlsconf.Local{Dir: filepath.Join(t.TempDir(), "tls")}
	if err := local.Ensure([]string{"127.0.0.1"}, "node"); err != nil {
		t.Fatal(err)
	}
	f := local.Party("node")
	srvTLS, err := tlsconf.Files{Cert: f.Cert, Key: f.Key}.Server() // server TLS only, as byzlog-app serves it
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(srvTLS)), grpc.MaxSendMsgSize(64<<20))
	byzlogv1.RegisterNodeDataServer(srv, d)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	servers = append(servers, srv)
	return ln.Addr().String(), local
}

// servers are the data services serveDataNode started; stopAll stops the
// last one.
var servers []*grpc.Server

func stopAll(t *testing.T) {
	t.Helper()
	servers[len(servers)-1].Stop()
}

// TestDataService: with a data service, queries and submissions go there
// (the RPC address is dead), answers are bounded as the RPC's are, and the
// service's certificate is checked.
func TestDataService(t *testing.T) {
	d := &dataNode{value: []byte("answer")}
	addr, local := serveDataNode(t, d)
	clientTLS, err := tlsconf.Files{CA: local.CA()}.Client()
	if err != nil {
		t.Fatal(err)
	}
	const maxResponse = 1 << 20
	var heard []error
	c, err := rpcnode.New("http://127.0.0.1:1", rpcnode.Options{TLS: clientTLS, Timeout: 10 * time.Second, MaxResponseBytes: maxResponse,
		Data: "https://" + addr, OnDataError: func(err error) { heard = append(heard, err) }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if !c.HasData() {
		t.Fatal("HasData() = false with Options.Data given")
	}
	res, err := c.ABCIQuery(ctx, wire.PathTopics, nil)
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Response.Value) != "answer" || res.Response.Height != 7 || len(d.paths) != 1 || d.paths[0] != wire.PathTopics {
		t.Errorf("ABCIQuery = %q at %d (service asked %v), want the service's answer", res.Response.Value, res.Response.Height, d.paths)
	}

	tx := []byte("a transaction")
	sub, err := c.Submit(ctx, tx)
	if err != nil {
		t.Fatal(err)
	}
	if sub.Code != 5 || sub.Log != "refused for the test" || string(sub.Hash) != string(cmttypes.Tx(tx).Hash()) || len(d.txs) != 1 || string(d.txs[0]) != string(tx) {
		t.Errorf("Submit = code %d %q hash %X (service got %q), want the service's answer and the tx's hash", sub.Code, sub.Log, sub.Hash, d.txs)
	}

	// A bundle it serves is checked against its hash, as over the RPC.
	d.value = []byte{0x0a, 0x03, 'b', 'a', 'd'} // Bundles{bundles: ["bad"]}
	if _, err := chain.FetchBundles(ctx, c, [][sha256.Size]byte{sha256.Sum256([]byte("good"))}); err == nil || !strings.Contains(err.Error(), "hashes to") {
		t.Errorf("FetchBundles of a wrong bundle = %v, want its hash refused", err)
	}
	// A lying node's answer over the bound fails its call, unread, and
	// the query goes to the RPC (dead here).
	d.value = make([]byte, maxResponse+1)
	if _, err := c.ABCIQuery(ctx, wire.PathTopics, nil); err == nil || !strings.Contains(err.Error(), "abci_query") {
		t.Errorf("ABCIQuery of a %d-byte answer = %v, want it asked of the RPC", len(d.value), err)
	}
	if len(heard) != 1 || !strings.Contains(heard[0].Error(), "ResourceExhausted") {
		t.Errorf("the data service's failures heard: %v, want one ResourceExhausted", heard)
	}

	// A data service that fails sends the client to the RPC for a while:
	// the next submission is not even tried there.
	heard = nil
	stopped, _ := serveDataNode(t, &dataNode{})
	b, err := rpcnode.New("http://127.0.0.1:1", rpcnode.Options{TLS: clientTLS, Timeout: 5 * time.Second, MaxResponseBytes: maxResponse,
		Data: "https://" + stopped, OnDataError: func(err error) { heard = append(heard, err) }})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	stopAll(t)
	if _, err := b.Submit(ctx, tx); !errors.Is(err, rpcnode.ErrNoData) || len(heard) != 1 {
		t.Fatalf("Submit to a stopped data service = %v (heard %d), want ErrNoData, heard once", err, len(heard))
	}
	if _, err := b.Submit(ctx, tx); !errors.Is(err, rpcnode.ErrNoData) || len(heard) != 1 {
		t.Errorf("Submit again = %v (heard %d), want ErrNoData at once", err, len(heard))
	}
	if _, err := b.ABCIQuery(ctx, wire.PathTopics, nil); err == nil || !strings.Contains(err.Error(), "abci_query") {
		t.Errorf("ABCIQuery with the data service down = %v, want the RPC's error (abci_query)", err)
	}

	// Another CA's client does not take the service's certificate.
	other := tlsconf.Local{Dir: filepath.Join(t.TempDir(), "other")}
	if err := other.Ensure([]string{"127.0.0.1"}, "x"); err != nil {
		t.Fatal(err)
	}
	otherTLS, err := tlsconf.Files{CA: other.CA()}.Client()
	if err != nil {
		t.Fatal(err)
	}
	heard = nil
	o, err := rpcnode.New("http://127.0.0.1:1", rpcnode.Options{TLS: otherTLS, Timeout: 5 * time.Second, MaxResponseBytes: maxResponse,
		Data: "https://" + addr, OnDataError: func(err error) { heard = append(heard, err) }})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if _, err := o.ABCIQuery(ctx, wire.PathTopics, nil); err == nil || len(heard) != 1 || !strings.Contains(heard[0].Error(), "certificate") {
		t.Errorf("ABCIQuery with another CA = %v, heard %v; want a certificate error from the data service", err, heard)
	}
	// Plaintext beyond loopback only when allowed.
	if _, err := rpcnode.New("http://127.0.0.1:1", rpcnode.Options{MaxResponseBytes: maxResponse, Data: "10.0.0.5:26659"}); err == nil {
		t.Error("New with a plaintext data service beyond loopback succeeded, want refused")
	}
	if p, err := rpcnode.New("http://127.0.0.1:1", rpcnode.Options{MaxResponseBytes: maxResponse, Data: "10.0.0.5:26659", InsecureData: true}); err != nil {
		t.Errorf("New with InsecureData = %v, want ok", err)
	} else {
		p.Close()
	}
	// Without a data service there is nothing to submit to.
	n, err := rpcnode.New("http://127.0.0.1:1", rpcnode.Options{MaxResponseBytes: maxResponse})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Submit(ctx, tx); err != rpcnode.ErrNoData || n.HasData() {
		t.Errorf("Submit without a data service = %v (HasData %v), want ErrNoData", err, n.HasData())
	}
}

func TestCheckDataAddrs(t *testing.T) {
	for _, tt := range []struct {
		addrs []string
		n     int
		ok    bool
	}{
		{nil, 4, true},
		{[]string{"https://127.0.0.1:1", "https://127.0.0.1:2"}, 2, true},
		{[]string{"127.0.0.1:1", "http://127.0.0.1:2"}, 2, true},
		{[]string{"https://127.0.0.1:1"}, 2, false},                // one missing
		{[]string{"https://127.0.0.1:1", "127.0.0.1:1"}, 2, false}, // one node twice
		{[]string{"https://node.example"}, 1, false},               // no port
		{[]string{"https://node.example:26659/data"}, 1, false},    // a path
		{[]string{"http://10.0.0.5:26659"}, 1, false},              // plaintext beyond loopback
		{[]string{"https://10.0.0.5:26659", "https://10.0.0.6:26659"}, 2, true},
		{[]string{"", "https://10.0.0.6:26659"}, 2, true}, // the first node over its RPC alone
		{[]string{"", ""}, 2, true},
	} {
		if err := rpcnode.CheckDataAddrs(tt.addrs, tt.n, false); (err == nil) != tt.ok {
			t.Errorf("CheckDataAddrs(%q, %d) = %v, want ok=%v", tt.addrs, tt.n, err, tt.ok)
		}
	}
}
