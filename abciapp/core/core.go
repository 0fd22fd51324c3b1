// Package core is byzlog's replicated state machine: given the committed state
// and a block decided by consensus, it returns each transaction's result and
// the next state. Every validator runs it and must reach the same answer, so
// it never performs I/O, reads a clock, draws random numbers, starts
// goroutines, iterates maps or uses floats. The ABCI adapter and the store do
// all I/O around it.
package core

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"

	"github.com/cometbft/cometbft/crypto/merkle"
)

// MaxTxBytes is the largest transaction the chain accepts. It is a chain rule,
// not a node setting: a proposal holding a larger transaction is rejected by
// every correct validator.
const MaxTxBytes = 2 << 20

// appHashDomain separates byzlog's app hash from any other use of SHA-256
// over the same bytes, and versions its layout.
const appHashDomain = "byzlog/app-hash/v1"

// State is the part of the committed state that identifies it: the last
// committed height and the app hash after it.
type State struct {
	Height  int64
	AppHash []byte
}

// Block is a block as consensus decided it.
type Block struct {
	Height int64
	Txs    [][]byte
}

// Result is the outcome of one transaction.
type Result struct {
	Code Code
	// Log says what was wrong, in words a client can act on; empty on success.
	Log string
}

// OK reports whether the transaction was accepted.
func (r Result) OK() bool { return r.Code == CodeOK }

// Outcome is what applying a block produces.
type Outcome struct {
	// State is the state after the block, to be persisted by Commit.
	State State
	// Results holds one result per transaction, in block order.
	Results []Result
}

// Apply executes block b on top of prev. The new app hash chains the previous
// one, the height and a Merkle root of the block's accepted transactions:
//
//	app_hash(h) = SHA-256(domain || app_hash(h-1) || be64(h) || txs_root(h))
//
// so it is a deterministic function of every committed block. An error means
// the caller is broken (a height out of sequence), never that a transaction
// is bad: bad transactions get a result code.
func Apply(prev State, b Block) (Outcome, error) {
	if prev.Height != 0 && b.Height != prev.Height+1 {
		return Outcome{}, fmt.Errorf("apply block %d: the committed height is %d, expected block %d", b.Height, prev.Height, prev.Height+1)
	}
	if b.Height <= 0 {
		return Outcome{}, fmt.Errorf("apply block %d: heights start at 1", b.Height)
	}
	results := make([]Result, len(b.Txs))
	accepted := make([][]byte, 0, len(b.Txs))
	for i, tx := range b.Txs {
		results[i] = ValidateTx(tx)
		if results[i].OK() {
			accepted = append(accepted, tx)
		}
	}
	return Outcome{
		State:   State{Height: b.Height, AppHash: nextAppHash(prev.AppHash, b.Height, accepted)},
		Results: results,
	}, nil
}

func nextAppHash(prev []byte, height int64, txs [][]byte) []byte {
	h := sha256.New()
	h.Write([]byte(appHashDomain))
	h.Write(prev)
	var be [8]byte
	binary.BigEndian.PutUint64(be[:], uint64(height))
	h.Write(be[:])
	h.Write(merkle.HashFromByteSlices(txs))
	return h.Sum(nil)
}
