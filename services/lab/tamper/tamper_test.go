package tamper

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	cmtjson "github.com/cometbft/cometbft/libs/json"
	ctypes "github.com/cometbft/cometbft/rpc/core/types"
	"google.golang.org/protobuf/proto"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func TestProxyForwardsFormsAndLiesOnDemand(t *testing.T) {
	tx := base64.StdEncoding.EncodeToString([]byte("value tx-1"))
	var gotType, gotBody string
	node := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		gotType, gotBody = r.Header.Get("Content-Type"), string(b)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"jsonrpc":"2.0","id":1,"result":{"block":{"data":{"txs":["`+tx+`"]}}}}`)
	}))
	defer node.Close()
	addr := freeAddr(t)
	p, err := Start(addr, node.URL, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	// A gateway's form submission reaches the node as a form.
	resp, err := http.Post("http://"+addr+"/broadcast_tx_sync", "application/x-www-form-urlencoded", strings.NewReader("tx=0xabcd"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if gotType != "application/x-www-form-urlencoded" || gotBody != "tx=0xabcd" {
		t.Fatalf("the node got %q with content type %q, want the form as sent", gotBody, gotType)
	}

	block := func() string {
		resp, err := http.Post("http://"+addr+"/", "application/json", strings.NewReader(`{"method":"block","id":1}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var msg struct {
			Result struct {
				Block struct {
					Data struct {
						Txs []string `json:"txs"`
					} `json:"data"`
				} `json:"block"`
			} `json:"result"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&msg); err != nil {
			t.Fatal(err)
		}
		b, _ := base64.StdEncoding.DecodeString(msg.Result.Block.Data.Txs[0])
		return string(b)
	}
	if got := block(); got != "value tx-1" || p.Count(Tx) != 0 {
		t.Fatalf("honest proxy: tx %q, %d lies", got, p.Count(Tx))
	}
	p.SetMode(Tx)
	if got := block(); got != "value TX-1" || p.Count(Tx) != 1 {
		t.Fatalf("tx mode: tx %q, %d lies; want the record altered once", got, p.Count(Tx))
	}
}

func TestMisplaceMovesTheFirstBatch(t *testing.T) {
	b, err := proto.Marshal(&byzlogv1.TxOutcome{Batches: []*byzlogv1.BatchResult{{Topic: "t", BaseOffset: 7, RecordCount: 3}}})
	if err != nil {
		t.Fatal(err)
	}
	flipped := false
	got := misplace(base64.StdEncoding.EncodeToString(b), func(s string) string { flipped = true; return s })
	raw, _ := base64.StdEncoding.DecodeString(got)
	var out byzlogv1.TxOutcome
	if err := proto.Unmarshal(raw, &out); err != nil || flipped || out.Batches[0].BaseOffset != 8 {
		t.Fatalf("misplace = %v (flipped %v, err %v), want base offset 8", &out, flipped, err)
	}
	if misplace("not base64!", func(string) string { flipped = true; return "x" }); !flipped {
		t.Fatal("misplace did not fall back to a flip for data that is no outcome")
	}
}

func TestHugeStreamsAWellFormedBodyOfHugeBytes(t *testing.T) {
	node := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Error("a huge answer reached the node")
	}))
	defer node.Close()
	addr := freeAddr(t)
	p, err := Start(addr, node.URL, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	old := HugeBytes
	HugeBytes = 3<<20 + 17 // several chunks and a short last one
	defer func() { HugeBytes = old }()
	p.SetMode(Huge)
	resp, err := http.Post("http://"+addr+"/", "application/json", strings.NewReader(`{"method":"status","id":1}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(body)) != HugeBytes || resp.ContentLength != HugeBytes {
		t.Fatalf("huge answer: %d bytes (Content-Length %d), want %d", len(body), resp.ContentLength, HugeBytes)
	}
	var msg struct {
		Result struct {
			Filler string `json:"filler"`
		} `json:"result"`
	}
	if err := json.Unmarshal(body, &msg); err != nil || len(msg.Result.Filler) < int(HugeBytes)-64 {
		t.Fatalf("huge answer is no JSON-RPC response with a long result (%v, %d bytes of filler)", err, len(msg.Result.Filler))
	}
	if p.Count(Huge) != 1 {
		t.Fatalf("Count(huge) = %d, want 1", p.Count(Huge))
	}
}

// TestLiar: the lying-node nemesis's lies, each as a gateway reads it.
func TestLiar(t *testing.T) {
	forwarded := 0
	node := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		forwarded++
		w.Header().Set("Content-Type", "application/json")
		switch {
		case strings.Contains(string(b), `"status"`):
			_, _ = io.WriteString(w, `{"jsonrpc":"2.0","id":1,"result":{"sync_info":{"latest_block_height":"42"}}}`)
		default:
			_, _ = io.WriteString(w, `{"jsonrpc":"2.0","id":1,"result":{"response":{"value":"CAc=","height":"42"}}}`)
		}
	}))
	defer node.Close()
	addr := freeAddr(t)
	p, err := Start(addr, node.URL, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	call := func(body string) map[string]any {
		t.Helper()
		resp, err := http.Post("http://"+addr+"/", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var msg struct {
			Result map[string]any `json:"result"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&msg); err != nil {
			t.Fatal(err)
		}
		return msg.Result
	}
	p.SetMode(LieHeight)
	if h := call(`{"method":"status","id":1}`)["sync_info"].(map[string]any)["latest_block_height"]; h != "1000042" {
		t.Errorf("status height = %v, want 1000042 (a million ahead)", h)
	}
	p.SetMode(LieQuery)
	v := call(`{"method":"abci_query","id":1,"params":{"path":"/producer","data":"00"}}`)["response"].(map[string]any)["value"].(string)
	if b, _ := base64.StdEncoding.DecodeString(v); len(b) != 0 {
		t.Errorf("producer query value = %x, want next sequence 0 (empty message)", b)
	}
	b, err := proto.Marshal(&byzlogv1.Tx{Kind: &byzlogv1.Tx_ProduceBundle{ProduceBundle: &byzlogv1.ProduceBundle{Batches: []*byzlogv1.SignedBatch{{Body: []byte("b")}}}}})
	if err != nil {
		t.Fatal(err)
	}
	p.SetMode(LieDuplicate)
	before := forwarded
	resp, err := http.Post("http://"+addr+"/broadcast_tx_sync", "application/x-www-form-urlencoded", strings.NewReader("tx=0x"+hexString(b)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// Read as a gateway reads it: CometBFT's JSON of ResultBroadcastTx.
	var msg struct {
		Result json.RawMessage `json:"result"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&msg); err != nil {
		t.Fatal(err)
	}
	var res ctypes.ResultBroadcastTx
	if err := cmtjson.Unmarshal(msg.Result, &res); err != nil {
		t.Fatalf("the lie is not a ResultBroadcastTx a gateway can read: %v", err)
	}
	var out byzlogv1.TxOutcome
	if err := proto.Unmarshal(res.Data, &out); err != nil || res.Code != 13 || len(out.Batches) != 1 || !out.Batches[0].Duplicate {
		t.Errorf("broadcast answer = code %d, outcome %v (%v); want every batch a duplicate", res.Code, &out, err)
	}
	if forwarded != before {
		t.Errorf("the liar forwarded the bundle to the node; it must drop it")
	}
	p.SetMode(LieRefuse)
	resp2, err := http.Post("http://"+addr+"/broadcast_tx_sync", "application/x-www-form-urlencoded", strings.NewReader("tx=0x"+hexString(b)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp2.Body.Close()
	if err := json.NewDecoder(resp2.Body).Decode(&msg); err != nil {
		t.Fatal(err)
	}
	var refused ctypes.ResultBroadcastTx
	if err := cmtjson.Unmarshal(msg.Result, &refused); err != nil || refused.Code != 6 {
		t.Errorf("refusing broadcast answer = code %d (%v); want 6, bad_signature", refused.Code, err)
	}
	if forwarded != before {
		t.Errorf("the refusing liar forwarded the bundle to the node; it must drop it")
	}
	for _, m := range LiarModes {
		if p.Count(m) != 1 {
			t.Errorf("Count(%s) = %d, want 1", m, p.Count(m))
		}
	}
}

func hexString(b []byte) string { return hex.EncodeToString(b) }
