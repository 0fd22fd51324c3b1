// Package consumer is byzlog's consumer SDK: it reads the records the
// indexer publishes to NATS JetStream (see package layout for the streams,
// subjects and headers), seeks by offset or time, shares a topic among the
// members of a consumer group, and commits the group's offsets on the chain
// through a gateway, signed with the consumer's key.
//
//	c, err := consumer.Connect("nats://127.0.0.1:4222", consumer.WithGateway("127.0.0.1:7070"), consumer.WithKey(key))
//	sub, err := c.Subscribe(ctx, "orders", consumer.WithGroup("billing"), consumer.FromCommitted())
//	for {
//		r, err := sub.Next(ctx)
//		...
//	}
//	sub.Commit(ctx)
//	sub.Close()
//
// It reads, it never writes records, and it does not log: every problem is
// an error returned to the caller. It trusts what NATS delivers as far as the
// indexer put it there; WithVerifier checks each record against the chain's
// signed headers. Either way it reports records missing from a partition
// (ErrGap), in a group too, where a member asks the stream what comes before
// a record it was delivered (see Subscription.Next); and a message it reads
// back from a stream to find where to start is used only if it is a byzlog
// record of the subject asked for.
package consumer

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/chain/receipt"
	"github.com/byzlog/byzlog/protos/wire"
)

// Errors callers branch on.
var (
	// ErrClosed: the Subscription or Consumer was closed.
	ErrClosed = errors.New("byzlog consumer: closed")
	// ErrTopicNotIndexed: the topic has no JetStream stream (yet).
	ErrTopicNotIndexed = errors.New("byzlog consumer: topic not indexed")
	// ErrMalformed: a message on a record subject is not a byzlog record.
	// Next skips it; the next call carries on.
	ErrMalformed = errors.New("byzlog consumer: malformed record message")
	// ErrUnverified: in verify mode (WithVerifier), a record could not be
	// proven to be what the chain committed. Next skips it; the next call
	// carries on.
	ErrUnverified = errors.New("byzlog consumer: record not verified against the chain")
	// ErrGap: records of a partition are missing between two delivered
	// ones. Next reports it once, then carries on with the later record.
	ErrGap = errors.New("byzlog consumer: records missing")
	// ErrNoGroup: the group has committed no offsets.
	ErrNoGroup = errors.New("byzlog consumer: group has no committed offsets")
)

// Consumer reads byzlog topics from one NATS connection. It is safe for
// concurrent use; each Subscription is not.
type Consumer struct {
	nc       *nats.Conn
	ownsConn bool
	js       jetstream.JetStream
	o        options
	gw       byzlogv1.GatewayClient
	gwConn   *grpc.ClientConn

	mu     sync.Mutex
	verify *receipt.Verifier // built at the first commit; nil: not verified
}

// New returns a Consumer on an existing NATS connection, which it does not
// close.
func New(nc *nats.Conn, opts ...Option) (*Consumer, error) {
	if nc == nil {
		return nil, errors.New("byzlog consumer: New needs a NATS connection; use Connect to make one")
	}
	o := defaults()
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("byzlog consumer: JetStream on %s: %w", nc.ConnectedUrlRedacted(), err)
	}
	c := &Consumer{nc: nc, js: js, o: o, gw: o.gwClient}
	if o.gateway != "" {
		conn, err := grpc.NewClient(o.gateway, o.gatewayCreds())
		if err != nil {
			return nil, fmt.Errorf("byzlog consumer: gateway %s: %w", o.gateway, err)
		}
		c.gw, c.gwConn = byzlogv1.NewGatewayClient(conn), conn
	}
	return c, nil
}

// Connect connects to NATS at url (comma-separated for several servers) and
// returns a Consumer that closes the connection on Close.
func Connect(url string, opts ...Option) (*Consumer, error) {
	o := defaults()
	for _, opt := range opts {
		opt(&o)
	}
	// NATS's 2 s connect timeout covers the TLS handshake, which a loaded
	// machine can take longer than that to finish.
	nc, err := nats.Connect(url, append([]nats.Option{nats.Name("byzlog consumer"), nats.Timeout(10 * time.Second)}, o.natsOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("byzlog consumer: connect to NATS at %s: %w", url, err)
	}
	c, err := New(nc, opts...)
	if err != nil {
		nc.Close()
		return nil, err
	}
	c.ownsConn = true
	return c, nil
}

// Close closes the gateway connection, and the NATS connection when Connect
// made it. Close subscriptions first.
func (c *Consumer) Close() error {
	var err error
	if c.gwConn != nil {
		err = c.gwConn.Close()
	}
	if c.ownsConn {
		c.nc.Close()
	}
	return err
}

// Offset is a group's position in one partition: the next offset it will
// read (Kafka's committed offset), so after a record at offset n, n+1.
type Offset struct {
	Topic     string
	Partition uint32
	Offset    uint64
	Metadata  string
}

// GroupOffsets is what the chain holds for a consumer group.
type GroupOffsets struct {
	Group string
	// Owner is the key that first committed for the group; only it may commit.
	Owner   ed25519.PublicKey
	Offsets []Offset
}

// GroupOffsets reads a group's committed offsets through the gateway.
// ErrNoGroup means the group has committed none.
func (c *Consumer) GroupOffsets(ctx context.Context, group string) (*GroupOffsets, error) {
	if c.gw == nil {
		return nil, errors.New("byzlog consumer: reading committed offsets needs WithGateway")
	}
	resp, err := c.gw.GetGroupOffsets(ctx, &byzlogv1.GroupRequest{Group: group})
	if status.Code(err) == codes.NotFound {
		return nil, fmt.Errorf("%w: group %q", ErrNoGroup, group)
	}
	if err != nil {
		return nil, fmt.Errorf("read committed offsets of group %q: %w", group, err)
	}
	g := &GroupOffsets{Group: resp.Group, Owner: ed25519.PublicKey(resp.OwnerKey)}
	for _, po := range resp.Offsets {
		g.Offsets = append(g.Offsets, Offset{Topic: po.Topic, Partition: po.Partition, Offset: po.Offset, Metadata: po.Metadata})
	}
	return g, nil
}

// Commit records offsets for group on the chain, signed with the consumer's
// key, and returns the height that committed them. Offsets may only move
// forward; the chain refuses a commit that would move one back
// (FailedPrecondition, "offset_backwards").
func (c *Consumer) Commit(ctx context.Context, group string, offsets ...Offset) (int64, error) {
	return c.commit(ctx, group, func(context.Context) ([]Offset, bool, error) { return offsets, false, nil })
}

// commit signs what build returns with the key's next nonce and sends it; a
// nonce read from a node a block behind or raced by another commit of the
// same key is read again, as is (when build asks for it, retryBackwards) a
// commit that another member moved past. build returning no offsets means
// there is nothing to commit.
func (c *Consumer) commit(ctx context.Context, group string, build func(context.Context) (offsets []Offset, retryBackwards bool, err error)) (int64, error) {
	if c.gw == nil || c.o.key == nil {
		return 0, errors.New("byzlog consumer: committing offsets needs WithGateway and WithKey")
	}
	if err := c.o.trust.Validate("byzlog consumer: committing offsets needs WithTrust"); err != nil {
		return 0, err
	}
	v, err := c.verifier()
	if err != nil {
		return 0, err
	}
	s := wire.NewSigner(c.o.key, c.o.trust.ChainID())
	for attempt := 0; ; attempt++ {
		offsets, retryBackwards, err := build(ctx)
		if err != nil || len(offsets) == 0 {
			return 0, err
		}
		pos := make([]*byzlogv1.PartitionOffset, len(offsets))
		for i, o := range offsets {
			pos[i] = &byzlogv1.PartitionOffset{Topic: o.Topic, Partition: o.Partition, Offset: o.Offset, Metadata: o.Metadata}
		}
		expiry, err := receipt.Expiry(ctx, c.gw, v, c.o.trust.ChainID())
		if err != nil {
			return 0, fmt.Errorf("commit offsets of group %q: %w", group, err)
		}
		n, err := c.gw.GetNonce(ctx, &byzlogv1.NonceRequest{Key: s.PublicKey()})
		if err != nil {
			return 0, fmt.Errorf("read the consumer key's nonce: %w", err)
		}
		if v != nil {
			if err := v.Nonce(ctx, s.PublicKey(), n); err != nil {
				return 0, fmt.Errorf("commit offsets of group %q: %w", group, err)
			}
		}
		req, err := s.CommitOffsetsUntil(n.NextNonce, expiry, group, false, pos...)
		if err != nil {
			return 0, err
		}
		resp, err := c.gw.CommitOffsets(ctx, req)
		if err == nil && v != nil {
			tx, terr := wire.OffsetsTx(req)
			if terr != nil {
				return 0, terr
			}
			if verr := v.Tx(ctx, tx, resp.GetHeight(), resp.GetTxIndex(), resp.GetProof()); verr != nil {
				return 0, fmt.Errorf("commit offsets of group %q: the gateway answered committed at height %d: %w", group, resp.GetHeight(), verr)
			}
		}
		if err == nil {
			return resp.Height, nil
		}
		retry := isCode(err, wire.CodeBadNonce) || (retryBackwards && isCode(err, wire.CodeOffsetBackwards))
		if !retry || attempt+1 >= c.o.commitTry {
			return 0, fmt.Errorf("commit offsets of group %q: %w", group, err)
		}
		select {
		case <-time.After(c.o.retryWait):
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// isCode says whether a gateway error carries the state machine's code c:
// the gateway starts such messages with the code's name.
func isCode(err error, c wire.Code) bool {
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.FailedPrecondition && strings.HasPrefix(st.Message(), c.String()+":")
}

// verifier returns the commit verifier, built on first use.
func (c *Consumer) verifier() (*receipt.Verifier, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.verify != nil || !c.o.trust.Verifies() {
		return c.verify, nil
	}
	v, err := receipt.NewVerifier(c.o.trust, []byzlogv1.GatewayClient{c.gw}, 30*time.Second)
	if err != nil {
		return nil, fmt.Errorf("byzlog consumer: %w", err)
	}
	c.verify = v
	return v, nil
}
