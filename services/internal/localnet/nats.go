package localnet

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/byzlog/byzlog/indexer/natsauth"
)

// NATS identities of a localnet, users of one JetStream account with
// NATS's own subject permissions (natsauth renders them; the indexer
// renders them again whenever a topic's readers change): the indexer may
// do anything; the consumer user may read the open topics; each key a
// topic lists as a reader is a user of its own (nkey); the reloader, of
// the system account, may only ask the server to reload.
const (
	NATSIndexerUser  = "indexer"
	NATSConsumerUser = "consumer"
	natsReloaderUser = "reloader"
	natsAccount      = "BYZLOG"
)

func (n *Net) natsDir() string { return filepath.Join(n.cfg.Dir, "nats") }

// NATSStoreDir is the JetStream store of the network's NATS server.
func (n *Net) NATSStoreDir() string { return filepath.Join(n.natsDir(), "data") }

// NATSPasswordFile is where user's NATS password is kept (mode 0600).
func (n *Net) NATSPasswordFile(user string) string {
	return filepath.Join(n.natsDir(), user+".password")
}

// natsPassword reads user's password, making one the first time.
func (n *Net) natsPassword(user string) (string, error) {
	return readOrMakePassword(n.NATSPasswordFile(user))
}

// readOrMakePassword reads the password in path, making one the first time.
func readOrMakePassword(path string) (string, error) {
	if b, err := os.ReadFile(path); err == nil {
		return strings.TrimSpace(string(b)), nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	var raw [24]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", err
	}
	pw := hex.EncodeToString(raw[:])
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", err
	}
	return pw, os.WriteFile(path, []byte(pw+"\n"), 0o600)
}

// NATSOptions are what a client needs to connect to s's NATS as user: its
// password and, unless s is insecure, TLS checked against the network's CA.
func (n *Net) NATSOptions(s Services, user string) ([]nats.Option, error) {
	pw, err := n.natsPassword(user)
	if err != nil {
		return nil, err
	}
	opts := []nats.Option{nats.UserInfo(user, pw)}
	if !s.Insecure {
		if err := n.ensureTLS(); err != nil {
			return nil, err
		}
		opts = append(opts, nats.RootCAs(n.TLS().CA()))
	}
	return opts, nil
}

// NATSReaderOptions connect to s's NATS as reader key (natsauth): the
// nkey challenge signed with it, its own inbox prefix, and TLS unless s is
// insecure.
func (n *Net) NATSReaderOptions(s Services, key ed25519.PrivateKey) ([]nats.Option, error) {
	opts, err := natsauth.ReaderOptions(key)
	if err != nil || s.Insecure {
		return opts, err
	}
	if err := n.ensureTLS(); err != nil {
		return nil, err
	}
	return append(opts, nats.RootCAs(n.TLS().CA())), nil
}

// NATSSyncInterval is how often the local network's NATS server syncs
// JetStream to disk. JetStream acknowledges a message once written, so a
// power loss drops what was written since the last sync, and whole streams
// whose meta.inf was never synced; the indexer then finds the streams
// shorter than its cursor says and publishes again from the chain, which
// holds the log (design.md, "NATS synced, and reconciled after a power
// loss"). So the interval bounds the refill, not what consumers get. Sync
// at every write ("always") costs an fsync per message on a single server
// (R1 streams; replicated streams sync per Raft batch instead): the bench's
// consumer got 11,079 records in 40 s with it, 485,681 with 1s.
const NATSSyncInterval = "1s"

// natsConfigPath is the server's configuration, written at every start.
func (n *Net) natsConfigPath() string { return filepath.Join(n.natsDir(), "nats.conf") }

// NATSAuthzPath is the indexer's --nats-authz spec: the accounts file
// and the fixed users, with their passwords (mode 0600).
func (n *Net) NATSAuthzPath() string { return filepath.Join(n.natsDir(), "authz.json") }

// natsAccountsPath is the accounts file the server's config includes; the
// indexer rewrites it.
func (n *Net) natsAccountsPath() string { return filepath.Join(n.natsDir(), "accounts.conf") }

// writeNATSConfig writes the server's configuration for s: loopback, the
// monitoring port if s.NATSMonitor, JetStream in the network's directory,
// TLS with the network's certificate unless s is insecure, and the
// accounts file, which it writes with no topic when there is none (a
// restarted network keeps what its indexer rendered), and the indexer's
// authz spec.
func (n *Net) writeNATSConfig(s Services) error {
	spec := natsauth.Spec{Conf: n.natsAccountsPath(), Account: natsAccount}
	for _, u := range []struct {
		name string
		to   *natsauth.User
	}{{NATSIndexerUser, &spec.Indexer}, {NATSConsumerUser, &spec.Consumer}, {natsReloaderUser, &spec.Reloader}} {
		pw, err := n.natsPassword(u.name)
		if err != nil {
			return fmt.Errorf("NATS password of %s: %w", u.name, err)
		}
		*u.to = natsauth.User{Name: u.name, Password: pw}
	}
	b, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(n.NATSAuthzPath(), append(b, '\n'), 0o600); err != nil {
		return err
	}
	if _, err := os.Stat(spec.Conf); errors.Is(err, os.ErrNotExist) {
		if err := natsauth.Write(spec, nil); err != nil {
			return err
		}
	}
	q := strconv.Quote
	var c strings.Builder
	fmt.Fprintf(&c, "# Written by byzlog localnet at every start.\n")
	fmt.Fprintf(&c, "listen: %s\nserver_name: byzlog-localnet\n", q(fmt.Sprintf("127.0.0.1:%d", s.NATSPort)))
	if s.NATSMonitor {
		fmt.Fprintf(&c, "http: %s\n", q(fmt.Sprintf("127.0.0.1:%d", s.MonitorPort())))
	}
	if s.PprofPort != 0 {
		fmt.Fprintf(&c, "prof_port: %d\n", s.NATSPprofPort())
	}
	// One server, so every stream is R1: "always" would be an fsync per
	// message, which held the indexer to ~280 records/s (bench, 2 cores);
	// NATSSyncInterval explains the choice.
	sync := "sync_interval: " + NATSSyncInterval
	if s.NATSLazySync {
		sync = "# sync_interval: its default, 2m (weakened)"
	}
	fmt.Fprintf(&c, "jetstream {\n  store_dir: %s\n  %s\n}\n", q(n.NATSStoreDir()), sync)
	if !s.Insecure {
		f := n.TLS().Party(natsParty)
		fmt.Fprintf(&c, "tls { cert_file: %s, key_file: %s, timeout: 5 }\n", q(f.Cert), q(f.Key))
	}
	fmt.Fprintf(&c, "include %s\n", q(filepath.Base(spec.Conf)))
	return os.WriteFile(n.natsConfigPath(), []byte(c.String()), 0o600)
}
