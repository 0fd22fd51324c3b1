package natsauth_test

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/byzlog/byzlog/indexer/layout"
	"github.com/byzlog/byzlog/indexer/natsauth"
)

func key(name string) ed25519.PrivateKey {
	seed := sha256.Sum256([]byte(name))
	return ed25519.NewKeyFromSeed(seed[:])
}

func pub(k ed25519.PrivateKey) ed25519.PublicKey { return k.Public().(ed25519.PublicKey) }

// cluster is a NATS server run from a config that includes the rendered
// accounts, as the localnet's is.
type cluster struct {
	t    *testing.T
	spec natsauth.Spec
	srv  *server.Server
	url  string
}

func start(t *testing.T, topics []natsauth.Topic) *cluster {
	t.Helper()
	dir := t.TempDir()
	spec := natsauth.Spec{Conf: filepath.Join(dir, "accounts.conf"), Account: "BYZLOG",
		Indexer: natsauth.User{Name: "indexer", Password: "ipw"}, Consumer: natsauth.User{Name: "consumer", Password: "cpw"},
		Reloader: natsauth.User{Name: "reloader", Password: "rpw"}}
	if err := natsauth.Write(spec, topics); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "nats.conf")
	text := fmt.Sprintf("listen: \"127.0.0.1:-1\"\njetstream { store_dir: %q }\ninclude \"accounts.conf\"\n", filepath.Join(dir, "js"))
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	opts.NoLog, opts.NoSigs = true, true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("NATS did not start")
	}
	return &cluster{t: t, spec: spec, srv: srv, url: srv.ClientURL()}
}

func (c *cluster) connect(opts ...nats.Option) (*nats.Conn, error) {
	return nats.Connect(c.url, append([]nats.Option{nats.Timeout(5 * time.Second), nats.NoReconnect()}, opts...)...)
}

func (c *cluster) must(opts ...nats.Option) *nats.Conn {
	c.t.Helper()
	nc, err := c.connect(opts...)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(nc.Close)
	return nc
}

func (c *cluster) reader(k ed25519.PrivateKey) []nats.Option {
	c.t.Helper()
	opts, err := natsauth.ReaderOptions(k)
	if err != nil {
		c.t.Fatal(err)
	}
	return opts
}

// publish makes topic's stream, as the indexer does, with one record.
func (c *cluster) publish(ctx context.Context, topic string) {
	c.t.Helper()
	js, err := jetstream.New(c.must(nats.UserInfo("indexer", "ipw")))
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: layout.StreamName(topic), Subjects: []string{layout.TopicSubjects(topic)}}); err != nil {
		c.t.Fatal(err)
	}
	if _, err := js.Publish(ctx, layout.Subject(topic, 0), []byte("secret of "+topic)); err != nil {
		c.t.Fatal(err)
	}
}

// read gets topic's first record through an ordered consumer, as the
// consumer SDK does.
func read(ctx context.Context, nc *nats.Conn, topic string) (string, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, layout.StreamName(topic), jetstream.OrderedConsumerConfig{})
	if err != nil {
		return "", err
	}
	m, err := cons.Next(jetstream.FetchMaxWait(2 * time.Second))
	if err != nil {
		return "", err
	}
	return string(m.Data()), nil
}

func TestPermissionsFollowTopicConfigs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	alice, bob, mallory := key("alice"), key("bob"), key("mallory")
	c := start(t, []natsauth.Topic{{Name: "open"}, {Name: "secret", Readers: []ed25519.PublicKey{pub(alice)}}, {Name: "a.b", Readers: []ed25519.PublicKey{pub(bob)}}})
	for _, topic := range []string{"open", "secret", "a", "a.b"} {
		c.publish(ctx, topic)
	}
	consumer := c.must(nats.UserInfo("consumer", "cpw"))
	for _, tc := range []struct {
		who   string
		nc    *nats.Conn
		topic string
		ok    bool
	}{
		{"consumer", consumer, "open", true},
		{"consumer", consumer, "secret", false},
		{"consumer", consumer, "a", false}, // created after the accounts were written: nobody reads it yet
		{"alice", c.must(c.reader(alice)...), "secret", true},
		{"alice", c.must(c.reader(alice)...), "open", true},
		{"alice", c.must(c.reader(alice)...), "a.b", false},
		{"bob", c.must(c.reader(bob)...), "a.b", true},
		{"bob", c.must(c.reader(bob)...), "secret", false},
	} {
		got, err := read(ctx, tc.nc, tc.topic)
		if ok := err == nil && got == "secret of "+tc.topic; ok != tc.ok {
			t.Errorf("%s reads %s: %q, %v; want readable %v", tc.who, tc.topic, got, err, tc.ok)
		}
	}
	// A key no topic lists is no NATS user at all.
	if nc, err := c.connect(c.reader(mallory)...); err == nil {
		nc.Close()
		t.Error("mallory's key connected; want an authorization error")
	}
	// Nobody but the indexer publishes a record, and no reader sees
	// another's inbox or the topics' subjects it may not read.
	for _, tc := range []struct {
		who  string
		nc   *nats.Conn
		subj string
		sub  bool
	}{
		{"consumer", consumer, layout.Subject("open", 0), false},
		{"alice", c.must(c.reader(alice)...), layout.Subject("secret", 0), false},
		{"consumer", consumer, natsauth.InboxPrefix("x") + ".>", true},
		// Nobody but the indexer lists a stream's consumers: a group's
		// durable, named with its key's secret, cannot be found.
		{"consumer", consumer, "$JS.API.CONSUMER.NAMES." + layout.StreamName("open"), false},
		{"alice", c.must(c.reader(alice)...), "$JS.API.CONSUMER.LIST." + layout.StreamName("secret"), false},
		{"consumer", consumer, layout.TopicSubjects("secret"), true},
		{"consumer", consumer, layout.KeyTopicSubjects("secret"), true},
		{"alice", c.must(c.reader(alice)...), layout.KeyPartitionSubjects("a.b", 0), true},
		{"bob", c.must(c.reader(bob)...), layout.KeySubject("secret", 0, []byte("k")), true},
		{"bob", c.must(c.reader(bob)...), "_INBOX.>", true},
		{"bob", c.must(c.reader(bob)...), "byzlog.>", true},
	} {
		errs := make(chan error, 1)
		nc, err := c.connect(append(connOpts(t, c, tc.who, alice, bob), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case errs <- err:
			default:
			}
		}))...)
		if err != nil {
			t.Fatal(err)
		}
		if tc.sub {
			_, err = nc.SubscribeSync(tc.subj)
		} else {
			err = nc.Publish(tc.subj, []byte("forged"))
		}
		if err == nil {
			err = nc.Flush()
		}
		select {
		case err = <-errs:
		case <-time.After(2 * time.Second):
		}
		nc.Close()
		if err == nil || !errors.Is(err, nats.ErrPermissionViolation) && !strings.Contains(err.Error(), "Permissions Violation") {
			t.Errorf("%s on %s (subscribe %v): %v, want a permissions violation", tc.who, tc.subj, tc.sub, err)
		}
	}
}

// connOpts are who's credentials.
func connOpts(t *testing.T, c *cluster, who string, alice, bob ed25519.PrivateKey) []nats.Option {
	switch who {
	case "consumer":
		return []nats.Option{nats.UserInfo("consumer", "cpw")}
	case "alice":
		return c.reader(alice)
	case "bob":
		return c.reader(bob)
	}
	t.Fatalf("who is %s?", who)
	return nil
}

// TestReload: a topic's readers change, the file is written again and the
// reloader asks the server to reload: the new reader reads at once, the
// old one no longer can.
func TestReload(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	alice, bob := key("alice"), key("bob")
	c := start(t, []natsauth.Topic{{Name: "t", Readers: []ed25519.PublicKey{pub(alice)}}})
	c.publish(ctx, "t")
	if got, err := read(ctx, c.must(c.reader(alice)...), "t"); err != nil || got != "secret of t" {
		t.Fatalf("alice reads t before the change: %q, %v", got, err)
	}
	if err := natsauth.Write(c.spec, []natsauth.Topic{{Name: "t", Readers: []ed25519.PublicKey{pub(bob)}}}); err != nil {
		t.Fatal(err)
	}
	sys := c.must(nats.UserInfo("reloader", "rpw"))
	if err := natsauth.Reload(ctx, sys, c.srv.ID()); err != nil {
		t.Fatal(err)
	}
	if got, err := read(ctx, c.must(c.reader(bob)...), "t"); err != nil || got != "secret of t" {
		t.Errorf("bob reads t after the reload: %q, %v", got, err)
	}
	if nc, err := c.connect(c.reader(alice)...); err == nil {
		nc.Close()
		t.Error("alice still connects after she was removed from every topic")
	}
	// The reloader may do nothing else.
	if _, err := sys.Request("$SYS.REQ.SERVER.PING.CONNZ", nil, time.Second); err == nil {
		t.Error("the reloader listed connections; want a permissions violation")
	}
	// The consumer user cannot reload.
	rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
	defer rcancel()
	if err := natsauth.Reload(rctx, c.must(nats.UserInfo("consumer", "cpw")), c.srv.ID()); err == nil {
		t.Error("the consumer user reloaded the server")
	}
}

func TestSpecValidate(t *testing.T) {
	good := natsauth.Spec{Conf: "a.conf", Account: "BYZLOG", Indexer: natsauth.User{Name: "i", Password: "p"},
		Consumer: natsauth.User{Name: "c", Password: "p"}, Reloader: natsauth.User{Name: "r", Password: "p"}}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]func(*natsauth.Spec){
		"no conf":     func(s *natsauth.Spec) { s.Conf = "" },
		"sys account": func(s *natsauth.Spec) { s.Account = natsauth.SystemAccount },
		"no password": func(s *natsauth.Spec) { s.Consumer.Password = "" },
		"no reloader": func(s *natsauth.Spec) { s.Reloader = natsauth.User{} },
	} {
		s := good
		f(&s)
		if err := s.Validate(); err == nil {
			t.Errorf("%s: Validate() = nil", name)
		}
	}
}

// TestReadersReadTables: a compacted topic's stream (a subject a key) is
// read by its readers, through a consumer and by subscribing to its
// keys, and by nobody else.
func TestReadersReadTables(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	alice, bob := key("alice"), key("bob")
	c := start(t, []natsauth.Topic{{Name: "kv", Readers: []ed25519.PublicKey{pub(alice)}}})
	js, err := jetstream.New(c.must(nats.UserInfo("indexer", "ipw")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: layout.StreamName("kv"), Subjects: []string{layout.KeyTopicSubjects("kv")}, MaxMsgsPerSubject: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, layout.KeySubject("kv", 0, []byte("k")), []byte("secret of kv")); err != nil {
		t.Fatal(err)
	}
	if got, err := read(ctx, c.must(c.reader(alice)...), "kv"); err != nil || got != "secret of kv" {
		t.Errorf("alice reads kv: %q, %v; want its record", got, err)
	}
	for _, tc := range []struct {
		who string
		ok  bool
	}{{"alice", true}, {"consumer", false}, {"bob", false}} {
		errs := make(chan error, 1)
		nc, err := c.connect(append(connOpts(t, c, tc.who, alice, bob), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case errs <- err:
			default:
			}
		}))...)
		if tc.who == "bob" && err != nil {
			continue // bob is no NATS user at all: no topic lists him
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err = nc.SubscribeSync(layout.KeyTopicSubjects("kv")); err == nil {
			err = nc.Flush()
		}
		select {
		case err = <-errs:
		case <-time.After(time.Second):
		}
		nc.Close()
		if denied := err != nil; denied == tc.ok {
			t.Errorf("%s subscribes to %s: %v; want allowed %v", tc.who, layout.KeyTopicSubjects("kv"), err, tc.ok)
		}
	}
}
