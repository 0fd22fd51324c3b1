package rpcnode

import (
	"bytes"
	"encoding/base64"

	cmtjson "github.com/cometbft/cometbft/libs/json"
	ctypes "github.com/cometbft/cometbft/rpc/core/types"
	cmttypes "github.com/cometbft/cometbft/types"
)

// scanBlock is DecodeBlock's fast path for an answer in the shape
// CometBFT's server writes: it finds the block ID, the header and the
// transactions by scanning for the ends of strings and brackets, decodes
// the first two with CometBFT's JSON (they are small) and the transactions
// straight from base64. encoding/json spent most of its time stepping
// through the megabytes of base64 byte by byte, twice (validation, then
// decoding).
//
// It gives up (ok false) on anything it is not sure it reads as
// encoding/json would: a JSON-RPC error, a key written with escapes or in
// another case than CometBFT's (encoding/json matches keys without regard
// to case), a key repeated, an escape inside a transaction, malformed
// structure. DecodeBlock then decodes the answer the slow way, which gives
// the answer or the error encoding/json gives. What it skips unread it does
// not validate: nothing there is used (DecodeBlock's comment says why).
func scanBlock(answer []byte) (out *ctypes.ResultBlock, ok bool) {
	s := scanner{b: answer}
	var blockID, header []byte
	var txs cmttypes.Txs
	var haveBlock bool
	data := func() bool {
		return s.fields(map[string]func() bool{"txs": func() (ok bool) { txs, ok = s.txs(); return ok }}, false)
	}
	block := func() bool {
		haveBlock = true
		return s.fields(map[string]func() bool{"header": s.raw(&header), "data": data}, false)
	}
	if !s.rpcResult(func() bool {
		return s.fields(map[string]func() bool{"block_id": s.raw(&blockID), "block": block}, false)
	}) || !haveBlock || header == nil || string(header) == "null" {
		return nil, false
	}
	var res ctypes.ResultBlock
	if len(blockID) > 0 && string(blockID) != "null" {
		if err := cmtjson.Unmarshal(blockID, &res.BlockID); err != nil {
			return nil, false
		}
	}
	var hdr cmttypes.Header
	if err := cmtjson.Unmarshal(header, &hdr); err != nil {
		return nil, false
	}
	if txs == nil {
		txs = cmttypes.Txs{} // no "txs": as DecodeBlock's slow path has it
	}
	res.Block = &cmttypes.Block{Header: hdr, Data: cmttypes.Data{Txs: txs}}
	return &res, true
}

// maxScanDepth bounds the nesting scanner.value follows.
const maxScanDepth = 64

// scanner walks JSON it need not fully validate.
type scanner struct {
	b     []byte
	i     int
	depth int
}

func (s *scanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// object reads an object, calling member with each key (without quotes,
// not unescaped: a key with an escape gives up) to read its value.
func (s *scanner) object(member func(key []byte) bool) bool {
	s.space()
	if s.i >= len(s.b) || s.b[s.i] != '{' {
		return false
	}
	s.i++
	s.space()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		return true
	}
	for {
		s.space()
		key, escaped, ok := s.str()
		if !ok || escaped {
			return false
		}
		s.space()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return false
		}
		s.i++
		if !member(key) {
			return false
		}
		s.space()
		if s.i >= len(s.b) {
			return false
		}
		switch s.b[s.i] {
		case ',':
			s.i++
		case '}':
			s.i++
			return true
		default:
			return false
		}
	}
}

// rpcResult reads a JSON-RPC answer in the shape CometBFT writes: "error"
// null, "result" read by result, and nothing after the object but space.
func (s *scanner) rpcResult(result func() bool) bool {
	isNull := func() bool {
		v, ok := s.value()
		return ok && string(v) == "null"
	}
	if !s.fields(map[string]func() bool{"error": isNull, "result": result}, false) {
		return false
	}
	s.space()
	return s.i == len(s.b)
}

// fields reads an object whose keys in read are each read by their
// function, once: a key repeated, or one of them in another case (which
// encoding/json would match), gives up. Other keys are skipped, or, when
// strict, give up.
func (s *scanner) fields(read map[string]func() bool, strict bool) bool {
	seen := map[string]bool{}
	return s.object(func(key []byte) bool {
		if fn, ok := read[string(key)]; ok {
			if seen[string(key)] {
				return false
			}
			seen[string(key)] = true
			return fn()
		}
		if strict {
			return false
		}
		for k := range read {
			if bytes.EqualFold(key, []byte(k)) {
				return false
			}
		}
		_, ok := s.value()
		return ok
	})
}

// raw reads a value into dst, unparsed.
func (s *scanner) raw(dst *[]byte) func() bool {
	return func() bool {
		v, ok := s.value()
		*dst = v
		return ok
	}
}

// base64 reads a string without escapes as encoding/json decodes a []byte.
func (s *scanner) base64() ([]byte, bool) {
	s.space()
	raw, escaped, ok := s.str()
	if !ok || escaped {
		return nil, false
	}
	v := make([]byte, base64.StdEncoding.DecodedLen(len(raw)))
	n, err := base64.StdEncoding.Decode(v, raw)
	if err != nil {
		return nil, false
	}
	return v[:n], true
}

// str reads a string, returning its bytes between the quotes and whether
// they hold an escape.
func (s *scanner) str() (raw []byte, escaped, ok bool) {
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return nil, false, false
	}
	start := s.i + 1
	for j := start; ; {
		k := bytes.IndexAny(s.b[j:], "\"\\")
		if k < 0 {
			return nil, false, false
		}
		j += k
		if s.b[j] == '\\' {
			escaped = true
			j += 2
			if j > len(s.b) {
				return nil, false, false
			}
			continue
		}
		s.i = j + 1
		return s.b[start:j], escaped, true
	}
}

// value skips one value and returns its bytes.
func (s *scanner) value() ([]byte, bool) {
	s.space()
	if s.i >= len(s.b) {
		return nil, false
	}
	start := s.i
	switch s.b[s.i] {
	case '"':
		if _, _, ok := s.str(); !ok {
			return nil, false
		}
	case '{', '[':
		if s.depth >= maxScanDepth {
			return nil, false
		}
		s.depth++
		defer func() { s.depth-- }()
		closing := byte('}')
		if s.b[s.i] == '[' {
			closing = ']'
		}
		s.i++
		for first := true; ; first = false {
			s.space()
			if s.i < len(s.b) && s.b[s.i] == closing && first {
				s.i++
				break
			}
			if closing == '}' {
				s.space()
				if _, _, ok := s.str(); !ok {
					return nil, false
				}
				s.space()
				if s.i >= len(s.b) || s.b[s.i] != ':' {
					return nil, false
				}
				s.i++
			}
			if _, ok := s.value(); !ok {
				return nil, false
			}
			s.space()
			if s.i >= len(s.b) {
				return nil, false
			}
			if s.b[s.i] == closing {
				s.i++
				break
			}
			if s.b[s.i] != ',' {
				return nil, false
			}
			s.i++
		}
	default:
		for s.i < len(s.b) && bytes.IndexByte([]byte("-+.0123456789eEtruefalsn"), s.b[s.i]) >= 0 {
			s.i++
		}
		if s.i == start {
			return nil, false
		}
	}
	return s.b[start:s.i], true
}

// txs reads the transactions: null, or an array of base64 strings without
// escapes, decoded as encoding/json decodes a []byte.
func (s *scanner) txs() (cmttypes.Txs, bool) {
	s.space()
	if bytes.HasPrefix(s.b[s.i:], []byte("null")) {
		s.i += len("null")
		return cmttypes.Txs{}, true // as DecodeBlock's slow path has it
	}
	if s.i >= len(s.b) || s.b[s.i] != '[' {
		return nil, false
	}
	s.i++
	txs := cmttypes.Txs{}
	s.space()
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		return txs, true
	}
	for {
		s.space()
		if bytes.HasPrefix(s.b[s.i:], []byte("null")) {
			// encoding/json leaves a null element nil.
			s.i += len("null")
			txs = append(txs, nil)
		} else {
			tx, ok := s.base64()
			if !ok {
				return nil, false
			}
			txs = append(txs, tx)
		}
		s.space()
		if s.i >= len(s.b) {
			return nil, false
		}
		switch s.b[s.i] {
		case ',':
			s.i++
		case ']':
			s.i++
			return txs, true
		default:
			return nil, false
		}
	}
}
