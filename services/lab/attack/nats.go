package attack

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/byzlog/byzlog/indexer/layout"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

// natsIntruder connects to NATS as a consumer (env.NATSOptions: an
// identity that may read) and tries, in turn, what only the indexer may
// do. Every try is a send; one the server lets through is accepted, and
// the row misses its goal (Attack.Unauthorized).
func natsIntruder(ctx context.Context, env *Env, t *Tally) error {
	if env.NATSURL == "" {
		return errors.New("nats-intruder: the cluster has no NATS to attack")
	}
	nc, v, err := connectWatching(env, "nats-intruder")
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	stream := layout.StreamName(env.Topic)
	tries := []try{
		{"publish a forged record", func(ctx context.Context, i int) error {
			m := nats.NewMsg(layout.Subject(env.Topic, 0))
			m.Data = []byte("forged")
			m.Header.Set(layout.HeaderOffset, "18446744073709551000") // a huge offset: the indexer once trusted what it read back
			_, err := js.PublishMsg(ctx, m)
			return err
		}},
		{"publish past the indexer", func(ctx context.Context, i int) error {
			// A message where the indexer expects its next one: it would
			// make every publish of the indexer's fail its expected sequence.
			m := layout.Message(&byzlogv1.StoredRecord{Topic: env.Topic, Offset: uint64(1000 + i), Height: 1, ProducerKey: make([]byte, 32)})
			_, err := js.PublishMsg(ctx, m)
			return err
		}},
		{"delete the topic's stream", func(ctx context.Context, _ int) error { return js.DeleteStream(ctx, stream) }},
		{"purge the topic's stream", func(ctx context.Context, _ int) error {
			st, err := js.Stream(ctx, stream)
			if err != nil {
				return err
			}
			return st.Purge(ctx)
		}},
		{"create a byzlog stream", func(ctx context.Context, i int) error {
			_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: fmt.Sprintf("byzlog-intruder-%d", i), Subjects: []string{fmt.Sprintf("byzlog.intruder%d.>", i)}})
			return err
		}},
		{"edit the indexer's cursor", func(ctx context.Context, _ int) error {
			_, err := js.Publish(ctx, "$KV."+layout.CursorBucket+".cursor.intruder", []byte("999999"))
			return err
		}},
		{"open the cursor bucket", func(ctx context.Context, _ int) error {
			_, err := js.KeyValue(ctx, layout.CursorBucket)
			return err
		}},
	}
	runTries(ctx, t, tries, 500*time.Millisecond, v, "NATS let a consumer %s")
	return nil
}
