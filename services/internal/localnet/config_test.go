package localnet

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cometbft/cometbft/p2p"

	"github.com/byzlog/byzlog/abciapp/core"
)

func validConfig(t *testing.T) Config {
	t.Helper()
	dir := t.TempDir()
	c := Default()
	c.Dir = dir
	for _, name := range []string{"cometbft", "byzlog-app"} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	c.CometBFT, c.App = filepath.Join(dir, "cometbft"), filepath.Join(dir, "byzlog-app")
	return c
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		change  func(*Config)
		wantErr string // empty: valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"socket transport may exceed the gRPC cap", func(c *Config) { c.Transport = "socket"; c.BlockMaxBytes = 8 << 20 }, ""},
		{"no dir", func(c *Config) { c.Dir = "" }, "dir"},
		{"zero validators", func(c *Config) { c.Validators = 0 }, "validators (0)"},
		{"ports overflow", func(c *Config) { c.BasePort = 65500 }, "base_port (65500)"},
		{"privileged ports", func(c *Config) { c.BasePort = 80 }, "base_port (80)"},
		{"unknown transport", func(c *Config) { c.Transport = "http" }, `transport "http"`},
		{"block over the gRPC cap", func(c *Config) { c.BlockMaxBytes = 4 << 20 }, "block_max_bytes (4194304) must stay below"},
		{"tiny blocks", func(c *Config) { c.BlockMaxBytes = 1000 }, "block_max_bytes (1000)"},
		{"no chain id", func(c *Config) { c.ChainID = "" }, "chain_id"},
		{"timeout commit too short", func(c *Config) { c.TimeoutCommit = Duration(time.Millisecond) }, "timeout_commit (1ms)"},
		{"missing cometbft", func(c *Config) { c.CometBFT = "/nonexistent/cometbft" }, "cometbft binary /nonexistent/cometbft: not found"},
		{"missing app", func(c *Config) { c.App = "" }, "byzlog-app binary: path is empty"},
		{"oldest rules", func(c *Config) { c.RulesVersion = 1 }, ""},
		{"rules past this build's", func(c *Config) { c.RulesVersion = core.MaxRulesVersion + 1 }, fmt.Sprintf("rules_version (%d)", core.MaxRulesVersion+1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig(t)
			tt.change(&c)
			err := c.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Validate() = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestNodeConfig(t *testing.T) {
	c := validConfig(t)
	ids := []p2p.ID{"id0", "id1", "id2", "id3"}
	sock := "unix://" + filepath.Join(c.Dir, "node2", "abci.sock")
	long := c
	long.Dir = "/" + strings.Repeat("d", maxSocketPath)
	for _, tt := range []struct {
		c         Config
		transport string
		proxyApp  string
	}{
		{c, "grpc", "passthrough:///" + sock}, {c, "socket", sock},
		// a home too deep for a socket's path: loopback TCP
		{long, "grpc", "127.0.0.1:26858"}, {long, "socket", "tcp://127.0.0.1:26858"},
	} {
		c := tt.c
		c.Transport = tt.transport
		got := c.nodeConfig(2, ids)
		if got.ProxyApp != tt.proxyApp || got.ABCI != tt.transport {
			t.Errorf("%s: proxy_app %q abci %q, want %q %q", tt.transport, got.ProxyApp, got.ABCI, tt.proxyApp, tt.transport)
		}
		if got.RPC.ListenAddress != "tcp://127.0.0.1:26857" || got.P2P.ListenAddress != "tcp://127.0.0.1:26856" {
			t.Errorf("node 2 listens on rpc %q p2p %q, want ports 26857 and 26856 on loopback", got.RPC.ListenAddress, got.P2P.ListenAddress)
		}
		if wantCert := filepath.Join(c.Dir, "tls", "node.pem"); got.RPC.TLSCertFile != wantCert || !got.RPC.IsTLSEnabled() || !strings.HasPrefix(c.RPCAddr(2), "https://") {
			t.Errorf("rpc tls_cert_file %q (TLS %v), clients at %s: want %s, https", got.RPC.TLSCertFile, got.RPC.IsTLSEnabled(), c.RPCAddr(2), wantCert)
		}
		if c.InsecureRPC = true; c.nodeConfig(2, ids).RPC.IsTLSEnabled() || !strings.HasPrefix(c.RPCAddr(2), "http://") {
			t.Errorf("insecure_rpc: the node still serves TLS, or clients dial %s", c.RPCAddr(2))
		}
		wantPeers := "id0@127.0.0.1:26656,id1@127.0.0.1:26756,id3@127.0.0.1:26956"
		if got.P2P.PersistentPeers != wantPeers {
			t.Errorf("persistent_peers = %q, want %q", got.P2P.PersistentPeers, wantPeers)
		}
		if got.Mempool.Recheck || !got.P2P.AllowDuplicateIP || got.P2P.SendRate <= 5120000 || got.P2P.RecvRate <= 5120000 {
			t.Errorf("recheck %v, allow_duplicate_ip %v, rates %d/%d: want recheck off, duplicates allowed, rates above 5 MB/s",
				got.Mempool.Recheck, got.P2P.AllowDuplicateIP, got.P2P.SendRate, got.P2P.RecvRate)
		}
		if got.Mempool.Type != "app" || got.Mempool.ReapInterval > 100*time.Millisecond {
			t.Errorf("mempool type %q reap_interval %s, want the app's mempool, reaped at least every 100ms", got.Mempool.Type, got.Mempool.ReapInterval)
		}
		if got.Consensus.TimeoutCommit != 300*time.Millisecond {
			t.Errorf("timeout_commit = %s, want 300ms", got.Consensus.TimeoutCommit)
		}
		if err := got.ValidateBasic(); err != nil {
			t.Errorf("CometBFT rejects the generated config: %v", err)
		}
	}
}

func TestSavedShapeWins(t *testing.T) {
	c := validConfig(t)
	c.Validators, c.BasePort = 7, 40000
	b := []byte(`{"validators":7,"base_port":40000,"transport":"grpc","chain_id":"x","timeout_commit":"1s","block_max_bytes":1048576}`)
	if err := os.WriteFile(c.savedPath(), b, 0o644); err != nil {
		t.Fatal(err)
	}
	n, err := Open(Config{Dir: c.Dir, Validators: 4, CometBFT: c.CometBFT, App: c.App})
	if err != nil {
		t.Fatal(err)
	}
	got := n.Config()
	if !n.Existing() || got.Validators != 7 || got.BasePort != 40000 || time.Duration(got.TimeoutCommit) != time.Second || got.CometBFT != c.CometBFT {
		t.Errorf("Open over a saved network = %+v (existing %v), want the saved shape with the given binaries", got, n.Existing())
	}
	// Saved before rules_version: its genesis named none, version 1.
	if got.RulesVersion != 1 {
		t.Errorf("Open over a network saved without rules_version: RulesVersion = %d, want 1", got.RulesVersion)
	}
}

func TestGenesisRulesVersion(t *testing.T) {
	admin := hex.EncodeToString(make([]byte, 32))
	indexer := hex.EncodeToString(append(make([]byte, 31), 1))
	for _, tt := range []struct {
		set, want uint64
	}{{0, core.MaxRulesVersion}, {1, 1}, {2, 2}, {3, 3}} {
		c := validConfig(t)
		c.RulesVersion = tt.set
		b, err := json.Marshal(c.appState([]string{admin}, indexer))
		if err != nil {
			t.Fatal(err)
		}
		var raw map[string]any
		if err := json.Unmarshal(b, &raw); err != nil || raw["rules_version"] != float64(tt.want) {
			t.Errorf("rules_version %d: app_state %s, want \"rules_version\": %d", tt.set, b, tt.want)
		}
		params, _, err := core.ParseGenesis(c.ChainID, b)
		if err != nil || params.RulesVersion != tt.want {
			t.Errorf("rules_version %d: the app reads app_state %s as version %d (%v), want %d", tt.set, b, params.GetRulesVersion(), err, tt.want)
		}
	}
}

// flagValue is the value after name in args, and whether name is there.
func flagValue(args []string, name string) (string, bool) {
	for k, a := range args {
		if a == name && k+1 < len(args) {
			return args[k+1], true
		}
	}
	return "", false
}

func TestAppPeerArgs(t *testing.T) {
	c := validConfig(t)
	for _, tt := range []struct {
		name      string
		change    func(*Config)
		node      int
		wantPeers string // empty: no --peer-rpc
		wantCA    bool
	}{
		{"tls", func(*Config) {}, 1,
			"https://127.0.0.1:26657,https://127.0.0.1:26857,https://127.0.0.1:26957", true},
		{"insecure rpc", func(c *Config) { c.InsecureRPC = true }, 1,
			"http://127.0.0.1:26657,http://127.0.0.1:26857,http://127.0.0.1:26957", false},
		{"first node", func(*Config) {}, 0,
			"https://127.0.0.1:26757,https://127.0.0.1:26857,https://127.0.0.1:26957", true},
		{"a node added beside the validators", func(*Config) {}, 4,
			"https://127.0.0.1:26657,https://127.0.0.1:26757,https://127.0.0.1:26857,https://127.0.0.1:26957", true},
		{"one validator", func(c *Config) { c.Validators = 1 }, 0, "", false},
		{"built-in app", func(c *Config) { c.Transport = "kvstore" }, 1, "", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := c
			tt.change(&c)
			args := (&Net{cfg: c}).app(tt.node).args
			peers, ok := flagValue(args, "--peer-rpc")
			if peers != tt.wantPeers || ok != (tt.wantPeers != "") {
				t.Errorf("app(%d) --peer-rpc = %q (given: %v), want %q", tt.node, peers, ok, tt.wantPeers)
			}
			if self := c.RPCAddr(tt.node); ok && strings.Contains(peers, self) {
				t.Errorf("app(%d) --peer-rpc %q names its own node %s", tt.node, peers, self)
			}
			ca, ok := flagValue(args, "--peer-tls-ca")
			if wantCA := filepath.Join(c.Dir, "tls", "ca.pem"); ok != tt.wantCA || (ok && ca != wantCA) {
				t.Errorf("app(%d) --peer-tls-ca = %q (given: %v), want %v (%s)", tt.node, ca, ok, tt.wantCA, wantCA)
			}
		})
	}
}

// TestNodeDataArgs: every app serves its data service, and the gateways
// and the indexer are given each node's, in the order of their --nodes;
// an empty entry where a proxy stands for a node's RPC, none with a
// built-in app.
func TestNodeDataArgs(t *testing.T) {
	c := validConfig(t)
	for _, tt := range []struct {
		name     string
		change   func(*Config, *Services)
		wantData bool
		scheme   string
	}{
		{"tls", func(*Config, *Services) {}, true, "https"},
		{"insecure rpc", func(c *Config, _ *Services) { c.InsecureRPC = true }, true, "http"},
		{"a proxied node", func(_ *Config, s *Services) { s.ProxiedRPC = map[int]int{2: 30000} }, true, "https"},
		{"built-in app", func(c *Config, _ *Services) { c.Transport = "kvstore" }, false, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, s := c, DefaultServices()
			tt.change(&c, &s)
			n := &Net{cfg: c}
			if !c.Builtin() {
				args := n.app(1).args
				listen, _ := flagValue(args, "--data-listen")
				if want := fmt.Sprintf("127.0.0.1:%d", c.DataPort(1)); listen != want {
					t.Errorf("app(1) --data-listen = %q, want %q", listen, want)
				}
				if cert, ok := flagValue(args, "--data-tls-cert"); ok != !c.InsecureRPC || (ok && cert != filepath.Join(c.Dir, "tls", "node.pem")) {
					t.Errorf("app(1) --data-tls-cert = %q (given: %v), want the node's certificate unless the RPC is plaintext", cert, ok)
				}
			}
			for name, args := range map[string][]string{"gateway1": n.gatewayProc(s, 1).args, "indexer": n.indexerProc(s).args} {
				nodes, _ := flagValue(args, "--nodes")
				data, ok := flagValue(args, "--node-data")
				if ok != tt.wantData {
					t.Fatalf("%s --node-data = %q (given: %v), want given: %v", name, data, ok, tt.wantData)
				}
				if !ok {
					continue
				}
				rpcs, datas := strings.Split(nodes, ","), strings.Split(data, ",")
				if len(rpcs) != len(datas) {
					t.Fatalf("%s: %d --nodes, %d --node-data", name, len(rpcs), len(datas))
				}
				for k := range rpcs {
					var i int
					if _, err := fmt.Sscanf(rpcs[k][strings.LastIndex(rpcs[k], ":")+1:], "%d", &i); err != nil {
						t.Fatal(err)
					}
					node := (i - c.BasePort - 1) / 100
					if i == 30000 { // node 2's proxy
						if datas[k] != "" {
							t.Errorf("%s --node-data[%d] = %q for the node behind a proxy, want empty", name, k, datas[k])
						}
						continue
					}
					if want := c.DataAddr(node); datas[k] != want || !strings.HasPrefix(want, tt.scheme+"://") {
						t.Errorf("%s --node-data[%d] = %q for --nodes[%d] %q, want %q", name, k, datas[k], k, rpcs[k], want)
					}
				}
			}
		})
	}
}
