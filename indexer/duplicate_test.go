package indexer

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/byzlog/byzlog/indexer/layout"
)

// TestDuplicateIsChecked: a message that claimed a record's id first (as
// anyone with publish rights could) makes JetStream drop the real record as
// a duplicate; the publisher's check of the duplicate answer names it. A
// duplicate of the same record, as a restart or a second indexer publishes
// it, passes.
func TestDuplicateIsChecked(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := startPublisher(ctx, t)
	if _, err := p.stream(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	b := testBlock(2, 0, 2, time.Now())
	real0, real1 := layout.Message(b.Appended.Partitions[0].Records[0]), layout.Message(b.Appended.Partitions[0].Records[1])
	forged := layout.Message(b.Appended.Partitions[0].Records[1])
	forged.Data = []byte("forged")
	for _, m := range []*nats.Msg{real0, forged} {
		if _, err := p.js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name string
		msg  *nats.Msg
		want string
	}{
		{"the same record again", layout.Message(b.Appended.Partitions[0].Records[0]), ""},
		{"a record whose id a forgery claimed", real1, "claimed the id first"},
	} {
		f, err := p.js.PublishMsgAsync(c.msg)
		if err != nil {
			t.Fatal(err)
		}
		var ack *jetstream.PubAck
		select {
		case ack = <-f.Ok():
		case err := <-f.Err():
			t.Fatal(err)
		}
		if !ack.Duplicate {
			t.Fatalf("%s: JetStream did not answer a duplicate", c.name)
		}
		err = p.checkDuplicate(ctx, f.Msg(), ack)
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: checkDuplicate = %v, want %q", c.name, err, c.want)
		}
	}
}
