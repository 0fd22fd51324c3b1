package client

import (
	"crypto/ed25519"
	"crypto/tls"
	"fmt"
	"time"

	"google.golang.org/grpc"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/chain/tlsconf"
	"github.com/byzlog/byzlog/protos/wire"
)

// Option configures a Producer.
type Option func(*options)

type options struct {
	trust          Trust
	gateways       []string
	key            ed25519.PrivateKey
	linger         time.Duration
	batchRecords   int
	batchBytes     int
	acks           byzlogv1.Ack
	codec          byzlogv1.Codec
	requestTimeout time.Duration
	backoff        time.Duration
	maxBackoff     time.Duration
	tls            *tls.Config
	insecure       bool
	cosigners      []ed25519.PrivateKey
}

func defaults() options {
	return options{
		linger:         5 * time.Millisecond,
		batchRecords:   1000,
		batchBytes:     512 << 10,
		acks:           byzlogv1.Ack_ACK_COMMIT,
		codec:          byzlogv1.Codec_CODEC_NONE,
		requestTimeout: 30 * time.Second,
		backoff:        100 * time.Millisecond,
		maxBackoff:     2 * time.Second,
	}
}

// maxBatchRecords is the chain's default max_batch_records.
var maxBatchRecords = int(wire.DefaultLimits().MaxBatchRecords)

// bounds checks every option from one table, naming the option.
func (o options) validate() error {
	checks := []struct {
		ok  bool
		msg string
	}{
		{o.trust.ChainID() != "", "WithTrust: required: TrustGenesis, TrustHeader or TrustGateway (the chain id comes from the client's configuration, not from a gateway)"},
		{len(o.gateways) > 0, "WithGateways: at least one gateway address is required"},
		{o.key == nil || len(o.key) == ed25519.PrivateKeySize, fmt.Sprintf("WithKey: key is %d bytes, an ed25519 private key is %d", len(o.key), ed25519.PrivateKeySize)},
		{o.linger >= 0 && o.linger <= time.Second, fmt.Sprintf("WithLinger(%s): must be between 0 and 1s", o.linger)},
		{o.batchRecords >= 1 && o.batchRecords <= maxBatchRecords, fmt.Sprintf("WithBatchRecords(%d): must be between 1 and %d (the chain's default max_batch_records)", o.batchRecords, maxBatchRecords)},
		{o.batchBytes >= 1<<10 && o.batchBytes <= wire.DefaultBundleBytes, fmt.Sprintf("WithBatchBytes(%d): must be between 1 KiB and %d (a gateway's default max_bundle_bytes)", o.batchBytes, wire.DefaultBundleBytes)},
		{o.requestTimeout >= time.Second, fmt.Sprintf("WithRequestTimeout(%s): must be at least 1s", o.requestTimeout)},
		{!(o.insecure && o.tls != nil), "WithInsecure and WithTLS: choose one"},
		{o.backoff > 0 && o.maxBackoff >= o.backoff, fmt.Sprintf("WithBackoff(%s, %s): initial must be positive and at most the maximum", o.backoff, o.maxBackoff)},
	}
	for _, c := range checks {
		if !c.ok {
			return fmt.Errorf("byzlog producer: %s", c.msg)
		}
	}
	return nil
}

// WithTrust sets the chain the producer signs for and the root of trust
// its receipts are verified from. Required. With TrustGenesis or
// TrustHeader every ACK_COMMIT receipt is checked against a header the
// producer's light client verified (the gateways relay the headers and the
// proofs; they are not trusted), and one that does not check fails its
// records with ErrUnverified. TrustGateway turns that off.
func WithTrust(t Trust) Option { return func(o *options) { o.trust = t } }

// WithGateways sets the gateway addresses (host:port). Required. Batches go
// to the first; on a retriable error they go to the next, same bytes.
func WithGateways(addrs ...string) Option { return func(o *options) { o.gateways = addrs } }

// WithKey sets the producer's ed25519 key (default: a new random key, which
// means a new producer identity and sequences starting at 0).
func WithKey(k ed25519.PrivateKey) Option { return func(o *options) { o.key = k } }

// WithLinger sets how long a partition's batch waits for more records
// (default 5 ms, at most 1 s), like Kafka's linger.ms.
func WithLinger(d time.Duration) Option { return func(o *options) { o.linger = d } }

// WithBatchRecords closes a batch at this many records (default 1000, 1..10000).
func WithBatchRecords(n int) Option { return func(o *options) { o.batchRecords = n } }

// WithBatchBytes closes a batch at about this many bytes of records
// (default 512 KiB, 1 KiB..1 MiB), like Kafka's batch.size.
func WithBatchBytes(n int) Option { return func(o *options) { o.batchBytes = n } }

// WithAcks sets how far a write must get before its future completes
// (default ACK_COMMIT: in a committed block, with offsets).
func WithAcks(a byzlogv1.Ack) Option { return func(o *options) { o.acks = a } }

// WithCompression sets the batch codec (default none; zstd saves bytes
// through consensus for compressible records).
func WithCompression(c byzlogv1.Codec) Option { return func(o *options) { o.codec = c } }

// WithRequestTimeout bounds one attempt to send a batch (default 30 s, at
// least 1 s); after it the batch is sent again, same bytes.
func WithRequestTimeout(d time.Duration) Option { return func(o *options) { o.requestTimeout = d } }

// WithBackoff sets the retry backoff: it starts at initial and doubles up
// to maxBackoff (defaults 100 ms and 2 s).
func WithBackoff(initial, maxBackoff time.Duration) Option {
	return func(o *options) { o.backoff, o.maxBackoff = initial, maxBackoff }
}

// WithTLS sets the TLS configuration of the gateway connections: the CA
// the gateways' certificates are checked against (RootCAs) and, for a
// gateway that requires mutual TLS, the client's certificate. Default: TLS
// checked against the system's roots. tlsconf.Files builds one from PEM
// files.
func WithTLS(c *tls.Config) Option { return func(o *options) { o.tls = c } }

// WithInsecure connects to the gateways in plaintext: anyone on the path
// reads the records and can alter what is not signed. For a gateway on
// loopback started with --insecure.
func WithInsecure() Option { return func(o *options) { o.insecure = true } }

// WithCosigners makes the admin client sign every request with these
// admin keys too, for operations that need the admin set's threshold
// (deleting a topic, changing the admins or the validators). Admin only.
func WithCosigners(keys ...ed25519.PrivateKey) Option {
	return func(o *options) { o.cosigners = append(o.cosigners, keys...) }
}

// dialCreds is the transport of the gateway connections.
func (o options) dialCreds() grpc.DialOption {
	return grpc.WithTransportCredentials(tlsconf.Transport(o.tls, o.insecure))
}
