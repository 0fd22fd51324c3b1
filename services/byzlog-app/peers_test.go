package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	abci "github.com/cometbft/cometbft/abci/types"
	cmtbytes "github.com/cometbft/cometbft/libs/bytes"
	ctypes "github.com/cometbft/cometbft/rpc/core/types"
	rpctypes "github.com/cometbft/cometbft/rpc/jsonrpc/types"
	"google.golang.org/protobuf/proto"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

func TestPeers(t *testing.T) {
	notPEM := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		opts  peerOptions
		names []string
		err   string // in the error; "" for none
	}{
		{"none", peerOptions{}, nil, ""},
		{"loopback and https", peerOptions{rpc: []string{"127.0.0.1:26657", " https://node2:26657/ ", ""}}, []string{"http://127.0.0.1:26657", "https://node2:26657"}, ""},
		{"plaintext beyond loopback", peerOptions{rpc: []string{"http://node2:26657"}}, nil, "--insecure-peers"},
		{"plaintext allowed", peerOptions{rpc: []string{"http://node2:26657"}, insecure: true}, []string{"http://node2:26657"}, ""},
		{"another scheme", peerOptions{rpc: []string{"ftp://node2:21"}}, nil, "want http or https"},
		{"credentials hidden", peerOptions{rpc: []string{"https://u:secret@node2:26657"}}, []string{"https://u:xxxxx@node2:26657"}, ""},
		{"a CA that is not one", peerOptions{rpc: []string{"https://node2:26657"}, ca: notPEM}, nil, "--peer-tls-ca"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			peers, err := tc.opts.peers()
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("peers() = %d peers, %v; want an error with %q", len(peers), err, tc.err)
				}
				return
			}
			if err != nil || len(peers) != len(tc.names) {
				t.Fatalf("peers() = %d peers, %v; want %q", len(peers), err, tc.names)
			}
			for i, p := range peers {
				if p.String() != tc.names[i] {
					t.Errorf("peer %d = %s, want %s", i, p, tc.names[i])
				}
			}
		})
	}
}

// TestBundlePeerOverRPC: a peer's largest answer (wire.MaxBundlesBytes of
// bundles) fits the response bound, through CometBFT's JSON-RPC.
func TestBundlePeerOverRPC(t *testing.T) {
	const n = 3
	held := map[[sha256.Size]byte][]byte{}
	var hashes [][sha256.Size]byte
	for i := range n {
		b := bytes.Repeat([]byte{byte(i + 1)}, wire.MaxBundlesBytes/n)
		held[sha256.Sum256(b)] = b
		hashes = append(hashes, sha256.Sum256(b))
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req rpctypes.RPCRequest
		var params struct {
			Path string            `json:"path"`
			Data cmtbytes.HexBytes `json:"data"`
		}
		var asked byzlogv1.BundlesRequest
		if json.NewDecoder(r.Body).Decode(&req) != nil || req.Method != "abci_query" || json.Unmarshal(req.Params, &params) != nil ||
			params.Path != wire.PathBundles || proto.Unmarshal(params.Data, &asked) != nil {
			http.Error(w, "not a bundles query", http.StatusBadRequest)
			return
		}
		var answer byzlogv1.Bundles
		for _, h := range asked.Hashes {
			answer.Bundles = append(answer.Bundles, held[[sha256.Size]byte(h)])
		}
		value, _ := proto.Marshal(&answer)
		out, _ := json.Marshal(rpctypes.NewRPCSuccessResponse(req.ID, &ctypes.ResultABCIQuery{Response: abci.ResponseQuery{Value: value}}))
		w.Write(out)
	}))
	defer srv.Close()
	peers, err := peerOptions{rpc: []string{srv.URL}}.peers()
	if err != nil {
		t.Fatal(err)
	}
	got, err := peers[0].Bundles(context.Background(), hashes)
	if err != nil {
		t.Fatalf("Bundles = %v", err)
	}
	for i, h := range hashes {
		if !bytes.Equal(got[i], held[h]) {
			t.Errorf("Bundles entry %d = %d bytes, want %d", i, len(got[i]), len(held[h]))
		}
	}
}
