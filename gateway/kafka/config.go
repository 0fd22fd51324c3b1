package kafka

import (
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/byzlog/byzlog/gateway/kafka/batch"
)

// Broker is one gateway's Kafka address, as Metadata lists it.
type Broker struct {
	NodeID int32
	Host   string
	Port   int32
}

// Config is the Kafka face's settings. Default fills every field but the
// addresses and credentials.
type Config struct {
	// Listen is the host:port the face accepts connections on.
	Listen string
	// NodeID is this gateway's broker id; it must be listed in Brokers.
	NodeID int32
	// Brokers are every gateway's Kafka address, this one included, in the
	// same order on every gateway: Metadata lists them, and partition p's
	// leader is Brokers[p mod len(Brokers)]. Empty: this gateway alone, at
	// Advertise.
	Brokers []Broker
	// Advertise is host:port clients reach this gateway at, when Brokers
	// is empty. Empty: Listen.
	Advertise string

	// TLS is the server's TLS configuration; nil serves plaintext, which
	// needs Insecure.
	TLS *tls.Config
	// Insecure allows plaintext (TLS nil).
	Insecure bool
	// Auth authenticates clients with SASL. Either Auth or AnonymousKey.
	Auth Authenticator
	// AnonymousKey, instead of Auth, is every client's principal, without
	// authenticating: anyone who reaches the port writes as this key.
	AnonymousKey ed25519.PrivateKey
	// AnonymousAdmin lets unauthenticated clients create and delete topics
	// (the anonymous key must be a genesis admin key): for tests only.
	AnonymousAdmin bool
	// AutoCreateKey, when set, creates a topic a client names in Metadata
	// and the chain does not have, as Kafka's auto.create.topics.enable:
	// the key signs the CreateTopic, so it must be a genesis admin key,
	// given to the gateway for that alone. Nil: off (byzlog's default, and
	// Redpanda's; Kafka's is on).
	AutoCreateKey ed25519.PrivateKey
	// AutoCreatePartitions are an auto-created topic's partitions
	// (Kafka's num.partitions).
	AutoCreatePartitions int32

	// Batch bounds one record batch a client sends.
	Batch batch.Limits
	// MaxRequestBytes bounds one request once authenticated.
	MaxRequestBytes int32
	// MaxPreAuthBytes bounds one request before authentication.
	MaxPreAuthBytes int32
	// MaxBufferedBytes bounds the bytes of requests in progress across all
	// connections; past it, connections wait before reading more.
	MaxBufferedBytes int64
	// MaxConns bounds open connections; past it, new ones are closed.
	MaxConns int
	// MaxConnsPerIP bounds one address's open connections.
	MaxConnsPerIP int
	// MaxInFlight bounds the requests one connection has in progress.
	MaxInFlight int
	// MaxWorkers bounds batches decoded and signed at once, server-wide.
	MaxWorkers int

	// HandshakeTimeout bounds the TLS handshake and authentication.
	HandshakeTimeout time.Duration
	// RequestReadTimeout bounds the time between a request's first byte
	// and its last, so a trickled request cannot hold its buffer.
	RequestReadTimeout time.Duration
	// IdleTimeout closes a connection that sends nothing for this long
	// (Kafka's connections.max.idle.ms is 9 minutes).
	IdleTimeout time.Duration
	// WriteTimeout bounds writing one response.
	WriteTimeout time.Duration
	// MaxFetchWait caps a Fetch's max wait.
	MaxFetchWait time.Duration
	// FetchPoll is how often a waiting Fetch looks for new blocks.
	FetchPoll time.Duration
	// TopicsTTL is how long topic metadata is cached.
	TopicsTTL time.Duration
	// InitialRebalanceDelay is Kafka's group.initial.rebalance.delay.ms:
	// how long an empty group's first join phase waits for more members
	// (again for each that arrives, up to the rebalance timeout). 0: none.
	InitialRebalanceDelay time.Duration
}

// Default returns the defaults.
func Default() Config {
	return Config{
		Batch:              batch.DefaultLimits(),
		MaxRequestBytes:    16 << 20,
		MaxPreAuthBytes:    64 << 10,
		MaxBufferedBytes:   256 << 20,
		MaxConns:           1024,
		MaxConnsPerIP:      256,
		MaxInFlight:        64,
		MaxWorkers:         8,
		HandshakeTimeout:   10 * time.Second,
		RequestReadTimeout: 30 * time.Second,
		IdleTimeout:        9 * time.Minute,
		WriteTimeout:       30 * time.Second,
		MaxFetchWait:       30 * time.Second,
		FetchPoll:          50 * time.Millisecond,
		TopicsTTL:          2 * time.Second,

		AutoCreatePartitions:  1,
		InitialRebalanceDelay: 3 * time.Second,
	}
}

// Validate says which setting is wrong.
func (c Config) Validate() error {
	if c.Listen == "" {
		return errors.New("kafka listen address is empty")
	}
	if c.TLS == nil && !c.Insecure {
		return errors.New("kafka face needs TLS (a certificate and key) or insecure for plaintext")
	}
	if (c.Auth == nil) == (c.AnonymousKey == nil) {
		return errors.New("kafka face needs users (SASL) or an anonymous key, not both")
	}
	if c.AnonymousAdmin && c.AnonymousKey == nil {
		return errors.New("kafka anonymous_admin needs an anonymous key")
	}
	if c.AnonymousKey != nil && len(c.AnonymousKey) != ed25519.PrivateKeySize {
		return fmt.Errorf("kafka anonymous key is %d bytes, want an ed25519 private key", len(c.AnonymousKey))
	}
	if c.AutoCreateKey != nil && len(c.AutoCreateKey) != ed25519.PrivateKeySize {
		return fmt.Errorf("kafka auto-create key is %d bytes, want an ed25519 private key", len(c.AutoCreateKey))
	}
	if c.InitialRebalanceDelay < 0 {
		return fmt.Errorf("kafka initial_rebalance_delay (%s) must not be negative", c.InitialRebalanceDelay)
	}
	if c.AutoCreatePartitions < 1 {
		return fmt.Errorf("kafka auto_create_partitions (%d) must be at least 1", c.AutoCreatePartitions)
	}
	if len(c.Brokers) > 0 && c.broker(c.NodeID) == nil {
		return fmt.Errorf("kafka node id %d is not among the %d brokers listed", c.NodeID, len(c.Brokers))
	}
	seen := map[int32]bool{}
	for _, b := range c.Brokers {
		if seen[b.NodeID] {
			return fmt.Errorf("kafka brokers list node id %d twice", b.NodeID)
		}
		seen[b.NodeID] = true
	}
	for _, b := range []struct {
		name string
		v    int64
	}{
		{"kafka max_request_bytes", int64(c.MaxRequestBytes)},
		{"kafka max_pre_auth_bytes", int64(c.MaxPreAuthBytes)},
		{"kafka max_buffered_bytes", c.MaxBufferedBytes},
		{"kafka max_conns", int64(c.MaxConns)},
		{"kafka max_conns_per_ip", int64(c.MaxConnsPerIP)},
		{"kafka max_in_flight", int64(c.MaxInFlight)},
		{"kafka max_workers", int64(c.MaxWorkers)},
		{"kafka handshake_timeout", int64(c.HandshakeTimeout)},
		{"kafka request_read_timeout", int64(c.RequestReadTimeout)},
		{"kafka idle_timeout", int64(c.IdleTimeout)},
		{"kafka write_timeout", int64(c.WriteTimeout)},
		{"kafka fetch_poll", int64(c.FetchPoll)},
		{"kafka topics_ttl", int64(c.TopicsTTL)},
	} {
		if b.v <= 0 {
			return fmt.Errorf("%s (%d) must be positive", b.name, b.v)
		}
	}
	if c.MaxBufferedBytes < int64(c.MaxRequestBytes) {
		return fmt.Errorf("kafka max_buffered_bytes (%d) must be at least max_request_bytes (%d)", c.MaxBufferedBytes, c.MaxRequestBytes)
	}
	if c.MaxPreAuthBytes > c.MaxRequestBytes {
		return fmt.Errorf("kafka max_pre_auth_bytes (%d) must not exceed max_request_bytes (%d)", c.MaxPreAuthBytes, c.MaxRequestBytes)
	}
	return nil
}

func (c Config) broker(id int32) *Broker {
	for i := range c.Brokers {
		if c.Brokers[i].NodeID == id {
			return &c.Brokers[i]
		}
	}
	return nil
}

// brokers is the list Metadata answers with.
func (c Config) brokers() ([]Broker, error) {
	if len(c.Brokers) > 0 {
		return c.Brokers, nil
	}
	addr := c.Advertise
	if addr == "" {
		addr = c.Listen
	}
	b, err := ParseBroker(c.NodeID, addr)
	if err != nil {
		return nil, fmt.Errorf("kafka advertise: %w", err)
	}
	return []Broker{b}, nil
}

// ParseBroker reads host:port as broker id's address.
func ParseBroker(id int32, addr string) (Broker, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return Broker{}, fmt.Errorf("%q is not host:port: %w", addr, err)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 {
		return Broker{}, fmt.Errorf("%q: port %q is not 1-65535", addr, port)
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		return Broker{}, fmt.Errorf("%q: clients cannot connect to an unspecified host; advertise the address they reach", addr)
	}
	return Broker{NodeID: id, Host: host, Port: int32(p)}, nil
}
