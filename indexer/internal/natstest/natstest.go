// Package natstest runs a real, embedded nats-server with JetStream for
// the indexer's tests, on a loopback port, until the test ends. It is for
// tests only and stands in for nothing: the server is NATS's own.
package natstest

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Start runs a server and returns a connection to it; edit (optional)
// changes the server's options first.
func Start(t *testing.T, edit ...func(*server.Options)) *nats.Conn {
	t.Helper()
	s := Server(t, edit...)
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// Server runs an embedded JetStream server until the test ends; edit
// (optional) changes its options first.
func Server(t *testing.T, edit ...func(*server.Options)) *server.Server {
	t.Helper()
	o := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true}
	for _, e := range edit {
		e(o)
	}
	s, err := server.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	t.Cleanup(s.Shutdown)
	return s
}
