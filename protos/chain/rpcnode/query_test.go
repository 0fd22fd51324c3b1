package rpcnode

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	abci "github.com/cometbft/cometbft/abci/types"
	cmtjson "github.com/cometbft/cometbft/libs/json"
	ctypes "github.com/cometbft/cometbft/rpc/core/types"
	rpctypes "github.com/cometbft/cometbft/rpc/jsonrpc/types"
)

// queryAnswer is abci_query's answer as CometBFT's server writes it.
func queryAnswer(t testing.TB, id int, res abci.ResponseQuery) []byte {
	t.Helper()
	out, err := json.Marshal(rpctypes.NewRPCSuccessResponse(rpctypes.JSONRPCIntID(id), &ctypes.ResultABCIQuery{Response: res}))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// slowQuery is how CometBFT's client reads an answer.
func slowQuery(t testing.TB, answer []byte) (*ctypes.ResultABCIQuery, error) {
	t.Helper()
	var r rpctypes.RPCResponse
	if err := json.Unmarshal(answer, &r); err != nil {
		return nil, err
	}
	if r.Error != nil {
		return nil, r.Error
	}
	var out ctypes.ResultABCIQuery
	err := cmtjsonUnmarshal(r.Result, &out)
	return &out, err
}

func queries() []abci.ResponseQuery {
	big := make([]byte, 100_000)
	_, _ = rand.Read(big)
	return []abci.ResponseQuery{
		{},
		{Code: 29, Log: "bad query: /bundles takes a byzlog.v1.BundlesRequest", Codespace: "byzlog"},
		{Value: big, Height: 1234},
		{Key: []byte{1, 2, 3}, Value: []byte{}, Index: 7, Height: 9, Info: "i"},
		{Code: 1<<32 - 1, Value: []byte("v")},
	}
}

// TestScanQueryReadsCometBFT: every answer CometBFT writes takes the fast
// path and reads as CometBFT's client reads it.
func TestScanQueryReadsCometBFT(t *testing.T) {
	for i, res := range queries() {
		answer := queryAnswer(t, 0, res)
		for name, a := range map[string][]byte{"compact": answer, "spaced": spaced(answer)} {
			got, ok := scanQuery(a)
			if !ok {
				t.Fatalf("query %d, %s: the fast path gave up on %.200s", i, name, a)
			}
			want, err := slowQuery(t, a)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Response, want.Response) {
				t.Errorf("query %d, %s: fast path %+v, CometBFT's client %+v", i, name, got.Response, want.Response)
			}
		}
	}
}

// TestScanQueryGivesUp: what the fast path cannot be sure of goes the slow
// way, which reads it (or refuses it) as CometBFT's client does.
func TestScanQueryGivesUp(t *testing.T) {
	a := string(queryAnswer(t, 0, abci.ResponseQuery{Log: "x", Value: []byte("value"), Height: 3}))
	for _, tc := range []struct{ name, answer string }{
		{"a key in another case", strings.Replace(a, `"value":`, `"Value":`, 1)},
		{"a repeated key", strings.Replace(a, `"value":`, `"value":null,"value":`, 1)},
		{"an escape in the log", strings.Replace(a, `"log":"x"`, `"log":"\u0078"`, 1)},
		{"a field it does not know", strings.Replace(a, `"value":`, `"other":1,"value":`, 1)},
		{"an RPC error", strings.Replace(a, `"result":`, `"error":{"code":1,"message":"m"},"result":`, 1)},
		{"bad base64", strings.Replace(a, `"value":"`, `"value":"*`, 1)},
		{"trailing bytes", a + "x"},
		{"not JSON", "<html>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, ok := scanQuery([]byte(tc.answer)); ok {
				t.Errorf("scanQuery read %.120q, want it to give up", tc.answer)
			}
		})
	}
	got, err := DecodeQuery([]byte(strings.Replace(a, `"log":"x"`, `"log":"\u0078"`, 1)))
	if err != nil || got.Response.Log != "x" || string(got.Response.Value) != "value" {
		t.Fatalf("DecodeQuery(an escaped log) = %+v, %v; want the slow path's reading", got, err)
	}
	if _, err := DecodeQuery([]byte(strings.Replace(a, `"result":`, `"error":{"code":1,"message":"m"},"result":`, 1))); err == nil || !strings.Contains(err.Error(), "RPC error") {
		t.Fatalf("DecodeQuery(an RPC error) = %v, want the error", err)
	}
}

// TestClientABCIQuery: the client asks abci_query with the path and data
// hex-encoded, and reads the answer.
func TestClientABCIQuery(t *testing.T) {
	var asked []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked, _ = io.ReadAll(r.Body)
		_, _ = w.Write(queryAnswer(t, 0, abci.ResponseQuery{Value: []byte("answer"), Height: 5}))
	}))
	defer srv.Close()
	c, err := New(srv.URL, Options{MaxResponseBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.ABCIQuery(context.Background(), "/bundles", []byte{0xab, 0x01})
	if err != nil || string(res.Response.Value) != "answer" || res.Response.Height != 5 {
		t.Fatalf("ABCIQuery = %+v, %v", res, err)
	}
	var req struct {
		Method string `json:"method"`
		Params struct {
			Path, Data, Height string
			Prove              bool
		} `json:"params"`
	}
	if err := json.Unmarshal(asked, &req); err != nil || req.Method != "abci_query" || req.Params.Path != "/bundles" || req.Params.Data != "AB01" || req.Params.Prove {
		t.Fatalf("asked %s (%v)", asked, err)
	}
}

// FuzzScanQuery: untrusted bytes. scanQuery never panics, and whenever it
// and CometBFT's client both read an answer, they read the same.
func FuzzScanQuery(f *testing.F) {
	for _, res := range queries()[:2] {
		a := queryAnswer(f, 0, res)
		f.Add(a)
		f.Add(spaced(a))
	}
	f.Fuzz(func(t *testing.T, answer []byte) {
		got, ok := scanQuery(answer)
		if !ok {
			return
		}
		want, err := slowQuery(t, answer)
		if err != nil {
			return // the slow path refuses what the fast path skipped unread
		}
		if !reflect.DeepEqual(got.Response, want.Response) && !(bytes.Equal(got.Response.Value, want.Response.Value) && bytes.Equal(got.Response.Key, want.Response.Key) && got.Response.Code == want.Response.Code && got.Response.Log == want.Response.Log && got.Response.Height == want.Response.Height) {
			t.Errorf("the fast path and CometBFT's client read %q differently: %+v, %+v", answer, got.Response, want.Response)
		}
	})
}

func cmtjsonUnmarshal(b []byte, v any) error { return cmtjson.Unmarshal(b, v) }
