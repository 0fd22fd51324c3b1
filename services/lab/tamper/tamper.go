// Package tamper holds liars for tests, chaos and attack runs. Proxy is a
// lying CometBFT RPC proxy: in front of one node, it forges headers, alters
// transactions and results, withholds blocks or answers with endless
// bodies, so that a client of that node (the indexer, a gateway) must
// notice and go to another. GatewayProxy is a lying gateway: it invents,
// alters and fakes receipts, so that a producer must notice. Each only ever
// listens on the address it is given.
package tamper

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

// Proxy sits in front of one CometBFT node's JSON-RPC and, per mode, lies.
type Proxy struct {
	target   string
	upstream *http.Client
	srv      *http.Server
	mode     atomic.Value // string
	mu       sync.Mutex
	hits     map[string]int
}

// Modes are the lies a Proxy tells in chaos runs; "" tells none. Huge is
// an attack's (byzlog-lab attack), not a chaos nemesis's, and is not listed.
var Modes = []string{Header, Tx, Results, Withhold}

// LiarModes are the lies of the lying-node nemesis (issue 14): a node that
// lies to a gateway in what it answers directly, not in blocks.
var LiarModes = []string{LieDuplicate, LieHeight, LieQuery, LieRefuse}

// The modes.
const (
	// Header forges the app hash of the signed header (/commit) a light
	// client fetches.
	Header = "header"
	// Tx flips a byte of a block's first transaction (a record's value
	// when it holds "tx-": an altered record, not only a broken signature).
	Tx = "tx"
	// Results moves a block's first produce outcome one offset on (a wrong
	// receipt, if believed), or flips a byte of other result data.
	Results = "results"
	// Withhold never answers for a block (12 s, then an error).
	Withhold = "withhold"
	// LieDuplicate drops produce bundles and answers CheckTx that every
	// batch is a duplicate committed at height 1, offset 0: a batch never
	// written, acknowledged if believed.
	LieDuplicate = "lie-duplicate"
	// LieRefuse drops produce bundles and answers CheckTx that the bundle's
	// signature is bad: honest batches refused, if believed.
	LieRefuse = "lie-refuse"
	// LieHeight claims a height a million blocks ahead: honest nodes look
	// lagging, and a gateway that believed it waited for that height.
	LieHeight = "lie-height"
	// LieQuery answers every producer-state query with next sequence 0:
	// an honest batch looks like a gap.
	LieQuery = "lie-query"
	// Huge answers every request with a well-formed start of a JSON-RPC
	// response whose result never ends before HugeBytes: a client that
	// reads whole responses holds them all in memory.
	Huge = "huge"
)

// HugeBytes is the size of a Huge answer. It is generated as it is
// written, never held in memory.
var HugeBytes int64 = 200 << 20

// Start serves a Proxy on listen (host:port) in front of target (the
// node's RPC URL, "https://127.0.0.1:26657"), which it reaches with
// upstream (nil: http.DefaultClient). With serve it serves https, as the
// node does. It tells no lie until SetMode.
func Start(listen, target string, upstream *http.Client, serve *tls.Config) (*Proxy, error) {
	if upstream == nil {
		upstream = http.DefaultClient
	}
	p := &Proxy{target: target, upstream: upstream, hits: map[string]int{}}
	p.SetMode("")
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("tamper proxy: %w", err)
	}
	if serve != nil {
		ln = tls.NewListener(ln, serve)
	}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// Close stops the proxy.
func (p *Proxy) Close() error { return p.srv.Close() }

// SetMode chooses the lie; "" makes the proxy honest.
func (p *Proxy) SetMode(m string) { p.mode.Store(m) }

// Count is how many times the proxy told lie m.
func (p *Proxy) Count(m string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hits[m]
}

func (p *Proxy) hit(m string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hits[m]++
}

// ServeHTTP forwards a JSON-RPC request and alters the answer per mode.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	_ = json.Unmarshal(body, &req)
	if req.Method == "" { // a URI or form call: /broadcast_tx_sync
		req.Method = strings.TrimPrefix(r.URL.Path, "/")
	}
	mode := p.mode.Load().(string)
	if (mode == LieDuplicate || mode == LieRefuse) && req.Method == "broadcast_tx_sync" {
		fake := fakeDuplicate
		if mode == LieRefuse {
			fake = fakeRefusal
		}
		if out, ok := fake(requestTx(body, req.Params)); ok {
			p.hit(mode)
			id := req.ID
			if len(id) == 0 {
				id = json.RawMessage("-1")
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": id, "result": out})
			return
		}
	}
	if mode == Huge {
		p.hit(mode)
		_, _ = writeHuge(w, HugeBytes)
		return
	}
	if mode == Withhold && req.Method == "block" {
		p.hit(mode)
		select { // longer than the indexer's 10 s request timeout, bounded
		case <-time.After(12 * time.Second):
		case <-r.Context().Done():
		}
		http.Error(w, "withheld", http.StatusServiceUnavailable)
		return
	}
	// Forward as it came: a gateway submits small transactions as a form
	// (tx=0x<hex>), which the node reads as an empty tx under any other
	// content type.
	url := p.target + r.URL.Path
	if r.URL.RawQuery != "" {
		url += "?" + r.URL.RawQuery
	}
	fwd, err := http.NewRequestWithContext(r.Context(), r.Method, url, bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "" {
		fwd.Header.Set("Content-Type", ct)
	}
	resp, err := p.upstream.Do(fwd)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	var msg map[string]any
	if json.Unmarshal(out, &msg) == nil {
		if res, ok := msg["result"].(map[string]any); ok && (p.tamper(mode, req.Method, res) || p.lie(mode, req.Method, req.Params, res)) {
			p.hit(mode)
			out, _ = json.Marshal(msg)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

// tamper alters res in place per mode and says whether it did.
func (p *Proxy) tamper(mode, method string, res map[string]any) bool {
	path := func(keys ...string) map[string]any {
		m := res
		for _, k := range keys {
			next, ok := m[k].(map[string]any)
			if !ok {
				return nil
			}
			m = next
		}
		return m
	}
	flip := func(b64 string) string {
		b, err := base64.StdEncoding.DecodeString(b64)
		if err != nil || len(b) == 0 {
			return b64
		}
		b[len(b)-1] ^= 0x01
		return base64.StdEncoding.EncodeToString(b)
	}
	switch {
	case mode == Tx && method == "block":
		data := path("block", "data")
		if txs, ok := data["txs"].([]any); ok && len(txs) > 0 {
			// Change a record's value ("tx-..." to "TX-..."), not just any
			// byte: an altered record, not only a broken signature.
			if b, err := base64.StdEncoding.DecodeString(txs[0].(string)); err == nil && bytes.Contains(b, []byte("tx-")) {
				txs[0] = base64.StdEncoding.EncodeToString(bytes.Replace(b, []byte("tx-"), []byte("TX-"), 1))
			} else {
				txs[0] = flip(txs[0].(string))
			}
			return true
		}
	case mode == Results && method == "block_results":
		if rs, ok := res["txs_results"].([]any); ok && len(rs) > 0 {
			if r, ok := rs[0].(map[string]any); ok {
				if d, ok := r["data"].(string); ok && d != "" {
					r["data"] = misplace(d, flip)
					return true
				}
			}
		}
	case mode == Header && method == "commit":
		if h := path("signed_header", "header"); h != nil {
			if ah, ok := h["app_hash"].(string); ok && len(ah) > 0 {
				c := byte('0')
				if ah[0] == '0' {
					c = '1'
				}
				h["app_hash"] = string(c) + ah[1:]
				return true
			}
		}
	}
	return false
}

// misplace rewrites a produce bundle's outcome (base64) so that its first
// batch's records seem to sit one offset later: a lie that would give a
// producer a wrong receipt. Other data gets a flipped bit.
func misplace(b64 string, flip func(string) string) string {
	b, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return flip(b64)
	}
	var out byzlogv1.TxOutcome
	if proto.Unmarshal(b, &out) != nil || len(out.Batches) == 0 || out.Batches[0].RecordCount == 0 {
		return flip(b64)
	}
	out.Batches[0].BaseOffset++
	b, err = proto.Marshal(&out)
	if err != nil {
		return flip(b64)
	}
	return base64.StdEncoding.EncodeToString(b)
}

// writeHuge writes a JSON-RPC response of n bytes whose result is one
// string of filler, in chunks, so the proxy's memory stays small whatever
// n is. It stops at the first write error (the client gave up).
func writeHuge(w http.ResponseWriter, n int64) (int64, error) {
	head, tail := []byte(`{"jsonrpc":"2.0","id":-1,"result":{"filler":"`), []byte(`"}}`)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", fmt.Sprint(n))
	chunk := bytes.Repeat([]byte("A"), 64<<10)
	var sent int64
	write := func(b []byte) error {
		k, err := w.Write(b)
		sent += int64(k)
		return err
	}
	if err := write(head); err != nil {
		return sent, err
	}
	for left := n - int64(len(head)) - int64(len(tail)); left > 0; {
		c := chunk[:min(int64(len(chunk)), left)]
		if err := write(c); err != nil {
			return sent, err
		}
		left -= int64(len(c))
	}
	return sent, write(tail)
}

// lie alters answers to status and producer queries in place, per mode.
func (p *Proxy) lie(mode, method string, params json.RawMessage, res map[string]any) bool {
	switch {
	case mode == LieHeight && method == "status":
		if si, ok := res["sync_info"].(map[string]any); ok {
			if h, err := strconv.ParseInt(fmt.Sprint(si["latest_block_height"]), 10, 64); err == nil {
				si["latest_block_height"] = strconv.FormatInt(h+1_000_000, 10)
				return true
			}
		}
	case mode == LieQuery && method == "abci_query":
		if !bytes.Contains(params, []byte(`"/producer"`)) {
			return false
		}
		if r, ok := res["response"].(map[string]any); ok {
			zero, _ := proto.Marshal(&byzlogv1.ProducerState{NextSequence: 0})
			r["value"] = base64.StdEncoding.EncodeToString(zero)
			return true
		}
	}
	return false
}

// requestTx is the transaction of a broadcast request: a form's tx=0x<hex>
// or JSON-RPC params' base64 tx.
func requestTx(body []byte, params json.RawMessage) []byte {
	if len(params) > 0 {
		var p struct {
			Tx []byte `json:"tx"`
		}
		if json.Unmarshal(params, &p) == nil {
			return p.Tx
		}
		return nil
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return nil
	}
	tx, err := hex.DecodeString(strings.TrimPrefix(form.Get("tx"), "0x"))
	if err != nil {
		return nil
	}
	return tx
}

// fakeRefusal is LieRefuse's CheckTx answer to a produce bundle: code 6,
// bad_signature, for every batch.
func fakeRefusal(tx []byte) (map[string]any, bool) {
	var env byzlogv1.Tx
	if len(tx) == 0 || proto.Unmarshal(tx, &env) != nil || env.GetProduceBundle() == nil {
		return nil, false
	}
	out := &byzlogv1.TxOutcome{}
	for range env.GetProduceBundle().Batches {
		out.Batches = append(out.Batches, &byzlogv1.BatchResult{Code: 6, Log: "signature does not verify (a lie)"})
	}
	data, err := proto.Marshal(out)
	if err != nil {
		return nil, false
	}
	sum := sha256.Sum256(tx)
	return map[string]any{"code": 6, "codespace": "byzlog", "log": "bad_signature: signature does not verify (a lie)",
		"data": strings.ToUpper(hex.EncodeToString(data)), "hash": strings.ToUpper(hex.EncodeToString(sum[:]))}, true
}

// fakeDuplicate is LieDuplicate's CheckTx answer to a produce bundle: every
// batch a duplicate committed at height 1, offset 0.
func fakeDuplicate(tx []byte) (map[string]any, bool) {
	var env byzlogv1.Tx
	if len(tx) == 0 || proto.Unmarshal(tx, &env) != nil || env.GetProduceBundle() == nil {
		return nil, false
	}
	out := &byzlogv1.TxOutcome{}
	for range env.GetProduceBundle().Batches {
		out.Batches = append(out.Batches, &byzlogv1.BatchResult{Code: 13, Duplicate: true, Height: 1, RecordCount: 1, Log: "already committed (a lie)"})
	}
	data, err := proto.Marshal(out)
	if err != nil {
		return nil, false
	}
	sum := sha256.Sum256(tx)
	return map[string]any{"code": 13, "codespace": "byzlog", "log": "duplicate (a lie)",
		"data": strings.ToUpper(hex.EncodeToString(data)), "hash": strings.ToUpper(hex.EncodeToString(sum[:]))}, true
}
