package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/byzlog/byzlog/protos/chain/tlsconf"
)

func newCertsCommand() *cobra.Command {
	dir := ""
	hosts := []string{"127.0.0.1", "localhost", "::1"}
	cmd := &cobra.Command{
		Use:   "certs NAME...",
		Short: "Make a local CA in --dir and a TLS certificate for each NAME",
		Long: `Make what byzlog's TLS needs for a cluster without a CA of its own: in --dir,
a certificate authority (ca.pem, ca-key.pem) when there is none, and for each
NAME a certificate and key (NAME.pem, NAME-key.pem) that the CA signs, valid for
--hosts as a server and as a client, for a year. What exists is kept, so running
it again adds names without replacing anyone's certificate. ECDSA P-256.

Gateways serve with theirs (--tls-cert, --tls-key); clients check them against
ca.pem (--tls-ca), and with mutual TLS present their own. byzlog run and the
localnet make theirs in DIR/tls.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, names []string) error {
			if dir == "" {
				return fmt.Errorf("--dir: required")
			}
			for _, n := range names {
				if n == "" || n == "ca" || n == "ca-key" || strings.ContainsAny(n, "/\\ ") {
					return fmt.Errorf("name %q: want a plain file name other than ca", n)
				}
			}
			l := tlsconf.Local{Dir: dir}
			if err := l.Ensure(hosts, names...); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "CA %s\n", l.CA())
			for _, n := range names {
				f := l.Party(n)
				fmt.Fprintf(cmd.OutOrStdout(), "%s: %s, %s\n", n, f.Cert, f.Key)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "", "directory of the CA and certificates (created, mode 0700)")
	f.StringSliceVar(&hosts, "hosts", hosts, "host names and IP addresses the certificates are valid for")
	return cmd
}
