package verify

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/abciapp/core"
	"github.com/byzlog/byzlog/indexer/layout"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// Headers checks records on its own, trusting no node and no indexer: it
// verifies headers with CometBFT's light client from a root of trust and
// proves each record against the app hash of the header after its block
// (core.VerifyRecord), with a proof any node may serve. The consumer SDK's
// verify mode uses it. Safe for concurrent use.
type Headers struct {
	mu sync.Mutex
	v  *Verifier
}

// NewHeaders follows the chain chainID through nodes (at least two: a
// primary and a witness, reached over link) from the root of trust.
func NewHeaders(chainID string, nodes []string, link NodeLink, trust Trust, log zerolog.Logger) (*Headers, error) {
	cfg := Default()
	cfg.ChainID, cfg.Nodes, cfg.Link, cfg.Trust = chainID, nodes, link, trust
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	_, ns, err := newNodes(chainID, nodes, nil, link, cfg.MaxResponseBytes, log)
	if err != nil {
		return nil, err
	}
	return &Headers{v: New(cfg, ns, unregistered(), log)}, nil
}

// AppHashAfter is the app hash after block height, from the verified
// header of height+1.
func (h *Headers) AppHashAfter(ctx context.Context, height int64) ([]byte, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	lb, err := h.v.Header(ctx, height+1)
	if err != nil {
		return nil, err
	}
	return lb.AppHash, nil
}

// ErrForged means a record differs from what the chain committed.
var ErrForged = errors.New("record differs from what the chain committed")

// VerifyRecord checks that r is exactly the record the chain stored at its
// topic, partition and offset: the node's proof must lead to the verified
// app hash after r's block, and the proven record must equal r, or be the
// transactional record r is the place of (layout.Aborted). That the
// transaction aborted is for the reader to prove from the transaction's
// marker, later on the partition (the consumer SDK's verify mode does).
func (h *Headers) VerifyRecord(ctx context.Context, r *byzlogv1.StoredRecord) error {
	req, _ := proto.Marshal(&byzlogv1.ProofRequest{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset})
	var errs []error
	for i := range h.v.nodes {
		n := h.v.nodes[i]
		q, err := n.RPC.ABCIQuery(ctx, wire.PathProof, req)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", n.Addr, err))
			continue
		}
		if q.Response.Code != 0 {
			errs = append(errs, fmt.Errorf("%s: %s", n.Addr, q.Response.Log))
			continue
		}
		var p byzlogv1.RecordProof
		if err := proto.Unmarshal(q.Response.Value, &p); err != nil {
			errs = append(errs, fmt.Errorf("%s: proof does not decode: %w", n.Addr, err))
			continue
		}
		appHash, err := h.AppHashAfter(ctx, p.Height)
		if err != nil {
			return err
		}
		proven, err := core.VerifyRecord(&p, appHash)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", n.Addr, err))
			continue // a node lying about the proof; another may not
		}
		if !layout.SamePublished(r, proven) {
			return fmt.Errorf("%w: %s/%d@%d (height %d)", ErrForged, r.Topic, r.Partition, r.Offset, proven.Height)
		}
		return nil
	}
	return fmt.Errorf("verify %s/%d@%d: no node served a proof that checks: %w", r.Topic, r.Partition, r.Offset, errors.Join(errs...))
}
