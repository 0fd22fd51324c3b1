package consumer

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/grpc"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/chain/receipt"
	"github.com/byzlog/byzlog/protos/chain/tlsconf"
	"github.com/byzlog/byzlog/protos/wire"
)

// Option configures a Consumer.
type Option func(*options)

type options struct {
	gateway   string
	gwClient  byzlogv1.GatewayClient
	key       ed25519.PrivateKey
	natsOpts  []nats.Option
	commitTry int
	retryWait time.Duration
	verifier  RecordVerifier
	trust     receipt.Trust
	// gatewayTLS and gatewayInsecure: the WithGateway transport.
	gatewayTLS      *tls.Config
	gatewayInsecure bool
}

func defaults() options {
	return options{commitTry: 5, retryWait: 300 * time.Millisecond}
}

func (o options) validate() error {
	return firstFailed("byzlog consumer", []check{
		{o.gateway == "" || o.gwClient == nil, "WithGateway and WithGatewayClient: set one, not both"},
		{!(o.gatewayInsecure && o.gatewayTLS != nil), "WithGatewayInsecure and WithGatewayTLS: choose one"},
		{o.key == nil || len(o.key) == ed25519.PrivateKeySize, fmt.Sprintf("WithKey: key is %d bytes, an ed25519 private key is %d", len(o.key), ed25519.PrivateKeySize)},
	})
}

// WithTrust sets the chain offset commits are signed for and, unless it
// is receipt.TrustGateway, the root of trust each commit is verified from:
// the commit's transaction and its result must be in a block whose header
// the consumer's light client verified, so a gateway cannot answer a
// commit it dropped. Committing needs it; reading records does not.
func WithTrust(t receipt.Trust) Option { return func(o *options) { o.trust = t } }

// WithGateway sets the byzlog gateway (host:port) that Commit,
// GroupOffsets and FromCommitted talk to, over TLS (WithGatewayTLS; the
// system's roots by default) unless WithGatewayInsecure. Default: none;
// reading records needs only NATS.
func WithGateway(addr string) Option { return func(o *options) { o.gateway = addr } }

// WithGatewayTLS sets the TLS configuration of the WithGateway connection:
// the CA the gateway is checked against and, for mutual TLS, the client's
// certificate (tlsconf.Files builds one from PEM files).
func WithGatewayTLS(c *tls.Config) Option { return func(o *options) { o.gatewayTLS = c } }

// WithGatewayInsecure connects to the WithGateway gateway in plaintext,
// for one started with --insecure on loopback.
func WithGatewayInsecure() Option { return func(o *options) { o.gatewayInsecure = true } }

// WithGatewayClient is WithGateway for a client you dialled yourself (TLS,
// interceptors). The Consumer does not close it.
func WithGatewayClient(c byzlogv1.GatewayClient) Option { return func(o *options) { o.gwClient = c } }

// RecordVerifier checks a record against the chain before Next returns it;
// *verify.Headers is one (light-client verified headers and per-record
// Merkle proofs).
type RecordVerifier interface {
	VerifyRecord(ctx context.Context, r *byzlogv1.StoredRecord) error
}

// WithVerifier turns on verify mode: Next returns a record only after v
// has checked it, and returns ErrUnverified instead when it fails, so a
// record altered or forged anywhere between the validators and here is
// never delivered. It costs a proof query per record and a header
// verification per block (default off).
func WithVerifier(v RecordVerifier) Option { return func(o *options) { o.verifier = v } }

// WithKey sets the consumer's ed25519 key, which signs offset commits.
// Default: none, and Commit fails. A group belongs to the key that first
// committed for it: every member that commits must use the same key.
func WithKey(k ed25519.PrivateKey) Option { return func(o *options) { o.key = k } }

// WithNATSOptions passes options to nats.Connect (credentials, TLS, name).
// Only Connect uses them; New takes a connection you made. Default: none.
func WithNATSOptions(opts ...nats.Option) Option {
	return func(o *options) { o.natsOpts = append(o.natsOpts, opts...) }
}

// SubscribeOption configures one Subscription.
type SubscribeOption func(*subOptions)

type startKind int

const (
	startBeginning startKind = iota
	startOffset
	startTime
	startCommitted
)

type subOptions struct {
	partitions    []uint32
	start         startKind
	startOffset   uint64
	startTime     time.Time
	group         string
	maxAckPending int
	ackWait       time.Duration
	buffer        int
	bufferSet     bool
	startSet      int // how many start options were given
}

func subDefaults() subOptions {
	return subOptions{maxAckPending: 1, ackWait: 30 * time.Second, buffer: DefaultBuffer}
}

// Bounds of the subscription options.
const (
	maxBuffer        = 10_000
	maxMaxAckPending = 10_000
	minAckWait       = time.Second
	maxAckWait       = time.Hour
)

func (o subOptions) validate() error {
	seen := map[uint32]bool{}
	dup := false
	for _, p := range o.partitions {
		dup = dup || seen[p]
		seen[p] = true
	}
	return firstFailed("byzlog subscribe", []check{
		{o.startSet <= 1, "FromBeginning, FromOffset, FromTime and FromCommitted: choose one"},
		{!dup, fmt.Sprintf("WithPartitions(%v): a partition is listed twice", o.partitions)},
		{o.group == "" || wire.CheckGroupName(o.group) == nil,
			fmt.Sprintf("WithGroup: a group name is 1 to %d bytes of UTF-8 without NUL", wire.MaxGroupName)},
		{o.start != startCommitted || o.group != "", "FromCommitted: needs WithGroup, whose committed offsets it reads"},
		{o.buffer >= 1 && o.buffer <= maxBuffer, fmt.Sprintf("WithBuffer(%d): must be between 1 and %d", o.buffer, maxBuffer)},
		{o.maxAckPending >= 1 && o.maxAckPending <= maxMaxAckPending, fmt.Sprintf("WithMaxAckPending(%d): must be between 1 and %d", o.maxAckPending, maxMaxAckPending)},
		{o.ackWait >= minAckWait && o.ackWait <= maxAckWait, fmt.Sprintf("WithAckWait(%s): must be between %s and %s", o.ackWait, minAckWait, maxAckWait)},
	})
}

type check struct {
	ok  bool
	msg string
}

// firstFailed checks every option from one table, naming the option.
func firstFailed(who string, checks []check) error {
	for _, c := range checks {
		if !c.ok {
			return fmt.Errorf("%s: %s", who, c.msg)
		}
	}
	return nil
}

// WithPartitions reads only these partitions. Default: every partition of
// the topic, including ones added later.
func WithPartitions(ps ...uint32) SubscribeOption {
	return func(o *subOptions) { o.partitions = append(o.partitions, ps...) }
}

// FromBeginning starts each partition at its first record still held
// (retention may have removed older ones). The default.
func FromBeginning() SubscribeOption {
	return func(o *subOptions) { o.start = startBeginning; o.startSet++ }
}

// FromOffset starts each partition at its first record with an offset at or
// past n. A partition that has not reached n yet starts when it does.
func FromOffset(n uint64) SubscribeOption {
	return func(o *subOptions) { o.start, o.startOffset = startOffset, n; o.startSet++ }
}

// FromTime starts each partition at its first record whose timestamp (the
// committing block's time) is at or after t, as Kafka's offsetsForTimes.
// A partition with no such record yet starts with its next one that is.
func FromTime(t time.Time) SubscribeOption {
	return func(o *subOptions) { o.start, o.startTime = startTime, t; o.startSet++ }
}

// FromCommitted starts each partition at the group's committed offset, read
// on the chain through the gateway (WithGroup and WithGateway are needed);
// a partition without one starts at the beginning.
func FromCommitted() SubscribeOption {
	return func(o *subOptions) { o.start = startCommitted; o.startSet++ }
}

// WithGroup makes the subscription a member of consumer group name: a
// durable JetStream consumer shared by every member, so members split the
// records and a restarted member resumes after the last record the group
// acknowledged. The start option applies only when the group's JetStream
// consumer is created, by its first member; after that the consumer's own
// acknowledgements decide where reading resumes. Default: no group, an
// ephemeral ordered consumer that reads every selected record in order.
func WithGroup(name string) SubscribeOption { return func(o *subOptions) { o.group = name } }

// WithMaxAckPending bounds the messages a group has delivered and not yet
// acknowledged (default 1, at most 10,000); a message carries up to the
// indexer's --records-per-message records, and is acknowledged with the
// last of them. With 1, messages are handed out one at a time in stream
// order, so each partition is processed in offset
// order however many members there are, and a redelivery (a member died
// holding a record) comes before anything later. Raise it for throughput:
// members then work on records concurrently, so one partition's records are
// no longer processed in order across members, and a redelivered record
// arrives after later ones. Fixed when the group's consumer is created.
func WithMaxAckPending(n int) SubscribeOption { return func(o *subOptions) { o.maxAckPending = n } }

// WithAckWait is how long a group waits for a delivered message's ack
// before giving it to a member again (default 30 s, 1 s to 1 h). Fixed when
// the group's consumer is created. A run is acknowledged with its last
// record; while its member works through it, Next tells JetStream the run
// is in progress with its first record and whenever a quarter of the wait
// has passed since, so a member loses a run only when it takes the whole
// wait over one record.
func WithAckWait(d time.Duration) SubscribeOption { return func(o *subOptions) { o.ackWait = d } }

// DefaultBuffer is how many messages a subscription fetches ahead of Next
// unless WithBuffer says otherwise. Each pull asks JetStream for about half
// of it. The indexer puts up to 256 of a block's records of a partition in
// a message of at most 64 KiB (its --records-per-message), so 256 messages
// are up to 65,536 records, and 16 MiB. With a message per record
// (--records-per-message 1), raise it: with 256, a consumer on shared,
// saturated cores fell behind a 15,500 records/s stream ever faster (read
// back 14,245 → 6,130/s over three minutes), with 4,096 far less (15,006 →
// 10,605/s; docs/benchmarks.md). Kafka consumers fetch up to a MiB a
// partition for the same reason.
const DefaultBuffer = 256

// RecordBuffer is the default buffer for a stream with a message per
// record (its metadata says so, or says nothing: an indexer older than
// runs wrote it).
const RecordBuffer = 4096

// WithBuffer bounds the messages fetched ahead of Next (default
// DefaultBuffer, or RecordBuffer for a stream with a message per record;
// 1 to 10,000): fetches are batched up to this size and paused while it
// is full.
func WithBuffer(n int) SubscribeOption {
	return func(o *subOptions) { o.buffer, o.bufferSet = n, true }
}

// gatewayCreds is the WithGateway connection's transport: TLS unless
// WithGatewayInsecure.
func (o options) gatewayCreds() grpc.DialOption {
	return grpc.WithTransportCredentials(tlsconf.Transport(o.gatewayTLS, o.gatewayInsecure))
}
