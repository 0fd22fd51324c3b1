// Package nodelink is how byzlog's commands reach CometBFT nodes' RPC:
// https with the nodes' certificates checked against a CA, and plaintext
// beyond loopback only when asked for. The gateway, the indexer and
// `byzlog consume --verify` register the same two flags, read --nodes
// the same way, and the indexer and consume take their root of trust
// from genesis through the nodes the same way.
package nodelink

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	cmttypes "github.com/cometbft/cometbft/types"
	"github.com/spf13/pflag"

	"github.com/byzlog/byzlog/indexer/verify"
	"github.com/byzlog/byzlog/protos/chain/rpcnode"
	"github.com/byzlog/byzlog/protos/chain/tlsconf"
)

// Flags are the node link's settings.
type Flags struct {
	// CA is the PEM CA the nodes' RPC certificates are checked against
	// (empty: the system's roots).
	CA string
	// Insecure allows plaintext RPC (http://) to nodes beyond loopback.
	Insecure bool
}

// Add registers --node-tls-ca and --insecure-nodes, with d's values as
// defaults.
func (f *Flags) Add(fs *pflag.FlagSet, d Flags) {
	*f = d
	fs.StringVar(&f.CA, "node-tls-ca", d.CA, "PEM CA the nodes' RPC certificates (https:// in --nodes) are checked against (empty: the system's roots)")
	fs.BoolVar(&f.Insecure, "insecure-nodes", d.Insecure, "allow plaintext RPC (http://) to nodes beyond loopback: anyone on the path reads every record")
}

// Link is the verify.NodeLink the flags say. A default CA that does not
// exist is left out (an https node then fails against the system's
// roots, saying so); one given on the command line must exist.
func (f Flags) Link(fs *pflag.FlagSet) (verify.NodeLink, error) {
	l := verify.NodeLink{Insecure: f.Insecure}
	if f.CA == "" {
		return l, nil
	}
	if _, err := os.Stat(f.CA); err != nil && !fs.Changed("node-tls-ca") {
		return l, nil
	}
	c, err := tlsconf.Files{CA: f.CA}.Client()
	if err != nil {
		return l, fmt.Errorf("--node-tls-ca: %w", err)
	}
	l.TLS = c
	return l, nil
}

// NodesHelp is the help of every --nodes flag: the forms ParseNodes takes.
const NodesHelp = "comma-separated CometBFT RPC addresses: https://host:port, or http://host:port or host:port (plaintext: loopback only, unless --insecure-nodes)"

// ParseNodes reads a comma-separated list of CometBFT RPC addresses in
// any form tlsconf.NodeURL takes (https://host:port, http://host:port,
// host:port), dropping empty entries and spaces around each, and checks
// each: plaintext beyond loopback only when insecure. The addresses come
// back as given.
func ParseNodes(list string, insecure bool) ([]string, error) {
	var addrs []string
	for _, a := range strings.Split(list, ",") {
		if a = strings.TrimSpace(a); a == "" {
			continue
		}
		if _, err := tlsconf.NodeURL(a, insecure); err != nil {
			return nil, err
		}
		addrs = append(addrs, a)
	}
	return addrs, nil
}

// NodeDataHelp is the help of every --node-data flag.
const NodeDataHelp = "comma-separated addresses of the nodes' data services (byzlog-app --data-listen), one per --nodes entry in the same order (empty for a node without one), in the same forms: queries, bundles and submissions go there instead of through JSON-RPC's base64 and hex (much less CPU for the nodes); empty: all over the nodes' RPC"

// ParseNodeData reads --node-data: one entry per node (n), in the order
// of --nodes, an empty one for a node reached over its RPC alone, or none
// at all; checked by rpcnode.CheckDataAddrs.
func ParseNodeData(list string, n int, insecure bool) ([]string, error) {
	if strings.TrimSpace(list) == "" {
		return nil, nil
	}
	// Positional: an empty entry is a node without a data service.
	addrs := strings.Split(list, ",")
	for i := range addrs {
		addrs[i] = strings.TrimSpace(addrs[i])
	}
	if err := rpcnode.CheckDataAddrs(addrs, n, insecure); err != nil {
		return nil, err
	}
	return addrs, nil
}

// TrustGenesis is the root of trust a genesis file gives: it reads the
// file at path, reaches addrs through link and takes the chain's first
// header, which the genesis validators must have signed. On a new chain
// the first block may take a moment: it retries for up to wait (0: tries
// once). Errors name the setting at fault: genesis or nodes.
func TrustGenesis(ctx context.Context, path string, addrs []string, link verify.NodeLink, wait time.Duration) (*cmttypes.GenesisDoc, verify.Trust, error) {
	gen, err := cmttypes.GenesisDocFromFile(path)
	if err != nil {
		return nil, verify.Trust{}, fmt.Errorf("genesis: %w", err)
	}
	provs, _, err := verify.NewNodes(gen.ChainID, addrs, link)
	if err != nil {
		return nil, verify.Trust{}, fmt.Errorf("nodes: %w", err)
	}
	deadline := time.Now().Add(wait)
	for {
		trust, err := verify.TrustGenesis(ctx, gen, provs)
		if err == nil || !time.Now().Before(deadline) || ctx.Err() != nil {
			return gen, trust, err
		}
		time.Sleep(500 * time.Millisecond)
	}
}
