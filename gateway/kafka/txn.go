package kafka

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"

	abci "github.com/cometbft/cometbft/abci/types"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/gateway/pipeline"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// Kafka transactions (KIP-98) with the chain as the coordinator
// (abciapp/core/txn.go, rules version 8; scripts/model/txn.pml). Any
// gateway coordinates any transactional id: FindCoordinator names this
// one, and each step is a transaction signed with the user's key, so a
// gateway that dies mid-transaction loses nothing another cannot finish.
//
//   - InitProducerId with a transactional id is a TxnInit: the chain hands
//     out the producer id and bumps the epoch, fencing the older producer
//     and aborting its open transaction.
//   - AddPartitionsToTxn and AddOffsetsToTxn change nothing on the chain:
//     a transactional batch adds its partition itself, and offsets join
//     with TxnOffsetCommit. They check the producer is current.
//   - TxnOffsetCommit is a TxnOffsets, EndTxn a TxnEnd: the chain writes
//     every partition's marker in the block that takes it.

// txnStep signs op for transactional id with the connection's key and its
// next nonce, submits it and waits for its commit, and returns the chain's
// outcome.
func (c *conn) txnStep(ctx context.Context, id string, op proto.Message) (*byzlogv1.TxnOutcome, error) {
	if c.s.b.Txns == nil {
		return nil, errTxnsOff
	}
	signer := wire.NewSigner(c.principal.Key, c.s.b.ChainID())
	var committed pipeline.Committed
	err := c.s.nonces.use(ctx, signer.PublicKey(), func(nonce uint64, accepted func()) error {
		req, err := signer.Txn(nonce, id, op)
		if err != nil {
			return fmt.Errorf("sign transaction step: %w", err)
		}
		committed, err = c.s.b.Txns.Txn(ctx, req, accepted)
		return err
	})
	if err != nil {
		return nil, err
	}
	return txnOutcomeOf(committed)
}

// errTxnsOff: the gateway's backend serves no transactions.
var errTxnsOff = errors.New("this gateway serves no Kafka transactions")

// txnOutcomeOf reads a committed step's outcome from its result proof.
func txnOutcomeOf(c pipeline.Committed) (*byzlogv1.TxnOutcome, error) {
	if c.Proof == nil {
		return nil, errors.New("the committed transaction step came without its result")
	}
	var res abci.ExecTxResult
	if err := res.Unmarshal(c.Proof.TxResult); err != nil {
		return nil, fmt.Errorf("result of the transaction step: %w", err)
	}
	var out byzlogv1.TxnOutcome
	if err := proto.Unmarshal(res.Data, &out); err != nil {
		return nil, fmt.Errorf("result of the transaction step is not a TxnOutcome: %w", err)
	}
	return &out, nil
}

// txnError is the Kafka error of a failed transaction step.
func txnError(err error) *kerr.Error {
	var re *pipeline.RejectedError
	switch {
	case errors.Is(err, errTxnsOff):
		return kerr.TransactionalIDAuthorizationFailed
	case errors.As(err, &re):
		switch re.Code {
		case wire.CodeProducerFenced:
			return kerr.ProducerFenced
		case wire.CodeUnknownTxKind:
			// A chain before rules version 8.
			return kerr.TransactionalIDAuthorizationFailed
		case wire.CodeNotGroupOwner:
			return kerr.GroupAuthorizationFailed
		case wire.CodeUnknownTopic, wire.CodeUnknownPartition:
			return kerr.UnknownTopicOrPartition
		}
		return rejectedError(re.Code, true)
	}
	return kerr.ConcurrentTransactions // not committed now: retry
}

// initTxnProducer answers InitProducerId with a transactional id.
func (c *conn) initTxnProducer(ctx context.Context, r *kmsg.InitProducerIDRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.InitProducerIDResponse)
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	if r.TransactionTimeoutMillis <= 0 || r.TransactionTimeoutMillis > wire.MaxTxnTimeoutMs {
		c.log.Info().Str("transactional_id", *r.TransactionalID).Int32("transaction_timeout_ms", r.TransactionTimeoutMillis).
			Int("max", wire.MaxTxnTimeoutMs).Msg("InitProducerId refused: transaction.timeout.ms out of range")
		resp.ErrorCode = kerr.InvalidTransactionTimeout.Code
		return resp
	}
	pid, epoch := r.ProducerID, int32(r.ProducerEpoch)
	if pid < 0 {
		pid, epoch = -1, -1
	}
	out, err := c.txnStep(ctx, *r.TransactionalID, &byzlogv1.TxnInit{TimeoutMs: uint32(r.TransactionTimeoutMillis), ProducerId: pid, Epoch: epoch})
	if err != nil {
		c.log.Info().Err(err).Str("transactional_id", *r.TransactionalID).Msg("InitProducerId refused")

		resp.ErrorCode = txnError(err).Code
		return resp
	}
	resp.ProducerID, resp.ProducerEpoch = out.ProducerId, int16(out.Epoch)
	return resp
}

// currentTxn checks that producer id pid at epoch is transactional id's
// current producer, by the chain's state.
func (c *conn) currentTxn(ctx context.Context, id string, pid int64, epoch int16) *kerr.Error {
	code, why := c.checkCurrentTxn(ctx, id, pid, epoch)
	if code != nil {
		c.log.Info().Str("transactional_id", id).Int64("producer_id", pid).Int16("epoch", epoch).Str("error", code.Message).Msg("transaction step refused: " + why)
	}
	return code
}

// checkCurrentTxn is currentTxn's check: the error, and why.
func (c *conn) checkCurrentTxn(ctx context.Context, id string, pid int64, epoch int16) (*kerr.Error, string) {
	if c.s.b.Txns == nil {
		return kerr.TransactionalIDAuthorizationFailed, "this gateway does not serve transactions"
	}
	list, err := c.s.b.Txns.Txns(ctx, &byzlogv1.TxnsRequest{TransactionalId: id})
	var re *pipeline.RejectedError
	switch {
	case errors.As(err, &re) && re.Code == wire.CodeNotFound:
		return kerr.InvalidProducerIDMapping, "the transactional id is unknown"
	case err != nil || len(list.Txns) != 1:
		return kerr.CoordinatorNotAvailable, fmt.Sprintf("the chain's transactional ids could not be read (%v)", err)
	}
	t := list.Txns[0].State
	switch {
	case !bytes.Equal(t.Owner, c.principal.Key.Public().(ed25519.PublicKey)):
		return kerr.TransactionalIDAuthorizationFailed, "the transactional id is another key's"
	case t.ProducerId != pid:
		return kerr.InvalidProducerIDMapping, fmt.Sprintf("the transactional id's producer id is %d", t.ProducerId)
	case int32(epoch) != t.Epoch:
		return kerr.ProducerFenced, fmt.Sprintf("the transactional id's epoch is %d", t.Epoch)
	}
	return nil, ""
}

// addPartitionsToTxn answers AddPartitionsToTxn: the chain adds a
// partition with the transaction's first batch there, so this checks the
// producer and the partitions only.
func (c *conn) addPartitionsToTxn(ctx context.Context, r *kmsg.AddPartitionsToTxnRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.AddPartitionsToTxnResponse)
	code := c.currentTxn(ctx, r.TransactionalID, r.ProducerID, r.ProducerEpoch)
	for _, t := range r.Topics {
		rt := kmsg.NewAddPartitionsToTxnResponseTopic()
		rt.Topic = t.Topic
		n, err := c.s.topics.partitions(ctx, t.Topic)
		for _, p := range t.Partitions {
			rp := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
			rp.Partition = p
			switch {
			case code != nil:
				rp.ErrorCode = code.Code
			case err != nil:
				rp.ErrorCode = kafkaError(err).Code
			case p < 0 || uint32(p) >= n:
				rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// addOffsetsToTxn answers AddOffsetsToTxn: the offsets join with
// TxnOffsetCommit, so this checks the producer only.
func (c *conn) addOffsetsToTxn(ctx context.Context, r *kmsg.AddOffsetsToTxnRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.AddOffsetsToTxnResponse)
	if code := c.currentTxn(ctx, r.TransactionalID, r.ProducerID, r.ProducerEpoch); code != nil {
		resp.ErrorCode = code.Code
	}
	return resp
}

// txnOffsetCommit answers TxnOffsetCommit: the group's offsets wait in the
// transaction for its commit.
func (c *conn) txnOffsetCommit(ctx context.Context, r *kmsg.TxnOffsetCommitRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
	var offsets []*byzlogv1.PartitionOffset
	for _, t := range r.Topics {
		for _, p := range t.Partitions {
			meta := ""
			if p.Metadata != nil {
				meta = *p.Metadata
			}
			offsets = append(offsets, &byzlogv1.PartitionOffset{Topic: t.Topic, Partition: uint32(max(p.Partition, 0)), Offset: uint64(max(p.Offset, 0)), Metadata: meta})
		}
	}
	var code *kerr.Error
	if len(offsets) > 0 {
		if _, err := c.txnStep(ctx, r.TransactionalID, &byzlogv1.TxnOffsets{ProducerId: r.ProducerID, Epoch: int32(r.ProducerEpoch), Group: r.Group, Offsets: offsets}); err != nil {
			c.log.Info().Err(err).Str("transactional_id", r.TransactionalID).Str("group", r.Group).Msg("TxnOffsetCommit refused")
			code = txnError(err)
		}
	}
	for _, t := range r.Topics {
		rt := kmsg.NewTxnOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
			rp.Partition = p.Partition
			if code != nil {
				rp.ErrorCode = code.Code
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// endTxn answers EndTxn: commit or abort, every partition's marker in one
// block.
func (c *conn) endTxn(ctx context.Context, r *kmsg.EndTxnRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.EndTxnResponse)
	if _, err := c.txnStep(ctx, r.TransactionalID, &byzlogv1.TxnEnd{ProducerId: r.ProducerID, Epoch: int32(r.ProducerEpoch), Commit: r.Commit}); err != nil {
		c.log.Info().Err(err).Str("transactional_id", r.TransactionalID).Bool("commit", r.Commit).Msg("EndTxn refused")
		resp.ErrorCode = txnError(err).Code
	}
	return resp
}
