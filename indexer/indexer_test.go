package indexer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/byzlog/byzlog/indexer/internal/natstest"
	"github.com/byzlog/byzlog/indexer/publish"
	"github.com/byzlog/byzlog/indexer/verify"
)

func TestConfigValidate(t *testing.T) {
	good := Default()
	good.Nodes, good.ChainID, good.Trust = []string{"https://a:1", "127.0.0.1:1"}, "c", verify.Trust{Height: 1, Hash: make([]byte, 32)}
	if err := good.Validate(); err != nil {
		t.Fatalf("good config: %v", err)
	}
	for _, tc := range []struct {
		name string
		fn   func(*Config)
		want string
	}{
		{"one node", func(c *Config) { c.Nodes = c.Nodes[:1] }, "witness"},
		{"no chain", func(c *Config) { c.ChainID = "" }, "chain_id"},
		{"no trust", func(c *Config) { c.Trust = verify.Trust{} }, "trust root"},
		{"bad id", func(c *Config) { c.ID = "a.b" }, "id"},
		{"replicas", func(c *Config) { c.Replicas = 7 }, "replicas"},
		{"start", func(c *Config) { c.StartHeight = 0 }, "start_height"},
		{"held", func(c *Config) { c.MaxHeldBytes = 1000 }, "max_held_bytes"},
		{"plaintext node", func(c *Config) { c.Nodes = []string{"https://a:1", "http://b:1"} }, "plaintext RPC"},
	} {
		c := good
		tc.fn(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate() = %v, want an error naming %q", tc.name, err, tc.want)
		}
	}
}

// TestNewRefusesAReconnectBuffer: a connection that sends, after a
// reconnect, what was published while it was down would put later records
// in a stream before the ones the server lost.
func TestNewRefusesAReconnectBuffer(t *testing.T) {
	s := natstest.Server(t)
	cfg := Default()
	cfg.Nodes, cfg.ChainID, cfg.Trust = []string{"https://a:1", "https://b:1"}, "c", verify.Trust{Height: 1, Hash: make([]byte, 32)}
	for _, tc := range []struct {
		name string
		opts []nats.Option
		ok   bool
	}{
		{"nats.go's default buffer", nil, false},
		{"a buffer set", []nats.Option{nats.ReconnectBufSize(1 << 20)}, false},
		{"no buffer", []nats.Option{nats.ReconnectBufSize(-1)}, true},
	} {
		nc, err := nats.Connect(s.ClientURL(), tc.opts...)
		if err != nil {
			t.Fatal(err)
		}
		_, err = New(cfg, nc, zerolog.Nop())
		nc.Close()
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, errNATSBuffers)) {
			t.Errorf("%s: New = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}

// TestRefusalSurfacesAfterAConflict: a message JetStream refuses without
// an acknowledgement reads as another indexer's conflict. The indexer must
// not take it for one forever, resuming every RetryBackoff with only the
// server's log naming the cause: after a conflict that acknowledged
// nothing, the next block asks an acknowledgement of every message (the
// publisher's side: publish.TestRefusalSurfacesWithAnAckPerMessage), and
// the refusal that then surfaces is backed off as a failure, doubling.
func TestRefusalSurfacesAfterAConflict(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := Default()
	pub, err := publish.New(ctx, natstest.Start(t), cfg.publishing(), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	i := &Indexer{cfg: cfg, log: zerolog.Nop(), m: newMetrics()}
	const height = 1
	i.acked.Store(height - 1)
	conflict := fmt.Errorf("%w: JetStream refused a message of height %d", publish.ErrOtherWriter, height)
	wait, backoff := i.afterFollow(conflict, false, cfg.RetryBackoff, pub)
	if wait != cfg.RetryBackoff || pub.AckAllThrough != height {
		t.Fatalf("after a conflict that acknowledged nothing: wait %s, every message acknowledged through height %d; want %s and %d", wait, pub.AckAllThrough, cfg.RetryBackoff, height)
	}
	refused := &jetstream.APIError{ErrorCode: 10054, Description: "message size exceeds maximum allowed"}
	for n := range 3 {
		want := backoff
		wait, backoff = i.afterFollow(refused, false, backoff, pub)
		if wait != want || backoff != min(2*want, cfg.MaxRetryBackoff) || pub.AckAllThrough != height {
			t.Fatalf("refusal %d with an acknowledgement per message: wait %s then %s, acknowledgements per message through %d; want %s, then double, through %d", n+1, wait, backoff, pub.AckAllThrough, want, height)
		}
	}
	if got := testutil.ToFloat64(i.m.conflicts); got != 1 {
		t.Errorf("conflicts counted: %v, want 1", got)
	}

	// A conflict after progress is another indexer's, resumed at once and
	// with sparse acknowledgements.
	i.acked.Store(5)
	pub.AckAllThrough = 0
	if wait, _ := i.afterFollow(publish.ErrOtherWriter, true, cfg.MaxRetryBackoff, pub); wait != cfg.RetryBackoff || pub.AckAllThrough != 0 {
		t.Errorf("conflict after progress: wait %s, acknowledgements per message through %d; want %s and none", wait, pub.AckAllThrough, cfg.RetryBackoff)
	}
}
