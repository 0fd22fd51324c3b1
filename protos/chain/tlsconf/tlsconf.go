// Package tlsconf builds the TLS configurations of byzlog's links from PEM
// files, and issues a local certificate authority and certificates for
// localnets and tests.
//
// A server has a certificate and key and, for mutual TLS, a CA its
// clients' certificates must chain to. A client has a CA to check the
// server against (the system's roots when none is given) and, for mutual
// TLS, a certificate of its own. TLS 1.3 only: every byzlog party is new.
package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"google.golang.org/grpc/credentials"
	grpcinsecure "google.golang.org/grpc/credentials/insecure"
)

// Files names a party's PEM files.
type Files struct {
	// CA: a client checks the server's certificate against it (empty: the
	// system's roots); a server given one requires every client to present
	// a certificate it signed (mutual TLS).
	CA string
	// Cert and Key: the party's own certificate chain and private key. A
	// server needs them; a client sends them when the server asks.
	Cert string
	Key  string
}

// Server is the TLS configuration of a server: f.Cert and f.Key, and with
// f.CA mutual TLS.
func (f Files) Server() (*tls.Config, error) {
	if f.Cert == "" || f.Key == "" {
		return nil, errors.New("TLS server: need a certificate and a key (tls_cert, tls_key), or insecure for plaintext")
	}
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, fmt.Errorf("TLS server: load certificate %s and key %s: %w", f.Cert, f.Key, err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}}
	if f.CA != "" {
		pool, err := loadPool(f.CA)
		if err != nil {
			return nil, fmt.Errorf("TLS server: client CA: %w", err)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// Client is the TLS configuration of a client: the server is checked
// against f.CA (the system's roots when empty), and f.Cert and f.Key, when
// given, are sent to a server that asks for a certificate.
func (f Files) Client() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS13}
	if f.CA != "" {
		pool, err := loadPool(f.CA)
		if err != nil {
			return nil, fmt.Errorf("TLS client: %w", err)
		}
		cfg.RootCAs = pool
	}
	switch {
	case f.Cert != "" && f.Key != "":
		cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, fmt.Errorf("TLS client: load certificate %s and key %s: %w", f.Cert, f.Key, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	case f.Cert != "" || f.Key != "":
		return nil, fmt.Errorf("TLS client: a certificate needs its key and a key its certificate (got cert %q, key %q)", f.Cert, f.Key)
	}
	return cfg, nil
}

func loadPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read CA %s: %w", path, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("CA %s holds no PEM certificate", path)
	}
	return pool, nil
}

// Transport is a gRPC client's transport: plaintext when insecure, else
// TLS with c (nil: TLS 1.3 against the system's roots).
func Transport(c *tls.Config, insecure bool) credentials.TransportCredentials {
	if insecure {
		return grpcinsecure.NewCredentials()
	}
	if c == nil {
		c = &tls.Config{MinVersion: tls.VersionTLS13}
	}
	return credentials.NewTLS(c)
}
