package nodes

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strings"

	cmtjson "github.com/cometbft/cometbft/libs/json"
	ctypes "github.com/cometbft/cometbft/rpc/core/types"
	rpctypes "github.com/cometbft/cometbft/rpc/jsonrpc/types"
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
	return &http.Client{Transport: limitTransport{base: t, max: maxBroadcastResponse}}
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
func (n *Node) BroadcastTxSync(ctx context.Context, tx []byte) (*ctypes.ResultBroadcastTx, error) {
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

// AlreadyHeld reports whether a broadcast failed only because the node
// already has the same transaction: CometBFT's flood mempool answers "tx
// already exists in cache", its app mempool (mempool.type = "app",
// mempool.ErrSeenTx) "tx already seen". Either way the transaction is in
// that node's mempool, or was committed: not a failure of the node.
func AlreadyHeld(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "tx already exists in cache") || strings.Contains(msg, "tx already seen")
}
