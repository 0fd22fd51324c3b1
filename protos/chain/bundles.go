package chain

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"

	cmtbytes "github.com/cometbft/cometbft/libs/bytes"
	ctypes "github.com/cometbft/cometbft/rpc/core/types"
	cmttypes "github.com/cometbft/cometbft/types"
	"google.golang.org/protobuf/proto"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// From rules version 3 a block may carry, in place of a large transaction,
// a bundle reference to it (wire.BundleRef: its SHA-256). The transaction
// itself is read from a node's /bundles query (wire.PathBundles), and every
// one is checked against its hash: the node is trusted for nothing but
// having it.

// ErrBundleAnswer is wrapped by FetchBundles' error when a node's answer
// cannot be right (undecodable, the wrong number of entries, an entry that
// is not the bundle asked for, an error code to a well-formed request):
// the node served wrong data, as opposed to not answering.
var ErrBundleAnswer = errors.New("wrong answer to a bundles query")

// Querier asks a node's app: CometBFT's RPC client (rpcnode.Client) has
// this method.
type Querier interface {
	ABCIQuery(ctx context.Context, path string, data cmtbytes.HexBytes) (*ctypes.ResultABCIQuery, error)
}

// FetchBundles asks q for the bundles named by hashes (their SHA-256) and
// returns one entry per hash, in order: the bundle, or nil for one q does
// not hold. It asks at most wire.MaxBundlesPerQuery hashes at a time, and
// asks again for those that came back empty as long as the last answer
// held some (a node leaves the rest empty once its answer reaches
// wire.MaxBundlesBytes): whatever a node answers, never more queries
// than hashes. An error wrapping ErrBundleAnswer means q
// served wrong data; any other, that it did not answer.
func FetchBundles(ctx context.Context, q Querier, hashes [][sha256.Size]byte) ([][]byte, error) {
	out := make([][]byte, len(hashes))
	for start := 0; start < len(hashes); start += wire.MaxBundlesPerQuery {
		end := min(start+wire.MaxBundlesPerQuery, len(hashes))
		if err := fetchChunk(ctx, q, hashes[start:end], out[start:end]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// fetchChunk fills out[i] with the bundle hashes[i] names, for at most
// wire.MaxBundlesPerQuery hashes. Every round but the last fills one
// entry at least, and the last fills the rest or finds it held nowhere, so
// there are at most len(hashes).
func fetchChunk(ctx context.Context, q Querier, hashes [][sha256.Size]byte, out [][]byte) error {
	missing := make([]int, len(hashes))
	for i := range missing {
		missing[i] = i
	}
	for len(missing) > 0 {
		asked := make([][sha256.Size]byte, len(missing))
		for j, i := range missing {
			asked[j] = hashes[i]
		}
		got, err := askBundles(ctx, q, asked)
		if err != nil {
			return err
		}
		rest := make([]int, 0, len(missing))
		for j, i := range missing {
			if got[j] == nil {
				rest = append(rest, i)
			} else {
				out[i] = got[j]
			}
		}
		if len(rest) == len(missing) {
			return nil // nothing new: the node holds none of the rest
		}
		missing = rest
	}
	return nil
}

// maxLogInError bounds how much of a node's log an error quotes.
const maxLogInError = 200

// askBundles is one /bundles query for hashes (at most
// wire.MaxBundlesPerQuery), its answer checked (decodeBundles).
func askBundles(ctx context.Context, q Querier, hashes [][sha256.Size]byte) ([][]byte, error) {
	req := &byzlogv1.BundlesRequest{Hashes: make([][]byte, len(hashes))}
	for i := range hashes {
		req.Hashes[i] = hashes[i][:]
	}
	data, err := proto.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("marshal a bundles request: %w", err) // cannot happen
	}
	res, err := q.ABCIQuery(ctx, wire.PathBundles, data)
	if err != nil {
		return nil, fmt.Errorf("query %s for %d bundles: %w", wire.PathBundles, len(hashes), err)
	}
	if res == nil {
		return nil, fmt.Errorf("%w: an empty answer", ErrBundleAnswer)
	}
	if res.Response.Code != 0 {
		return nil, fmt.Errorf("%w: code %d to a well-formed request for %d bundles: %.*q", ErrBundleAnswer, res.Response.Code, len(hashes), maxLogInError, res.Response.Log)
	}
	return decodeBundles(res.Response.Value, hashes)
}

// decodeBundles decodes a node's answer to a /bundles query for hashes and
// checks it: one entry per hash, each empty (not held, or past the
// answer's byte bound) or the bytes whose SHA-256 is its hash. Empty
// entries come back nil.
func decodeBundles(value []byte, hashes [][sha256.Size]byte) ([][]byte, error) {
	var b byzlogv1.Bundles
	if err := proto.Unmarshal(value, &b); err != nil {
		return nil, fmt.Errorf("%w: it does not decode as byzlog.v1.Bundles: %v", ErrBundleAnswer, err)
	}
	if len(b.Bundles) != len(hashes) {
		return nil, fmt.Errorf("%w: %d entries for %d hashes asked", ErrBundleAnswer, len(b.Bundles), len(hashes))
	}
	for i, e := range b.Bundles {
		if len(e) == 0 {
			b.Bundles[i] = nil
			continue
		}
		if got := sha256.Sum256(e); got != hashes[i] {
			return nil, fmt.Errorf("%w: entry %d (%d bytes) hashes to %X, not the %X asked for", ErrBundleAnswer, i, len(e), got, hashes[i])
		}
	}
	return b.Bundles, nil
}

// resolveBundles returns blk with every bundle reference among its
// transactions replaced by the bundle it names, read from q: a copy, blk
// unchanged (its transactions stay the ones its data hash names). A block
// without references comes back as it is. kind is KindBlock when q served
// wrong data, empty when it did not answer or does not hold a bundle.
// The bundles local gives (it may be nil) are not asked of q.
func resolveBundles(ctx context.Context, q Querier, blk *cmttypes.Block, local Local) (resolved *cmttypes.Block, kind string, err error) {
	var txs cmttypes.Txs // a copy, made at the first reference
	var at []int
	var hashes [][sha256.Size]byte
	for i, tx := range blk.Txs {
		sum, ok := wire.BundleRef(tx)
		if !ok {
			continue
		}
		if txs == nil {
			txs = make(cmttypes.Txs, len(blk.Txs))
			copy(txs, blk.Txs)
		}
		if local != nil {
			if b := local(sum); b != nil {
				txs[i] = b
				continue
			}
		}
		at = append(at, i)
		hashes = append(hashes, sum)
	}
	if txs == nil {
		return blk, "", nil
	}
	if len(at) > 0 {
		bundles, err := FetchBundles(ctx, q, hashes)
		if err != nil {
			if errors.Is(err, ErrBundleAnswer) {
				kind = KindBlock
			}
			return nil, kind, fmt.Errorf("bundles of block %d: %w", blk.Height, err)
		}
		for j, i := range at {
			if bundles[j] == nil {
				return nil, "", fmt.Errorf("block %d tx %d references bundle %X, which the node does not hold", blk.Height, i, hashes[j])
			}
			txs[i] = bundles[j]
		}
	}
	// Field by field: a Block holds a mutex, and a new Data no cached hash.
	return &cmttypes.Block{Header: blk.Header, Data: cmttypes.Data{Txs: txs}, Evidence: blk.Evidence, LastCommit: blk.LastCommit}, "", nil
}
