package main

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/byzlog/byzlog/abciapp/app"
	"github.com/byzlog/byzlog/protos/chain"
	"github.com/byzlog/byzlog/protos/chain/rpcnode"
	"github.com/byzlog/byzlog/protos/chain/tlsconf"
	"github.com/byzlog/byzlog/protos/wire"
)

// peerOptions are the other nodes a validator fetches the bundles it
// lacks from (app.Config.Peers), reached as the gateway reaches nodes:
// https checked against a CA, plaintext beyond loopback only when asked.
type peerOptions struct {
	rpc      []string
	ca       string
	insecure bool
}

const (
	// peerCallTimeout bounds one Bundles call to a peer, all its queries.
	peerCallTimeout = 10 * time.Second
	// maxPeerResponseBytes bounds a peer's answer: a /bundles answer holds
	// up to wire.MaxBundlesBytes, base64 in JSON-RPC (4/3) with a few
	// bytes of framing an entry; twice that is ample.
	maxPeerResponseBytes = 2 * wire.MaxBundlesBytes
)

func (p *peerOptions) addFlags(f *pflag.FlagSet, c *app.Config) {
	f.StringSliceVar(&p.rpc, "peer-rpc", nil, "CometBFT RPC addresses of the chain's OTHER nodes, repeated or comma-separated: https://host:port, or http://host:port or host:port (plaintext: loopback only, unless --insecure-peers). A validator of a chain at rules version 3 fetches from them the bundles a block references that it lacks; every answer is checked against its hash, so any node will do, trusted or not. None: wait for gossip only")
	f.StringVar(&p.ca, "peer-tls-ca", "", "PEM CA the peers' RPC certificates (https:// in --peer-rpc) are checked against (empty: the system's roots)")
	f.BoolVar(&p.insecure, "insecure-peers", false, "allow plaintext RPC (http://) to peers beyond loopback: anyone on the path reads the bundles fetched (an altered one fails its hash)")
	f.DurationVar(&c.GossipWait, "bundle-gossip-wait", c.GossipWait, "rules version 3: how long a proposal's referenced bundle may take to arrive by gossip before it is fetched from --peer-rpc")
	f.DurationVar(&c.RefuseAfter, "bundle-refuse-after", c.RefuseAfter, "rules version 3: how long in all a proposal may wait for a bundle it references before this validator refuses it (at least --bundle-gossip-wait)")
}

// peers is a BundlePeer for each --peer-rpc address.
func (p peerOptions) peers() ([]app.BundlePeer, error) {
	var cfg *tls.Config
	if p.ca != "" {
		var err error
		if cfg, err = (tlsconf.Files{CA: p.ca}).Client(); err != nil {
			return nil, fmt.Errorf("--peer-tls-ca: %w", err)
		}
	}
	var peers []app.BundlePeer
	for _, a := range p.rpc {
		if a = strings.TrimSpace(a); a == "" {
			continue
		}
		if _, err := tlsconf.NodeURL(a, true); err != nil {
			return nil, fmt.Errorf("--peer-rpc: %w", err)
		}
		u, err := tlsconf.NodeURL(a, p.insecure)
		if err != nil {
			return nil, fmt.Errorf("--peer-rpc %q: plaintext RPC to a host other than loopback carries every record in the clear; give the peer's https:// address (its rpc.tls_cert_file, rpc.tls_key_file), or --insecure-peers", a)
		}
		c, err := rpcnode.New(u, rpcnode.Options{TLS: cfg, MaxResponseBytes: maxPeerResponseBytes})
		if err != nil {
			return nil, fmt.Errorf("--peer-rpc %q: %w", a, err)
		}
		name := u
		if pu, err := url.Parse(u); err == nil {
			name = pu.Redacted()
		}
		peers = append(peers, bundlePeer{name: name, c: c})
	}
	return peers, nil
}

// bundlePeer is another node's /bundles query over its CometBFT RPC.
type bundlePeer struct {
	name string
	c    *rpcnode.Client
}

var _ app.BundlePeer = bundlePeer{}

// Bundles asks the peer for the bundles named by hashes (chain.FetchBundles,
// which checks every one against its hash), within peerCallTimeout.
func (p bundlePeer) Bundles(ctx context.Context, hashes [][sha256.Size]byte) ([][]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, peerCallTimeout)
	defer cancel()
	return chain.FetchBundles(ctx, p.c, hashes)
}

func (p bundlePeer) String() string { return p.name }
