package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/byzlog/byzlog/protos/chain/tlsconf"
)

// newHealthcheckCommand is the images' health check of the HTTP face over
// TLS: the slim images have no curl, and a shell cannot speak TLS.
func newHealthcheckCommand() *cobra.Command {
	var files tlsconf.Files
	timeout := 3 * time.Second
	cmd := &cobra.Command{
		Use:   "healthcheck URL",
		Short: "GET URL (https with --tls-ca) and exit 0 on HTTP 200: a container health check",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := files.Client()
			if err != nil {
				return err
			}
			hc := &http.Client{Timeout: timeout, Transport: &http.Transport{TLSClientConfig: c}}
			return healthcheck(cmd.Context(), hc, args[0])
		},
	}
	f := cmd.Flags()
	f.StringVar(&files.CA, "tls-ca", "", "PEM CA the gateway's certificate is checked against (empty: the system's roots)")
	f.StringVar(&files.Cert, "tls-cert", "", "PEM client certificate, for a gateway that requires mutual TLS")
	f.StringVar(&files.Key, "tls-key", "", "PEM private key of --tls-cert")
	f.DurationVar(&timeout, "timeout", timeout, "give up after this long")
	return cmd
}

func healthcheck(ctx context.Context, hc *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %s: %s", url, resp.Status, body)
	}
	return nil
}
