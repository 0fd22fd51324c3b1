//go:build e2e

package e2e

import (
	"fmt"
	"net"
	"net/url"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// container is one process a deployment file starts, with what its file
// declares around it.
type container struct {
	where    string // names the file and the place in it
	binary   string
	inv      *invocation
	declared map[int]bool // ports: compose expose and ports, containerPort, EXPOSE
	mounts   []mount
	probes   []probe
	pod      string // containers of one pod (compose: one service) share loopback
	checked  bool   // mounts and addresses are known (not a bare image)
	script   string // the command line of a container running none of knownBinaries
	// What the files the deployment generates say about the process, once
	// the check has generated them (tlsUnknown, nil: not known).
	rpcTLS   tlsMode        // cometbft start: config.toml's rpc.tls_cert_file
	natsConf map[string]any // nats-server --config, parsed
}

// tlsMode is whether a listener serves TLS, as far as the check knows.
type tlsMode int

const (
	tlsUnknown tlsMode = iota
	tlsOff
	tlsOn
)

func tlsIf(on bool) tlsMode {
	if on {
		return tlsOn
	}
	return tlsOff
}

type mount struct {
	target, volume       string
	readOnly, persistent bool
}

type probe struct {
	kind   string // healthcheck, readiness, liveness, startup
	inside bool   // runs in the container, so loopback reaches it (not kubelet's httpGet)
	host   string
	port   int
	path   string // "" for a TCP check
	tls    bool   // speaks TLS (https)
	ca     string // the CA file it checks the certificate against; "" checks none
	args   []string
}

// listener is an address a flag makes the process listen on.
type listener struct {
	flag   string
	host   string
	port   int
	http   []string // health endpoints served there; nil when not HTTP
	public bool     // others must reach it (a gateway, a node), so not loopback
	tls    tlsMode
}

func (c *container) longRunning() bool {
	switch c.binary {
	case "byzlog-app", "byzlog-gateway", "byzlog-indexer", "nats-server":
		return true
	case "cometbft":
		return c.inv.sub == "start"
	}
	return false
}

func loopback(host string) bool {
	ip := net.ParseIP(host)
	return host == "localhost" || (ip != nil && ip.IsLoopback())
}

// splitAddr reads host:port, with or without a scheme such as tcp:// or http://.
func splitAddr(addr string) (string, int, error) {
	if _, rest, ok := strings.Cut(addr, "://"); ok {
		addr = rest
	}
	addr = strings.TrimSuffix(addr, "/")
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 1 || port > 65535 {
		return "", 0, fmt.Errorf("port %q of %q is not a port number", p, addr)
	}
	return host, port, nil
}

func (c *container) listeners() ([]listener, error) {
	f := c.inv.flags
	var out []listener
	add := func(flag, addr string, public bool, tls tlsMode, http ...string) error {
		if addr == "" {
			return nil // disabled
		}
		host, port, err := splitAddr(addr)
		if err != nil {
			return fmt.Errorf("%s %q: %w", flag, addr, err)
		}
		out = append(out, listener{flag: flag, host: host, port: port, http: http, public: public, tls: tls})
		return nil
	}
	var err error
	switch c.binary {
	case "byzlog-app":
		err = add("--listen", f["listen"], false, tlsOff)
	case "byzlog-gateway":
		faces := tlsIf(f["insecure"] != "true")
		if err = add("--listen", f["listen"], true, faces); err == nil {
			err = add("--http-listen", f["http-listen"], true, faces, "/healthz", "/metrics")
		}
	case "byzlog-indexer":
		err = add("--http-listen", f["http-listen"], true, tlsOff, "/healthz", "/readyz", "/metrics")
	case "cometbft":
		if c.inv.sub == "start" {
			if err = add("--rpc.laddr", f["rpc.laddr"], true, c.rpcTLS, "/health", "/status"); err == nil {
				err = add("--p2p.laddr", f["p2p.laddr"], true, tlsOn) // CometBFT's SecretConnection
			}
		}
	case "nats-server":
		n := c.natsListen()
		if err = add("--port", n.client, true, n.tls); err == nil && n.monitor != "" {
			// Monitoring is plain HTTP unless https_port; its own flag says which.
			err = add(n.monitorFlag, n.monitor, !loopback(strings.Split(n.monitor, ":")[0]), tlsOff, "/healthz", "/varz")
		}
	}
	return out, err
}

// natsAddrs are where a NATS server listens: its flags over its --config.
type natsAddrs struct {
	client, monitor, monitorFlag string
	tls                          tlsMode
}

func (c *container) natsListen() natsAddrs {
	f, g, conf := c.inv.flags, c.inv.given, c.natsConf
	str := func(k string) string {
		switch v := conf[k].(type) {
		case string:
			return v
		case int64:
			return strconv.FormatInt(v, 10)
		}
		return ""
	}
	host, port := f["addr"], f["port"]
	if conf != nil {
		if l := str("listen"); l != "" {
			host, port, _ = net.SplitHostPort(l)
		}
		if h := str("host"); h != "" {
			host = h
		}
		if p := str("port"); p != "" {
			port = p
		}
	}
	if g["addr"] {
		host = f["addr"]
	}
	if g["port"] {
		port = f["port"]
	}
	if host == "" {
		host = "0.0.0.0" // nats-server's default
	}
	n := natsAddrs{client: net.JoinHostPort(host, port), tls: tlsIf(f["tls"] == "true" || f["tlscert"] != "")}
	if conf != nil {
		if _, ok := conf["tls"]; ok {
			n.tls = tlsOn
		}
		switch {
		case str("http") != "":
			n.monitor, n.monitorFlag = str("http"), "--config http"
		case str("http_port") != "":
			n.monitor, n.monitorFlag = net.JoinHostPort(host, str("http_port")), "--config http_port"
		}
	}
	if g["http_port"] {
		n.monitor, n.monitorFlag = net.JoinHostPort(host, f["http_port"]), "--http_port"
	}
	return n
}

func (c *container) listenerOf(flag string) (listener, bool) {
	ls, _ := c.listeners()
	for _, l := range ls {
		if l.flag == flag {
			return l, true
		}
	}
	return listener{}, false
}

// reach says whether from can connect to to's port: some flag of to must
// listen there, on an address other pods can reach unless they share one.
func reach(from, to *container, port int) error {
	ls, err := to.listeners()
	if err != nil {
		return err
	}
	for _, l := range ls {
		if l.port != port {
			continue
		}
		if from.pod != to.pod && loopback(l.host) {
			return fmt.Errorf("%s listens on %s (%s) only, which %s cannot reach", to.where, net.JoinHostPort(l.host, strconv.Itoa(port)), l.flag, from.where)
		}
		return nil
	}
	return fmt.Errorf("%s does not listen on port %d", to.where, port)
}

// arrive is the target at to's port, with what serves there.
func arrive(from, to *container, port int) (target, error) {
	tg := target{c: to, port: port}
	ls, _ := to.listeners()
	for _, l := range ls {
		if l.port == port {
			tg.tls = l.tls
		}
	}
	return tg, reach(from, to, port)
}

// target is where an address leads: a container and the port it arrives
// on, or something outside the files (external names it).
type target struct {
	c        *container
	port     int
	external string
	tls      tlsMode // what serves there, as far as known
}

// network resolves the host names a deployment's containers use.
type network interface {
	dial(from *container, host string, port int) (target, error)
}

// pathFlag is a file or directory a flag names.
type pathFlag struct {
	flag, path string
	state      bool // written and kept: must be on a persistent, writable volume
}

func (c *container) paths() []pathFlag {
	f := c.inv.flags
	var out []pathFlag
	// read adds the files a process reads, when the flag is set.
	read := func(flags ...string) {
		for _, fl := range flags {
			if f[fl] != "" {
				out = append(out, pathFlag{"--" + fl, f[fl], false})
			}
		}
	}
	switch c.binary {
	case "byzlog-app":
		out = append(out, pathFlag{"--data-dir", f["data-dir"], true})
	case "byzlog-gateway":
		read("tls-cert", "tls-key", "tls-client-ca", "node-tls-ca")
	case "byzlog-indexer":
		out = append(out, pathFlag{"--genesis", f["genesis"], false})
		read("node-tls-ca", "nats-tls-ca", "nats-password-file", "nats-authz")
	case "cometbft":
		if c.inv.sub == "start" {
			out = append(out, pathFlag{"--home", f["home"], true})
		}
	case "nats-server":
		read("config", "tlscert", "tlskey")
		dir := f["store_dir"]
		if js, ok := c.natsConf["jetstream"].(map[string]any); ok && !c.inv.given["store_dir"] {
			dir, _ = js["store_dir"].(string)
		}
		out = append(out, pathFlag{"--store_dir", dir, true})
	}
	for _, pr := range c.probes {
		if pr.ca != "" {
			out = append(out, pathFlag{pr.kind + " --ca", pr.ca, false})
		}
	}
	return out
}

// mountOf is the mount holding p (the deepest one), or nil.
func (c *container) mountOf(p string) *mount {
	var best *mount
	for i, m := range c.mounts {
		t := strings.TrimSuffix(m.target, "/")
		if (p == t || strings.HasPrefix(p, t+"/")) && (best == nil || len(t) > len(best.target)) {
			best = &c.mounts[i]
		}
	}
	return best
}

// checkContainer checks one container's flags against its ports, health
// checks, volumes and (given a network) the processes its addresses name.
func checkContainer(t *testing.T, c *container, nw network) {
	t.Helper()
	ls, err := c.listeners()
	if err != nil {
		t.Errorf("%s: %v", c.where, err)
	}
	byPort := map[int]listener{}
	for _, l := range ls {
		if prev, dup := byPort[l.port]; dup {
			t.Errorf("%s: %s and %s both listen on port %d", c.where, prev.flag, l.flag, l.port)
		}
		byPort[l.port] = l
		if l.public && loopback(l.host) {
			t.Errorf("%s: %s listens on %s, loopback: nothing outside the container reaches it", c.where, l.flag, l.host)
		}
		if !loopback(l.host) && !c.declared[l.port] {
			t.Errorf("%s: %s listens on port %d, which is not declared (ports: %v)", c.where, l.flag, l.port, sortedPorts(c.declared))
		}
	}
	for _, p := range sortedPorts(c.declared) {
		if l, ok := byPort[p]; !ok || loopback(l.host) {
			t.Errorf("%s: declares port %d, but no flag makes it listen there (it listens on %s)", c.where, p, describe(ls))
		}
	}
	if c.longRunning() && len(c.probes) == 0 {
		t.Errorf("%s: no health check", c.where)
	}
	for _, pr := range c.probes {
		l, ok := byPort[pr.port]
		switch {
		case !ok:
			t.Errorf("%s: the %s probe targets port %d, where it does not listen (it listens on %s)", c.where, pr.kind, pr.port, describe(ls))
		case !pr.inside && loopback(l.host):
			t.Errorf("%s: the %s probe comes from outside the container, but %s listens on %s only", c.where, pr.kind, l.flag, l.host)
		case pr.inside && loopback(pr.host) && l.host != "" && !loopback(l.host) && !net.ParseIP(l.host).IsUnspecified():
			t.Errorf("%s: the %s probe dials %s, but %s listens on %s", c.where, pr.kind, pr.host, l.flag, l.host)
		case pr.path != "" && l.http == nil:
			t.Errorf("%s: the %s probe sends GET %s to port %d (%s), which does not serve HTTP", c.where, pr.kind, pr.path, pr.port, l.flag)
		case pr.path != "" && !slices.Contains(l.http, pr.path):
			t.Errorf("%s: the %s probe asks port %d for %s; %s serves %s", c.where, pr.kind, pr.port, pr.path, l.flag, strings.Join(l.http, ", "))
		case pr.tls && l.tls == tlsOff:
			t.Errorf("%s: the %s probe speaks TLS to port %d, but %s serves it in plaintext", c.where, pr.kind, pr.port, l.flag)
		case !pr.tls && pr.path != "" && l.tls == tlsOn:
			t.Errorf("%s: the %s probe sends plain HTTP to port %d, but %s serves TLS there: use https (probe --ca FILE, scheme: HTTPS)", c.where, pr.kind, pr.port, l.flag)
		case pr.tls && pr.inside && pr.ca == "":
			t.Errorf("%s: the %s probe runs beside the process, so it can check the certificate: give it the CA (probe --ca FILE, --tls-ca)", c.where, pr.kind)
		}
	}
	if !c.checked {
		return
	}
	for _, pf := range c.paths() {
		m := c.mountOf(pf.path)
		switch {
		case !path.IsAbs(pf.path):
			t.Errorf("%s: %s %q is relative: state an absolute path on a volume", c.where, pf.flag, pf.path)
		case m == nil:
			t.Errorf("%s: %s %s is on no volume (mounts: %s)", c.where, pf.flag, pf.path, describeMounts(c.mounts))
		case pf.state && !m.persistent:
			t.Errorf("%s: %s %s is on %s, which does not persist: the state is lost with the container", c.where, pf.flag, pf.path, m.volume)
		case pf.state && m.readOnly:
			t.Errorf("%s: %s %s is on a read-only mount", c.where, pf.flag, pf.path)
		}
	}
	checkAddresses(t, c, nw)
}

// checkAddresses follows every address a container's flags name.
func checkAddresses(t *testing.T, c *container, nw network) {
	t.Helper()
	f := c.inv.flags
	expect := func(addr string, tg target, binary, flag string) {
		if tg.c == nil {
			t.Errorf("%s: %s leads outside the deployment (%s), want %s %s", c.where, addr, tg.external, binary, flag)
			return
		}
		if tg.c.binary != binary {
			t.Errorf("%s: %s leads to %s, which runs %s, want %s", c.where, addr, tg.c.where, tg.c.binary, binary)
			return
		}
		if l, ok := tg.c.listenerOf(flag); !ok || l.port != tg.port {
			t.Errorf("%s: %s arrives at port %d of %s, where its %s is not (%s)", c.where, addr, tg.port, tg.c.where, flag, describe([]listener{l}))
		}
	}
	dial := func(flag, addr string) (target, bool) {
		host, port, err := splitAddr(addr)
		if err != nil {
			t.Errorf("%s: %s %q: %v", c.where, flag, addr, err)
			return target{}, false
		}
		tg, err := nw.dial(c, host, port)
		if err != nil {
			t.Errorf("%s: %s %s: %v", c.where, flag, addr, err)
			return target{}, false
		}
		return tg, true
	}
	switch c.binary {
	case "cometbft":
		if c.inv.sub != "start" {
			return
		}
		abci, proxy := f["abci"], f["proxy_app"]
		if abci != "grpc" {
			t.Errorf("%s: --abci %s: byzlog-app is served over gRPC (--abci grpc)", c.where, abci)
		}
		if abci == "grpc" && strings.Contains(proxy, "://") {
			t.Errorf("%s: --proxy_app %s: with --abci grpc it must be host:port without a scheme (DESIGN.md, known traps)", c.where, proxy)
		}
		if tg, ok := dial("--proxy_app", proxy); ok {
			expect("--proxy_app "+proxy, tg, "byzlog-app", "--listen")
			if tg.c != nil && tg.c.binary == "byzlog-app" && tg.c.inv.flags["transport"] != abci {
				t.Errorf("%s: --abci %s, but %s serves --transport %s", c.where, abci, tg.c.where, tg.c.inv.flags["transport"])
			}
		}
	case "byzlog-gateway", "byzlog-indexer":
		nodes := strings.Split(f["nodes"], ",")
		if c.binary == "byzlog-indexer" && len(nodes) < 2 {
			t.Errorf("%s: --nodes %s: the light client needs a primary and at least one witness", c.where, f["nodes"])
		}
		if f["insecure-nodes"] == "true" {
			t.Errorf("%s: --insecure-nodes: the nodes' RPC carries every record; serve it over https", c.where)
		}
		for _, node := range nodes {
			// As tlsconf.NodeURL reads them: host:port is plaintext.
			u, err := url.Parse(node)
			if err != nil || u.Scheme != "https" || u.Host == "" {
				t.Errorf("%s: --nodes %q: want https://HOST:PORT (a node's RPC carries every record: plaintext beyond loopback is refused)", c.where, node)
				continue
			}
			if f["node-tls-ca"] == "" {
				t.Errorf("%s: --nodes %s without --node-tls-ca: the nodes' certificates come from the cluster's CA, not the system's roots", c.where, node)
			}
			if tg, ok := dial("--nodes", u.Host); ok {
				expect("--nodes "+node, tg, "cometbft", "--rpc.laddr")
				if tg.tls == tlsOff {
					t.Errorf("%s: --nodes %s: %s serves RPC in plaintext (no rpc.tls_cert_file in its config.toml)", c.where, node, tg.c.where)
				}
			}
		}
		if c.binary == "byzlog-gateway" {
			return
		}
		for _, n := range strings.Split(f["nats"], ",") {
			u, err := url.Parse(n)
			if err != nil || u.Scheme != "tls" {
				t.Errorf("%s: --nats %q: want tls://HOST:PORT (records and the indexer's password cross it)", c.where, n)
				continue
			}
			for _, fl := range []string{"nats-tls-ca", "nats-user", "nats-password-file"} {
				if f[fl] == "" {
					t.Errorf("%s: --nats %s without --%s: NATS asks for TLS and a password", c.where, n, fl)
				}
			}
			if tg, ok := dial("--nats", u.Host); ok {
				if tg.c != nil {
					expect("--nats "+n, tg, "nats-server", "--port")
				}
				if tg.tls == tlsOff {
					t.Errorf("%s: --nats %s: the server there serves no TLS", c.where, n)
				}
			}
		}
	}
}

// checkTopology checks the containers of one deployment file together.
func checkTopology(t *testing.T, cs []*container, nw network) {
	t.Helper()
	// One app per node: proxy_app pairs them one to one.
	apps := map[*container]string{}
	for _, c := range cs {
		if c.binary != "cometbft" || c.inv.sub != "start" {
			continue
		}
		host, port, err := splitAddr(c.inv.flags["proxy_app"])
		if err != nil {
			continue
		}
		if tg, err := nw.dial(c, host, port); err == nil && tg.c != nil {
			if prev, ok := apps[tg.c]; ok {
				t.Errorf("%s serves two nodes: %s and %s", tg.c.where, prev, c.where)
			}
			apps[tg.c] = c.where
		}
	}
	for _, c := range cs {
		if c.binary == "byzlog-app" {
			if _, ok := apps[c]; !ok {
				t.Errorf("%s: no node's --proxy_app leads to it", c.where)
			}
		}
	}
	// No two processes write the same state.
	writers := map[string]string{}
	for _, c := range cs {
		for _, pf := range c.paths() {
			if m := c.mountOf(pf.path); m != nil && pf.state {
				if prev, ok := writers[m.volume]; ok {
					t.Errorf("%s and %s both keep state on volume %s", prev, c.where, m.volume)
				}
				writers[m.volume] = c.where
			}
		}
	}
	// Indexers keep their cursors under their --id.
	ids := map[string]string{}
	for _, c := range cs {
		if c.binary == "byzlog-indexer" {
			id := c.inv.flags["id"]
			if prev, ok := ids[id]; ok {
				t.Errorf("%s and %s share --id %s: their cursors would clash", prev, c.where, id)
			}
			ids[id] = c.where
		}
	}
}

func sortedPorts(m map[int]bool) []int {
	var ps []int
	for p := range m {
		ps = append(ps, p)
	}
	sort.Ints(ps)
	return ps
}

func describe(ls []listener) string {
	var s []string
	for _, l := range ls {
		if l.flag != "" {
			s = append(s, fmt.Sprintf("%s %s", l.flag, net.JoinHostPort(l.host, strconv.Itoa(l.port))))
		}
	}
	if len(s) == 0 {
		return "nothing"
	}
	return strings.Join(s, ", ")
}

func describeMounts(ms []mount) string {
	var s []string
	for _, m := range ms {
		s = append(s, m.volume+":"+m.target)
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// probeCommand reads a health check command line: `probe HOST:PORT [PATH]`
// (deployments/docker/probe), `byzlog-gateway healthcheck [flags] URL`
// (the gateway's own check of its TLS face), or wget/curl with a URL.
func probeCommand(kind string, args []string) (probe, error) {
	if len(args) == 0 {
		return probe{}, fmt.Errorf("empty %s check", kind)
	}
	switch path.Base(args[0]) {
	case "probe":
		rest, ca := args[1:], ""
		if len(rest) > 0 && rest[0] == "--ca" {
			if len(rest) < 2 {
				return probe{}, fmt.Errorf("%s check %q: --ca needs a file", kind, args)
			}
			ca, rest = rest[1], rest[2:]
		}
		if len(rest) < 1 || len(rest) > 2 {
			return probe{}, fmt.Errorf("%s check %q: want probe [--ca FILE] HOST:PORT [PATH]", kind, args)
		}
		host, port, err := splitAddr(rest[0])
		if err != nil {
			return probe{}, err
		}
		pr := probe{kind: kind, inside: true, host: host, port: port, tls: ca != "", ca: ca, args: args}
		if len(rest) == 2 {
			pr.path = rest[1]
		}
		return pr, nil
	case "byzlog-gateway", "wget", "curl":
		if path.Base(args[0]) == "byzlog-gateway" && (len(args) < 3 || args[1] != "healthcheck") {
			break
		}
		ca := ""
		for i, a := range args[1:] {
			if (a == "--tls-ca" || a == "--cacert") && i+2 < len(args) {
				ca = args[i+2]
			}
		}
		for _, a := range args[1:] {
			if strings.HasPrefix(a, "http://") || strings.HasPrefix(a, "https://") {
				u, err := url.Parse(a)
				if err != nil {
					return probe{}, err
				}
				host, port, err := splitAddr(u.Host)
				if err != nil {
					return probe{}, err
				}
				return probe{kind: kind, inside: true, host: host, port: port, path: u.Path, tls: u.Scheme == "https", ca: ca, args: args}, nil
			}
		}
	}
	return probe{}, fmt.Errorf("cannot read the %s probe %q: use probe [--ca FILE] HOST:PORT [PATH], byzlog-gateway healthcheck URL, wget or curl with a URL", kind, args)
}
