package tlsconf

import (
	"bytes"
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// handshake runs a TLS handshake between a server and a client config over
// loopback and returns the client's and the server's error.
func handshake(t *testing.T, server, client *tls.Config) (error, error) {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", server)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	serr := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			serr <- err
			return
		}
		defer c.Close()
		err = c.(*tls.Conn).Handshake()
		if err == nil {
			_, err = c.Write([]byte("ok"))
		}
		serr <- err
	}()
	c, err := tls.Dial("tcp", ln.Addr().String(), client)
	if err == nil {
		buf := make([]byte, 2)
		_, err = c.Read(buf) // a refused client certificate shows after the handshake in TLS 1.3
		c.Close()
	}
	return err, <-serr
}

func TestLocalTLS(t *testing.T) {
	dir := t.TempDir()
	local := Local{Dir: filepath.Join(dir, "tls")}
	if err := local.Ensure([]string{"127.0.0.1", "localhost"}, "gateway", "client"); err != nil {
		t.Fatal(err)
	}
	other := Local{Dir: filepath.Join(dir, "other")}
	if err := other.Ensure([]string{"127.0.0.1"}, "gateway", "client"); err != nil {
		t.Fatal(err)
	}
	gw, cl := local.Party("gateway"), local.Party("client")
	serverTLS := Files{Cert: gw.Cert, Key: gw.Key}
	mutual := gw // with the CA: client certificates required
	for _, tc := range []struct {
		name          string
		server        Files
		client        Files
		wantClientErr string // "" : the handshake works
	}{
		{"server TLS, client checks the CA", serverTLS, Files{CA: cl.CA}, ""},
		{"a client with another CA", serverTLS, Files{CA: other.CA()}, "certificate signed by unknown authority"},
		{"mutual TLS", mutual, cl, ""},
		{"mutual TLS, no client certificate", mutual, Files{CA: cl.CA}, "certificate required"},
		{"mutual TLS, a certificate of another CA", mutual, Files{CA: cl.CA, Cert: other.Party("client").Cert, Key: other.Party("client").Key}, "unknown certificate authority"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := tc.server.Server()
			if err != nil {
				t.Fatal(err)
			}
			c, err := tc.client.Client()
			if err != nil {
				t.Fatal(err)
			}
			c.ServerName = "127.0.0.1"
			cerr, serr := handshake(t, s, c)
			if tc.wantClientErr == "" {
				if cerr != nil || serr != nil {
					t.Fatalf("handshake: client %v, server %v; want both ok", cerr, serr)
				}
				return
			}
			if cerr == nil || !strings.Contains(cerr.Error(), tc.wantClientErr) {
				t.Fatalf("client error %v; want one with %q (server: %v)", cerr, tc.wantClientErr, serr)
			}
			if serr == nil {
				t.Fatal("the server completed the handshake")
			}
		})
	}

	// Ensure again keeps every file: a restarted localnet keeps its CA.
	before, _ := os.ReadFile(local.CA())
	beforeGW, _ := os.ReadFile(gw.Cert)
	if err := local.Ensure([]string{"127.0.0.1"}, "gateway", "client", "indexer"); err != nil {
		t.Fatal(err)
	}
	after, _ := os.ReadFile(local.CA())
	afterGW, _ := os.ReadFile(gw.Cert)
	if !bytes.Equal(before, after) || !bytes.Equal(beforeGW, afterGW) {
		t.Fatal("Ensure replaced existing certificates")
	}
	if _, err := os.Stat(local.Party("indexer").Cert); err != nil {
		t.Fatalf("Ensure did not issue the new party's certificate: %v", err)
	}
}

func TestFilesErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  func() error
		want string
	}{
		{"server without a certificate", func() error { _, err := Files{}.Server(); return err }, "or insecure for plaintext"},
		{"missing CA file", func() error { _, err := Files{CA: "/nonexistent/ca.pem"}.Client(); return err }, "read CA /nonexistent/ca.pem"},
		{"certificate without key", func() error { _, err := Files{Cert: "c.pem"}.Client(); return err }, "needs its key"},
		{"CA that is not PEM", func() error {
			p := filepath.Join(t.TempDir(), "ca.pem")
			_ = os.WriteFile(p, []byte("not pem"), 0o600)
			_, err := Files{CA: p}.Client()
			return err
		}, "holds no PEM certificate"},
	} {
		if err := tc.err(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want an error with %q", tc.name, err, tc.want)
		}
	}
}
