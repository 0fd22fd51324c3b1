package nodes

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	cmtjson "github.com/cometbft/cometbft/libs/json"
	ctypes "github.com/cometbft/cometbft/rpc/core/types"
	rpctypes "github.com/cometbft/cometbft/rpc/jsonrpc/types"

	"github.com/byzlog/byzlog/protos/chain/rpcnode"
)

// formOverhead is "tx=0x" and slack, beyond the hex digits of a form body.
const formOverhead = 16

// newSubmitClient keeps connections to the nodes open between
// submissions, https checked against tlsCfg (nil: the system's roots). A
// broadcast_tx_sync answer holds CheckTx's result: its log is short and
// its data a TxOutcome of at most 4096 batch results.
func newSubmitClient(tlsCfg *tls.Config) *http.Client {
	t := &http.Transport{MaxIdleConnsPerHost: 16, ForceAttemptHTTP2: false}
	if tlsCfg != nil {
		t.TLSClientConfig = tlsCfg.Clone()
	}
	return &http.Client{Transport: rpcnode.LimitTransport(t, maxBroadcastResponse)}
}

const maxBroadcastResponse = 4 << 20

// BroadcastTxSync submits tx to the node and waits for its CheckTx.
//
// A transaction whose hex form fits the node's rpc.max_body_bytes (as
// Config.HexSubmitMaxBytes says) goes as a URL-encoded form, tx=0x<hex>, to
// /broadcast_tx_sync: the node decodes hex instead of scanning a JSON body
// and base64, which measured as a fifth of a node's CPU under load. A
// larger one goes as JSON-RPC (base64 is 1.33x, hex 2x): a form body over
// the node's limit would not fail, it would be read as an empty tx.
// With the node's data service (Config.DataAddrs), a transaction to a
// healthy node goes there as it is (rpcnode.Client.Submit), and over the
// RPC when that fails. Not to a node that is not healthy: CometBFT's
// broadcast_tx_sync refuses while the node catches up, which the app alone
// does not know.
func (n *Node) BroadcastTxSync(ctx context.Context, tx []byte) (*ctypes.ResultBroadcastTx, error) {
	if n.Client.HasData() && n.snapshot().Healthy {
		res, err := n.Client.Submit(ctx, tx)
		if !errors.Is(err, rpcnode.ErrNoData) || ctx.Err() != nil {
			return res, err
		}
	}
	if len(tx) == 0 || len(tx) > n.hexMax {
		return n.Client.BroadcastTxSync(ctx, tx)
	}
	body := make([]byte, 0, len("tx=0x")+2*len(tx))
	body = append(body, "tx=0x"...)
	body = hex.AppendEncode(body, tx)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.base+"/broadcast_tx_sync", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := n.submit.Do(req)
	if err != nil {
		return nil, fmt.Errorf("post broadcast_tx_sync: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("read broadcast_tx_sync response: %w", err)
	}
	var rr rpctypes.RPCResponse
	if err := cmtjson.Unmarshal(raw, &rr); err != nil {
		return nil, fmt.Errorf("broadcast_tx_sync: HTTP %s, not a JSON-RPC response: %.200q", resp.Status, raw)
	}
	if rr.Error != nil {
		return nil, rr.Error // same text as the JSON-RPC client's: callers match on it
	}
	var res ctypes.ResultBroadcastTx
	if err := cmtjson.Unmarshal(rr.Result, &res); err != nil {
		return nil, fmt.Errorf("broadcast_tx_sync result: %w", err)
	}
	return &res, nil
}

// Failure is what a failed broadcast_tx_sync call says about the node.
type Failure int

const (
	// Broken: the node failed the call (unreachable, an error of its
	// own); take it out of rotation and ask another.
	Broken Failure = iota
	// AlreadyHeld: the node already has the same transaction, in its
	// mempool or its cache of committed ones: not a failure of the node.
	AlreadyHeld
	// MempoolFull: the node's mempool is full; back off.
	MempoolFull
)

func (f Failure) String() string {
	switch f {
	case AlreadyHeld:
		return "already held"
	case MempoolFull:
		return "mempool full"
	}
	return "broken"
}

// cometErrors are the CometBFT mempool errors a broadcast can fail with
// that do not mean the node is broken, by the text they carry in the
// JSON-RPC error's data (the RPC error's Error() wraps it; both the
// JSON-RPC client and BroadcastTxSync's form path keep it):
//   - mempool.ErrTxInCache, "tx already exists in cache" (flood mempool)
//   - mempool.ErrSeenTx, "tx already seen" (mempool.type = "app")
//   - mempool.ErrMempoolIsFull, "mempool is full: number of txs ..."
var cometErrors = []struct {
	text    string
	failure Failure
}{
	{"tx already exists in cache", AlreadyHeld},
	{"tx already seen", AlreadyHeld},
	{"mempool is full", MempoolFull},
}

// Classify says what err, from BroadcastTxSync, means. Anything it does
// not know is Broken.
func Classify(err error) Failure {
	if err == nil {
		return Broken
	}
	msg := err.Error()
	for _, e := range cometErrors {
		if strings.Contains(msg, e.text) {
			return e.failure
		}
	}
	return Broken
}
