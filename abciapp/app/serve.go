package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	abciserver "github.com/cometbft/cometbft/abci/server"
	abci "github.com/cometbft/cometbft/abci/types"
	"google.golang.org/grpc"
)

// Transports the app can be served over.
const (
	TransportGRPC   = "grpc"
	TransportSocket = "socket"
)

// maxGRPCMessageBytes bounds one ABCI message over gRPC in either direction.
// It sits well above any block a correctly configured chain produces (the
// node's own client keeps gRPC's 4 MiB default, which is what genesis
// block.max_bytes must stay under), so the app is never the side that fails.
const maxGRPCMessageBytes = 64 << 20

// ServeConfig says where and how to serve the app.
type ServeConfig struct {
	// Transport is "grpc" (default) or "socket" (CometBFT's own protocol).
	Transport string
	// Listen is host:port or unix:///path/to/socket. With gRPC, the
	// node's proxy_app is host:port without a scheme, or
	// passthrough:///unix:///path; with the socket transport
	// tcp://host:port or unix:///path.
	Listen string
	// PrivateNetwork allows a Listen host other than loopback. The ABCI
	// link has neither authentication nor encryption (CometBFT's ABCI
	// clients speak neither), so it must stay on loopback, or on a network
	// that only this validator's node can reach (compose's per-validator
	// abciN network).
	PrivateNetwork bool
}

// DefaultServeConfig returns the defaults: gRPC on 127.0.0.1:26658. A unix
// socket confines the link further: only processes that may open the
// socket reach it, and nothing of it crosses loopback.
func DefaultServeConfig() ServeConfig {
	return ServeConfig{Transport: TransportGRPC, Listen: "127.0.0.1:26658"}
}

// Validate says what is wrong with c, naming the field.
func (c ServeConfig) Validate() error {
	switch c.Transport {
	case TransportGRPC, TransportSocket:
	default:
		return fmt.Errorf("transport %q: must be %q or %q", c.Transport, TransportGRPC, TransportSocket)
	}
	if path, ok := strings.CutPrefix(c.Listen, "unix://"); ok {
		if path == "" {
			return fmt.Errorf("listen %q: want unix:///path/to/socket", c.Listen)
		}
		return nil
	}
	host, _, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return fmt.Errorf("listen %q: want host:port or unix:///path: %w", c.Listen, err)
	}
	if ip := net.ParseIP(host); !c.PrivateNetwork && host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("listen %q: ABCI has no authentication or encryption, so the app listens on loopback (127.0.0.1, the node beside it); on a network only this validator's node reaches, say so with private_network", c.Listen)
	}
	return nil
}

// Serve serves application on c until ctx is done.
func Serve(ctx context.Context, c ServeConfig, application abci.Application) error {
	if err := c.Validate(); err != nil {
		return err
	}
	if c.Transport == TransportSocket {
		return serveSocket(ctx, c.Listen, application)
	}
	return serveGRPC(ctx, c.Listen, application)
}

// listen listens on host:port or unix:///path. A socket file left by an
// app that was killed is removed first; the socket is the owner's alone.
func listen(addr string) (net.Listener, error) {
	path, ok := strings.CutPrefix(addr, "unix://")
	if !ok {
		return net.Listen("tcp", addr)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove the old socket: %w", err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

func serveGRPC(ctx context.Context, addr string, application abci.Application) error {
	ln, err := listen(addr)
	if err != nil {
		return fmt.Errorf("listen for ABCI over gRPC on %s: %w", addr, err)
	}
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(maxGRPCMessageBytes), grpc.MaxSendMsgSize(maxGRPCMessageBytes))
	abci.RegisterABCIServer(srv, grpcShim{application})
	return serveGRPCUntil(ctx, srv, ln, "ABCI over gRPC on "+addr)
}

// serveGRPCUntil serves srv on ln until ctx is done, then stops it: calls
// in flight get a moment to finish (clients such as CometBFT's hold their
// connections open forever), and the rest are cut. what names the service
// in errors.
func serveGRPCUntil(ctx context.Context, srv *grpc.Server, ln net.Listener, what string) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve %s: %w", what, err)
	case <-ctx.Done():
	}
	done := make(chan struct{})
	go func() { srv.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		srv.Stop()
		<-done
	}
	if err := <-errc; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("serve %s: %w", what, err)
	}
	return nil
}

func serveSocket(ctx context.Context, addr string, application abci.Application) error {
	protoAddr := "tcp://" + addr
	if path, ok := strings.CutPrefix(addr, "unix://"); ok {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("serve ABCI over a socket on %s: remove the old socket: %w", addr, err)
		}
		protoAddr = addr
	}
	srv := abciserver.NewSocketServer(protoAddr, application)
	if err := srv.Start(); err != nil {
		return fmt.Errorf("serve ABCI over a socket on %s: %w", addr, err)
	}
	<-ctx.Done()
	if err := srv.Stop(); err != nil {
		return fmt.Errorf("stop ABCI socket server: %w", err)
	}
	return nil
}

// grpcShim adds the two connection-level calls that the gRPC service has and
// the Application interface does not.
type grpcShim struct{ abci.Application }

func (grpcShim) Echo(_ context.Context, req *abci.RequestEcho) (*abci.ResponseEcho, error) {
	return &abci.ResponseEcho{Message: req.Message}, nil
}

func (grpcShim) Flush(context.Context, *abci.RequestFlush) (*abci.ResponseFlush, error) {
	return &abci.ResponseFlush{}, nil
}
