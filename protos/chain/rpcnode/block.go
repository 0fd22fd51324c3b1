package rpcnode

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	cmtjson "github.com/cometbft/cometbft/libs/json"
	rpchttp "github.com/cometbft/cometbft/rpc/client/http"
	ctypes "github.com/cometbft/cometbft/rpc/core/types"
	cmttypes "github.com/cometbft/cometbft/types"
)

// Client is one node's RPC client: CometBFT's, except that Block is read
// by DecodeBlock, which decodes only the header and the transactions.
// CometBFT's client decodes a whole /block answer by reflection (its JSON
// is scanned three times over, then every transaction, signature and
// evidence decoded): that was 40% of the indexer's CPU and 30% of the
// gateway's, which read every block and use only its header and txs.
type Client struct {
	*rpchttp.HTTP
	hc      *http.Client
	url     string
	data    *dataClient // nil: queries and submissions go over the RPC
	timeout time.Duration
}

// Block reads block height (nil: the latest) with only its header and
// transactions filled in (DecodeBlock): no last commit, no evidence.
func (c *Client) Block(ctx context.Context, height *int64) (*ctypes.ResultBlock, error) {
	params := "{}"
	if height != nil {
		params = `{"height":"` + strconv.FormatInt(*height, 10) + `"}`
	}
	b, err := c.call(ctx, "block", "block", params)
	if err != nil {
		return nil, err
	}
	return DecodeBlock(b)
}

// call posts one JSON-RPC call of method with params (a JSON object) and
// returns the answer's bytes (bounded by LimitTransport); what names the
// call in errors.
func (c *Client) call(ctx context.Context, what, method, params string) ([]byte, error) {
	body := `{"jsonrpc":"2.0","id":0,"method":"` + method + `","params":` + params + `}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewBufferString(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusInternalServerError {
		return nil, fmt.Errorf("%s: %s answered %s", what, req.URL.Redacted(), resp.Status)
	}
	return b, nil
}

// DecodeBlock decodes a JSON-RPC answer to /block as far as byzlog reads
// blocks: the block ID, the header, and the transactions. The last commit
// and the evidence are skipped, unread: a reader checks the transactions
// against the header's data hash, and the header against what it trusts
// (chain.ReadBlock), so nothing it does not decode can change what it
// uses. A JSON-RPC error is returned as an error. An answer in the shape
// CometBFT writes is scanned (scanBlock); anything else is decoded with
// encoding/json.
func DecodeBlock(answer []byte) (*ctypes.ResultBlock, error) {
	if out, ok := scanBlock(answer); ok {
		return out, nil
	}
	return decodeBlockJSON(answer)
}

// rpcError is a JSON-RPC answer's error member.
type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    string `json:"data"`
}

func (e *rpcError) err() error { return fmt.Errorf("RPC error %d: %s %s", e.Code, e.Message, e.Data) }

// decodeBlockJSON is DecodeBlock with encoding/json.
func decodeBlockJSON(answer []byte) (*ctypes.ResultBlock, error) {
	var r struct {
		Error  *rpcError `json:"error"`
		Result *struct {
			BlockID json.RawMessage `json:"block_id"`
			Block   *struct {
				Header json.RawMessage `json:"header"`
				Data   struct {
					Txs [][]byte `json:"txs"`
				} `json:"data"`
			} `json:"block"`
		} `json:"result"`
	}
	if err := json.Unmarshal(answer, &r); err != nil {
		return nil, fmt.Errorf("block: the answer is not JSON-RPC: %w", err)
	}
	if r.Error != nil {
		return nil, fmt.Errorf("block: %w", r.Error.err())
	}
	if r.Result == nil || r.Result.Block == nil {
		return nil, errors.New("block: the answer holds no block")
	}
	var out ctypes.ResultBlock
	if len(r.Result.BlockID) > 0 {
		if err := cmtjson.Unmarshal(r.Result.BlockID, &out.BlockID); err != nil {
			return nil, fmt.Errorf("block: block_id: %w", err)
		}
	}
	var hdr cmttypes.Header
	if err := cmtjson.Unmarshal(r.Result.Block.Header, &hdr); err != nil {
		return nil, fmt.Errorf("block: header: %w", err)
	}
	txs := make(cmttypes.Txs, len(r.Result.Block.Data.Txs))
	for i, tx := range r.Result.Block.Data.Txs {
		txs[i] = tx
	}
	out.Block = &cmttypes.Block{Header: hdr, Data: cmttypes.Data{Txs: txs}}
	return &out, nil
}

// httpURL is the URL CometBFT's client posts to for remote: tcp:// is
// http://.
func httpURL(remote string) (string, error) {
	u, err := url.Parse(remote)
	if err != nil {
		return "", err
	}
	switch u.Scheme {
	case "tcp":
		u.Scheme = "http"
	case "http", "https":
	default:
		return "", fmt.Errorf("node URL %s: want http://, https:// or tcp://", remote)
	}
	return u.String(), nil
}
