package verify

import (
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"github.com/byzlog/byzlog/protos/chain/rpcnode"
	"github.com/byzlog/byzlog/protos/chain/tlsconf"
	"github.com/byzlog/byzlog/protos/wire"
)

// Config is what verifying blocks needs: the nodes, how to reach them, the
// chain and its root of trust.
type Config struct {
	// Nodes are the CometBFT RPC addresses to follow; the light client uses
	// the first reachable one as primary and every other as a witness, so
	// at least two are needed.
	Nodes []string
	// NodeData are the nodes' data services (byzlog-app --data-listen),
	// one per node of Nodes in the same order, in the same forms: the
	// bundles blocks reference are read there, without JSON-RPC's base64.
	// Empty: everything is read over the RPC.
	NodeData []string
	// Link says how to reach the nodes' RPC.
	Link NodeLink
	// ChainID is the chain to follow (from genesis).
	ChainID string
	// Trust is the root of trust: a header hash at a height, taken from
	// genesis by TrustGenesis or configured by the operator.
	Trust Trust
	// TrustingPeriod bounds how old a trusted header may be (CometBFT's
	// light client rule); past it the indexer needs a new root.
	TrustingPeriod time.Duration
	// MaxResponseBytes bounds every RPC response body read from a node
	// (blocks and their results are the largest honest ones), so a lying
	// node cannot make the indexer read a huge one.
	MaxResponseBytes int64
}

// DefaultTrustingPeriod is 168 h, CometBFT's usual two thirds of a
// three-week unbonding period, rounded to a week.
const DefaultTrustingPeriod = 168 * time.Hour

// Default is the defaults: DefaultTrustingPeriod, DefaultMaxResponseBytes.
func Default() Config {
	return Config{TrustingPeriod: DefaultTrustingPeriod, MaxResponseBytes: DefaultMaxResponseBytes}
}

// Validate says which field is wrong and why.
func (c Config) Validate() error {
	for _, check := range []func() error{c.ValidateTrust, c.ValidateResponses, c.ValidateLinks} {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// ValidateTrust checks the nodes' count, the chain and its root of trust.
func (c Config) ValidateTrust() error {
	switch {
	case len(c.Nodes) < 2:
		return fmt.Errorf("nodes: %d given; the light client needs a primary and at least one witness", len(c.Nodes))
	case c.ChainID == "":
		return errors.New("chain_id is empty; take it from genesis")
	case c.Trust.Height < 1 || len(c.Trust.Hash) != 32:
		return fmt.Errorf("trust root: height %d, hash of %d bytes; want a height ≥ 1 and a 32-byte header hash", c.Trust.Height, len(c.Trust.Hash))
	case c.TrustingPeriod < time.Minute:
		return fmt.Errorf("trusting_period (%s) must be at least 1m", c.TrustingPeriod)
	}
	return nil
}

// ValidateResponses checks the bound on a node's answers.
func (c Config) ValidateResponses() error {
	if c.MaxResponseBytes < wire.MinReaderResponseBytes {
		return fmt.Errorf("max_response_bytes (%d) must be at least %d (8 MiB): a block's bundles are read in answers of up to 3 MiB, ~4 MiB in JSON", c.MaxResponseBytes, wire.MinReaderResponseBytes)
	}
	return nil
}

// ValidateLinks checks the nodes' addresses and data services against how
// they are reached.
func (c Config) ValidateLinks() error {
	if err := rpcnode.CheckDataAddrs(c.NodeData, len(c.Nodes), c.Link.Insecure); err != nil {
		return fmt.Errorf("node_data: %w", err)
	}
	_, err := c.Link.urls(c.Nodes)
	return err
}

// NodeLink says how to reach CometBFT nodes' RPC: https with certificates
// checked against TLS (the nodes' CA; nil: the system's roots), plaintext
// only on loopback unless Insecure.
type NodeLink struct {
	TLS      *tls.Config
	Insecure bool
}

// urls checks addrs and returns them as URLs (tlsconf.NodeURL).
func (l NodeLink) urls(addrs []string) ([]string, error) {
	out := make([]string, len(addrs))
	for i, a := range addrs {
		u, err := tlsconf.NodeURL(a, l.Insecure)
		if err != nil {
			return nil, err
		}
		out[i] = u
	}
	return out, nil
}

// DefaultMaxResponseBytes is 16 MiB: four times the 4 MiB block limit, room
// for a block or its results in JSON.
const DefaultMaxResponseBytes = 16 << 20
