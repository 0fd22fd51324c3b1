//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	cmtcfg "github.com/cometbft/cometbft/config"
	cmtjson "github.com/cometbft/cometbft/libs/json"
	"github.com/cometbft/cometbft/p2p"
	"github.com/cometbft/cometbft/privval"
	cmttypes "github.com/cometbft/cometbft/types"
	composecli "github.com/compose-spec/compose-go/v2/cli"
	composetypes "github.com/compose-spec/compose-go/v2/types"
	"github.com/spf13/viper"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	kjson "sigs.k8s.io/json"
	sigsyaml "sigs.k8s.io/yaml"
)

// TestDeployments checks deployments/ without a Docker engine or a cluster:
// the Dockerfile, docker-compose.yml (loaded by compose-go, the library behind
// `docker compose config`), the Kubernetes manifests (decoded strictly into
// k8s.io/api types, so an unknown field fails) and init-cluster.sh, which it
// runs. Every command line of byzlog-app, byzlog-gateway, byzlog-indexer,
// cometbft, nats-server and init-cluster.sh is read with the flags the real
// binary's --help lists; then the addresses those flags name must lead to the
// right process and port, the state they name must be on a persistent
// volume, and the health checks must probe endpoints that exist.
func TestDeployments(t *testing.T) {
	bin := binDir(t)
	for _, name := range []string{"byzlog-gateway", "byzlog-indexer", "nats-server"} {
		if _, err := os.Stat(filepath.Join(bin, name)); err != nil {
			t.Fatalf("%s not found in %s (BYZLOG_BIN): run `make build` first: %v", name, bin, err)
		}
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	d := &deployment{root: root, dep: filepath.Join(root, "deployments"), bin: bin, helps: map[string]helpFlags{}}
	d.df = parseDockerfile(t, filepath.Join(d.dep, "docker", "Dockerfile"))
	d.pins = readPins(t, root)

	t.Run("dockerfile", d.checkDockerfile)
	t.Run("compose", d.checkCompose)
	t.Run("k8s", d.checkK8s)
}

// deployment is what the checks share.
type deployment struct {
	root, dep, bin string
	helps          map[string]helpFlags
	df             *dockerfile
	pins           pins
}

// pins are the versions the Makefile and go.work declare.
type pins struct {
	cometbft, nats, goVersion string // "v0.40.0", "2.15.2", "1.26"
}

func readPins(t *testing.T, root string) pins {
	t.Helper()
	find := func(file, pattern string) string {
		b, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(pattern).FindSubmatch(b)
		if m == nil {
			t.Fatalf("%s: no match for %s", file, pattern)
		}
		return string(m[1])
	}
	return pins{
		// The Makefile takes CometBFT's version from abciapp/go.mod.
		cometbft:  find("abciapp/go.mod", `(?m)^\s*github\.com/cometbft/cometbft (v\S+)`),
		nats:      strings.TrimPrefix(find("Makefile", `(?m)^NATS_SERVER_VERSION\s*:=\s*(\S+)`), "v"),
		goVersion: find("go.work", `(?m)^go (\d+\.\d+)`),
	}
}

// --- the binaries' flags ------------------------------------------------------

const initScript = "init-cluster.sh"

// flagSpec is one flag as --help lists it.
type flagSpec struct {
	name  string // the longest spelling without dashes: "data-dir", "jetstream"
	value bool   // takes a value
	def   string // the default --help states, "" when none
}

// helpFlags maps every spelling ("--data-dir", "-js") to its flag.
type helpFlags map[string]*flagSpec

var (
	reFlagToken = regexp.MustCompile(`-{1,2}[A-Za-z][A-Za-z0-9_.\-]*`)
	reColumns   = regexp.MustCompile(`\s{2,}`)
	reDefault   = regexp.MustCompile(`\(default:? "?([^")]*)"?\)\s*$`)
)

// parseHelp reads the flag lines of cobra's and nats-server's --help: an
// indented line starting with a dash, spellings and a value placeholder in the
// first column, the description after two spaces.
func parseHelp(text string) helpFlags {
	flags := helpFlags{}
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == line || !strings.HasPrefix(trimmed, "-") {
			continue
		}
		cols := reColumns.Split(trimmed, 2)
		locs := reFlagToken.FindAllStringIndex(cols[0], -1)
		if len(locs) == 0 {
			continue
		}
		spec := &flagSpec{value: strings.TrimSpace(cols[0][locs[len(locs)-1][1]:]) != ""}
		for _, l := range locs {
			tok := cols[0][l[0]:l[1]]
			if n := strings.TrimLeft(tok, "-"); len(n) > len(spec.name) {
				spec.name = n
			}
			flags[tok] = spec
		}
		if len(cols) == 2 {
			if m := reDefault.FindStringSubmatch(cols[1]); m != nil {
				spec.def = m[1]
			}
		}
	}
	return flags
}

func (d *deployment) help(t *testing.T, binary, sub string) helpFlags {
	t.Helper()
	key := binary + " " + sub
	if h, ok := d.helps[key]; ok {
		return h
	}
	var cmd *exec.Cmd
	if binary == initScript {
		cmd = exec.Command("bash", filepath.Join(d.dep, initScript), "--help")
	} else {
		var args []string
		if sub != "" {
			args = append(args, sub)
		}
		cmd = exec.Command(filepath.Join(d.bin, binary), append(args, "--help")...)
	}
	out, _ := cmd.CombinedOutput() // nats-server's --help exits non-zero
	h := parseHelp(string(out))
	if len(h) == 0 {
		t.Fatalf("`%s` lists no flags:\n%s", strings.Join(cmd.Args, " "), out)
	}
	d.helps[key] = h
	return h
}

var knownBinaries = []string{"byzlog", "byzlog-app", "byzlog-gateway", "byzlog-indexer", "cometbft", "nats-server", initScript}

// invocation is a command line read with its binary's real flags.
type invocation struct {
	sub   string            // the subcommand (cometbft start, byzlog consume)
	flags map[string]string // canonical name -> value given, else --help's default
	given map[string]bool
}

// invoke reads args with binary's --help and reports every flag it lacks.
func (d *deployment) invoke(t *testing.T, where, binary string, args []string) *invocation {
	t.Helper()
	inv := &invocation{flags: map[string]string{}, given: map[string]bool{}}
	if (binary == "cometbft" || binary == "byzlog") && len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		inv.sub, args = args[0], args[1:]
	}
	spec := d.help(t, binary, inv.sub)
	name := strings.TrimSpace(binary + " " + inv.sub)
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			continue // a positional argument
		}
		flag, value, hasValue := strings.Cut(a, "=")
		f := spec[flag]
		if f == nil {
			t.Errorf("%s: `%s` has no flag %s (see `%s --help`)", where, name, flag, name)
			continue
		}
		switch {
		case f.value && !hasValue:
			if i+1 == len(args) {
				t.Errorf("%s: %s %s needs a value", where, name, flag)
				continue
			}
			i++
			value = args[i]
		case !f.value && !hasValue:
			value = "true"
		}
		inv.flags[f.name], inv.given[f.name] = value, true
	}
	for _, f := range spec {
		if _, ok := inv.flags[f.name]; !ok && f.def != "" {
			inv.flags[f.name] = f.def
		}
	}
	return inv
}

// --- containers ---------------------------------------------------------------

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
// (deployments/docker/probe), or wget/curl with a URL.
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
	case "wget", "curl":
		for _, a := range args[1:] {
			if strings.HasPrefix(a, "http://") {
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
	return probe{}, fmt.Errorf("cannot read the %s probe %q: use probe HOST:PORT [PATH], wget or curl with a URL", kind, args)
}

// --- Dockerfile ---------------------------------------------------------------

type dfStage struct {
	name, base string
	line       int
	parent     *dfStage
	entrypoint []string
	cmd        []string
	health     []string
	hasEntry   bool
	hasCmd     bool
	hasHealth  bool
	expose     []int
	user       string
	runs       []string
	copies     [][]string // sources from the build context
	copiesFrom [][2]string
}

func (s *dfStage) Entrypoint() []string {
	for x := s; x != nil; x = x.parent {
		if x.hasEntry {
			return x.entrypoint
		}
	}
	return nil
}

// Cmd follows Docker: an ENTRYPOINT set after the last CMD clears it.
func (s *dfStage) Cmd() []string {
	for x := s; x != nil; x = x.parent {
		if x.hasCmd {
			return x.cmd
		}
		if x.hasEntry {
			return nil
		}
	}
	return nil
}

func (s *dfStage) Health() []string {
	for x := s; x != nil; x = x.parent {
		if x.hasHealth {
			return x.health
		}
	}
	return nil
}

func (s *dfStage) User() string {
	for x := s; x != nil; x = x.parent {
		if x.user != "" {
			return x.user
		}
	}
	return ""
}

func (s *dfStage) Expose() map[int]bool {
	ports := map[int]bool{}
	for x := s; x != nil; x = x.parent {
		for _, p := range x.expose {
			ports[p] = true
		}
	}
	return ports
}

func (s *dfStage) Runs() string {
	var all []string
	for x := s; x != nil; x = x.parent {
		all = append(all, x.runs...)
	}
	return strings.Join(all, "\n")
}

func (s *dfStage) copiesContext(src string) bool {
	for x := s; x != nil; x = x.parent {
		for _, c := range x.copies {
			if slices.Contains(c, src) {
				return true
			}
		}
	}
	return false
}

type dockerfile struct {
	path   string
	args   map[string]string // ARGs before the first FROM, with their defaults
	stages []*dfStage
	byName map[string]*dfStage
}

// parseDockerfile reads the instructions the checks need; ENTRYPOINT, CMD and
// HEALTHCHECK must use the exec form (JSON), so the binary is PID 1 and gets
// SIGTERM.
func parseDockerfile(t *testing.T, file string) *dockerfile {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	df := &dockerfile{path: file, args: map[string]string{}, byName: map[string]*dfStage{}}
	var cur *dfStage
	var logical strings.Builder
	start := 0
	lines := strings.Split(string(b), "\n")
	for i, raw := range lines {
		line := strings.TrimSpace(raw)
		if strings.HasPrefix(line, "#") || (line == "" && logical.Len() == 0) {
			continue
		}
		if logical.Len() == 0 {
			start = i + 1
		}
		if strings.HasSuffix(line, `\`) {
			logical.WriteString(strings.TrimSuffix(line, `\`) + " ")
			continue
		}
		logical.WriteString(line)
		instr := logical.String()
		logical.Reset()
		where := fmt.Sprintf("%s:%d", filepath.Base(file), start)
		word, rest, _ := strings.Cut(instr, " ")
		rest = strings.TrimSpace(rest)
		execForm := func(s string) []string {
			var v []string
			if err := json.Unmarshal([]byte(s), &v); err != nil {
				t.Errorf("%s: %s %s: use the exec form [\"binary\", \"arg\"]: %v", where, word, s, err)
			}
			return v
		}
		switch strings.ToUpper(word) {
		case "ARG":
			name, def, _ := strings.Cut(rest, "=")
			if cur == nil {
				df.args[name] = def
			}
		case "FROM":
			fields := strings.Fields(rest)
			var img, name string
			for j := 0; j < len(fields); j++ {
				switch {
				case strings.HasPrefix(fields[j], "--"):
				case strings.EqualFold(fields[j], "AS") && j+1 < len(fields):
					name = fields[j+1]
					j++
				default:
					img = fields[j]
				}
			}
			cur = &dfStage{name: name, base: img, line: start, parent: df.byName[img]}
			df.stages = append(df.stages, cur)
			if name != "" {
				df.byName[name] = cur
			}
		case "ENTRYPOINT":
			cur.entrypoint, cur.hasEntry = execForm(rest), true
		case "CMD":
			cur.cmd, cur.hasCmd = execForm(rest), true
		case "HEALTHCHECK":
			cur.hasHealth = true
			if _, c, ok := strings.Cut(rest, "CMD "); ok {
				cur.health = execForm(strings.TrimSpace(c))
			}
		case "EXPOSE":
			for _, p := range strings.Fields(rest) {
				n, err := strconv.Atoi(strings.TrimSuffix(p, "/tcp"))
				if err != nil {
					t.Errorf("%s: EXPOSE %s: not a port", where, p)
				}
				cur.expose = append(cur.expose, n)
			}
		case "USER":
			cur.user = rest
		case "RUN":
			cur.runs = append(cur.runs, rest)
		case "COPY", "ADD":
			var from string
			var args []string
			for _, f := range strings.Fields(rest) {
				if v, ok := strings.CutPrefix(f, "--from="); ok {
					from = v
				} else if !strings.HasPrefix(f, "--") {
					args = append(args, f)
				}
			}
			if len(args) < 2 {
				t.Errorf("%s: %s needs a source and a destination", where, word)
				continue
			}
			for _, src := range args[:len(args)-1] {
				if from != "" {
					cur.copiesFrom = append(cur.copiesFrom, [2]string{from, src})
				}
			}
			if from == "" {
				cur.copies = append(cur.copies, args)
			}
		}
	}
	return df
}

// dockerignored says whether the context path p is left out of the build by
// Dockerfile.dockerignore: last matching pattern wins, ! re-includes; the
// patterns used are "**", "dir/", "file" and "**/name/".
func dockerignored(patterns []string, p string) bool {
	ignored := false
	for _, pat := range patterns {
		neg := strings.HasPrefix(pat, "!")
		pat = strings.Trim(strings.TrimPrefix(pat, "!"), "/")
		match := false
		switch {
		case pat == "**":
			match = true
		case strings.HasPrefix(pat, "**/"):
			name := strings.TrimPrefix(pat, "**/")
			parts := strings.Split(p, "/")
			match = slices.Contains(parts, name)
		default:
			match = p == pat || strings.HasPrefix(p, pat+"/")
		}
		if match {
			ignored = !neg
		}
	}
	return ignored
}

func (d *deployment) checkDockerfile(t *testing.T) {
	df := d.df
	if got := df.args["COMETBFT_VERSION"]; got != d.pins.cometbft {
		t.Errorf("Dockerfile: ARG COMETBFT_VERSION=%s, but the Makefile (abciapp/go.mod) pins %s", got, d.pins.cometbft)
	}
	if got := df.args["GO_VERSION"]; got != d.pins.goVersion {
		t.Errorf("Dockerfile: ARG GO_VERSION=%s, but go.work says go %s", got, d.pins.goVersion)
	}
	ignoreFile := df.path + ".dockerignore"
	b, err := os.ReadFile(ignoreFile)
	if err != nil {
		t.Fatalf("%v (BuildKit reads it next to the Dockerfile: without it the whole repository, bin/ and run/ included, is sent)", err)
	}
	var patterns []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			patterns = append(patterns, l)
		}
	}
	for _, s := range df.stages {
		for _, c := range s.copies {
			for _, src := range c[:len(c)-1] {
				p := strings.Trim(path.Clean(src), "/")
				if _, err := os.Stat(filepath.Join(d.root, p)); err != nil {
					t.Errorf("Dockerfile stage %s: COPY %s: not in the repository: %v", s.name, src, err)
				}
				if dockerignored(patterns, p) {
					t.Errorf("Dockerfile stage %s: COPY %s, but %s leaves it out of the build context", s.name, src, filepath.Base(ignoreFile))
				}
			}
		}
	}
	for _, s := range df.stages {
		entry := s.Entrypoint()
		if s.name == "" || len(entry) == 0 {
			continue
		}
		where := fmt.Sprintf("Dockerfile target %s", s.name)
		if u := s.User(); u == "" || u == "root" || strings.HasPrefix(u, "0:") || u == "0" {
			t.Errorf("%s: runs as root (USER %q): set a non-root USER", where, u)
		}
		binary := path.Base(entry[0])
		if !slices.Contains(knownBinaries, binary) {
			t.Errorf("%s: ENTRYPOINT %s is none of %v", where, binary, knownBinaries)
			continue
		}
		// The binary must be in the image.
		if !s.copiesContext("deployments/"+binary) && !slices.ContainsFunc(s.copiesFrom, func(c [2]string) bool { return path.Base(c[1]) == binary }) {
			t.Errorf("%s: ENTRYPOINT %s, but the stage copies no %s", where, binary, binary)
		}
		// Its shared libraries must be installed: Debian names librocksdb.so.7.8's package librocksdb7.8.
		for _, cf := range s.copiesFrom {
			name := path.Base(cf[1])
			for _, pkg := range debianLibs(t, filepath.Join(d.bin, name)) {
				if !strings.Contains(s.Runs(), pkg) {
					t.Errorf("%s: %s needs %s at run time: apt-get install it", where, name, pkg)
				}
				if from := df.byName[cf[0]]; from != nil && !strings.Contains(from.Runs(), strings.TrimSuffix(pkg, regexp.MustCompile(`[0-9.]+$`).FindString(pkg))+"-dev") {
					t.Errorf("Dockerfile stage %s builds %s, which links %s: install its -dev package", cf[0], name, pkg)
				}
			}
		}
		c := &container{where: where, binary: binary, declared: s.Expose(), pod: where}
		c.inv = d.invoke(t, where, binary, append(slices.Clone(entry[1:]), s.Cmd()...))
		if h := s.Health(); h != nil {
			if slices.Contains(h, "probe") && !s.copiesContext("deployments/docker/probe") {
				t.Errorf("%s: HEALTHCHECK runs probe, which the image lacks", where)
			}
			pr, err := probeCommand("HEALTHCHECK", h)
			if err != nil {
				t.Errorf("%s: %v", where, err)
			} else {
				c.probes = append(c.probes, pr)
			}
		}
		checkContainer(t, c, nil)
	}
}

// debianLibs lists the Debian packages of the non-base libraries a binary
// links (RocksDB), from ldd.
func debianLibs(t *testing.T, binPath string) []string {
	out, err := exec.Command("ldd", binPath).Output()
	if err != nil {
		t.Logf("ldd %s: %v: runtime libraries not checked", binPath, err)
		return nil
	}
	var pkgs []string
	for _, m := range regexp.MustCompile(`lib(rocksdb)\.so\.(\d+\.\d+)`).FindAllStringSubmatch(string(out), -1) {
		if pkg := "lib" + m[1] + m[2]; !slices.Contains(pkgs, pkg) {
			pkgs = append(pkgs, pkg)
		}
	}
	return pkgs
}

// --- docker-compose.yml ---------------------------------------------------------

type composeNetwork struct {
	byName   map[string]*container
	networks map[string][]string        // service -> networks it joins
	dials    map[string]map[string]bool // service -> services it dials
}

func (n *composeNetwork) dial(from *container, host string, port int) (target, error) {
	if loopback(host) {
		return target{c: from, port: port}, reach(from, from, port)
	}
	to := n.byName[host]
	if to == nil {
		return target{}, fmt.Errorf("no service %q in docker-compose.yml", host)
	}
	if !slices.ContainsFunc(n.networks[from.pod], func(net string) bool { return slices.Contains(n.networks[to.pod], net) }) {
		return target{}, fmt.Errorf("services %s and %s share no network (%v and %v)", from.pod, to.pod, n.networks[from.pod], n.networks[to.pod])
	}
	if !to.declared[port] {
		return target{}, fmt.Errorf("service %s does not expose port %d (it exposes %v)", to.pod, port, sortedPorts(to.declared))
	}
	if n.dials[from.pod] == nil {
		n.dials[from.pod] = map[string]bool{}
	}
	n.dials[from.pod][to.pod] = true
	return target{c: to, port: port}, reach(from, to, port)
}

func (d *deployment) loadCompose(t *testing.T, file string) *composetypes.Project {
	t.Helper()
	opts, err := composecli.NewProjectOptions([]string{file},
		composecli.WithWorkingDirectory(filepath.Dir(file)),
		composecli.WithProfiles([]string{"*"}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	proj, err := opts.LoadProject(ctx)
	if err != nil {
		t.Fatalf("docker-compose.yml does not load (as `docker compose config` would say): %v", err)
	}
	return proj
}

func (d *deployment) checkCompose(t *testing.T) {
	file := filepath.Join(d.dep, "docker-compose.yml")
	var proj *composetypes.Project
	if !t.Run("loads", func(t *testing.T) { proj = d.loadCompose(t, file) }) {
		t.FailNow()
	}
	nw := &composeNetwork{byName: map[string]*container{}, networks: map[string][]string{}, dials: map[string]map[string]bool{}}
	var cs []*container
	imageTargets := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(proj.Services)) {
		svc := proj.Services[name]
		where := "docker-compose.yml service " + name
		c := &container{where: where, pod: name, declared: map[int]bool{}, checked: true}
		var stage *dfStage
		if svc.Build != nil {
			if ctx := filepath.Clean(svc.Build.Context); ctx != d.root {
				t.Errorf("%s: build context %s, want the repository root %s (the Go workspace)", where, ctx, d.root)
			}
			df := svc.Build.Dockerfile
			if !filepath.IsAbs(df) {
				df = filepath.Join(svc.Build.Context, df)
			}
			if filepath.Clean(df) != d.df.path {
				t.Errorf("%s: builds %s, want %s", where, svc.Build.Dockerfile, d.df.path)
			}
			if stage = d.df.byName[svc.Build.Target]; stage == nil {
				t.Errorf("%s: build target %q is no stage of the Dockerfile", where, svc.Build.Target)
			}
			repo, _, _ := strings.Cut(svc.Image, ":")
			if prev, ok := imageTargets[repo]; ok && prev != svc.Build.Target {
				t.Errorf("%s: image %s is built from target %s here and %s elsewhere", where, repo, svc.Build.Target, prev)
			}
			imageTargets[repo] = svc.Build.Target
		}
		if repo, _, _ := strings.Cut(svc.Image, ":"); stage == nil && strings.HasPrefix(repo, "byzlog/") {
			// An image of ours without a build section: the target it is named after.
			if stage = d.df.byName[strings.TrimPrefix(repo, "byzlog/")]; stage == nil {
				t.Errorf("%s: image %s is no target of deployments/docker/Dockerfile", where, svc.Image)
			}
		}
		if repo, tag, _ := strings.Cut(svc.Image, ":"); repo == "nats" && strings.TrimSuffix(tag, "-alpine") != d.pins.nats {
			t.Errorf("%s: image %s, but the Makefile pins nats-server v%s", where, svc.Image, d.pins.nats)
		}
		entry, cmd := []string(svc.Entrypoint), []string(svc.Command)
		if stage != nil {
			if entry == nil {
				entry = stage.Entrypoint()
				if cmd == nil {
					cmd = stage.Cmd()
				}
			}
		}
		if len(entry) == 0 && len(cmd) > 0 {
			entry, cmd = cmd[:1], cmd[1:]
		}
		if len(entry) == 0 {
			t.Errorf("%s: cannot tell what it runs: give it an entrypoint or a build target", where)
			continue
		}
		c.binary = path.Base(entry[0])
		if !slices.Contains(knownBinaries, c.binary) {
			t.Errorf("%s: runs %s, none of %v", where, c.binary, knownBinaries)
			continue
		}
		c.inv = d.invoke(t, where, c.binary, append(slices.Clone(entry[1:]), cmd...))
		for _, e := range svc.Expose {
			p, err := strconv.Atoi(e)
			if err != nil {
				t.Errorf("%s: expose %q: not a port", where, e)
			}
			c.declared[p] = true
		}
		for _, p := range svc.Ports {
			c.declared[int(p.Target)] = true
			if p.HostIP != "127.0.0.1" {
				t.Errorf("%s: port %s:%d is published on %q: publish on 127.0.0.1 only", where, p.Published, p.Target, p.HostIP)
			}
		}
		for _, v := range svc.Volumes {
			named := v.Type == composetypes.VolumeTypeVolume && v.Source != ""
			if v.Type == composetypes.VolumeTypeBind {
				t.Errorf("%s: bind mount %s: keep state in named volumes", where, v.Source)
			}
			c.mounts = append(c.mounts, mount{target: v.Target, volume: v.Source, readOnly: v.ReadOnly, persistent: named})
		}
		var test []string
		switch hc := svc.HealthCheck; {
		case hc != nil && !hc.Disable && len(hc.Test) > 0:
			test = hc.Test
		case hc == nil && stage != nil:
			test = append([]string{"CMD"}, stage.Health()...) // the image's HEALTHCHECK
		}
		if len(test) > 1 {
			switch test[0] {
			case "CMD":
				test = test[1:]
			case "CMD-SHELL":
				test = strings.Fields(strings.Join(test[1:], " "))
			}
			pr, err := probeCommand("healthcheck", test)
			if err != nil {
				t.Errorf("%s: %v", where, err)
			} else {
				if path.Base(test[0]) == "probe" && stage != nil && !stage.copiesContext("deployments/docker/probe") {
					t.Errorf("%s: the healthcheck runs probe, which image target %s lacks", where, stage.name)
				}
				c.probes = append(c.probes, pr)
			}
		}
		switch {
		case svc.NetworkMode == "none":
		case strings.HasPrefix(svc.NetworkMode, "service:"):
			c.pod = strings.TrimPrefix(svc.NetworkMode, "service:")
		case len(svc.Networks) == 0:
			nw.networks[name] = []string{"default"}
		default:
			for n := range svc.Networks {
				nw.networks[name] = append(nw.networks[name], n)
			}
			sort.Strings(nw.networks[name])
		}
		if c.longRunning() && !slices.Contains([]string{"always", "unless-stopped", "on-failure"}, strings.Split(svc.Restart, ":")[0]) {
			t.Errorf("%s: restart %q: a long-running service should come back (unless-stopped)", where, svc.Restart)
		}
		nw.byName[name] = c
		cs = append(cs, c)
	}

	t.Run("containers", func(t *testing.T) {
		for _, c := range cs {
			if c.binary != initScript {
				checkContainer(t, c, nw)
			}
		}
		checkTopology(t, cs, nw)
		// A service waits for what it talks to.
		for from, tos := range nw.dials {
			for to := range tos {
				if to == from {
					continue
				}
				dep, ok := proj.Services[from].DependsOn[to]
				want := composetypes.ServiceConditionHealthy
				if !ok || dep.Condition != want {
					t.Errorf("docker-compose.yml service %s talks to %s: give it depends_on %s: {condition: %s}", from, to, to, want)
				}
			}
		}
		count := map[string]int{}
		for _, c := range cs {
			if c.longRunning() {
				count[c.binary]++
			}
		}
		for binary, want := range map[string]int{"cometbft": 4, "byzlog-app": 4, "byzlog-gateway": 2, "byzlog-indexer": 1, "nats-server": 1} {
			if count[binary] < want {
				t.Errorf("docker-compose.yml runs %d %s, want %d", count[binary], binary, want)
			}
		}
	})

	t.Run("init", func(t *testing.T) { d.checkComposeInit(t, proj, cs, nw) })
}

// checkComposeInit runs the init service's command line and follows its
// volumes into the services that mount them.
func (d *deployment) checkComposeInit(t *testing.T, proj *composetypes.Project, cs []*container, nw *composeNetwork) {
	var init *container
	for _, c := range cs {
		if c.binary == initScript {
			init = c
		}
	}
	if init == nil {
		t.Fatalf("docker-compose.yml: no service runs %s", initScript)
	}
	for _, c := range cs {
		if c.binary != "cometbft" {
			continue
		}
		dep, ok := proj.Services[c.pod].DependsOn[init.pod]
		if !ok || dep.Condition != composetypes.ServiceConditionCompletedSuccessfully {
			t.Errorf("%s: start after the network exists: depends_on %s: {condition: %s}", c.where, init.pod, composetypes.ServiceConditionCompletedSuccessfully)
		}
	}
	f := init.inv.flags
	out := f["out"]
	tmp := t.TempDir()
	args := d.initArgs(t, init, tmp)
	runInitCluster(t, d, args...)

	// Where init writes each volume, in tmp.
	written := map[string]string{}
	for _, m := range init.mounts {
		rel, err := filepath.Rel(out, m.target)
		if err != nil || strings.HasPrefix(rel, "..") {
			t.Errorf("%s: volume %s at %s is outside --out %s", init.where, m.volume, m.target, out)
			continue
		}
		written[m.volume] = filepath.Join(tmp, rel)
	}
	n, _ := strconv.Atoi(f["validators"])
	p2pPort, _ := strconv.Atoi(f["p2p-port"])
	abciPort, _ := strconv.Atoi(f["abci-port"])
	host := func(i int) string { return fmt.Sprintf("%s%d%s", f["hostname-prefix"], i, f["hostname-suffix"]) }
	peers := checkGenerated(t, tmp, n, f["chain-id"], host, p2pPort, abciPort)

	homes := map[string]*container{} // tmp/nodeI -> the node using it
	for _, c := range cs {
		if !c.checked || c == init {
			continue
		}
		for _, pf := range c.paths() {
			m := c.mountOf(pf.path)
			if m == nil {
				continue
			}
			dir, ok := written[m.volume]
			if !ok {
				if pf.flag != "--data-dir" && pf.flag != "--store_dir" {
					t.Errorf("%s: %s %s is on volume %s, which %s does not write", c.where, pf.flag, pf.path, m.volume, init.where)
				}
				continue
			}
			rel, _ := filepath.Rel(m.target, pf.path)
			p := filepath.Join(dir, rel)
			want := p
			if pf.flag == "--home" {
				want = filepath.Join(p, "config", "config.toml")
				homes[p] = c
			}
			if _, err := os.Stat(want); err != nil {
				t.Errorf("%s: %s %s: init does not write it there (volume %s): %v", c.where, pf.flag, pf.path, m.volume, err)
			}
		}
	}
	// The peers each node is configured with are the other nodes' services.
	for i := 0; i < n; i++ {
		node := homes[filepath.Join(tmp, fmt.Sprintf("node%d", i))]
		if node == nil {
			t.Errorf("no cometbft service uses the home init writes as node%d", i)
			continue
		}
		for _, peer := range peers[i] {
			tg, err := nw.dial(node, peer.host, peer.port)
			if err != nil {
				t.Errorf("%s: persistent peer %s@%s:%d: %v", node.where, peer.id, peer.host, peer.port, err)
				continue
			}
			if other := homes[filepath.Join(tmp, fmt.Sprintf("node%d", peer.index))]; tg.c != other {
				t.Errorf("%s: persistent peer %s (node%d) is %s:%d, which is %s, not the service with node%d's home", node.where, peer.id, peer.index, peer.host, peer.port, tg.c.where, peer.index)
			}
			if l, ok := tg.c.listenerOf("--p2p.laddr"); !ok || l.port != peer.port {
				t.Errorf("%s: persistent peer %s:%d is not %s's --p2p.laddr", node.where, peer.host, peer.port, tg.c.where)
			}
		}
	}
}

// initArgs is c's init-cluster.sh command line with --out moved to dir.
func (d *deployment) initArgs(t *testing.T, c *container, dir string) []string {
	t.Helper()
	var args []string
	for name, v := range c.inv.flags {
		if !c.inv.given[name] {
			continue
		}
		if name == "out" {
			v = dir
		}
		args = append(args, "--"+name+"="+v)
	}
	sort.Strings(args)
	return args
}

// runInitCluster runs deployments/init-cluster.sh with cometbft and byzlog
// from BYZLOG_BIN, as the init image does, and with no admin key given.
func runInitCluster(t *testing.T, d *deployment, args ...string) string {
	t.Helper()
	return runScript(t, d, filepath.Join(d.dep, initScript), args...)
}

func runScript(t *testing.T, d *deployment, script string, args ...string) string {
	t.Helper()
	if _, err := exec.LookPath("jq"); err != nil {
		t.Fatalf("jq is not on PATH: init-cluster.sh edits genesis with it (apt-get install jq)")
	}
	cmd := exec.Command("bash", append([]string{script}, args...)...)
	cmd.Env = append(os.Environ(), "PATH="+d.bin+string(os.PathListSeparator)+os.Getenv("PATH"), "BYZLOG_ADMIN_PUBKEY=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(script), strings.Join(args, " "), err, out)
	}
	return string(out)
}

type peer struct {
	index int
	id    p2p.ID
	host  string
	port  int
}

// checkGenerated checks the network init-cluster.sh wrote to dir and returns
// each node's persistent peers.
func checkGenerated(t *testing.T, dir string, n int, chainID string, host func(int) string, p2pPort, abciPort int) [][]peer {
	t.Helper()
	genesisPath := filepath.Join(dir, "genesis", "genesis.json")
	gen, err := cmttypes.GenesisDocFromFile(genesisPath)
	if err != nil {
		t.Fatalf("generated genesis: %v", err)
	}
	genBytes, _ := os.ReadFile(genesisPath)
	if chainID != "" && gen.ChainID != chainID {
		t.Errorf("genesis chain_id %q, want %q", gen.ChainID, chainID)
	}
	if len(gen.Validators) != n {
		t.Errorf("genesis has %d validators, want %d", len(gen.Validators), n)
	}
	if mb := gen.ConsensusParams.Block.MaxBytes; mb <= 0 || mb >= 4<<20-64<<10 {
		t.Errorf("genesis block.max_bytes %d: keep it under 4 MiB - 64 KiB, or a large block halts the chain (gRPC ABCI cap)", mb)
	}
	var state struct {
		Admins []string `json:"admins"`
	}
	if err := json.Unmarshal(gen.AppState, &state); err != nil {
		t.Errorf("genesis app_state %s: %v", gen.AppState, err)
	}
	if pub, err := os.ReadFile(filepath.Join(dir, "admin", "admin.pub")); err != nil {
		t.Errorf("the admin key was not generated: %v", err)
	} else if want := strings.TrimSpace(string(pub)); !slices.Equal(state.Admins, []string{want}) {
		t.Errorf("genesis app_state admins = %v, want [%s] (admin/admin.pub)", state.Admins, want)
	}

	ids := make([]p2p.ID, n)
	cfgs := make([]*cmtcfg.Config, n)
	for i := 0; i < n; i++ {
		home := filepath.Join(dir, fmt.Sprintf("node%d", i))
		key, err := p2p.LoadNodeKey(filepath.Join(home, "config", "node_key.json"))
		if err != nil {
			t.Fatalf("node%d: %v", i, err)
		}
		ids[i] = key.ID()
		v := viper.New()
		v.SetConfigFile(filepath.Join(home, "config", "config.toml"))
		if err := v.ReadInConfig(); err != nil {
			t.Fatalf("node%d config.toml: %v", i, err)
		}
		cfg := cmtcfg.DefaultConfig()
		if err := v.Unmarshal(cfg); err != nil {
			t.Fatalf("node%d config.toml: %v", i, err)
		}
		cfg.SetRoot(home)
		if err := cfg.ValidateBasic(); err != nil {
			t.Errorf("node%d config.toml: %v", i, err)
		}
		cfgs[i] = cfg
		where := fmt.Sprintf("generated node%d config.toml", i)
		for _, c := range []struct {
			name      string
			got, want any
		}{
			{"moniker", cfg.Moniker, host(i)},
			{"abci", cfg.ABCI, "grpc"},
			{"proxy_app", cfg.ProxyApp, fmt.Sprintf("127.0.0.1:%d", abciPort)},
			{"[mempool] recheck", cfg.Mempool.Recheck, false},
			{"[consensus] timeout_propose", cfg.Consensus.TimeoutPropose, 10 * time.Second},
			{"[p2p] pex", cfg.P2P.PexReactor, false},
			{"[p2p] laddr", cfg.P2P.ListenAddress, fmt.Sprintf("tcp://0.0.0.0:%d", p2pPort)},
		} {
			if c.got != c.want {
				t.Errorf("%s: %s = %v, want %v", where, c.name, c.got, c.want)
			}
		}
		if b, _ := os.ReadFile(cfg.GenesisFile()); !bytes.Equal(b, genBytes) {
			t.Errorf("%s: its genesis differs from genesis/genesis.json", where)
		}
		var pv privval.FilePVKey
		if b, err := os.ReadFile(cfg.PrivValidatorKeyFile()); err != nil || cmtjson.Unmarshal(b, &pv) != nil {
			t.Errorf("%s: cannot read its validator key: %v", where, err)
		} else if !slices.ContainsFunc(gen.Validators, func(v cmttypes.GenesisValidator) bool { return v.PubKey.Equals(pv.PubKey) }) {
			t.Errorf("%s: its validator key is not a genesis validator", where)
		}
		if _, err := os.Stat(cfg.PrivValidatorStateFile()); err != nil {
			t.Errorf("%s: %v", where, err)
		}
	}
	peers := make([][]peer, n)
	for i, cfg := range cfgs {
		list := strings.Split(cfg.P2P.PersistentPeers, ",")
		if len(list) != n-1 {
			t.Errorf("node%d: %d persistent peers (%s), want the %d others", i, len(list), cfg.P2P.PersistentPeers, n-1)
		}
		for _, s := range list {
			id, addr, _ := strings.Cut(s, "@")
			h, port, err := splitAddr(addr)
			if err != nil {
				t.Errorf("node%d: persistent peer %q: %v", i, s, err)
				continue
			}
			j := slices.Index(ids, p2p.ID(id))
			switch {
			case j < 0:
				t.Errorf("node%d: persistent peer %s is no node's id", i, id)
			case j == i:
				t.Errorf("node%d: lists itself as a peer", i)
			case h != host(j) || port != p2pPort:
				t.Errorf("node%d: peer node%d at %s:%d, want %s:%d", i, j, h, port, host(j), p2pPort)
			default:
				peers[i] = append(peers[i], peer{index: j, id: p2p.ID(id), host: h, port: port})
			}
		}
	}
	return peers
}

// --- Kubernetes -----------------------------------------------------------------

// k8sObject is one decoded manifest document.
type k8sObject struct {
	file string
	obj  any
}

func newK8sObject(apiVersion, kind string) any {
	switch apiVersion + "/" + kind {
	case "v1/Service":
		return &corev1.Service{}
	case "v1/ConfigMap":
		return &corev1.ConfigMap{}
	case "v1/Secret":
		return &corev1.Secret{}
	case "v1/Namespace":
		return &corev1.Namespace{}
	case "apps/v1/StatefulSet":
		return &appsv1.StatefulSet{}
	case "apps/v1/Deployment":
		return &appsv1.Deployment{}
	case "autoscaling/v2/HorizontalPodAutoscaler":
		return &autoscalingv2.HorizontalPodAutoscaler{}
	case "policy/v1/PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}
	}
	return nil
}

// decodeManifests decodes every document of file strictly: an unknown or
// misspelled field is an error, as `kubectl apply --validate=strict` says.
func decodeManifests(t *testing.T, file string) []k8sObject {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var objs []k8sObject
	for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
		var meta struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := sigsyaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Errorf("%s document %d: %v", filepath.Base(file), i+1, err)
			continue
		}
		if meta.Kind == "" && meta.APIVersion == "" {
			continue // comments only
		}
		obj := newK8sObject(meta.APIVersion, meta.Kind)
		if obj == nil {
			t.Errorf("%s document %d: %s %s is not a kind this test knows", filepath.Base(file), i+1, meta.APIVersion, meta.Kind)
			continue
		}
		if err := strictDecode([]byte(doc), obj); err != nil {
			t.Errorf("%s document %d (%s): %v", filepath.Base(file), i+1, meta.Kind, err)
			continue
		}
		objs = append(objs, k8sObject{file: filepath.Base(file), obj: obj})
	}
	return objs
}

// strictDecode decodes YAML as the API server's strict validation does: a
// duplicate key, an unknown field or a field in the wrong case is an error
// (encoding/json alone would accept "containerport" for containerPort).
func strictDecode(doc []byte, obj any) error {
	j, err := sigsyaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	strict, err := kjson.UnmarshalStrict(j, obj, kjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// workload is a StatefulSet or Deployment: its pod's labels and containers.
type workload struct {
	kind, name, file string
	replicas         int32
	serviceName      string
	labels           map[string]string
	pvcTemplates     []string
	spec             corev1.PodSpec
	containers       []*container
	namedPorts       map[string]int
}

type k8sNetwork struct {
	workloads map[string]*workload
	services  map[string]*corev1.Service
	natsHost  string
	natsPort  int
}

func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func (w *workload) podDeclares(port int) *container {
	for _, c := range w.containers {
		if c.declared[port] {
			return c
		}
	}
	return nil
}

var rePodDNS = regexp.MustCompile(`^([a-z0-9-]+)-(\d+)\.([a-z0-9-]+)$`)

func (n *k8sNetwork) dial(from *container, host string, port int) (target, error) {
	if loopback(host) {
		w := n.workloads[from.pod]
		if w == nil {
			return target{}, fmt.Errorf("%s is in no pod", from.where)
		}
		for _, c := range w.containers {
			if ls, _ := c.listeners(); slices.ContainsFunc(ls, func(l listener) bool { return l.port == port }) {
				return target{c: c, port: port}, reach(from, c, port)
			}
		}
		return target{}, fmt.Errorf("no container of pod %s listens on port %d", from.pod, port)
	}
	if host == n.natsHost {
		if port != n.natsPort {
			return target{}, fmt.Errorf("the NATS Helm release %s serves clients on port %d (nats-values.yaml config.nats.port), not %d", host, n.natsPort, port)
		}
		return target{external: "the NATS Helm release " + host, port: port}, nil
	}
	if m := rePodDNS.FindStringSubmatch(host); m != nil {
		w := n.workloads[m[1]]
		if w == nil || w.kind != "StatefulSet" {
			return target{}, fmt.Errorf("%s: no StatefulSet %s", host, m[1])
		}
		ord, _ := strconv.Atoi(m[2])
		if int32(ord) >= w.replicas {
			return target{}, fmt.Errorf("%s: StatefulSet %s has %d replicas, no pod %d", host, w.name, w.replicas, ord)
		}
		if m[3] != w.serviceName {
			return target{}, fmt.Errorf("%s: pod DNS names use the StatefulSet's serviceName %s, not %s", host, w.serviceName, m[3])
		}
		svc := n.services[m[3]]
		if svc == nil || svc.Spec.ClusterIP != corev1.ClusterIPNone || !selects(svc.Spec.Selector, w.labels) {
			return target{}, fmt.Errorf("%s: needs a headless Service %s selecting StatefulSet %s's pods", host, m[3], w.name)
		}
		c := w.podDeclares(port)
		if c == nil {
			return target{}, fmt.Errorf("%s: no container of StatefulSet %s declares containerPort %d", host, w.name, port)
		}
		return target{c: c, port: port}, reach(from, c, port)
	}
	svc := n.services[host]
	if svc == nil {
		return target{}, fmt.Errorf("no Service, StatefulSet pod or NATS release named %q", host)
	}
	for _, sp := range svc.Spec.Ports {
		if int(sp.Port) != port {
			continue
		}
		for _, w := range n.workloads {
			if !selects(svc.Spec.Selector, w.labels) {
				continue
			}
			tp := int(sp.TargetPort.IntVal)
			if sp.TargetPort.Type == intstr.String {
				tp = w.namedPorts[sp.TargetPort.StrVal]
			} else if tp == 0 {
				tp = port
			}
			if c := w.podDeclares(tp); c != nil {
				return target{c: c, port: tp}, reach(from, c, tp)
			}
		}
		return target{}, fmt.Errorf("Service %s port %d (targetPort %s) reaches no declared container port", host, port, sp.TargetPort.String())
	}
	return target{}, fmt.Errorf("Service %s has no port %d", host, port)
}

func (d *deployment) checkK8s(t *testing.T) {
	dir := filepath.Join(d.dep, "k8s")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var manifests []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".yaml") && e.Name() != "kustomization.yaml" && e.Name() != "nats-values.yaml" {
			manifests = append(manifests, e.Name())
		}
	}
	var objs []k8sObject
	if !t.Run("strict", func(t *testing.T) {
		for _, m := range manifests {
			objs = append(objs, decodeManifests(t, filepath.Join(dir, m))...)
		}
	}) {
		t.FailNow()
	}
	d.checkKustomization(t, dir, manifests)
	nw := &k8sNetwork{workloads: map[string]*workload{}, services: map[string]*corev1.Service{}}
	nw.natsHost, nw.natsPort = d.checkNATSValues(t, dir)

	var ws []*workload
	configs := map[string]map[string][]byte{} // ConfigMap or Secret name -> keys
	for _, o := range objs {
		switch x := o.obj.(type) {
		case *appsv1.StatefulSet:
			r := int32(1)
			if x.Spec.Replicas != nil {
				r = *x.Spec.Replicas
			}
			w := &workload{kind: "StatefulSet", name: x.Name, file: o.file, replicas: r, serviceName: x.Spec.ServiceName, labels: x.Spec.Template.Labels, spec: x.Spec.Template.Spec}
			for _, tpl := range x.Spec.VolumeClaimTemplates {
				w.pvcTemplates = append(w.pvcTemplates, tpl.Name)
			}
			ws = append(ws, w)
			checkSelector(t, o.file, "StatefulSet "+x.Name, x.Spec.Selector.MatchLabels, x.Spec.Template.Labels)
		case *appsv1.Deployment:
			r := int32(1)
			if x.Spec.Replicas != nil {
				r = *x.Spec.Replicas
			}
			ws = append(ws, &workload{kind: "Deployment", name: x.Name, file: o.file, replicas: r, labels: x.Spec.Template.Labels, spec: x.Spec.Template.Spec})
			checkSelector(t, o.file, "Deployment "+x.Name, x.Spec.Selector.MatchLabels, x.Spec.Template.Labels)
		case *corev1.Service:
			nw.services[x.Name] = x
		case *corev1.ConfigMap:
			configs["configMap/"+x.Name] = configMapKeys(x)
		case *corev1.Secret:
			configs["secret/"+x.Name] = secretKeys(x)
		}
	}
	var cs []*container
	for _, w := range ws {
		nw.workloads[w.name] = w
		w.containers = d.k8sContainers(t, w)
		cs = append(cs, w.containers...)
	}

	t.Run("containers", func(t *testing.T) {
		for _, c := range cs {
			checkContainer(t, c, nw)
		}
		checkTopology(t, cs, nw)
	})
	t.Run("objects", func(t *testing.T) { d.checkK8sObjects(t, objs, nw) })
	t.Run("bootstrap", func(t *testing.T) { d.checkK8sBootstrap(t, ws, nw, configs) })
}

func checkSelector(t *testing.T, file, what string, selector, labels map[string]string) {
	t.Helper()
	if !selects(selector, labels) {
		t.Errorf("k8s/%s: %s: selector %v does not match its pod labels %v", file, what, selector, labels)
	}
}

func configMapKeys(cm *corev1.ConfigMap) map[string][]byte {
	keys := map[string][]byte{}
	for k, v := range cm.Data {
		keys[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		keys[k] = v
	}
	return keys
}

func secretKeys(s *corev1.Secret) map[string][]byte {
	keys := map[string][]byte{}
	for k, v := range s.Data {
		keys[k] = v
	}
	for k, v := range s.StringData {
		keys[k] = []byte(v)
	}
	return keys
}

// k8sContainers turns a pod template into containers; native sidecars (init
// containers with restartPolicy Always) run beside the others.
func (d *deployment) k8sContainers(t *testing.T, w *workload) []*container {
	vols := map[string]corev1.Volume{}
	for _, v := range w.spec.Volumes {
		vols[v.Name] = v
	}
	w.namedPorts = map[string]int{}
	var out []*container
	all := append(slices.Clone(w.spec.InitContainers), w.spec.Containers...)
	for i, kc := range all {
		init := i < len(w.spec.InitContainers)
		sidecar := init && kc.RestartPolicy != nil && *kc.RestartPolicy == corev1.ContainerRestartPolicyAlways
		where := fmt.Sprintf("k8s/%s %s/%s container %s", w.file, w.kind, w.name, kc.Name)
		if init && !sidecar {
			where = fmt.Sprintf("k8s/%s %s/%s init container %s", w.file, w.kind, w.name, kc.Name)
		}
		req := kc.Resources.Requests
		if req.Cpu().IsZero() || req.Memory().IsZero() {
			t.Errorf("%s: set resources.requests for cpu and memory", where)
		}
		if len(kc.Command) == 0 {
			t.Errorf("%s: set command, so what it runs is stated (and checked)", where)
			continue
		}
		binary := path.Base(kc.Command[0])
		repo, _, _ := strings.Cut(kc.Image, ":")
		if slices.Contains(knownBinaries, binary) {
			stage := d.df.byName[strings.TrimPrefix(repo, "byzlog/")]
			switch {
			case !strings.HasPrefix(repo, "byzlog/") || stage == nil:
				t.Errorf("%s: image %s is no target of deployments/docker/Dockerfile", where, kc.Image)
			case len(stage.Entrypoint()) == 0 || path.Base(stage.Entrypoint()[0]) != binary:
				t.Errorf("%s: runs %s, but image %s (Dockerfile target %s) is built for %v", where, binary, kc.Image, stage.name, stage.Entrypoint())
			}
		}
		c := &container{where: where, binary: binary, declared: map[int]bool{}, pod: w.name, checked: true}
		for _, p := range kc.Ports {
			c.declared[int(p.ContainerPort)] = true
			if p.Name != "" {
				w.namedPorts[p.Name] = int(p.ContainerPort)
			}
		}
		for _, vm := range kc.VolumeMounts {
			m := mount{target: vm.MountPath, volume: vm.Name, readOnly: vm.ReadOnly}
			v, ok := vols[vm.Name]
			switch {
			case ok && v.PersistentVolumeClaim != nil:
				m.persistent = true
			case ok && (v.ConfigMap != nil || v.Secret != nil):
				m.readOnly = true
			case !ok && slices.Contains(w.pvcTemplates, vm.Name):
				m.persistent, ok = true, true
			}
			if !ok {
				t.Errorf("%s: mounts %s, which is no volume or volumeClaimTemplate of its pod", where, vm.Name)
			}
			c.mounts = append(c.mounts, m)
		}
		for _, p := range []struct {
			kind string
			p    *corev1.Probe
		}{{"readiness", kc.ReadinessProbe}, {"liveness", kc.LivenessProbe}, {"startup", kc.StartupProbe}} {
			if p.p == nil {
				continue
			}
			pr, err := k8sProbe(p.kind, p.p, kc.Ports)
			if err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			c.probes = append(c.probes, pr)
		}
		if !slices.Contains(knownBinaries, binary) {
			// A shell step such as the validators' bootstrap: only the
			// files it reads are checked.
			c.inv, c.checked = &invocation{flags: map[string]string{}}, false
			c.script = strings.Join(append(kc.Command, kc.Args...), " ")
			out = append(out, c)
			continue
		}
		c.inv = d.invoke(t, where, binary, append(slices.Clone(kc.Command[1:]), kc.Args...))
		if c.longRunning() {
			if init && !sidecar {
				t.Errorf("%s: a long-running %s as a plain init container blocks the pod: give it restartPolicy: Always (a sidecar)", where, binary)
			}
			if kc.ReadinessProbe == nil || kc.LivenessProbe == nil {
				t.Errorf("%s: give it both a readinessProbe and a livenessProbe", where)
			}
			if sidecar && kc.StartupProbe == nil {
				t.Errorf("%s: a sidecar without a startupProbe lets the main containers start before it serves", where)
			}
		}
		out = append(out, c)
	}
	return out
}

func k8sProbe(kind string, p *corev1.Probe, ports []corev1.ContainerPort) (probe, error) {
	resolve := func(port intstr.IntOrString) (int, error) {
		if port.Type == intstr.Int {
			return int(port.IntVal), nil
		}
		for _, cp := range ports {
			if cp.Name == port.StrVal {
				return int(cp.ContainerPort), nil
			}
		}
		return 0, fmt.Errorf("%s probe: no container port named %q", kind, port.StrVal)
	}
	switch {
	case p.HTTPGet != nil:
		port, err := resolve(p.HTTPGet.Port)
		return probe{kind: kind, port: port, path: p.HTTPGet.Path}, err
	case p.TCPSocket != nil:
		port, err := resolve(p.TCPSocket.Port)
		return probe{kind: kind, port: port}, err
	case p.Exec != nil:
		return probeCommand(kind, p.Exec.Command)
	}
	return probe{}, fmt.Errorf("%s probe: use httpGet, tcpSocket or exec probe", kind)
}

func (d *deployment) checkKustomization(t *testing.T, dir string, manifests []string) {
	t.Helper()
	var k struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Namespace  string `json:"namespace"`
		Labels     []struct {
			Pairs            map[string]string `json:"pairs"`
			IncludeSelectors bool              `json:"includeSelectors"`
			IncludeTemplates bool              `json:"includeTemplates"`
		} `json:"labels"`
		Resources []string `json:"resources"`
		Images    []struct {
			Name    string `json:"name"`
			NewName string `json:"newName"`
			NewTag  string `json:"newTag"`
		} `json:"images"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := strictDecode(b, &k); err != nil {
		t.Errorf("k8s/kustomization.yaml: %v", err)
		return
	}
	for _, r := range k.Resources {
		if !slices.Contains(manifests, r) {
			t.Errorf("k8s/kustomization.yaml: resource %s is not a manifest in k8s/", r)
		}
	}
	for _, m := range manifests {
		if !slices.Contains(k.Resources, m) {
			t.Errorf("k8s/kustomization.yaml: does not list %s", m)
		}
	}
	for _, l := range k.Labels {
		if l.IncludeSelectors {
			t.Errorf("k8s/kustomization.yaml: labels with includeSelectors change selectors, which are immutable on a live StatefulSet")
		}
	}
	for _, img := range k.Images {
		if d.df.byName[strings.TrimPrefix(img.Name, "byzlog/")] == nil {
			t.Errorf("k8s/kustomization.yaml: image %s is no Dockerfile target", img.Name)
		}
	}
}

// checkNATSValues checks nats-values.yaml and returns the client Service's
// name (the Helm release in the install command it documents) and port.
func (d *deployment) checkNATSValues(t *testing.T, dir string) (string, int) {
	t.Helper()
	file := filepath.Join(dir, "nats-values.yaml")
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := sigsyaml.Unmarshal(b, &v); err != nil {
		t.Fatalf("k8s/nats-values.yaml: %v", err)
	}
	get := func(keys ...string) any {
		var cur any = v
		for _, k := range keys {
			m, ok := cur.(map[string]any)
			if !ok {
				return nil
			}
			cur = m[k]
		}
		return cur
	}
	for _, keys := range [][]string{
		{"config", "jetstream", "enabled"},
		{"config", "jetstream", "fileStore", "enabled"},
		{"config", "jetstream", "fileStore", "pvc", "enabled"},
	} {
		if get(keys...) != true {
			t.Errorf("k8s/nats-values.yaml: %s must be true (JetStream on file storage, on a PVC)", strings.Join(keys, "."))
		}
	}
	if tag, _ := get("container", "image", "tag").(string); strings.TrimSuffix(tag, "-alpine") != d.pins.nats {
		t.Errorf("k8s/nats-values.yaml: container.image.tag %q, but the Makefile pins nats-server v%s", tag, d.pins.nats)
	}
	port := 4222 // the chart's default
	if p, ok := get("config", "nats", "port").(float64); ok {
		port = int(p)
	}
	m := regexp.MustCompile(`helm (?:install|upgrade --install) (\S+) nats/nats`).FindSubmatch(b)
	if m == nil {
		t.Errorf("k8s/nats-values.yaml: document the `helm install RELEASE nats/nats` command: the release names the Service the indexer dials")
		return "", port
	}
	return string(m[1]), port
}

// checkK8sObjects checks Services, the autoscaler and the disruption budgets
// against the workloads, and the indexer against the NATS cluster.
func (d *deployment) checkK8sObjects(t *testing.T, objs []k8sObject, nw *k8sNetwork) {
	natsReplicas := 1
	if b, err := os.ReadFile(filepath.Join(d.dep, "k8s", "nats-values.yaml")); err == nil {
		var v struct {
			Config struct {
				Cluster struct {
					Enabled  bool `json:"enabled"`
					Replicas int  `json:"replicas"`
				} `json:"cluster"`
			} `json:"config"`
		}
		if sigsyaml.Unmarshal(b, &v) == nil && v.Config.Cluster.Enabled {
			natsReplicas = v.Config.Cluster.Replicas
		}
	}
	for _, o := range objs {
		switch x := o.obj.(type) {
		case *corev1.Service:
			var sel []*workload
			for _, w := range nw.workloads {
				if selects(x.Spec.Selector, w.labels) {
					sel = append(sel, w)
				}
			}
			if len(sel) == 0 {
				t.Errorf("k8s/%s: Service %s selects no pod (selector %v)", o.file, x.Name, x.Spec.Selector)
				continue
			}
			for _, sp := range x.Spec.Ports {
				if _, err := nw.dial(&container{where: "Service " + x.Name, pod: "(outside)"}, x.Name, int(sp.Port)); err != nil {
					t.Errorf("k8s/%s: Service %s port %s: %v", o.file, x.Name, sp.Name, err)
				}
			}
		case *autoscalingv2.HorizontalPodAutoscaler:
			w := nw.workloads[x.Spec.ScaleTargetRef.Name]
			if w == nil || w.kind != x.Spec.ScaleTargetRef.Kind {
				t.Errorf("k8s/%s: HorizontalPodAutoscaler %s scales %s %s, which is not here", o.file, x.Name, x.Spec.ScaleTargetRef.Kind, x.Spec.ScaleTargetRef.Name)
				continue
			}
			if x.Spec.MinReplicas == nil || *x.Spec.MinReplicas < 2 {
				t.Errorf("k8s/%s: HorizontalPodAutoscaler %s: minReplicas below 2 leaves one gateway, a single point of failure", o.file, x.Name)
			}
			for _, c := range w.spec.Containers {
				if c.Resources.Requests.Cpu().IsZero() {
					t.Errorf("k8s/%s: HorizontalPodAutoscaler %s scales on CPU utilization, but container %s requests no CPU", o.file, x.Name, c.Name)
				}
			}
			for _, c := range w.containers {
				if c.binary != "byzlog-gateway" {
					t.Errorf("k8s/%s: HorizontalPodAutoscaler %s scales %s, which runs %s: only the stateless gateways scale freely", o.file, x.Name, w.name, c.binary)
				}
			}
		case *policyv1.PodDisruptionBudget:
			if !slices.ContainsFunc(slices.Collect(maps.Values(nw.workloads)), func(w *workload) bool { return selects(x.Spec.Selector.MatchLabels, w.labels) }) {
				t.Errorf("k8s/%s: PodDisruptionBudget %s selects no pod", o.file, x.Name)
			}
		}
	}
	for _, w := range nw.workloads {
		for _, c := range w.containers {
			if c.binary != "byzlog-indexer" {
				continue
			}
			if w.replicas > 1 {
				t.Errorf("%s: %d replicas share one --id: run a second indexer as its own Deployment with another --id", c.where, w.replicas)
			}
			if r, _ := strconv.Atoi(c.inv.flags["replicas"]); r > natsReplicas {
				t.Errorf("%s: --replicas %d, but the NATS cluster (nats-values.yaml) has %d servers", c.where, r, natsReplicas)
			}
		}
	}
}

// checkK8sBootstrap runs k8s/bootstrap.sh and checks what it writes against
// the StatefulSet: the network's peers are its pods, and every file the pods
// read from the ConfigMap and Secret is in them.
func (d *deployment) checkK8sBootstrap(t *testing.T, ws []*workload, nw *k8sNetwork, configs map[string]map[string][]byte) {
	var sts *workload
	for _, w := range ws {
		if w.kind == "StatefulSet" && slices.ContainsFunc(w.containers, func(c *container) bool { return c.binary == "cometbft" }) {
			sts = w
		}
	}
	if sts == nil {
		t.Fatal("k8s: no StatefulSet runs cometbft")
	}
	var node, app *container
	for _, c := range sts.containers {
		switch c.binary {
		case "cometbft":
			node = c
		case "byzlog-app":
			app = c
		}
	}
	if node == nil || app == nil {
		t.Fatalf("k8s StatefulSet %s: want a cometbft and a byzlog-app container", sts.name)
	}
	p2pL, _ := node.listenerOf("--p2p.laddr")
	appL, _ := app.listenerOf("--listen")

	tmp := t.TempDir()
	runScript(t, d, filepath.Join(d.dep, "k8s", "bootstrap.sh"), tmp)
	host := func(i int) string { return fmt.Sprintf("%s-%d.%s", sts.name, i, sts.serviceName) }
	peers := checkGenerated(t, tmp, int(sts.replicas), "", host, p2pL.port, appL.port)
	for i, ps := range peers {
		for _, p := range ps {
			tg, err := nw.dial(node, p.host, p.port)
			if err != nil {
				t.Errorf("generated node%d: persistent peer %s:%d: %v", i, p.host, p.port, err)
			} else if l, ok := tg.c.listenerOf("--p2p.laddr"); !ok || l.port != p.port {
				t.Errorf("generated node%d: persistent peer %s:%d is not %s's --p2p.laddr", i, p.host, p.port, tg.c.where)
			}
		}
	}

	generated, _ := filepath.Glob(filepath.Join(tmp, "k8s", "*.yaml"))
	if len(generated) == 0 {
		t.Fatalf("bootstrap.sh wrote no manifests to %s/k8s", tmp)
	}
	for _, f := range generated {
		for _, o := range decodeManifests(t, f) {
			switch x := o.obj.(type) {
			case *corev1.ConfigMap:
				configs["configMap/"+x.Name] = configMapKeys(x)
			case *corev1.Secret:
				configs["secret/"+x.Name] = secretKeys(x)
			}
		}
	}
	// What pod i reads from a ConfigMap or Secret volume must be in it; a
	// script's $i is the pod's ordinal.
	for _, w := range ws {
		vols := map[string]corev1.Volume{}
		for _, v := range w.spec.Volumes {
			vols[v.Name] = v
		}
		keysOf := func(v corev1.Volume) (string, map[string][]byte) {
			switch {
			case v.ConfigMap != nil:
				for _, it := range v.ConfigMap.Items {
					if _, ok := configs["configMap/"+v.ConfigMap.Name][it.Key]; !ok {
						t.Errorf("k8s/%s %s/%s: volume %s takes key %s, which ConfigMap %s lacks", w.file, w.kind, w.name, v.Name, it.Key, v.ConfigMap.Name)
					}
				}
				return "ConfigMap " + v.ConfigMap.Name, configs["configMap/"+v.ConfigMap.Name]
			case v.Secret != nil:
				return "Secret " + v.Secret.SecretName, configs["secret/"+v.Secret.SecretName]
			}
			return "", nil
		}
		for _, c := range w.containers {
			for _, m := range c.mounts {
				v, ok := vols[m.volume]
				if !ok {
					continue
				}
				what, keys := keysOf(v)
				if what == "" {
					continue
				}
				if keys == nil {
					t.Errorf("%s: mounts %s, which neither k8s/ nor bootstrap.sh provides", c.where, what)
					continue
				}
				var texts []string
				for _, pf := range c.paths() {
					texts = append(texts, pf.path)
				}
				texts = append(texts, c.script)
				re := regexp.MustCompile(regexp.QuoteMeta(strings.TrimSuffix(m.target, "/")) + `/([A-Za-z0-9_.${}-]+)`)
				for _, text := range texts {
					for _, ref := range re.FindAllStringSubmatch(text, -1) {
						for ord := 0; ord < int(w.replicas); ord++ {
							key := strings.NewReplacer("${i}", strconv.Itoa(ord), "$i", strconv.Itoa(ord)).Replace(ref[1])
							if _, ok := keys[key]; !ok {
								t.Errorf("%s: reads %s/%s, but %s has no key %s", c.where, m.target, key, what, key)
							}
						}
					}
				}
			}
		}
	}
	// The config and keys in the manifests are the generated nodes'.
	for i := 0; i < int(sts.replicas); i++ {
		for key, file := range map[string]string{
			fmt.Sprintf("configMap/validator-config/config-%d.toml", i):        filepath.Join(tmp, fmt.Sprintf("node%d", i), "config", "config.toml"),
			fmt.Sprintf("secret/validator-keys/node_key-%d.json", i):           filepath.Join(tmp, fmt.Sprintf("node%d", i), "config", "node_key.json"),
			fmt.Sprintf("secret/validator-keys/priv_validator_key-%d.json", i): filepath.Join(tmp, fmt.Sprintf("node%d", i), "config", "priv_validator_key.json"),
			"configMap/validator-config/genesis.json":                          filepath.Join(tmp, "genesis", "genesis.json"),
		} {
			obj, k := path.Dir(key), path.Base(key)
			want, _ := os.ReadFile(file)
			if got := configs[obj][k]; !bytes.Equal(got, want) {
				t.Errorf("bootstrap.sh: %s key %s differs from %s", obj, k, file)
			}
		}
	}
}
