package rpcnode

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	abci "github.com/cometbft/cometbft/abci/types"
	cmtbytes "github.com/cometbft/cometbft/libs/bytes"
	ctypes "github.com/cometbft/cometbft/rpc/core/types"
)

// BenchmarkABCIQuery: a /bundles answer of 3 MiB (wire.MaxBundlesBytes)
// from a local server, read by the client's ABCIQuery (scanQuery) and by
// CometBFT's client, which the gateway and the indexer used before.
func BenchmarkABCIQuery(b *testing.B) {
	v := make([]byte, 3<<20)
	_, _ = rand.Read(v)
	ans := queryAnswer(b, 987654321, abci.ResponseQuery{Value: v, Height: 7})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		id := "0"
		if i := bytes.Index(body, []byte(`"id":`)); i >= 0 {
			id = strings.SplitN(string(body[i+5:]), ",", 2)[0]
		}
		_, _ = w.Write(bytes.Replace(ans, []byte("987654321"), []byte(id), 1))
	}))
	defer srv.Close()
	c, err := New(srv.URL, Options{MaxResponseBytes: 64 << 20})
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name  string
		query func(context.Context, string, cmtbytes.HexBytes) (*ctypes.ResultABCIQuery, error)
	}{{"scan", c.ABCIQuery}, {"cometbft", c.HTTP.ABCIQuery}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(v)))
			for i := 0; i < b.N; i++ {
				res, err := bc.query(context.Background(), "/bundles", []byte{1})
				if err != nil || len(res.Response.Value) != len(v) {
					b.Fatal(err)
				}
			}
		})
	}
}
