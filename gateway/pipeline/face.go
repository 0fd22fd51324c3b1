package pipeline

import (
	"context"
	"crypto/ed25519"

	"github.com/byzlog/byzlog/abciapp/core"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// The calls below serve faces that speak other protocols over the gateway
// (the Kafka face, gateway/kafka). Each answers as the gRPC call of the same
// name does, with the gateway's typed errors: every value about committed
// state is what f+1 nodes agree on.

// NextSequence is key's next batch sequence in topic/partition, as f+1
// nodes agree on it at the last block this gateway matched.
func (g *Gateway) NextSequence(ctx context.Context, key ed25519.PublicKey, topic string, partition uint32) (uint64, error) {
	next, _, err := g.agreedNextSequence(ctx, &byzlogv1.ProducerRequest{ProducerKey: key, Topic: topic, Partition: partition}, g.seenHeight(), "kafka")
	return next, err
}

// Topics lists the topics in committed state, with their partitions.
func (g *Gateway) Topics(ctx context.Context) ([]*byzlogv1.TopicInfo, error) {
	var list byzlogv1.TopicList
	if err := g.Query(ctx, wire.PathTopics, nil, &list); err != nil {
		return nil, err
	}
	return list.Topics, nil
}

// Limits are the chain's limits, as the gateway's pre-checks read them
// (cached, refreshed as they are).
func (g *Gateway) Limits(ctx context.Context) (*byzlogv1.Limits, error) {
	return g.topics.chainLimits(ctx)
}

// Records reads committed records of one partition from offset on.
func (g *Gateway) Records(ctx context.Context, req *byzlogv1.RecordsRequest) (*byzlogv1.RecordsResponse, error) {
	var resp byzlogv1.RecordsResponse
	if err := g.Query(ctx, wire.PathRecords, req, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// Group returns a consumer group's committed offsets.
func (g *Gateway) Group(ctx context.Context, group string) (*byzlogv1.GroupOffsets, error) {
	var resp byzlogv1.GroupOffsets
	if err := g.Query(ctx, wire.PathGroup, &byzlogv1.GroupRequest{Group: group}, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// Groups lists a page of the groups with committed offsets.
func (g *Gateway) Groups(ctx context.Context, startAfter string, limit uint32) (*byzlogv1.GroupList, error) {
	var resp byzlogv1.GroupList
	if err := g.Query(ctx, wire.PathGroups, &byzlogv1.GroupsRequest{StartAfter: startAfter, Limit: limit}, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// Rules is the rules version in force and any upgrade scheduled.
func (g *Gateway) Rules(ctx context.Context) (*byzlogv1.Rules, error) {
	var resp byzlogv1.Rules
	if err := g.Query(ctx, wire.PathRules, nil, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// Nonce is key's next admin or offset-commit nonce.
func (g *Gateway) Nonce(ctx context.Context, key ed25519.PublicKey) (uint64, error) {
	var resp byzlogv1.NonceResponse
	if err := g.Query(ctx, wire.PathNonce, &byzlogv1.NonceRequest{Key: key}, &resp); err != nil {
		return 0, err
	}
	return resp.NextNonce, nil
}

// Admin submits an admin-signed request and waits for its commit;
// accepted (may be nil) is called once a node's mempool has taken it, so a
// caller may sign the key's next nonce before this one commits.
func (g *Gateway) Admin(ctx context.Context, req *byzlogv1.AdminRequest, accepted func()) (Committed, error) {
	tx, err := wire.AdminTx(req)
	if err != nil {
		return Committed{}, errorf(ErrInvalid, "encode admin request: %v", err)
	}
	return g.submitChecked(ctx, tx, accepted)
}

// CommitOffsets submits a consumer-signed offset commit and waits for its
// commit; accepted is as Admin's.
func (g *Gateway) CommitOffsets(ctx context.Context, req *byzlogv1.CommitOffsets, accepted func()) (Committed, error) {
	tx, err := wire.OffsetsTx(req)
	if err != nil {
		return Committed{}, errorf(ErrInvalid, "encode offset commit: %v", err)
	}
	return g.submitChecked(ctx, tx, accepted)
}

// Txn submits a step of a Kafka transaction and waits for its commit;
// accepted is as Admin's.
func (g *Gateway) Txn(ctx context.Context, req *byzlogv1.TxnRequest, accepted func()) (Committed, error) {
	tx, err := wire.TxnTx(req)
	if err != nil {
		return Committed{}, errorf(ErrInvalid, "encode transaction step: %v", err)
	}
	return g.submitChecked(ctx, tx, accepted)
}

// Txns reads Kafka transactional ids and their state (query /txns).
func (g *Gateway) Txns(ctx context.Context, req *byzlogv1.TxnsRequest) (*byzlogv1.TxnList, error) {
	var resp byzlogv1.TxnList
	if err := g.Query(ctx, wire.PathTxns, req, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// submitChecked runs the chain's stateless checks on tx before it costs a
// node anything, then submits it.
func (g *Gateway) submitChecked(ctx context.Context, tx []byte, accepted func()) (Committed, error) {
	if res := core.ValidateTx(tx); !res.OK() {
		return Committed{}, rejected(res.Code, res.Log)
	}
	return g.submitTx(ctx, tx, accepted)
}

// Height is the highest block a healthy node has.
func (g *Gateway) Height() int64 {
	_, top := g.pool.Health()
	return top
}
