package attack

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/byzlog/byzlog/indexer/layout"
)

// natsIntruder connects to NATS as a consumer (env.NATSOptions: an
// identity that may read) and tries, in turn, what only the indexer may
// do. Every try is a send; one the server lets through is accepted, and
// the row misses its goal (Attack.Unauthorized).
func natsIntruder(ctx context.Context, env *Env, t *Tally) error {
	if env.NATSURL == "" {
		return errors.New("nats-intruder: the cluster has no NATS to attack")
	}
	// The server answers a forbidden publish with an asynchronous
	// permissions violation, not a reply: the try times out, and the
	// violation says why.
	var violation atomic.Value // string
	violation.Store("")
	nc, err := nats.Connect(env.NATSURL, append([]nats.Option{nats.Name("byzlog attack nats-intruder"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) {
				violation.Store(err.Error())
			}
		})}, env.NATSOptions...)...)
	if err != nil {
		return fmt.Errorf("nats-intruder: connect as a consumer: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	stream := layout.StreamName(env.Topic)
	tries := []struct {
		name string
		do   func(ctx context.Context, i int) error
	}{
		{"publish a forged record", func(ctx context.Context, i int) error {
			m := nats.NewMsg(layout.Subject(env.Topic, 0))
			m.Data = []byte("forged")
			m.Header.Set(layout.HeaderOffset, "18446744073709551000") // a huge offset: the indexer once trusted what it read back
			_, err := js.PublishMsg(ctx, m)
			return err
		}},
		{"pre-claim a message id", func(ctx context.Context, i int) error {
			m := nats.NewMsg(layout.Subject(env.Topic, 0))
			m.Header.Set(layout.HeaderMsgID, fmt.Sprintf("%s/0/%d", env.Topic, 1000+i)) // a record the indexer has yet to publish
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
	for i := 0; ctx.Err() == nil && i < 2000; i++ {
		try := tries[i%len(tries)]
		violation.Store("")
		cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		err := try.do(cctx, i)
		cancel()
		if ctx.Err() != nil {
			break
		}
		if v := violation.Load().(string); err != nil && v != "" {
			err = errors.New(v)
		}
		if err != nil {
			t.count(0, try.name+": "+err.Error(), nil)
		} else {
			t.count(0, "", nil)
			t.note("NATS let a consumer %s", try.name)
		}
		sleep(ctx, 20*time.Millisecond)
	}
	return nil
}
