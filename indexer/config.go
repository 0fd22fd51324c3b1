package indexer

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"time"

	"github.com/byzlog/byzlog/abciapp/core"
	"github.com/byzlog/byzlog/indexer/layout"
	"github.com/byzlog/byzlog/indexer/publish"
	"github.com/byzlog/byzlog/indexer/verify"
)

// Config is an indexer's settings. Default fills every field but the
// chain's; Validate names the field that is wrong.
type Config struct {
	// Config is what verifying the blocks needs: the nodes, the chain and
	// its root of trust.
	verify.Config
	// ID names this indexer's cursor; two indexers with distinct ids may run
	// side by side on the same NATS.
	ID string
	// StartHeight is the first height to publish when no cursor exists.
	StartHeight int64
	// Replicas is the JetStream replica count of the streams it creates.
	Replicas int
	// MaxPending bounds the messages published and not yet acknowledged,
	// in acknowledgements awaited at once: MaxPending/128, each vouching for
	// up to 128 messages.
	MaxPending int
	// RecordsPerMessage is how many of a block's consecutive records of a
	// partition one NATS message carries at most (a RecordRun, up to
	// layout.MaxRunBytes) in the topic streams this indexer makes. 1
	// publishes each record as its own message, its fields in headers,
	// which any NATS client reads without byzlog's protos; above 1, a
	// reader needs them (the consumer SDK reads both). A stream keeps the
	// format it was made with (its metadata layout.FormatMetadata), which
	// every indexer follows.
	RecordsPerMessage int
	// MaxHeldBytes bounds the records held back in memory behind open Kafka
	// transactions (package layout: a partition publishes nothing past its
	// last stable offset). Past it a partition's held records are dropped
	// and read again from the chain once the transaction ends.
	MaxHeldBytes int
	// PollInterval is how often nodes are asked for new blocks.
	PollInterval time.Duration
	// CursorInterval is how often the cursor is saved.
	CursorInterval time.Duration
	// Authz, when set, keeps NATS's read permissions following the
	// topics' readers (see Authz); nil leaves NATS's accounts alone.
	Authz *publish.Authz
	// GenesisTopics are the topics genesis creates, whose read access no
	// block shows (core.ParseGenesis of the genesis app_state).
	GenesisTopics []core.TopicChange
	// GenesisWait bounds how long taking the root of trust from genesis
	// waits for the chain's first block (a new chain may not have it yet).
	GenesisWait time.Duration
	// NATSTimeout bounds connecting to NATS and each request that reloads
	// its authorization (Authz).
	NATSTimeout time.Duration
	// PublishAckTimeout bounds the wait for JetStream to acknowledge one
	// publish; past it the block is published again.
	PublishAckTimeout time.Duration
	// RetryBackoff is the first wait after indexing is interrupted (a node
	// or NATS failing); it doubles up to MaxRetryBackoff while no progress
	// is made.
	RetryBackoff, MaxRetryBackoff time.Duration
	// StopSaveTimeout bounds saving the cursor once more on stop.
	StopSaveTimeout time.Duration
	// ProgressKey, when set, is the key of this indexer's registration on
	// the chain (SetIndexer): every ProgressInterval it reports the height
	// JetStream acknowledged ProgressDelay ago, and nodes that prune keep
	// every block above it (progress.go). ProgressDelay must be longer
	// than the NATS servers' sync_interval (JetStream's default is 2m).
	ProgressKey                     ed25519.PrivateKey
	ProgressInterval, ProgressDelay time.Duration
}

// Default returns the defaults: 168 h trusting period, id "indexer",
// start at height 1, 1 replica, 10 min duplicate window, 8192 pending
// publishes, up to 256 records a message, 256 MiB held behind open
// transactions, 100 ms polling, cursor saved every second, RPC responses up
// to 16 MiB, a minute's wait for a new chain's first block, 10 s to reach
// NATS, 30 s for a publish's acknowledgement, retries after 100 ms doubling
// to 5 s, 2 s to save the cursor on stop, progress reported every 10 s
// as it was 3 min before (no key: no reports).
func Default() Config {
	pub := publish.Default()
	return Config{
		Config:            verify.Default(),
		ID:                pub.ID,
		StartHeight:       1,
		Replicas:          pub.Replicas,
		MaxPending:        pub.MaxPending,
		RecordsPerMessage: pub.RecordsPerMessage,
		MaxHeldBytes:      pub.MaxHeldBytes,
		PollInterval:      100 * time.Millisecond,
		CursorInterval:    time.Second,

		GenesisWait: time.Minute,
		NATSTimeout: 10 * time.Second,

		PublishAckTimeout: pub.PublishAckTimeout,
		RetryBackoff:      100 * time.Millisecond,
		MaxRetryBackoff:   5 * time.Second,
		StopSaveTimeout:   2 * time.Second,
		ProgressInterval:  10 * time.Second,
		ProgressDelay:     3 * time.Minute,
	}
}

// publishing is the part of c the publisher takes.
func (c Config) publishing() publish.Config {
	return publish.Config{ChainID: c.ChainID, ID: c.ID, Replicas: c.Replicas, MaxPending: c.MaxPending, RecordsPerMessage: c.RecordsPerMessage,
		PublishAckTimeout: c.PublishAckTimeout, MaxHeldBytes: c.MaxHeldBytes, GenesisTopics: c.GenesisTopics, Authz: c.Authz}
}

// DefaultRecordsPerMessage is RecordsPerMessage's default, and
// MaxRecordsPerMessage its bound.
const (
	DefaultRecordsPerMessage = layout.DefaultRunRecords
	MaxRecordsPerMessage     = layout.MaxRunRecords
)

// Validate says which field is wrong and why.
func (c Config) Validate() error {
	if err := c.ValidateTrust(); err != nil {
		return err
	}
	switch {
	case !validID(c.ID):
		return fmt.Errorf("id %q: use 1 to 64 of a-z, A-Z, 0-9, '-' and '_'", c.ID)
	case c.StartHeight < 1:
		return fmt.Errorf("start_height (%d) must be at least 1", c.StartHeight)
	case c.Replicas < 1 || c.Replicas > 5:
		return fmt.Errorf("replicas (%d) must be between 1 and 5 (JetStream's limit)", c.Replicas)
	case c.MaxPending < 1:
		return errors.New("max_pending must be at least 1")
	case c.RecordsPerMessage < 1 || c.RecordsPerMessage > MaxRecordsPerMessage:
		return fmt.Errorf("records_per_message (%d) must be between 1 (a message per record) and %d", c.RecordsPerMessage, MaxRecordsPerMessage)
	case c.MaxHeldBytes < 1<<20:
		return fmt.Errorf("max_held_bytes (%d) must be at least 1 MiB (1048576)", c.MaxHeldBytes)
	case c.PollInterval <= 0 || c.CursorInterval <= 0:
		return fmt.Errorf("poll_interval (%s) and cursor_interval (%s) must be positive", c.PollInterval, c.CursorInterval)
	case c.ValidateResponses() != nil:
		return c.ValidateResponses()
	case c.GenesisWait < 0:
		return fmt.Errorf("genesis_wait (%s) must not be negative", c.GenesisWait)
	case c.NATSTimeout <= 0:
		return fmt.Errorf("nats_timeout (%s) must be positive", c.NATSTimeout)
	case c.PublishAckTimeout < time.Second:
		return fmt.Errorf("publish_ack_timeout (%s) must be at least 1s", c.PublishAckTimeout)
	case c.RetryBackoff <= 0 || c.MaxRetryBackoff < c.RetryBackoff:
		return fmt.Errorf("retry_backoff (%s) must be positive and at most max_retry_backoff (%s)", c.RetryBackoff, c.MaxRetryBackoff)
	case c.StopSaveTimeout <= 0:
		return fmt.Errorf("stop_save_timeout (%s) must be positive", c.StopSaveTimeout)
	case c.ProgressKey != nil && len(c.ProgressKey) != ed25519.PrivateKeySize:
		return fmt.Errorf("progress_key is %d bytes, an ed25519 private key is %d", len(c.ProgressKey), ed25519.PrivateKeySize)
	case c.ProgressInterval < time.Second || c.ProgressDelay < 0:
		return fmt.Errorf("progress_interval (%s) must be at least 1s and progress_delay (%s) not negative", c.ProgressInterval, c.ProgressDelay)
	}
	if a := c.Authz; a != nil {
		if err := a.Spec.Validate(); err != nil {
			return err
		}
		if a.Reload == nil {
			return errors.New("NATS authz: no way to reload the server (Reload is nil)")
		}
	}
	return c.ValidateLinks()
}

func validID(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
