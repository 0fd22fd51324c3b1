package pipeline

import (
	"bytes"
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/byzlog/byzlog/abciapp/core"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// ProducerState is a producer's next sequence: what f+1 nodes agree on,
// not one node's word. A producer starts from it, and a liar's low value
// would have it re-sign used sequences.
func (g *Gateway) ProducerState(ctx context.Context, req *byzlogv1.ProducerRequest) (uint64, error) {
	next, _, err := g.agreedNextSequence(ctx, req, g.seenHeight(), "client")
	return next, err
}

// ProducerProof is one node's proof of a producer's sequence state (query
// /producer-proof), as a gRPC error when there is none: FAILED_PRECONDITION
// on a chain before the key tree's rules version, UNAVAILABLE while the
// key tree is not ready or no node answers.
func (g *Gateway) ProducerProof(ctx context.Context, req *byzlogv1.ProducerRequest) (*byzlogv1.StateProof, error) {
	var sp byzlogv1.StateProof
	err := g.Query(ctx, wire.PathProducerProof, req, &sp)
	if err == nil {
		return &sp, nil
	}
	if rules, rerr := g.Rules(ctx); rerr == nil && rules.GetVersion() < core.KeyTreeRulesVersion {
		return nil, status.Errorf(codes.FailedPrecondition, "the chain runs rules version %d, which proves no producer state (version %d does): produce with trust in the gateway, or switch the chain to version %d", rules.GetVersion(), core.KeyTreeRulesVersion, core.KeyTreeRulesVersion)
	}
	return nil, status.Errorf(codes.Unavailable, "no proof of the producer's state: %v", err)
}

// NonceProof is a key's next nonce, as f+1 nodes agree on it, with the
// committed transaction that used the nonce before it and its proof: a
// client that signs only nonces shown used up to the one before signs no
// future nonce for a gateway to keep back. A block pruned since says so
// (UsedPruned) instead.
func (g *Gateway) NonceProof(ctx context.Context, req *byzlogv1.NonceRequest) (*byzlogv1.NonceResponse, error) {
	var n byzlogv1.NonceResponse
	if err := g.Query(ctx, wire.PathNonce, req, &n); err != nil {
		return nil, err
	}
	if n.NextNonce == 0 || n.UsedHeight <= 0 {
		return &n, nil
	}
	d, err := g.dups.get(ctx, g, n.UsedHeight)
	if err != nil {
		if _, lerr := g.LightBlock(ctx, n.UsedHeight); errors.Is(lerr, ErrPruned) {
			n.UsedPruned = true
			return &n, nil
		}
		return nil, status.Errorf(codes.Unavailable, "read block %d, which used nonce %d: %v", n.UsedHeight, n.NextNonce-1, err)
	}
	for i, tx := range d.Block.Txs {
		if key, nonce, ok := wire.NonceUse(tx); ok && bytes.Equal(key, req.Key) && nonce == n.NextNonce-1 {
			n.UsedTx, n.UsedTxIndex, n.UsedProof = tx, uint32(i), d.Prove(i, 0, true)
			return &n, nil
		}
	}
	return nil, status.Errorf(codes.Internal, "block %d holds no transaction of this key with nonce %d, which the nodes say it used", n.UsedHeight, n.NextNonce-1)
}
