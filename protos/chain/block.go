// Package chain reads committed blocks from CometBFT nodes, for the
// gateway, the indexer and the nodes themselves: a block and its results
// checked against each other (ReadBlock), and the bundles a block
// references checked against their hashes (FetchBundles). It takes
// CometBFT's RPC types, as CometBFT's and rpcnode's clients answer them.
//
// Those types bring CometBFT's node configuration and a database with them
// (cometbft/rpc/core/types imports p2p and config, which import
// cometbft-db): no SDK may import this package. What an SDK checks, it
// checks with package receipt, which this package builds the proofs with.
package chain

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	abci "github.com/cometbft/cometbft/abci/types"
	ctypes "github.com/cometbft/cometbft/rpc/core/types"
	cmttypes "github.com/cometbft/cometbft/types"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/chain/receipt"
)

// The one reader of committed blocks. A node's block and results are read
// by ReadBlock, which checks them against each other (the txs hash to the
// header's data hash, one result per tx); what makes them the chain's is
// the caller's policy, on the same Block:
//   - Check, against the light client's verified headers of the block and
//     the next one (the indexer, which publishes every block and can wait
//     for the next header);
//   - Digest, compared across f+1 nodes (the gateway, which answers a
//     block's receipts as soon as it is committed: the results hash is only
//     signed in the next header, a block later, and its clients check the
//     receipts' proofs against that header themselves).

// Kinds of failed check: data a node served that is wrong, as opposed to a
// node that did not answer (kind "").
const (
	KindBlock   = "block"
	KindResults = "results"
)

// Block is one node's account of a committed block and its results.
type Block struct {
	// Block is the block with its transactions as readers use them: as
	// committed, except that a bundle reference (wire.BundleRef, rules
	// version 3) is replaced by the bundle it names, whose SHA-256 it is
	// (ReadBlock). Its Data then no longer hashes to its header's
	// DataHash, which names Committed.
	Block     *cmttypes.Block
	Results   []*abci.ExecTxResult
	committed cmttypes.Txs     // as in the block: Committed
	proofs    *receipt.Results // over the committed transactions
	hash      []byte
}

// BlockSource serves blocks, their results and the bundles they
// reference: a CometBFT RPC client.
type BlockSource interface {
	Block(ctx context.Context, height *int64) (*ctypes.ResultBlock, error)
	BlockResults(ctx context.Context, height *int64) (*ctypes.ResultBlockResults, error)
	Querier
}

// ReadBlock reads block h and its results from src and checks that they
// fit each other, then reads from src the bundles the block references
// (FetchBundles) into Block.Block, in a copy: the header, Digest, Check
// and Prove stay over the transactions as committed (Committed). kind
// names the failed check when src served wrong data (KindBlock,
// KindResults) and is empty when it did not answer, or does not hold a
// bundle the block references.
func ReadBlock(ctx context.Context, src BlockSource, h int64) (b *Block, kind string, err error) {
	return ReadBlockLocal(ctx, src, h, nil)
}

// Local gives the bundle whose SHA-256 is sum when the reader holds it
// already, or nil. What it gives is used as it is, unhashed: it must only
// give bytes it knows hash to sum (a gateway's own pending transactions,
// kept by their hash).
type Local func(sum [sha256.Size]byte) []byte

// ReadBlockLocal is ReadBlock, taking the bundles local holds from it and
// reading only the others from src: a gateway reads back every block its
// transactions commit in, and fetching its own bundles from a node doubled
// what the nodes served (and the gateway decoded, and hashed). local may
// be nil.
func ReadBlockLocal(ctx context.Context, src BlockSource, h int64, local Local) (b *Block, kind string, err error) {
	rb, err := src.Block(ctx, &h)
	if err != nil {
		return nil, "", fmt.Errorf("block %d: %w", h, err)
	}
	if rb == nil || rb.Block == nil {
		return nil, KindBlock, fmt.Errorf("block %d: empty answer", h)
	}
	if rb.Block.Height != h {
		return nil, KindBlock, fmt.Errorf("asked for block %d, got %d", h, rb.Block.Height)
	}
	if err := checkTxs(rb.Block); err != nil {
		return nil, KindBlock, fmt.Errorf("block %d: %w", h, err)
	}
	rr, err := src.BlockResults(ctx, &h)
	if err != nil {
		return nil, "", fmt.Errorf("block results %d: %w", h, err)
	}
	if rr == nil || len(rr.TxsResults) != len(rb.Block.Txs) {
		n := 0
		if rr != nil {
			n = len(rr.TxsResults)
		}
		return nil, KindResults, fmt.Errorf("block %d: %d txs but %d results", h, len(rb.Block.Txs), n)
	}
	b = NewBlock(rb.Block, rr.TxsResults)
	if b.Block, kind, err = resolveBundles(ctx, src, rb.Block, local); err != nil {
		return nil, kind, err
	}
	return b, "", nil
}

// checkTxs checks what a reader of blocks uses: the header is well formed,
// and the transactions are the ones its data hash names. The last commit
// and the evidence are not read (rpcnode.DecodeBlock skips them): they are
// named by the header's hash, which the caller checks, and used by no one.
func checkTxs(b *cmttypes.Block) error {
	if err := b.Header.ValidateBasic(); err != nil {
		return fmt.Errorf("header: %w", err)
	}
	if got := b.Data.Hash(); !bytesEqual(got, b.DataHash) {
		return fmt.Errorf("its %d transactions hash to %X, its header's DataHash is %X", len(b.Txs), got, b.DataHash)
	}
	return nil
}

// NewBlock wraps a block and its results (one per tx), as ReadBlock
// returns them, its transactions taken as they are: a bundle reference
// stays one (only ReadBlock reads bundles).
func NewBlock(blk *cmttypes.Block, results []*abci.ExecTxResult) *Block {
	// The header's own hash: Block.Hash is nil for a block without its
	// last commit, which rpcnode.DecodeBlock does not read.
	return &Block{Block: blk, Results: results, committed: blk.Txs, proofs: receipt.NewResults(blk.Txs, results), hash: blk.Header.Hash()}
}

// Committed is the block's transactions as committed, which its header's
// data hash and the transaction paths of Prove are over: Block.Txs, but
// with each bundle reference as it is in the block.
func (b *Block) Committed() cmttypes.Txs { return b.committed }

// Height is the block's height.
func (b *Block) Height() int64 { return b.Block.Height }

// Digest names the block and its results: two accounts with the same
// digest are the same block with the same results.
func (b *Block) Digest() string { return digest(b.hash, b.proofs.Hash()) }

// Digest names a block by its header hash and its results hash (the next
// header's LastResultsHash), as Block.Digest does; from a header and
// results alone, it is enough to compare with a Block.
func Digest(blockHash []byte, results []*abci.ExecTxResult) string {
	return digest(blockHash, cmttypes.NewResults(results).Hash())
}

func digest(blockHash, resultsHash []byte) string {
	return hex.EncodeToString(blockHash) + "/" + hex.EncodeToString(resultsHash)
}

// Check checks that b is the block the verified header lb names and its
// results what the verified header next (one above) hashes: a node that
// served anything else is lying or broken. kind names the failed check.
func (b *Block) Check(lb, next *cmttypes.LightBlock) (kind string, err error) {
	if lb == nil || next == nil || next.Height != lb.Height+1 {
		return KindBlock, errors.New("check a block: need its verified header and the next one")
	}
	if kind, err := b.CheckHeader(lb); err != nil {
		return kind, err
	}
	if got := b.proofs.Hash(); !bytesEqual(got, next.LastResultsHash) {
		return KindResults, fmt.Errorf("results of block %d hash to %X, the verified header %d says %X", lb.Height, got, next.Height, next.LastResultsHash)
	}
	return "", nil
}

// CheckHeader checks that b is the block the verified header lb names: its
// transactions are then the chain's (checkTxs tied them to the header's
// data hash). Its results are checked only against the next header (Check).
func (b *Block) CheckHeader(lb *cmttypes.LightBlock) (kind string, err error) {
	if lb == nil || lb.Height != b.Block.Height {
		return KindBlock, errors.New("check a block: need its verified header")
	}
	if !bytesEqual(b.hash, lb.Hash()) {
		return KindBlock, fmt.Errorf("block %d hashes to %X, the verified header to %X", lb.Height, b.hash, lb.Hash())
	}
	return "", nil
}

// Prove returns the proof of tx i's result, batch naming the receipt's
// batch in it; withTx adds the tx's inclusion path (receipt.Results.Prove).
func (b *Block) Prove(i int, batch uint32, withTx bool) *byzlogv1.ResultProof {
	return b.proofs.Prove(i, batch, withTx)
}

func bytesEqual(a, b []byte) bool { return string(a) == string(b) }
