package rpcnode_test

import (
	"context"
	"crypto/sha256"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cmttypes "github.com/cometbft/cometbft/types"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/byzlog/byzlog/indexer/chain"
	"github.com/byzlog/byzlog/indexer/rpcnode"
	"github.com/byzlog/byzlog/indexer/tlsconf"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
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
	return ln.Addr().String(), local
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
	c, err := rpcnode.New("http://127.0.0.1:1", rpcnode.Options{TLS: clientTLS, Timeout: 10 * time.Second, MaxResponseBytes: maxResponse, Data: "https://" + addr})
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

	// A lying node's answer over the bound fails its call, unread.
	d.value = make([]byte, maxResponse+1)
	if _, err := c.ABCIQuery(ctx, wire.PathTopics, nil); err == nil || !strings.Contains(err.Error(), "ResourceExhausted") {
		t.Errorf("ABCIQuery of a %d-byte answer = %v, want ResourceExhausted", len(d.value), err)
	}
	// And a bundle it serves is checked against its hash, as over the RPC.
	d.value = []byte{0x0a, 0x03, 'b', 'a', 'd'} // Bundles{bundles: ["bad"]}
	if _, err := chain.FetchBundles(ctx, c, [][sha256.Size]byte{sha256.Sum256([]byte("good"))}); err == nil || !strings.Contains(err.Error(), "hashes to") {
		t.Errorf("FetchBundles of a wrong bundle = %v, want its hash refused", err)
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
	o, err := rpcnode.New("http://127.0.0.1:1", rpcnode.Options{TLS: otherTLS, Timeout: 5 * time.Second, MaxResponseBytes: maxResponse, Data: "https://" + addr})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if _, err := o.ABCIQuery(ctx, wire.PathTopics, nil); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("ABCIQuery with another CA = %v, want a certificate error", err)
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
