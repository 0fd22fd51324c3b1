package rpcnode

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"

	abci "github.com/cometbft/cometbft/abci/types"
	cmtbytes "github.com/cometbft/cometbft/libs/bytes"
	cmtjson "github.com/cometbft/cometbft/libs/json"
	ctypes "github.com/cometbft/cometbft/rpc/core/types"
)

// ABCIQuery is CometBFT's abci_query (latest height, no proof), its answer
// read by DecodeQuery: CometBFT's client decodes it by reflection,
// stepping through a value's base64 byte by byte several times over,
// 18 MB/s on these machines, and a block's bundles (/bundles) are megabytes
// of value.
//
// With a data service (Options.Data), the query is asked there instead;
// when that fails, over the RPC (and the RPC for dataRetry after).
func (c *Client) ABCIQuery(ctx context.Context, path string, data cmtbytes.HexBytes) (*ctypes.ResultABCIQuery, error) {
	if c.data.up() {
		dctx := ctx
		if c.timeout > 0 {
			var cancel context.CancelFunc
			dctx, cancel = context.WithTimeout(ctx, c.timeout)
			defer cancel()
		}
		res, err := c.data.query(dctx, path, data)
		if err == nil || ctx.Err() != nil {
			return res, err
		}
		c.data.failed(dctx, err) // and ask the RPC
	}
	p, err := json.Marshal(path)
	if err != nil {
		return nil, err
	}
	b, err := c.call(ctx, "abci_query "+path, "abci_query", `{"path":`+string(p)+`,"data":"`+data.String()+`","height":"0","prove":false}`)
	if err != nil {
		return nil, err
	}
	out, err := DecodeQuery(b)
	if err != nil {
		return nil, fmt.Errorf("abci_query %s: %w", path, err)
	}
	return out, nil
}

// DecodeQuery decodes a JSON-RPC answer to abci_query: scanned when it
// has the shape CometBFT writes (scanQuery), otherwise decoded as
// CometBFT's client decodes it, which gives the answer or its error.
func DecodeQuery(answer []byte) (*ctypes.ResultABCIQuery, error) {
	if out, ok := scanQuery(answer); ok {
		return out, nil
	}
	var r struct {
		Error  *rpcError       `json:"error"`
		Result json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(answer, &r); err != nil {
		return nil, fmt.Errorf("the answer is not JSON-RPC: %w", err)
	}
	if r.Error != nil {
		return nil, r.Error.err()
	}
	if len(r.Result) == 0 {
		return nil, errors.New("the answer holds no result")
	}
	var out ctypes.ResultABCIQuery
	if err := cmtjson.Unmarshal(r.Result, &out); err != nil {
		return nil, fmt.Errorf("result: %w", err)
	}
	return &out, nil
}

// scanQuery is DecodeQuery's fast path: the response's code, log,
// codespace, height, key and value, read straight from an answer in the
// shape CometBFT writes. It gives up (ok false) on what it is not sure it
// reads as the slow path would: an error, a key in another case or
// written with escapes, a key repeated, an escape or invalid UTF-8 in a
// string it keeps, a number or base64 that does not parse.
func scanQuery(answer []byte) (out *ctypes.ResultABCIQuery, ok bool) {
	s := scanner{b: answer}
	var res abci.ResponseQuery
	var haveResponse bool
	str := func(dst *string) func() bool {
		return func() bool {
			s.space()
			raw, escaped, ok := s.str()
			if !ok || escaped || !utf8.Valid(raw) { // encoding/json would replace bad UTF-8
				return false
			}
			*dst = string(raw)
			return true
		}
	}
	b64 := func(dst *[]byte) func() bool {
		return func() (ok bool) {
			s.space()
			if bytes.HasPrefix(s.b[s.i:], []byte("null")) {
				s.i += len("null")
				return true
			}
			*dst, ok = s.base64()
			return ok
		}
	}
	// num reads an integer, quoted (CometBFT's int64) or not.
	num := func(quoted bool, dst *int64) bool {
		var raw []byte
		if quoted {
			s.space()
			r, escaped, ok := s.str()
			if !ok || escaped {
				return false
			}
			raw = r
		} else {
			v, ok := s.value()
			if !ok {
				return false
			}
			raw = v
		}
		n, err := strconv.ParseInt(string(raw), 10, 64)
		*dst = n
		return err == nil
	}
	response := func() bool {
		haveResponse = true
		var code int64
		return s.fields(map[string]func() bool{
			"code": func() bool {
				ok := num(false, &code) && code >= 0 && code <= 1<<32-1
				res.Code = uint32(code)
				return ok
			},
			"log":       str(&res.Log),
			"info":      str(&res.Info),
			"codespace": str(&res.Codespace),
			"index":     func() bool { return num(true, &res.Index) },
			"height":    func() bool { return num(true, &res.Height) },
			"key":       b64(&res.Key),
			"value":     b64(&res.Value),
			"proofOps": func() bool {
				v, ok := s.value()
				return ok && string(v) == "null"
			},
		}, true) // a field this scan does not know gives up
	}
	if !s.rpcResult(func() bool {
		return s.fields(map[string]func() bool{"response": response}, false)
	}) || !haveResponse {
		return nil, false
	}
	return &ctypes.ResultABCIQuery{Response: res}, true
}
