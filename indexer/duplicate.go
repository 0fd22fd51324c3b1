package indexer

import (
	"bytes"
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/byzlog/byzlog/indexer/layout"
)

// checkDuplicate is called when JetStream answers a publish of msg as a
// duplicate: a message with its id is already stored, by a restart of this
// indexer or another indexer of the chain, or by someone who claimed the id
// first so that the real record would be dropped. The stored message must
// be the same record (or the same block), else it is an error naming it.
func (p *publisher) checkDuplicate(ctx context.Context, msg *nats.Msg, ack *jetstream.PubAck) error {
	st, err := p.js.Stream(ctx, ack.Stream)
	if err != nil {
		return fmt.Errorf("check duplicate %s: %w", msg.Header.Get(layout.HeaderMsgID), err)
	}
	got, err := st.GetMsg(ctx, ack.Sequence)
	if err != nil {
		return fmt.Errorf("check duplicate %s: stream %s sequence %d: %w", msg.Header.Get(layout.HeaderMsgID), ack.Stream, ack.Sequence, err)
	}
	same := false
	if msg.Subject == layout.BlocksSubject {
		same = got.Subject == msg.Subject && bytes.Equal(got.Data, msg.Data) && got.Header.Get(layout.HeaderHeight) == msg.Header.Get(layout.HeaderHeight)
	} else {
		want, werr := layout.Record(msg.Subject, msg.Header, msg.Data)
		have, herr := layout.Record(got.Subject, got.Header, got.Data)
		same = werr == nil && herr == nil && sameRecord(want, have)
	}
	if !same {
		return fmt.Errorf("stream %s sequence %d holds message id %s, but not the message the chain has for it: someone with publish rights on NATS claimed the id first, so JetStream dropped the real one; remove it (nats stream rmm %s %d) and publish again once the stream's duplicate window has passed",
			ack.Stream, ack.Sequence, msg.Header.Get(layout.HeaderMsgID), ack.Stream, ack.Sequence)
	}
	return nil
}
