package app_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	abcicli "github.com/cometbft/cometbft/abci/client"
	abci "github.com/cometbft/cometbft/abci/types"

	"github.com/byzlog/byzlog/abciapp/app"
	"github.com/byzlog/byzlog/protos/wire"
)

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestServeWithCometBFTClients serves the app over both transports, on
// loopback TCP and on a unix socket, and drives it with CometBFT's own ABCI
// clients, the code a node runs, with proxy_app as a node's config would
// say it. The gRPC case sends a FinalizeBlock request over gRPC's default
// 4 MiB receive cap, which the app's server must accept.
func TestServeWithCometBFTClients(t *testing.T) {
	for _, c := range []struct{ transport, network string }{
		{app.TransportGRPC, "tcp"}, {app.TransportSocket, "tcp"},
		{app.TransportGRPC, "unix"}, {app.TransportSocket, "unix"},
	} {
		transport := c.transport
		t.Run(transport+"/"+c.network, func(t *testing.T) {
			a := open(t, t.TempDir())
			defer a.Close()
			listen := "127.0.0.1:" + strconv.Itoa(freePort(t))
			addr := listen // gRPC: host:port, as proxy_app must be
			if transport == app.TransportSocket {
				addr = "tcp://" + listen
			}
			if c.network == "unix" {
				sock := filepath.Join(t.TempDir(), "abci.sock")
				if err := os.WriteFile(sock, nil, 0o600); err != nil { // as a killed app leaves it
					t.Fatal(err)
				}
				listen, addr = "unix://"+sock, "unix://"+sock
				if transport == app.TransportGRPC {
					addr = "passthrough:///" + addr
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			served := make(chan error, 1)
			go func() { served <- app.Serve(ctx, app.ServeConfig{Transport: transport, Listen: listen}, a) }()
			defer func() {
				cancel()
				select {
				case err := <-served:
					if err != nil {
						t.Errorf("Serve() = %v after cancel, want nil", err)
					}
				case <-time.After(10 * time.Second):
					t.Error("Serve() did not return within 10 s of cancel")
				}
			}()

			c, err := abcicli.NewClient(addr, transport, false)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = c.Stop() }()
			cctx, ccancel := context.WithTimeout(ctx, 20*time.Second)
			defer ccancel()

			big := make([]byte, 5<<20)
			res, err := c.FinalizeBlock(cctx, &abci.RequestFinalizeBlock{Height: 1, Txs: [][]byte{validTx(t, 0), big}})
			if err != nil {
				t.Fatalf("FinalizeBlock with a 5 MiB tx over %s: %v", transport, err)
			}
			if len(res.TxResults) != 2 || res.TxResults[0].Code != 0 || wire.Code(res.TxResults[1].Code) != wire.CodeTxTooLarge {
				t.Fatalf("FinalizeBlock results = %v, want ok then %s", res.TxResults, wire.CodeTxTooLarge)
			}
			if _, err := c.Commit(cctx, &abci.RequestCommit{}); err != nil {
				t.Fatal(err)
			}
			info, err := c.Info(cctx, &abci.RequestInfo{})
			if err != nil {
				t.Fatal(err)
			}
			if info.LastBlockHeight != 1 || string(info.LastBlockAppHash) != string(res.AppHash) {
				t.Errorf("Info() over %s = height %d hash %X, want 1 and %X", transport, info.LastBlockHeight, info.LastBlockAppHash, res.AppHash)
			}
		})
	}
}

func TestServeConfigValidate(t *testing.T) {
	for _, c := range []struct {
		cfg app.ServeConfig
		ok  bool
	}{
		{app.DefaultServeConfig(), true},
		{app.ServeConfig{Transport: "socket", Listen: "127.0.0.1:1"}, true},
		{app.ServeConfig{Transport: "http", Listen: "127.0.0.1:1"}, false},
		{app.ServeConfig{Transport: "grpc", Listen: "tcp://127.0.0.1:26658"}, false},
		{app.ServeConfig{Transport: "grpc", Listen: "[::1]:26658"}, true},
		{app.ServeConfig{Transport: "grpc", Listen: "localhost:26658"}, true},
		// ABCI is unauthenticated: off loopback only when told the network is private.
		{app.ServeConfig{Transport: "grpc", Listen: "0.0.0.0:26658"}, false},
		{app.ServeConfig{Transport: "grpc", Listen: ":26658"}, false},
		{app.ServeConfig{Transport: "grpc", Listen: "10.0.0.5:26658"}, false},
		{app.ServeConfig{Transport: "grpc", Listen: "0.0.0.0:26658", PrivateNetwork: true}, true},
		{app.ServeConfig{Transport: "grpc", Listen: "unix:///run/byzlog/abci.sock"}, true},
		{app.ServeConfig{Transport: "socket", Listen: "unix:///run/byzlog/abci.sock"}, true},
		{app.ServeConfig{Transport: "grpc", Listen: "unix://"}, false},
	} {
		if err := c.cfg.Validate(); (err == nil) != c.ok {
			t.Errorf("%+v.Validate() = %v, want ok=%v", c.cfg, err, c.ok)
		}
	}
}
