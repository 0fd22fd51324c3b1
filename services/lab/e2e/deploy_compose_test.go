//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
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

	"github.com/byzlog/byzlog/indexer/natsauth"
	"github.com/byzlog/byzlog/services/internal/localnet"
)

type composeNetwork struct {
	byName   map[string]*container
	networks map[string][]string        // service -> networks it joins
	dials    map[string]map[string]bool // service -> services it dials
}

func (n *composeNetwork) dial(from *container, host string, port int) (target, error) {
	if loopback(host) {
		return arrive(from, from, port)
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
	return arrive(from, to, port)
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

	// What init writes, generated once: the containers' certificates,
	// configurations and passwords come from it.
	var gen *generated
	genDir := t.TempDir()
	if !t.Run("generate", func(t *testing.T) { gen = d.generateCompose(t, genDir, cs) }) {
		t.FailNow()
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

	t.Run("init", func(t *testing.T) { d.checkComposeInit(t, proj, cs, nw, gen) })
	t.Run("tls", func(t *testing.T) { d.checkComposeTLS(t, cs, nw, gen) })
	t.Run("run", func(t *testing.T) { d.runCompose(t, cs, nw) })
}

// generated is what the init service writes, generated by the check.
type generated struct {
	init    *container
	dir     string            // init's --out, in a temporary directory
	written map[string]string // volume -> where init writes it, in dir
}

// hostPath is where p, a path inside c, is in the generated output.
func (g *generated) hostPath(c *container, p string) (string, bool) {
	m := c.mountOf(p)
	if m == nil {
		return "", false
	}
	dir, ok := g.written[m.volume]
	if !ok {
		return "", false
	}
	rel, err := filepath.Rel(m.target, p)
	if err != nil || strings.HasPrefix(rel, "..") {
		return "", false
	}
	return filepath.Join(dir, rel), true
}

// generate runs init's command line with --out in a temporary directory
// and learns from what it writes how each container serves: whether a
// node's RPC is TLS, what NATS's --config says.
func (d *deployment) generate(t *testing.T, dir string, init *container, cs []*container, extra ...string) *generated {
	t.Helper()
	g := &generated{init: init, dir: dir, written: map[string]string{}}
	runInitCluster(t, d, append(d.initArgs(t, init, g.dir), extra...)...)
	out := init.inv.flags["out"]
	for _, m := range init.mounts {
		rel, err := filepath.Rel(out, m.target)
		if err != nil || strings.HasPrefix(rel, "..") {
			t.Errorf("%s: volume %s at %s is outside --out %s", init.where, m.volume, m.target, out)
			continue
		}
		g.written[m.volume] = filepath.Join(g.dir, rel)
	}
	for _, c := range cs {
		switch {
		case c.binary == "cometbft" && c.inv.sub == "start":
			if home, ok := g.hostPath(c, c.inv.flags["home"]); ok {
				if cfg, err := readCometConfig(home); err == nil {
					c.rpcTLS = tlsIf(cfg.RPC.IsTLSEnabled())
				}
			}
		case c.binary == "nats-server" && c.inv.flags["config"] != "":
			file, ok := g.hostPath(c, c.inv.flags["config"])
			if !ok {
				continue // checkComposeInit says so
			}
			m, err := readNATSConf(file)
			if err != nil {
				t.Errorf("%s: --config %s: %v", c.where, c.inv.flags["config"], err)
				continue
			}
			c.natsConf = m
		}
	}
	return g
}

func (d *deployment) generateCompose(t *testing.T, dir string, cs []*container) *generated {
	for _, c := range cs {
		if c.binary == initScript {
			return d.generate(t, dir, c, cs)
		}
	}
	t.Fatalf("docker-compose.yml: no service runs %s", initScript)
	return nil
}

// readCometConfig reads home's config.toml as cometbft does.
func readCometConfig(home string) (*cmtcfg.Config, error) {
	v := viper.New()
	v.SetConfigFile(filepath.Join(home, "config", "config.toml"))
	if err := v.ReadInConfig(); err != nil {
		return nil, err
	}
	cfg := cmtcfg.DefaultConfig()
	if err := v.Unmarshal(cfg); err != nil {
		return nil, err
	}
	cfg.SetRoot(home)
	return cfg, nil
}

// dependsOn says whether service from starts only after to, directly or
// through what it depends on.
func dependsOn(proj *composetypes.Project, from, to string) bool {
	seen := map[string]bool{}
	next := []string{from}
	for len(next) > 0 {
		s := next[0]
		next = next[1:]
		for dep := range proj.Services[s].DependsOn {
			if dep == to {
				return true
			}
			if !seen[dep] {
				seen[dep] = true
				next = append(next, dep)
			}
		}
	}
	return false
}

// checkComposeInit checks what the init service wrote and follows its
// volumes into the services that mount them.
func (d *deployment) checkComposeInit(t *testing.T, proj *composetypes.Project, cs []*container, nw *composeNetwork, g *generated) {
	init := g.init
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
	tmp, written := g.dir, g.written
	n, _ := strconv.Atoi(f["validators"])
	p2pPort, _ := strconv.Atoi(f["p2p-port"])
	abciPort, _ := strconv.Atoi(f["abci-port"])
	host := func(i int) string { return fmt.Sprintf("%s%d%s", f["hostname-prefix"], i, f["hostname-suffix"]) }
	peers := d.checkGenerated(t, tmp, n, f["chain-id"], host, p2pPort, abciPort)

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
				// State of its own (--data-dir, --store_dir) starts empty;
				// anything else the process reads must come from init.
				if !pf.state || pf.flag == "--home" {
					t.Errorf("%s: %s %s is on volume %s, which %s does not write", c.where, pf.flag, pf.path, m.volume, init.where)
				}
				continue
			}
			if !dependsOn(proj, c.pod, init.pod) {
				t.Errorf("%s: reads %s from volume %s, which %s writes: give it (or what it waits for) depends_on %s: {condition: %s}", c.where, pf.path, m.volume, init.where, init.pod, composetypes.ServiceConditionCompletedSuccessfully)
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
func (d *deployment) checkGenerated(t *testing.T, dir string, n int, chainID string, host func(int) string, p2pPort, abciPort int) [][]peer {
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
		cfg, err := readCometConfig(home)
		if err != nil {
			t.Fatalf("node%d config.toml: %v", i, err)
		}
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
			{"[mempool] type", cfg.Mempool.Type, "app"},
			{"[mempool] reap_interval", cfg.Mempool.ReapInterval, 25 * time.Millisecond},
			{"[consensus] timeout_propose", cfg.Consensus.TimeoutPropose, 10 * time.Second},
			{"[consensus] peer_gossip_sleep_duration", cfg.Consensus.PeerGossipSleepDuration, localnet.PeerGossipSleep},
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
	rpc := make([]rpcTLSFiles, n)
	for i, cfg := range cfgs {
		if cfg.RPC.IsTLSEnabled() {
			rpc[i] = rpcTLSFiles{cert: cfg.RPC.CertFile(), key: cfg.RPC.KeyFile()}
		}
	}
	checkGeneratedTLS(t, dir, n, host, rpc)
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

// checkComposeTLS follows every TLS link between the services to the files
// init wrote: the certificate a server presents must be one the client's
// CA vouches for under the name the client dials (a health check dials
// loopback), and a NATS client's password must be the server's for its
// user. The CA's key stays with init.
func (d *deployment) checkComposeTLS(t *testing.T, cs []*container, nw *composeNetwork, g *generated) {
	file := func(c *container, p string) string {
		hp, ok := g.hostPath(c, p)
		if !ok {
			t.Errorf("%s: %s is on no volume init writes", c.where, p)
		}
		return hp
	}
	rpcCert := func(node *container) (cert, key string, err error) {
		home, ok := g.hostPath(node, node.inv.flags["home"])
		if !ok {
			return "", "", fmt.Errorf("%s: its --home is on no volume init writes", node.where)
		}
		cfg, err := readCometConfig(home)
		if err != nil {
			return "", "", err
		}
		if !cfg.RPC.IsTLSEnabled() {
			return "", "", fmt.Errorf("%s serves RPC in plaintext", node.where)
		}
		return cfg.RPC.CertFile(), cfg.RPC.KeyFile(), nil
	}
	for _, c := range cs {
		f := c.inv.flags
		for _, pr := range c.probes {
			if pr.ca == "" {
				continue
			}
			var cert, key string
			var err error
			switch c.binary {
			case "cometbft":
				cert, key, err = rpcCert(c)
			case "byzlog-gateway":
				cert, key = file(c, f["tls-cert"]), file(c, f["tls-key"])
			default:
				err = fmt.Errorf("no certificate known for port %d", pr.port)
			}
			if err == nil {
				err = checkCert(file(c, pr.ca), cert, key, pr.host)
			}
			if err != nil {
				t.Errorf("%s: the %s check would fail: %v", c.where, pr.kind, err)
			}
		}
		switch c.binary {
		case "byzlog-gateway", "byzlog-indexer":
			if c.binary == "byzlog-gateway" {
				// Clients in the network dial a gateway by its service name.
				for _, pr := range c.probes {
					if pr.ca != "" {
						if err := checkCert(file(c, pr.ca), file(c, f["tls-cert"]), file(c, f["tls-key"]), c.pod); err != nil {
							t.Errorf("%s: --tls-cert: %v", c.where, err)
						}
					}
				}
			}
			ca := file(c, f["node-tls-ca"])
			for _, node := range strings.Split(f["nodes"], ",") {
				u, err := url.Parse(node)
				if err != nil {
					continue // checkAddresses says so
				}
				tg, err := nw.dial(c, u.Hostname(), func() int { _, p, _ := splitAddr(u.Host); return p }())
				if err != nil || tg.c == nil {
					continue
				}
				cert, key, err := rpcCert(tg.c)
				if err == nil {
					err = checkCert(ca, cert, key, u.Hostname())
				}
				if err != nil {
					t.Errorf("%s: --nodes %s with --node-tls-ca %s: %v", c.where, node, f["node-tls-ca"], err)
				}
			}
			if c.binary == "byzlog-gateway" {
				continue
			}
			for _, n := range strings.Split(f["nats"], ",") {
				u, err := url.Parse(n)
				if err != nil {
					continue
				}
				_, port, _ := splitAddr(u.Host)
				tg, err := nw.dial(c, u.Hostname(), port)
				if err != nil || tg.c == nil || tg.c.natsConf == nil {
					t.Errorf("%s: --nats %s: no NATS server with a --config init writes there", c.where, n)
					continue
				}
				srv := tg.c
				tb, _ := srv.natsConf["tls"].(map[string]any)
				cf, _ := tb["cert_file"].(string)
				kf, _ := tb["key_file"].(string)
				if err := checkCert(file(c, f["nats-tls-ca"]), file(srv, cf), file(srv, kf), u.Hostname()); err != nil {
					t.Errorf("%s: --nats %s with --nats-tls-ca %s: %v", c.where, n, f["nats-tls-ca"], err)
				}
				b, err := os.ReadFile(file(c, f["nats-password-file"]))
				user := natsUsers(srv.natsConf["accounts"])[f["nats-user"]]
				switch pw, _ := user["password"].(string); {
				case err != nil:
					t.Errorf("%s: --nats-password-file: %v", c.where, err)
				case user == nil:
					t.Errorf("%s: --nats-user %s is no user of %s's NATS", c.where, f["nats-user"], srv.where)
				case strings.TrimSpace(string(b)) != pw:
					t.Errorf("%s: --nats-password-file %s is not user %s's password on %s", c.where, f["nats-password-file"], f["nats-user"], srv.where)
				}
				d.checkComposeAuthz(t, c, srv, g)
			}
		}
		if c == g.init {
			continue
		}
		for _, m := range c.mounts {
			if g.written[m.volume] == filepath.Join(g.dir, "ca") {
				t.Errorf("%s: mounts volume %s, the CA's key: with it anyone can pose as a node, a gateway or NATS; only %s needs it", c.where, m.volume, g.init.where)
			}
		}
	}
}

// checkComposeAuthz checks that the accounts file the indexer rewrites
// (--nats-authz: its conf) is the one its NATS server includes, on a volume
// both mount, writable by the indexer; and that the users it names are the
// server's, with their passwords.
func (d *deployment) checkComposeAuthz(t *testing.T, idx, srv *container, g *generated) {
	f := idx.inv.flags
	if f["nats-authz"] == "" {
		t.Errorf("%s: no --nats-authz: NATS's read permissions would not follow the topics' readers (a topic that lists readers would be readable by nobody)", idx.where)
		return
	}
	file, ok := g.hostPath(idx, f["nats-authz"])
	if !ok {
		return // checkComposeInit says so
	}
	spec, err := natsauthSpec(file)
	if err != nil {
		t.Errorf("%s: --nats-authz: %v", idx.where, err)
		return
	}
	cfg := srv.inv.flags["config"]
	cfgFile, _ := g.hostPath(srv, cfg)
	inc := regexp.MustCompile(`(?m)^include\s+"([^"]+)"`).FindStringSubmatch(readFile(t, cfgFile))
	if inc == nil {
		t.Errorf("%s: --config %s includes no accounts file", srv.where, cfg)
		return
	}
	included, ok1 := g.hostPath(srv, path.Join(path.Dir(cfg), inc[1]))
	rewritten, ok2 := g.hostPath(idx, spec.Conf)
	switch {
	case !ok1 || !ok2:
		t.Errorf("%s: --nats-authz conf %s, and %s includes %s: both must be on a volume init writes (ok: %v, %v)", idx.where, spec.Conf, srv.where, path.Join(path.Dir(cfg), inc[1]), ok2, ok1)
	case included != rewritten:
		t.Errorf("%s: --nats-authz rewrites %s, but %s includes %s, another file", idx.where, spec.Conf, srv.where, path.Join(path.Dir(cfg), inc[1]))
	case idx.mountOf(spec.Conf).readOnly:
		t.Errorf("%s: --nats-authz conf %s is on a read-only mount: the indexer rewrites it", idx.where, spec.Conf)
	}
	users := natsUsers(srv.natsConf["accounts"])
	for _, u := range []natsauth.User{spec.Indexer, spec.Consumer, spec.Reloader} {
		if users[u.Name]["password"] != u.Password {
			t.Errorf("%s: --nats-authz: user %s is not a user of %s with that password", idx.where, u.Name, srv.where)
		}
	}
}
