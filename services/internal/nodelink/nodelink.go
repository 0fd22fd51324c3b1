// Package nodelink is how byzlog's commands reach CometBFT nodes' RPC:
// https with the nodes' certificates checked against a CA, and plaintext
// beyond loopback only when asked for. The gateway, the indexer and
// `byzlog consume --verify` register the same two flags.
package nodelink

import (
	"fmt"
	"os"

	"github.com/spf13/pflag"

	"github.com/byzlog/byzlog/indexer"
	"github.com/byzlog/byzlog/indexer/tlsconf"
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

// Link is the indexer.NodeLink the flags say. A default CA that does not
// exist is left out (an https node then fails against the system's
// roots, saying so); one given on the command line must exist.
func (f Flags) Link(fs *pflag.FlagSet) (indexer.NodeLink, error) {
	l := indexer.NodeLink{Insecure: f.Insecure}
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
