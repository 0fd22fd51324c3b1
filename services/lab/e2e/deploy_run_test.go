//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/byzlog/byzlog/indexer/layout"
	"github.com/byzlog/byzlog/indexer/natsauth"
	"github.com/byzlog/byzlog/protos/chain/tlsconf"
	"github.com/byzlog/byzlog/services/internal/localnet"
)

// freePorts are n loopback ports nothing listens on.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

// local is one compose service run as a local process: its command line
// with every listen address on a free loopback port (ports maps the
// container's ports to them) and every file where init wrote it.
type local struct {
	c     *container
	ports map[int]int
}

// args is c's command line (its subcommand, then every flag given, as
// --name=value) with the values of over in place, and any path inside
// the container that init writes replaced by its generated copy.
func (l *local) args(g *generated, over map[string]string) []string {
	var out []string
	if l.c.inv.sub != "" {
		out = append(out, l.c.inv.sub)
	}
	names := slices.Sorted(maps.Keys(l.c.inv.given))
	for n := range over {
		if !l.c.inv.given[n] {
			names = append(names, n)
		}
	}
	for _, n := range names {
		v, ok := over[n]
		if !ok {
			v = l.c.inv.flags[n]
			if hp, found := g.hostPath(l.c, v); found && strings.HasPrefix(v, "/") {
				v = hp
			}
		}
		out = append(out, "--"+n+"="+v)
	}
	return out
}

// probeCmd is pr's command line with the container's ports and files
// replaced by the local ones.
func (l *local) probeCmd(d *deployment, g *generated, pr probe) []string {
	cmd := slices.Clone(pr.args)
	for i, a := range cmd {
		if hp, ok := g.hostPath(l.c, a); ok && strings.HasPrefix(a, "/") {
			cmd[i] = hp
			continue
		}
		if u, err := url.Parse(a); err == nil && (u.Scheme == "http" || u.Scheme == "https") {
			if _, p, err := splitAddr(u.Host); err == nil && l.ports[p] != 0 {
				u.Host = net.JoinHostPort(u.Hostname(), strconv.Itoa(l.ports[p]))
				cmd[i] = u.String()
			}
			continue
		}
		if h, p, err := splitAddr(a); err == nil && l.ports[p] != 0 {
			cmd[i] = net.JoinHostPort(h, strconv.Itoa(l.ports[p]))
		}
	}
	switch path.Base(cmd[0]) {
	case "probe":
		cmd[0] = filepath.Join(d.dep, "docker", "probe")
	case "byzlog-gateway":
		cmd[0] = filepath.Join(d.bin, "byzlog-gateway")
	}
	return cmd
}

// healthy runs l's health checks until each passes or the deadline comes.
func (l *local) healthy(t *testing.T, d *deployment, g *generated, deadline time.Time) {
	t.Helper()
	for _, pr := range l.c.probes {
		cmd := l.probeCmd(d, g, pr)
		var out []byte
		var err error
		for {
			if path.Base(cmd[0]) == "wget" { // NATS's image has busybox wget; plain HTTP on loopback
				err = httpOK(cmd[len(cmd)-1])
			} else {
				out, err = exec.Command(cmd[0], cmd[1:]...).CombinedOutput()
			}
			if err == nil {
				t.Logf("%s: %s check passes: %s", l.c.where, pr.kind, strings.Join(cmd, " "))
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("%s: the %s check %q never passed: %v\n%s", l.c.where, pr.kind, strings.Join(cmd, " "), err, out)
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
}

func httpOK(u string) error {
	r, err := http.Get(u)
	if err != nil {
		return err
	}
	r.Body.Close()
	if r.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %s", u, r.Status)
	}
	return nil
}

// runCompose runs the compose services of a chain of one node as local
// processes, each with its own command line and the files init writes for
// it: init's command line with --validators 1 (one validator makes blocks
// alone), node0's byzlog-app and cometbft, a gateway whose first node it
// is, and NATS. Each service's own health check must then pass, over TLS
// where it says so, checking certificates against the CA it names. And:
// node RPC refuses plain HTTP and a certificate from another CA; NATS asks
// every client for TLS; the indexer's credentials may publish; a
// consumer's may read and may not publish a record, delete a stream or
// open the indexer's cursor bucket.
func (d *deployment) runCompose(t *testing.T, cs []*container, nw *composeNetwork) {
	var init, node, natsC, idx *container
	for _, c := range cs {
		switch c.binary {
		case initScript:
			init = c
		case "nats-server":
			natsC = c
		case "byzlog-indexer":
			idx = c
		}
	}
	if init == nil || natsC == nil || idx == nil {
		t.Fatal("docker-compose.yml: want init, nats-server and byzlog-indexer services")
	}
	g := d.generate(t, t.TempDir(), init, nil, "--validators=1")
	for _, c := range cs {
		if c.binary == "cometbft" && c.inv.sub == "start" {
			if home, ok := g.hostPath(c, c.inv.flags["home"]); ok && home == filepath.Join(g.dir, "node0") {
				node = c
			}
		}
	}
	if node == nil {
		t.Fatal("docker-compose.yml: no cometbft service has node0's home")
	}
	host, port, _ := splitAddr(node.inv.flags["proxy_app"])
	tg, err := nw.dial(node, host, port)
	if err != nil || tg.c == nil {
		t.Fatalf("%s: --proxy_app leads to no app: %v", node.where, err)
	}
	app := tg.c
	var gw *container
	for _, c := range cs {
		if c.binary != "byzlog-gateway" {
			continue
		}
		u, err := url.Parse(strings.Split(c.inv.flags["nodes"], ",")[0])
		if err != nil {
			continue
		}
		_, p, _ := splitAddr(u.Host)
		if tg, err := nw.dial(c, u.Hostname(), p); err == nil && tg.c == node {
			gw = c
		}
	}
	if gw == nil {
		t.Fatalf("docker-compose.yml: no gateway lists %s first", node.pod)
	}

	ps := freePorts(t, 8)
	appL := &local{c: app, ports: map[int]int{port: ps[0]}}
	_, rpcPort, _ := splitAddr(node.inv.flags["rpc.laddr"])
	_, p2pPort, _ := splitAddr(node.inv.flags["p2p.laddr"])
	nodeL := &local{c: node, ports: map[int]int{rpcPort: ps[1], p2pPort: ps[2]}}
	_, grpcPort, _ := splitAddr(gw.inv.flags["listen"])
	_, gwHTTP, _ := splitAddr(gw.inv.flags["http-listen"])
	gwL := &local{c: gw, ports: map[int]int{grpcPort: ps[3], gwHTTP: ps[4]}}
	conf := natsC.natsListen()
	_, natsPort, _ := splitAddr(conf.client)
	_, monPort, _ := splitAddr(conf.monitor)
	natsL := &local{c: natsC, ports: map[int]int{natsPort: ps[5], monPort: ps[6]}}
	at := func(l *local, p int) string { return fmt.Sprintf("127.0.0.1:%d", l.ports[p]) }

	startProc(t, "byzlog-app", at(appL, port), appL.args(g, map[string]string{
		"listen": at(appL, port), "data-dir": t.TempDir(),
	})...)
	startProc(t, "cometbft", at(nodeL, rpcPort), nodeL.args(g, map[string]string{
		"proxy_app": at(appL, port), "rpc.laddr": "tcp://" + at(nodeL, rpcPort), "p2p.laddr": "tcp://" + at(nodeL, p2pPort),
	})...)
	startProc(t, "nats-server", at(natsL, natsPort), natsL.args(g, map[string]string{
		"config": localNATSConf(t, g, natsC, at(natsL, natsPort), at(natsL, monPort)),
	})...)
	startProc(t, "byzlog-gateway", at(gwL, grpcPort), gwL.args(g, map[string]string{
		"listen": at(gwL, grpcPort), "http-listen": at(gwL, gwHTTP), "nodes": "https://" + at(nodeL, rpcPort),
	})...)

	deadline := time.Now().Add(90 * time.Second)
	for _, l := range []*local{appL, nodeL, natsL, gwL} {
		l.healthy(t, d, g, deadline)
	}

	probeBin := filepath.Join(d.dep, "docker", "probe")
	if out, err := exec.Command(probeBin, at(nodeL, rpcPort), "/health").CombinedOutput(); err == nil {
		t.Errorf("%s: its RPC answers plain HTTP: %s", node.where, out)
	}
	other := tlsconf.Local{Dir: t.TempDir()}
	if err := other.Ensure([]string{"127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(probeBin, "--ca", other.CA(), at(nodeL, rpcPort), "/health").CombinedOutput(); err == nil {
		t.Errorf("probe --ca accepted %s's certificate against another CA: it checks nothing: %s", node.where, out)
	}

	// The indexer's NATS credentials (its own flags, its --nats-authz) and
	// a consumer's (init's consumer/).
	f := idx.inv.flags
	file := func(p string) string {
		hp, ok := g.hostPath(idx, p)
		if !ok {
			t.Fatalf("%s: %s is on no volume init writes", idx.where, p)
		}
		return hp
	}
	natsURL := "tls://" + at(natsL, natsPort)
	spec, err := natsauthSpec(file(f["nats-authz"]))
	if err != nil {
		t.Fatal(err)
	}
	spec.Conf = file(spec.Conf) // the file the NATS server includes (checkComposeTLS)
	ca := file(f["nats-tls-ca"])
	render := func(ctx context.Context, topics []natsauth.Topic) error {
		// What the indexer does when a topic's readers change.
		if err := natsauth.Write(spec, topics); err != nil {
			return err
		}
		sys, err := nats.Connect(natsURL, nats.UserInfo(spec.Reloader.Name, spec.Reloader.Password), nats.RootCAs(ca))
		if err != nil {
			return fmt.Errorf("connect as the reloader: %w", err)
		}
		defer sys.Close()
		return natsauth.Reload(ctx, sys, sys.ConnectedServerId())
	}
	checkNATSUsers(t, natsURL,
		natsCreds{user: f["nats-user"], password: readPassword(t, file(f["nats-password-file"])), ca: ca},
		natsCreds{user: localnet.NATSConsumerUser, password: readPassword(t, filepath.Join(g.dir, "consumer", "nats.password")), ca: filepath.Join(g.dir, "consumer", "ca.pem")},
		render)
}

func readPassword(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// localNATSConf is natsC's --config from init with the addresses and
// files the local NATS uses: client and monitoring ports on loopback, the
// certificate where init wrote it, JetStream in a temporary directory.
func localNATSConf(t *testing.T, g *generated, natsC *container, client, monitor string) string {
	t.Helper()
	file, _ := g.hostPath(natsC, natsC.inv.flags["config"])
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	swap := func(old, new string) {
		if old == "" || !strings.Contains(text, strconv.Quote(old)) {
			t.Fatalf("%s: no %q to run it locally", file, old)
		}
		text = strings.ReplaceAll(text, strconv.Quote(old), strconv.Quote(new))
	}
	m := natsC.natsConf
	listen, _ := m["listen"].(string)
	swap(listen, client)
	mon, _ := m["http"].(string)
	swap(mon, monitor)
	js, _ := m["jetstream"].(map[string]any)
	sd, _ := js["store_dir"].(string)
	swap(sd, t.TempDir())
	tb, _ := m["tls"].(map[string]any)
	for _, k := range []string{"cert_file", "key_file"} {
		p, _ := tb[k].(string)
		hp, ok := g.hostPath(natsC, p)
		if !ok {
			t.Fatalf("%s: tls.%s %s is on no volume init writes", natsC.where, k, p)
		}
		swap(p, hp)
	}
	out := filepath.Join(filepath.Dir(file), "nats-local.conf") // beside it: its include is relative
	if err := os.WriteFile(out, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return out
}

// natsCreds are how a NATS client connects: user, password, CA file.
type natsCreds struct{ user, password, ca string }

// checkNATSUsers checks the NATS at natsURL with an indexer's and a
// consumer's credentials: NATS asks every client for TLS and the right
// password; the indexer may make topics' streams, publish and keep its
// cursor; the consumer may read an open topic and may not publish a
// record, delete or make a stream, or open the indexer's cursor bucket.
// With render (the accounts the indexer keeps: it writes them for topics
// and has the server reload), a topic that lists a reader is readable by
// that reader's key and not by the consumer user.
func checkNATSUsers(t *testing.T, natsURL string, indexer, consumer natsCreds, render func(context.Context, []natsauth.Topic) error) {
	t.Helper()
	u, _ := url.Parse(natsURL)
	raw, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	info, _ := bufio.NewReader(raw).ReadString('\n')
	raw.Close()
	if !strings.Contains(info, `"tls_required":true`) {
		t.Errorf("NATS does not require TLS: its INFO is %s", info)
	}
	connect := func(c natsCreds, extra ...nats.Option) (*nats.Conn, error) {
		// Refusals come back as errors of the calls; the asynchronous
		// permission violations would only repeat them on stderr.
		quiet := nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})
		opts := append([]nats.Option{nats.Timeout(5 * time.Second), quiet}, extra...)
		if c.user != "" {
			opts = append(opts, nats.UserInfo(c.user, c.password))
		}
		if c.ca != "" {
			opts = append(opts, nats.RootCAs(c.ca))
		}
		return nats.Connect(natsURL, opts...)
	}
	if nc, err := connect(natsCreds{user: indexer.user, password: indexer.password}); err == nil {
		nc.Close()
		t.Errorf("NATS took the indexer's password over a certificate the system's roots cannot check")
	}
	if nc, err := connect(natsCreds{user: indexer.user, password: "wrong", ca: indexer.ca}); err == nil {
		nc.Close()
		t.Errorf("NATS took user %s with a wrong password", indexer.user)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	nc, err := connect(indexer)
	if err != nil {
		t.Fatalf("the indexer's NATS credentials: %v", err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	open, closed := "orders", "payroll"
	for _, topic := range []string{open, closed} {
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: layout.StreamName(topic), Subjects: []string{layout.TopicSubjects(topic)}}); err != nil {
			t.Fatalf("the indexer may not make a stream: %v", err)
		}
		if _, err := js.Publish(ctx, layout.Subject(topic, 0), []byte("record of "+topic)); err != nil {
			t.Fatalf("the indexer may not publish: %v", err)
		}
	}
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: layout.CursorBucket})
	if err == nil {
		_, err = kv.Put(ctx, "cursor.byzlog.indexer-0", []byte("1"))
	}
	if err != nil {
		t.Fatalf("the indexer may not keep its cursor: %v", err)
	}
	_, readerKey, _ := ed25519.GenerateKey(nil)
	if render != nil {
		if err := render(ctx, []natsauth.Topic{{Name: open}, {Name: closed, Readers: []ed25519.PublicKey{readerKey.Public().(ed25519.PublicKey)}}}); err != nil {
			t.Fatalf("render the accounts as the indexer does (--nats-authz): %v", err)
		}
	}
	// read takes a topic's record; an ordered consumer retries a refused
	// create, so a refusal ends with the timeout.
	read := func(js jetstream.JetStream, topic string) error {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		oc, err := js.OrderedConsumer(ctx, layout.StreamName(topic), jetstream.OrderedConsumerConfig{})
		if err != nil {
			return err
		}
		m, err := oc.Next(jetstream.FetchMaxWait(3 * time.Second))
		if err != nil {
			return err
		}
		if want := "record of " + topic; string(m.Data()) != want {
			return fmt.Errorf("read %q, want %q", m.Data(), want)
		}
		return nil
	}

	cnc, err := connect(consumer)
	if err != nil {
		t.Fatalf("the consumer's NATS credentials: %v", err)
	}
	defer cnc.Close()
	cjs, _ := jetstream.New(cnc)
	if err := read(cjs, open); err != nil {
		t.Errorf("a consumer may not read open topic %s: %v", open, err)
	}
	if render != nil {
		if err := read(cjs, closed); err == nil {
			t.Errorf("the consumer user reads %s, a topic that lists its readers", closed)
		}
		opts, err := natsauth.ReaderOptions(readerKey)
		if err != nil {
			t.Fatal(err)
		}
		rnc, err := connect(natsCreds{ca: consumer.ca}, opts...)
		if err != nil {
			t.Fatalf("topic %s's reader key may not connect: %v", closed, err)
		}
		defer rnc.Close()
		rjs, _ := jetstream.New(rnc)
		if err := read(rjs, closed); err != nil {
			t.Errorf("topic %s's reader may not read it: %v", closed, err)
		}
	}
	for _, try := range []struct {
		what string
		do   func(ctx context.Context) error
	}{
		{"publish a record", func(ctx context.Context) error {
			_, err := cjs.Publish(ctx, layout.Subject(open, 0), []byte("forged"))
			return err
		}},
		{"delete a topic's stream", func(ctx context.Context) error { return cjs.DeleteStream(ctx, layout.StreamName(open)) }},
		{"make a stream", func(ctx context.Context) error {
			_, err := cjs.CreateStream(ctx, jetstream.StreamConfig{Name: "byzlog-intruder", Subjects: []string{"byzlog.intruder.>"}})
			return err
		}},
		{"open the indexer's cursor bucket", func(ctx context.Context) error {
			_, err := cjs.KeyValue(ctx, layout.CursorBucket)
			return err
		}},
	} {
		tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := try.do(tctx)
		cancel()
		if err == nil {
			t.Errorf("NATS let a consumer %s", try.what)
		}
	}
}
