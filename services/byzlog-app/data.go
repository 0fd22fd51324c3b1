package main

import (
	"crypto/tls"
	"errors"
	"fmt"

	"github.com/spf13/pflag"

	"github.com/byzlog/byzlog/abciapp/app"
	"github.com/byzlog/byzlog/protos/chain/tlsconf"
)

// dataOptions are the node data service's flags (app.ServeData).
type dataOptions struct {
	listen     string
	cert, key  string
	insecure   bool
	maxTxBytes int
}

func (d *dataOptions) addFlags(f *pflag.FlagSet) {
	f.StringVar(&d.listen, "data-listen", "", "host:port of the node data service: gateways submit bundles and gateways and indexers read the bundles blocks reference there (their --node-data), without the node's JSON-RPC; empty: not served")
	f.StringVar(&d.cert, "data-tls-cert", "", "PEM certificate (chain) the data service serves TLS with (the node's RPC certificate will do)")
	f.StringVar(&d.key, "data-tls-key", "", "PEM private key of --data-tls-cert")
	f.IntVar(&d.maxTxBytes, "data-max-tx-bytes", app.DefaultDataMaxTxBytes, "refuse a larger submission to the data service: set it to the node's [mempool] max_tx_bytes, as broadcast_tx_sync refuses above it (its peers' mempools would refuse the transaction)")
	f.BoolVar(&d.insecure, "data-insecure", false, "allow the data service in plaintext beyond loopback: anyone on the path reads every record")
}

func (d dataOptions) validate() error {
	if (d.cert == "") != (d.key == "") {
		return errors.New("--data-tls-cert and --data-tls-key go together")
	}
	if d.cert != "" && d.listen == "" {
		return errors.New("--data-tls-cert without --data-listen: say where to serve the data service")
	}
	c := app.DataConfig{Listen: d.listen, Insecure: d.insecure, MaxTxBytes: d.maxTxBytes}
	if d.cert != "" {
		c.TLS = &tls.Config{} // its files are read by config
	}
	if err := c.Validate(); err != nil {
		return fmt.Errorf("--data-listen: %w", err)
	}
	return nil
}

// config reads the certificate files.
func (d dataOptions) config() (app.DataConfig, error) {
	c := app.DataConfig{Listen: d.listen, Insecure: d.insecure, MaxTxBytes: d.maxTxBytes}
	if d.cert != "" {
		var err error
		if c.TLS, err = (tlsconf.Files{Cert: d.cert, Key: d.key}).Server(); err != nil {
			return c, fmt.Errorf("--data-tls-cert: %w", err)
		}
	}
	return c, nil
}
