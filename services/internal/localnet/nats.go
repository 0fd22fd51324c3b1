package localnet

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/byzlog/byzlog/indexer/layout"
)

// NATS identities of a localnet, each a user of one account with
// JetStream, with NATS's own subject permissions (issue 15):
//   - the indexer may do anything in the account: it alone publishes
//     records (byzlog.>), makes and changes the streams and keeps its
//     cursor in the key-value bucket;
//   - a consumer may read: look streams up, make and read consumers of
//     them, ack, and subscribe to byzlog.> and its inboxes. It cannot
//     publish a record, claim a message id, make, delete or purge a
//     stream, delete a consumer, or read or write the cursor.
const (
	NATSIndexerUser  = "indexer"
	NATSConsumerUser = "consumer"
)

// natsConsumerPublish is what a consumer may publish: the JetStream API
// calls that read a stream, and acks. A subject wildcard matches whole
// tokens only, so these cover every stream of the account, which are all
// byzlog's; natsConsumerDeny takes the indexer's cursor bucket out.
var natsConsumerPublish = []string{
	"$JS.API.INFO",
	"$JS.API.STREAM.NAMES",
	"$JS.API.STREAM.INFO.*",
	"$JS.API.STREAM.MSG.GET.*", // a message by sequence: where a start offset or time is
	"$JS.API.DIRECT.GET.*",
	"$JS.API.DIRECT.GET.*.>",
	"$JS.API.CONSUMER.CREATE.*",
	"$JS.API.CONSUMER.CREATE.*.>",
	"$JS.API.CONSUMER.DURABLE.CREATE.*.*",
	"$JS.API.CONSUMER.INFO.*.*",
	"$JS.API.CONSUMER.MSG.NEXT.*.*",
	"$JS.ACK.*.>",
}

// natsConsumerDeny: the cursor bucket's stream may not be read either
// (deny wins over allow).
var natsConsumerDeny = func() []string {
	kv := "KV_" + layout.CursorBucket
	return []string{
		"$JS.API.STREAM.INFO." + kv, "$JS.API.STREAM.MSG.GET." + kv,
		"$JS.API.DIRECT.GET." + kv, "$JS.API.DIRECT.GET." + kv + ".>",
		"$JS.API.CONSUMER.CREATE." + kv, "$JS.API.CONSUMER.CREATE." + kv + ".>",
		"$JS.API.CONSUMER.DURABLE.CREATE." + kv + ".*",
		"$JS.API.CONSUMER.INFO." + kv + ".*", "$JS.API.CONSUMER.MSG.NEXT." + kv + ".*",
		"$JS.ACK." + kv + ".>",
	}
}()

func (n *Net) natsDir() string { return filepath.Join(n.cfg.Dir, "nats") }

// NATSPasswordFile is where user's NATS password is kept (mode 0600).
func (n *Net) NATSPasswordFile(user string) string {
	return filepath.Join(n.natsDir(), user+".password")
}

// natsPassword reads user's password, making one the first time.
func (n *Net) natsPassword(user string) (string, error) {
	path := n.NATSPasswordFile(user)
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

// natsConfigPath is the server's configuration, written at every start.
func (n *Net) natsConfigPath() string { return filepath.Join(n.natsDir(), "nats.conf") }

// writeNATSConfig writes the server's configuration for s: loopback, the
// monitoring port if s.NATSMonitor, JetStream in the network's directory, TLS with the
// network's certificate unless s is insecure, and the two users.
func (n *Net) writeNATSConfig(s Services) error {
	users := map[string]string{}
	for _, u := range []string{NATSIndexerUser, NATSConsumerUser} {
		pw, err := n.natsPassword(u)
		if err != nil {
			return fmt.Errorf("NATS password of %s: %w", u, err)
		}
		users[u] = pw
	}
	q := strconv.Quote
	var b strings.Builder
	fmt.Fprintf(&b, "# Written by byzlog localnet at every start.\n")
	fmt.Fprintf(&b, "listen: %s\nserver_name: byzlog-localnet\n", q(fmt.Sprintf("127.0.0.1:%d", s.NATSPort)))
	if s.NATSMonitor {
		fmt.Fprintf(&b, "http: %s\n", q(fmt.Sprintf("127.0.0.1:%d", s.MonitorPort())))
	}
	fmt.Fprintf(&b, "jetstream { store_dir: %s }\n", q(filepath.Join(n.natsDir(), "data")))
	if !s.Insecure {
		f := n.TLS().Party(natsParty)
		fmt.Fprintf(&b, "tls { cert_file: %s, key_file: %s, timeout: 5 }\n", q(f.Cert), q(f.Key))
	}
	quoted := func(subjects []string) string {
		out := make([]string, len(subjects))
		for i, subj := range subjects {
			out[i] = q(subj)
		}
		return strings.Join(out, ", ")
	}
	fmt.Fprintf(&b, `accounts {
  BYZLOG {
    jetstream: enabled
    users: [
      {user: %s, password: %s, permissions: {publish: ">", subscribe: ">"}}
      {user: %s, password: %s, permissions: {
        publish: {allow: [%s], deny: [%s]}
        subscribe: {allow: ["_INBOX.>", "byzlog.>"]}
      }}
    ]
  }
}
`, q(NATSIndexerUser), q(users[NATSIndexerUser]), q(NATSConsumerUser), q(users[NATSConsumerUser]), quoted(natsConsumerPublish), quoted(natsConsumerDeny))
	return os.WriteFile(n.natsConfigPath(), []byte(b.String()), 0o600)
}
