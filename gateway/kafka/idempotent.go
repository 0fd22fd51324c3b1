package kafka

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/byzlog/byzlog/protos/wire"
)

// Idempotent producers. InitProducerId hands out a random producer id
// (1..2^63-1) at epoch 0, or bumps the epoch of the id the producer names
// (KIP-360). It keeps nothing: the chain holds each producer id's epoch and
// next sequence under the principal's key, so any gateway answers the
// producer after a failover, and a batch signed by any of them is the same
// bytes (wire.Signer.KafkaBatch). A retry is then answered as a duplicate
// with the original offsets, a gap with OUT_OF_ORDER_SEQUENCE_NUMBER and an
// epoch older than one the chain has seen with INVALID_PRODUCER_EPOCH.
// Ids are random rather than counted on the chain: two producers of one
// principal share its key, and with 63 random bits their ids do not meet.

// initProducerID answers InitProducerId.
func (c *conn) initProducerID(r *kmsg.InitProducerIDRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.InitProducerIDResponse)
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	if r.TransactionalID != nil {
		// Kafka transactions are not served: a transactional producer
		// cannot start. The response carries no message.
		resp.ErrorCode = kerr.TransactionalIDAuthorizationFailed.Code
		return resp
	}
	if r.ProducerID > 0 && r.ProducerEpoch >= 0 && r.ProducerEpoch < wire.MaxKafkaEpoch {
		resp.ProducerID, resp.ProducerEpoch = r.ProducerID, r.ProducerEpoch+1
		return resp
	}
	id, err := newProducerID()
	if err != nil {
		resp.ErrorCode = kerr.UnknownServerError.Code
		return resp
	}
	resp.ProducerID, resp.ProducerEpoch = id, 0
	return resp
}

func newProducerID() (int64, error) {
	var b [8]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			return 0, fmt.Errorf("producer id: %w", err)
		}
		if id := int64(binary.BigEndian.Uint64(b[:]) >> 1); id > 0 {
			return id, nil
		}
	}
}
