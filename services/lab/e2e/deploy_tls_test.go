//go:build e2e

package e2e

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/conf"

	"github.com/byzlog/byzlog/indexer/natsauth"
	"github.com/byzlog/byzlog/services/internal/localnet"
)

// checkCert says whether certFile, with its key in keyFile, is a server
// certificate that the CA in caFile vouches for host, as a client that
// dials host and checks against caFile would accept it, for at least 30
// more days.
func checkCert(caFile, certFile, keyFile, host string) error {
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return fmt.Errorf("%s holds no PEM certificate", caFile)
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return fmt.Errorf("certificate %s with key %s: %w", certFile, keyFile, err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return err
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: host, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return fmt.Errorf("%s is not valid for %s by the CA in %s: %w", certFile, host, caFile, err)
	}
	if left := time.Until(leaf.NotAfter); left < 30*24*time.Hour {
		return fmt.Errorf("%s expires in %s", certFile, left.Round(time.Hour))
	}
	return nil
}

// readNATSConf parses a NATS server configuration as nats-server does.
func readNATSConf(file string) (map[string]any, error) {
	m, err := conf.ParseFile(file)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return m, nil
}

// natsUsers maps each user of every account to its entry (user,
// password, permissions).
func natsUsers(accounts any) map[string]map[string]any {
	out := map[string]map[string]any{}
	a, _ := accounts.(map[string]any)
	for _, acct := range a {
		ac, _ := acct.(map[string]any)
		users, _ := ac["users"].([]any)
		for _, u := range users {
			if m, ok := u.(map[string]any); ok {
				name, _ := m["user"].(string)
				out[name] = m
			}
		}
	}
	return out
}

// natsauthSpec reads an indexer's --nats-authz file.
func natsauthSpec(file string) (natsauth.Spec, error) {
	var spec natsauth.Spec
	b, err := os.ReadFile(file)
	if err == nil {
		err = json.Unmarshal(b, &spec)
	}
	if err == nil {
		err = spec.Validate()
	}
	if err != nil {
		return spec, fmt.Errorf("%s: %w", file, err)
	}
	return spec, nil
}

// checkGeneratedTLS checks the certificates and NATS credentials
// init-cluster.sh wrote to dir for n validators: one CA, copied to every
// audience; node i's RPC certificate valid for host(i) and 127.0.0.1 (its
// health check) and no other node, and its config.toml serving RPC with
// it; NATS's configuration with TLS, monitoring on loopback and the
// accounts file natsauth renders, with the passwords the indexer and
// consumers are given; and the CA's key nowhere but in ca/.
func checkGeneratedTLS(t *testing.T, dir string, n int, host func(int) string, cfgs []rpcTLSFiles) {
	t.Helper()
	ca := filepath.Join(dir, "ca", "ca.pem")
	caPEM, err := os.ReadFile(ca)
	if err != nil {
		t.Fatalf("init-cluster.sh made no CA: %v", err)
	}
	copies := []string{filepath.Join(dir, "tls", "ca.pem"), filepath.Join(dir, "indexer", "ca.pem"), filepath.Join(dir, "consumer", "ca.pem")}
	for i := 0; i < n; i++ {
		copies = append(copies, filepath.Join(dir, fmt.Sprintf("node%d", i), "config", "rpc-ca.pem"))
	}
	for _, c := range copies {
		if b, err := os.ReadFile(c); err != nil || !bytes.Equal(b, caPEM) {
			t.Errorf("%s: want a copy of the CA %s (%v)", c, ca, err)
		}
	}
	for i, f := range cfgs {
		where := fmt.Sprintf("generated node%d config.toml", i)
		if f.cert == "" || f.key == "" {
			t.Errorf("%s: rpc.tls_cert_file and rpc.tls_key_file unset: the node would serve RPC, every record, in plaintext", where)
			continue
		}
		for _, h := range []string{host(i), "127.0.0.1"} {
			if err := checkCert(ca, f.cert, f.key, h); err != nil {
				t.Errorf("%s: RPC certificate: %v", where, err)
			}
		}
		if j := (i + 1) % n; n > 1 && checkCert(ca, f.cert, f.key, host(j)) == nil {
			t.Errorf("%s: its RPC certificate is also valid for %s: one node's key could pose as another", where, host(j))
		}
	}

	natsConf, err := readNATSConf(filepath.Join(dir, "nats", "nats.conf"))
	if err != nil {
		t.Fatal(err)
	}
	where := "generated nats/nats.conf"
	if inc := regexp.MustCompile(`(?m)^include\s+"([^"]+)"`).FindStringSubmatch(readFile(t, filepath.Join(dir, "nats", "nats.conf"))); inc == nil || filepath.Join(dir, "nats", inc[1]) != filepath.Join(dir, "nats-accounts", "accounts.conf") {
		t.Errorf("%s: want it to include the accounts file, nats-accounts/accounts.conf, relative to itself (got %v)", where, inc)
	}
	tlsBlock, _ := natsConf["tls"].(map[string]any)
	if cf, _ := tlsBlock["cert_file"].(string); path.Base(cf) != "nats.pem" {
		t.Errorf("%s: tls.cert_file %q, want the certificate init writes, nats.pem", where, cf)
	}
	if err := checkCert(ca, filepath.Join(dir, "nats", "nats.pem"), filepath.Join(dir, "nats", "nats-key.pem"), "127.0.0.1"); err != nil {
		t.Errorf("%s: %v", where, err)
	}
	if h, _ := natsConf["http"].(string); h != "" {
		if host, _, err := net.SplitHostPort(h); err != nil || !loopback(host) {
			t.Errorf("%s: http %q: monitoring must listen on loopback only (it has no authentication)", where, h)
		}
	}
	if _, ok := natsConf["http_port"]; ok {
		t.Errorf("%s: http_port listens on every address: give http HOST:PORT on loopback", where)
	}
	// The accounts are natsauth's: the indexer renders them (--nats-authz)
	// and init writes them as natsauth would for no topic yet.
	spec, err := natsauthSpec(filepath.Join(dir, "indexer", "authz.json"))
	if err != nil {
		t.Fatal(err)
	}
	accounts := filepath.Join(dir, "nats-accounts", "accounts.conf")
	if want, err := natsauth.Render(spec, nil); err != nil {
		t.Error(err)
	} else if got, _ := os.ReadFile(accounts); string(got) != want {
		t.Errorf("%s is not what indexer/natsauth renders for no topic, which it must be (init-cluster.sh writes it as natsauth.Render would):\n got:\n%s\n want:\n%s", accounts, got, want)
	}
	if path.Base(spec.Conf) != "accounts.conf" {
		t.Errorf("indexer/authz.json: conf %s: want the accounts file init writes, accounts.conf", spec.Conf)
	}
	users := natsUsers(natsConf["accounts"])
	for _, u := range []struct {
		user, file string
		spec       natsauth.User
	}{
		{localnet.NATSIndexerUser, filepath.Join(dir, "indexer", "nats.password"), spec.Indexer},
		{localnet.NATSConsumerUser, filepath.Join(dir, "consumer", "nats.password"), spec.Consumer},
	} {
		b, err := os.ReadFile(u.file)
		pw := strings.TrimSpace(string(b))
		switch {
		case err != nil:
			t.Errorf("%s: %v", where, err)
		case len(pw) < 32:
			t.Errorf("%s: %d characters: too short a password", u.file, len(pw))
		case users[u.user]["password"] != pw:
			t.Errorf("%s (with what it includes): user %s's password is not the one in %s", where, u.user, u.file)
		case u.spec.Name != u.user || u.spec.Password != pw:
			t.Errorf("indexer/authz.json: user %s/%s, want %s with the password in %s", u.spec.Name, "…", u.user, u.file)
		}
	}

	caKey, err := os.ReadFile(filepath.Join(dir, "ca", "ca-key.pem"))
	if err != nil {
		t.Fatalf("init-cluster.sh kept no CA key in ca/: %v", err)
	}
	_ = filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() || strings.HasPrefix(p, filepath.Join(dir, "ca")+string(filepath.Separator)) {
			return err
		}
		if b, _ := os.ReadFile(p); bytes.Contains(b, bytes.TrimSpace(caKey)) {
			t.Errorf("%s holds the CA's key: keep it in ca/ alone, or whoever reads it can pose as any node", p)
		}
		return nil
	})
}

func readFile(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// rpcTLSFiles are a node's RPC certificate and key, as its config.toml
// names them (resolved against its config directory).
type rpcTLSFiles struct{ cert, key string }
