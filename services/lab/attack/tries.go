package attack

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// try is one send of an attacker with no right to it: do returns nil when
// it was let through.
type try struct {
	name string
	do   func(ctx context.Context, i int) error
}

// runTries sends tries in turn, each bounded by per, until ctx ends (at
// most 2000), 20 ms apart, and counts each: refused, with its error (or the
// permission violation v saw for it), or let through, noted as letIn with
// the try's name.
func runTries(ctx context.Context, t *Tally, tries []try, per time.Duration, v *violations, letIn string) {
	for i := 0; ctx.Err() == nil && i < 2000; i++ {
		tr := tries[i%len(tries)]
		v.reset()
		cctx, cancel := context.WithTimeout(ctx, per)
		err := tr.do(cctx, i)
		cancel()
		if ctx.Err() != nil {
			break
		}
		if last := v.last(); err != nil && last != "" {
			err = errors.New(last)
		}
		if err != nil {
			t.count(0, tr.name+": "+err.Error(), nil)
		} else {
			t.count(0, "", nil)
			t.note(letIn, tr.name)
		}
		sleep(ctx, 20*time.Millisecond)
	}
}

// violations keeps the last permissions violation a NATS server sent: it
// answers a forbidden publish with one, asynchronously, not with a reply,
// so the try times out and the violation says why. A nil *violations
// records nothing.
type violations struct{ v atomic.Value } // string

func (v *violations) reset() {
	if v != nil {
		v.v.Store("")
	}
}

func (v *violations) last() string {
	if v == nil {
		return ""
	}
	s, _ := v.v.Load().(string)
	return s
}

// connectWatching connects to env's NATS as a consumer (env.NATSOptions),
// named name, recording the server's permissions violations.
func connectWatching(env *Env, name string) (*nats.Conn, *violations, error) {
	v := &violations{}
	v.reset()
	nc, err := nats.Connect(env.NATSURL, append([]nats.Option{nats.Name("byzlog-lab attack " + name),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) {
				v.v.Store(err.Error())
			}
		})}, env.NATSOptions...)...)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: connect as a consumer: %w", name, err)
	}
	return nc, v, nil
}
