package pipeline

import (
	"sync"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

// request is one batch waiting for its answer.
type request struct {
	batch *byzlogv1.SignedBatch
	body  *byzlogv1.BatchBody
	key   string // producer key
	size  int
	ack   byzlogv1.Ack
	done  chan answer
	once  sync.Once // the answer
	g     *Gateway

	settleOnce sync.Once
	charged    bool // counted in queued and its producer's usage
	reserved   bool // holds its sequence in the producer's pending ones
	following  bool // the same batch is pending: answered with it, never bundled
	followers  []*request
}

type answer struct {
	receipt *byzlogv1.Receipt
	err     error
}

// answer gives the client its answer; a request acked at the mempool is
// answered before it is settled.
func (r *request) answer(rc *byzlogv1.Receipt, err error) {
	r.once.Do(func() { r.done <- answer{rc, err} })
}

// finish is a request's final outcome: it answers (if not yet) and gives
// back what the request held.
//
// It settles before it answers: a client that sends the same batch again
// the moment it has the answer must find the sequence free, not join the
// settled request as a follower and get its old answer.
func (r *request) finish(rc *byzlogv1.Receipt, err error) {
	r.settleOnce.Do(func() { r.g.settle(r, rc, err) })
	r.answer(rc, err)
}

func (r *request) receipt(ack byzlogv1.Ack) *byzlogv1.Receipt {
	return &byzlogv1.Receipt{Ack: ack, Topic: r.body.Topic, Partition: r.body.Partition}
}
