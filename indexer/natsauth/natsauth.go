// Package natsauth renders the NATS accounts a byzlog cluster runs with,
// from the chain's topic configs, in NATS's own configuration language:
// users with subject permissions in one JetStream account, and a system
// account user that may only ask the server to reload. Nothing here
// authenticates anyone; the NATS server does, with what is rendered.
//
// The identities:
//   - the indexer may do anything in the account: it alone publishes
//     records (byzlog.>), makes and changes streams, and keeps its cursor
//     in the key-value bucket;
//   - the consumer user (a shared password) may read the open topics,
//     those whose config lists no readers, and the blocks stream;
//   - each reader key a topic's config lists is a user of its own,
//     authenticated by NATS's nkey challenge (the key is an ed25519 key,
//     which is what a NATS user nkey is) that may read the open topics and
//     the topics that list it.
//
// Reading is allow-listed per topic, so a topic nobody rendered yet (just
// created, or unknown) is readable by nobody but the indexer: a stale or
// missing file fails closed. Reading means: look a stream up, make and
// read consumers of it, get its messages, ack, and subscribe to its
// subjects (a partition's, and a compacted topic's keys'). Nobody but the indexer may publish a record, claim a message
// id, make, delete or purge a stream, delete a consumer, or touch the
// cursor. Each reader's replies come to an inbox prefix of its own
// (InboxPrefix), which no other user may subscribe to; the consumer user
// keeps NATS's default _INBOX.
package natsauth

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/byzlog/byzlog/indexer/layout"
)

// User is a NATS user with a password: plain text, or a bcrypt hash
// ("$2a$..."), which NATS accepts either way.
type User struct {
	Name     string `json:"user"`
	Password string `json:"password"`
}

// Spec is the fixed part of a cluster's NATS accounts, as the indexer's
// --nats-authz file holds it.
type Spec struct {
	// Conf is the file Render's output goes to; the server's config
	// includes it (include "accounts.conf").
	Conf string `json:"conf"`
	// Account is the JetStream account byzlog's streams live in.
	Account  string `json:"account"`
	Indexer  User   `json:"indexer"`
	Consumer User   `json:"consumer"`
	// Reloader is the system account's one user: it may only ask the
	// server to reload its config ($SYS.REQ.SERVER.<id>.RELOAD).
	Reloader User `json:"reloader"`
}

// Validate names what is missing.
func (s Spec) Validate() error {
	switch {
	case s.Conf == "":
		return fmt.Errorf("NATS authz: conf (the accounts file the server includes) is empty")
	case s.Account == "" || s.Account == SystemAccount:
		return fmt.Errorf("NATS authz: account %q: name the JetStream account, not %q", s.Account, SystemAccount)
	}
	for _, u := range []struct {
		role string
		u    User
	}{{"indexer", s.Indexer}, {"consumer", s.Consumer}, {"reloader", s.Reloader}} {
		if u.u.Name == "" || u.u.Password == "" {
			return fmt.Errorf("NATS authz: the %s user needs a name and a password", u.role)
		}
	}
	return nil
}

// SystemAccount is the NATS system account's name in rendered configs.
const SystemAccount = "SYS"

// Topic is a topic's read access: Readers empty means open.
type Topic struct {
	Name    string
	Readers []ed25519.PublicKey
}

// ReaderNkey is the NATS user nkey ("U...") of a reader's ed25519 key.
func ReaderNkey(pub ed25519.PublicKey) (string, error) {
	b, err := nkeys.Encode(nkeys.PrefixByteUser, pub)
	if err != nil {
		return "", fmt.Errorf("reader key %x: %w", []byte(pub), err)
	}
	return string(b), nil
}

// InboxPrefix is where a reader's replies come: "_INBOX_" and its nkey.
// A reader's connection must say it (nats.CustomInboxPrefix).
func InboxPrefix(nkey string) string { return "_INBOX_" + nkey }

// Render is the accounts file for s and topics: deterministic, topics and
// readers in name order.
func Render(s Spec, topics []Topic) (string, error) {
	ts := slices.Clone(topics)
	slices.SortFunc(ts, func(a, b Topic) int { return strings.Compare(a.Name, b.Name) })
	var open []string
	readers := map[string][]string{} // nkey -> its restricted topics
	for _, t := range ts {
		if len(t.Readers) == 0 {
			open = append(open, t.Name)
			continue
		}
		for _, k := range t.Readers {
			nk, err := ReaderNkey(k)
			if err != nil {
				return "", fmt.Errorf("topic %q: %w", t.Name, err)
			}
			readers[nk] = append(readers[nk], t.Name)
		}
	}
	q := strconv.Quote
	var b strings.Builder
	b.WriteString("# Written by byzlog-indexer from the chain's topic configs: do not edit.\n")
	fmt.Fprintf(&b, "system_account: %s\naccounts {\n", q(SystemAccount))
	fmt.Fprintf(&b, "  %s {\n    users: [{user: %s, password: %s, permissions: {publish: [\"$SYS.REQ.SERVER.*.RELOAD\"], subscribe: [\"_INBOX.>\"]}}]\n  }\n",
		q(SystemAccount), q(s.Reloader.Name), q(s.Reloader.Password))
	fmt.Fprintf(&b, "  %s {\n    jetstream: enabled\n    users: [\n", q(s.Account))
	fmt.Fprintf(&b, "      {user: %s, password: %s, permissions: {publish: \">\", subscribe: \">\"}}\n", q(s.Indexer.Name), q(s.Indexer.Password))
	fmt.Fprintf(&b, "      {user: %s, password: %s, permissions: %s}\n", q(s.Consumer.Name), q(s.Consumer.Password), permissions("_INBOX", open))
	nkeysSorted := make([]string, 0, len(readers))
	for nk := range readers {
		nkeysSorted = append(nkeysSorted, nk)
	}
	slices.Sort(nkeysSorted)
	for _, nk := range nkeysSorted {
		fmt.Fprintf(&b, "      {nkey: %s, permissions: %s}\n", q(nk), permissions(InboxPrefix(nk), append(slices.Clone(open), readers[nk]...)))
	}
	b.WriteString("    ]\n  }\n}\n")
	return b.String(), nil
}

// permissions lets a user read topics and the blocks stream, with its
// replies under inbox.
func permissions(inbox string, topics []string) string {
	pub := []string{"$JS.API.INFO", "$JS.API.STREAM.NAMES", "$JS.API.STREAM.INFO.*"}
	sub := []string{inbox + ".>", layout.BlocksSubject}
	pub = append(pub, streamReads(layout.BlocksStream)...)
	for _, t := range topics {
		pub = append(pub, streamReads(layout.StreamName(t))...)
		sub = append(sub, layout.TopicSubjects(t), layout.KeyTopicSubjects(t)) // a compacted topic's stream is a subject a key
	}
	deny := []string{"$JS.API.STREAM.INFO.KV_" + layout.CursorBucket}
	return fmt.Sprintf("{publish: {allow: %s, deny: %s}, subscribe: {allow: %s}}", list(pub), list(deny), list(sub))
}

// streamReads are the JetStream API calls (and acks) that read stream:
// get a message (where a start offset or time is), make, look up and pull
// from a consumer, ack.
func streamReads(stream string) []string {
	return []string{
		"$JS.API.STREAM.MSG.GET." + stream,
		"$JS.API.DIRECT.GET." + stream, "$JS.API.DIRECT.GET." + stream + ".>",
		"$JS.API.CONSUMER.CREATE." + stream, "$JS.API.CONSUMER.CREATE." + stream + ".>",
		"$JS.API.CONSUMER.DURABLE.CREATE." + stream + ".*",
		"$JS.API.CONSUMER.INFO." + stream + ".*",
		"$JS.API.CONSUMER.MSG.NEXT." + stream + ".*",
		"$JS.ACK." + stream + ".>",
	}
}

func list(subjects []string) string {
	out := make([]string, len(subjects))
	for i, s := range subjects {
		out[i] = strconv.Quote(s)
	}
	return "[" + strings.Join(out, ", ") + "]"
}

// Write renders s and topics into s.Conf, atomically (a reloading server
// never reads half a file).
func Write(s Spec, topics []Topic) error {
	text, err := Render(s, topics)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(s.Conf), ".accounts-*")
	if err != nil {
		return fmt.Errorf("write NATS accounts: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(text); err != nil {
		tmp.Close()
		return fmt.Errorf("write NATS accounts: %w", err)
	}
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), s.Conf); err != nil {
		return fmt.Errorf("write NATS accounts: %w", err)
	}
	return nil
}

// Reload asks the server serverID to reload its config, through sys (a
// connection as Spec.Reloader), and waits until it has: the server answers
// after the new permissions apply.
func Reload(ctx context.Context, sys *nats.Conn, serverID string) error {
	msg, err := sys.RequestWithContext(ctx, fmt.Sprintf("$SYS.REQ.SERVER.%s.RELOAD", serverID), nil)
	if err != nil {
		return fmt.Errorf("reload NATS server %s: %w", serverID, err)
	}
	var resp struct {
		Error *struct {
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return fmt.Errorf("reload NATS server %s: answer %.200q: %w", serverID, msg.Data, err)
	}
	if resp.Error != nil {
		return fmt.Errorf("reload NATS server %s: %s", serverID, resp.Error.Description)
	}
	return nil
}

// ReaderOptions connect as reader key: NATS's nkey challenge signed with
// it, and the reader's own inbox prefix.
func ReaderOptions(key ed25519.PrivateKey) ([]nats.Option, error) {
	nk, err := ReaderNkey(key.Public().(ed25519.PublicKey))
	if err != nil {
		return nil, err
	}
	sign := func(nonce []byte) ([]byte, error) { return ed25519.Sign(key, nonce), nil }
	return []nats.Option{nats.Nkey(nk, sign), nats.CustomInboxPrefix(InboxPrefix(nk))}, nil
}
