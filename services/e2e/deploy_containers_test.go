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
}

// listener is an address a flag makes the process listen on.
type listener struct {
	flag   string
	host   string
	port   int
	http   []string // health endpoints served there; nil when not HTTP
	public bool     // others must reach it (a gateway, a node), so not loopback
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
	add := func(flag, addr string, public bool, http ...string) error {
		if addr == "" {
			return nil // disabled
		}
		host, port, err := splitAddr(addr)
		if err != nil {
			return fmt.Errorf("%s %q: %w", flag, addr, err)
		}
		out = append(out, listener{flag: flag, host: host, port: port, http: http, public: public})
		return nil
	}
	var err error
	switch c.binary {
	case "byzlog-app":
		err = add("--listen", f["listen"], false)
	case "byzlog-gateway":
		if err = add("--listen", f["listen"], true); err == nil {
			err = add("--http-listen", f["http-listen"], true, "/healthz", "/metrics")
		}
	case "byzlog-indexer":
		err = add("--http-listen", f["http-listen"], true, "/healthz", "/readyz", "/metrics")
	case "cometbft":
		if c.inv.sub == "start" {
			if err = add("--rpc.laddr", f["rpc.laddr"], true, "/health", "/status"); err == nil {
				err = add("--p2p.laddr", f["p2p.laddr"], true)
			}
		}
	case "nats-server":
		host := f["addr"]
		if err = add("--port", net.JoinHostPort(host, f["port"]), true); err == nil && f["http_port"] != "" {
			err = add("--http_port", net.JoinHostPort(host, f["http_port"]), true, "/healthz", "/varz")
		}
	}
	return out, err
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

// target is where an address leads: a container and the port it arrives
// on, or something outside the files (external names it).
type target struct {
	c        *container
	port     int
	external string
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
	switch c.binary {
	case "byzlog-app":
		return []pathFlag{{"--data-dir", f["data-dir"], true}}
	case "byzlog-indexer":
		return []pathFlag{{"--genesis", f["genesis"], false}}
	case "cometbft":
		if c.inv.sub == "start" {
			return []pathFlag{{"--home", f["home"], true}}
		}
	case "nats-server":
		return []pathFlag{{"--store_dir", f["store_dir"], true}}
	}
	return nil
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
	case "byzlog-gateway":
		for _, node := range strings.Split(f["nodes"], ",") {
			u, err := url.Parse(node)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
				t.Errorf("%s: --nodes %q: want http://HOST:PORT", c.where, node)
				continue
			}
			if tg, ok := dial("--nodes", u.Host); ok {
				expect("--nodes "+node, tg, "cometbft", "--rpc.laddr")
			}
		}
	case "byzlog-indexer":
		nodes := strings.Split(f["nodes"], ",")
		if len(nodes) < 2 {
			t.Errorf("%s: --nodes %s: the light client needs a primary and at least one witness", c.where, f["nodes"])
		}
		for _, node := range nodes {
			if tg, ok := dial("--nodes", node); ok {
				expect("--nodes "+node, tg, "cometbft", "--rpc.laddr")
			}
		}
		for _, n := range strings.Split(f["nats"], ",") {
			u, err := url.Parse(n)
			if err != nil || u.Scheme != "nats" {
				t.Errorf("%s: --nats %q: want nats://HOST:PORT", c.where, n)
				continue
			}
			if tg, ok := dial("--nats", u.Host); ok && tg.c != nil {
				expect("--nats "+n, tg, "nats-server", "--port")
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
		if len(args) < 2 || len(args) > 3 {
			return probe{}, fmt.Errorf("%s check %q: want probe HOST:PORT [PATH]", kind, args)
		}
		host, port, err := splitAddr(args[1])
		if err != nil {
			return probe{}, err
		}
		pr := probe{kind: kind, inside: true, host: host, port: port}
		if len(args) == 3 {
			pr.path = args[2]
		}
		return pr, nil
	case "byzlog-gateway", "wget", "curl":
		if path.Base(args[0]) == "byzlog-gateway" && (len(args) < 3 || args[1] != "healthcheck") {
			break
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
				return probe{kind: kind, inside: true, host: host, port: port, path: u.Path}, nil
			}
		}
	}
	return probe{}, fmt.Errorf("cannot read the %s probe %q: use probe HOST:PORT [PATH], byzlog-gateway healthcheck URL, wget or curl with a URL", kind, args)
}
