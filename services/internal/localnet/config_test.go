package localnet

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cometbft/cometbft/p2p"
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
}
