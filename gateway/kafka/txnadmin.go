package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/byzlog/byzlog/gateway/pipeline"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// Transaction administration (KIP-664, Kafka 3.0), as kafka-transactions.sh
// and kadm use it: DescribeTransactions, ListTransactions and
// DescribeProducers read the chain's transactional ids (the /txns query).
// As for groups, the chain's state is public and the face has no ACLs:
// every principal sees every id. Every gateway coordinates every id
// (FindCoordinator), but an admin client asks every broker to list and
// merges the answers, so ListTransactions lists the ids a group of that
// name would have this gateway coordinate: each id once in the cluster.
//
// The chain ends a transaction in the block that takes its EndTxn, so no
// id is ever PrepareCommit or PrepareAbort, and it forgets no id, so none
// is Dead. An idempotent producer's state is kept under its key and
// producer id, with no index by partition: DescribeProducers lists the
// open transactions' producers only.

// maxListedTxns bounds the transactional ids one request reads.
const maxListedTxns = 100_000

// Kafka's transaction states. Only Empty, Ongoing, CompleteCommit and
// CompleteAbort are ever answered (see above); the others are known so a
// filter naming them is not UnknownStateFilters.
const (
	txnEmpty          = "Empty"
	txnOngoing        = "Ongoing"
	txnCompleteCommit = "CompleteCommit"
	txnCompleteAbort  = "CompleteAbort"
)

var txnStateNames = []string{txnEmpty, txnOngoing, "PrepareCommit", "PrepareAbort", txnCompleteCommit, txnCompleteAbort, "Dead", "PrepareEpochFence"}

// txnStateName is t's state as Kafka names it. An id whose producer ended
// a transaction and has done nothing since is CompleteCommit or
// CompleteAbort; one whose epoch moved on since (InitProducerId, or a
// timeout's abort) is Empty, as the chain keeps no more to tell them apart.
func txnStateName(t *byzlogv1.TxnState) string {
	switch {
	case t.Open:
		return txnOngoing
	case t.Ended && t.EndedEpoch == t.Epoch && t.EndedCommit:
		return txnCompleteCommit
	case t.Ended && t.EndedEpoch == t.Epoch:
		return txnCompleteAbort
	}
	return txnEmpty
}

// pendingTxnOffsets are the partitions ("topic/partition") whose offsets
// of group an open transaction holds.
func (c *conn) pendingTxnOffsets(ctx context.Context, group string) (map[string]bool, error) {
	txns, err := c.chainTxns(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, t := range txns {
		if !t.State.GetOpen() {
			continue
		}
		for _, g := range t.State.Offsets {
			if g.Group != group {
				continue
			}
			for _, o := range g.Offsets {
				out[fmt.Sprintf("%s/%d", o.Topic, o.Partition)] = true
			}
		}
	}
	return out, nil
}

// chainTxns reads every transactional id the chain holds (none where the
// face serves no transactions), in id order.
func (c *conn) chainTxns(ctx context.Context) ([]*byzlogv1.TxnInfo, error) {
	if c.s.b.Txns == nil {
		return nil, nil
	}
	var out []*byzlogv1.TxnInfo
	after := ""
	for len(out) < maxListedTxns {
		list, err := c.s.b.Txns.Txns(ctx, &byzlogv1.TxnsRequest{StartAfter: after})
		if err != nil {
			return nil, err
		}
		out = append(out, list.Txns...)
		if !list.More || len(list.Txns) == 0 {
			break
		}
		after = list.Txns[len(list.Txns)-1].TransactionalId
	}
	return out, nil
}

func (c *conn) describeTransactions(ctx context.Context, r *kmsg.DescribeTransactionsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DescribeTransactionsResponse)
	for _, id := range r.TransactionalIDs {
		d := kmsg.NewDescribeTransactionsResponseTransactionState()
		d.TransactionalID = id
		d.ProducerID, d.ProducerEpoch, d.StartTimestamp = -1, -1, -1
		t, code := c.txnState(ctx, id)
		if code != nil {
			d.ErrorCode = code.Code
			resp.TransactionStates = append(resp.TransactionStates, d)
			continue
		}
		d.State, d.ProducerID, d.ProducerEpoch = txnStateName(t), t.ProducerId, int16(t.Epoch)
		d.TimeoutMillis = int32(min(t.TimeoutMs, wire.MaxTxnTimeoutMs))
		if t.Open {
			d.StartTimestamp = t.StartedUnixNano / 1e6
		}
		byTopic := map[string][]int32{}
		for _, p := range t.Partitions {
			byTopic[p.Topic] = append(byTopic[p.Topic], int32(p.Partition))
		}
		for topic, ps := range byTopic {
			dt := kmsg.NewDescribeTransactionsResponseTransactionStateTopic()
			dt.Topic, dt.Partitions = topic, ps
			slices.Sort(dt.Partitions)
			d.Topics = append(d.Topics, dt)
		}
		sort.Slice(d.Topics, func(i, j int) bool { return d.Topics[i].Topic < d.Topics[j].Topic })
		resp.TransactionStates = append(resp.TransactionStates, d)
	}
	return resp
}

// txnState reads transactional id's state, or the error DescribeTransactions
// answers for it.
func (c *conn) txnState(ctx context.Context, id string) (*byzlogv1.TxnState, *kerr.Error) {
	if c.s.b.Txns == nil || id == "" {
		return nil, kerr.TransactionalIDNotFound
	}
	list, err := c.s.b.Txns.Txns(ctx, &byzlogv1.TxnsRequest{TransactionalId: id})
	var re *pipeline.RejectedError
	switch {
	case errors.As(err, &re) && re.Code == wire.CodeNotFound:
		return nil, kerr.TransactionalIDNotFound
	case err != nil:
		c.log.Debug().Err(err).Str("transactional_id", id).Msg("kafka describe transactions: reading the chain failed")
		return nil, kerr.CoordinatorLoadInProgress
	case len(list.Txns) != 1 || list.Txns[0].State == nil:
		return nil, kerr.CoordinatorLoadInProgress
	}
	return list.Txns[0].State, nil
}

func (c *conn) listTransactions(ctx context.Context, r *kmsg.ListTransactionsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.ListTransactionsResponse)
	for _, s := range r.StateFilters {
		if !slices.Contains(txnStateNames, s) {
			resp.UnknownStateFilters = append(resp.UnknownStateFilters, s)
		}
	}
	txns, err := c.chainTxns(ctx)
	if err != nil {
		c.log.Debug().Err(err).Msg("kafka list transactions: reading the chain's transactional ids failed")
		resp.ErrorCode = kerr.CoordinatorLoadInProgress.Code
		return resp
	}
	for _, t := range txns {
		if t.State == nil || !c.coordinates(ctx, t.TransactionalId) {
			continue
		}
		state := txnStateName(t.State)
		// As Kafka: a filter of unknown states only matches nothing.
		if len(r.StateFilters) > 0 && !slices.Contains(r.StateFilters, state) {
			continue
		}
		if len(r.ProducerIDFilters) > 0 && !slices.Contains(r.ProducerIDFilters, t.State.ProducerId) {
			continue
		}
		l := kmsg.NewListTransactionsResponseTransactionState()
		l.TransactionalID, l.ProducerID, l.TransactionState = t.TransactionalId, t.State.ProducerId, state
		resp.TransactionStates = append(resp.TransactionStates, l)
	}
	return resp
}

// describeProducers answers each partition's producers with a transaction
// open there: its producer id and epoch, the transaction's first offset in
// the partition and the last sequence the chain took from it. The last
// timestamp and the coordinator epoch are not kept (-1), and an idempotent
// producer's state is not indexed by partition, so it is not listed.
func (c *conn) describeProducers(ctx context.Context, r *kmsg.DescribeProducersRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DescribeProducersResponse)
	var txns []*byzlogv1.TxnInfo
	var txnsErr error
	read := false
	for _, t := range r.Topics {
		rt := kmsg.NewDescribeProducersResponseTopic()
		rt.Topic = t.Topic
		n, topicErr := c.s.topics.partitions(ctx, t.Topic)
		for _, p := range t.Partitions {
			rp := kmsg.NewDescribeProducersResponseTopicPartition()
			rp.Partition = p
			err := topicErr
			switch {
			case err != nil:
			case p < 0 || uint32(p) >= n:
				rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			default:
				if !read {
					txns, txnsErr = c.chainTxns(ctx)
					read = true
				}
				if err = txnsErr; err == nil {
					rp.ActiveProducers, err = c.openProducers(ctx, txns, t.Topic, uint32(p))
				}
			}
			if err != nil {
				c.log.Debug().Err(err).Str("topic", t.Topic).Int32("partition", p).Msg("kafka describe producers: reading the chain failed")
				rp.ErrorCode, rp.ErrorMessage, rp.ActiveProducers = kafkaError(err).Code, message(err), nil
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// openProducers are the producers of txns with a transaction open in
// topic/partition, in producer id order.
func (c *conn) openProducers(ctx context.Context, txns []*byzlogv1.TxnInfo, topic string, partition uint32) ([]kmsg.DescribeProducersResponseTopicPartitionActiveProducer, error) {
	var out []kmsg.DescribeProducersResponseTopicPartitionActiveProducer
	for _, info := range txns {
		t := info.State
		if t == nil || !t.Open {
			continue
		}
		i := slices.IndexFunc(t.Partitions, func(tp *byzlogv1.TxnPartition) bool { return tp.Topic == topic && tp.Partition == partition })
		if i < 0 {
			continue
		}
		next, err := c.s.b.Txns.ProducerState(ctx, &byzlogv1.ProducerRequest{
			ProducerKey: t.Owner, Topic: topic, Partition: partition,
			Kafka: &byzlogv1.KafkaProducer{ProducerId: t.ProducerId, Epoch: t.Epoch},
		})
		if err != nil {
			return nil, err
		}
		ap := kmsg.NewDescribeProducersResponseTopicPartitionActiveProducer()
		ap.ProducerID, ap.ProducerEpoch = t.ProducerId, t.Epoch
		if next > 0 {
			ap.LastSequence = int32(next - 1)
		}
		ap.CoordinatorEpoch = -1
		ap.CurrentTxnStartOffset = int64(t.Partitions[i].FirstOffset)
		out = append(out, ap)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ProducerID < out[j].ProducerID })
	return out, nil
}
