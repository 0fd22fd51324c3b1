package kafka

import (
	"context"
	"crypto/ed25519"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/byzlog/byzlog/gateway/pipeline"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

// noBackend answers nothing: the tests below never get past the bounds.
type noBackend struct{}

var errNo = errors.New("no backend")

func (noBackend) Produce(context.Context, *byzlogv1.SignedBatch, byzlogv1.Ack) (*byzlogv1.Receipt, error) {
	return nil, errNo
}
func (noBackend) Submit(context.Context, *byzlogv1.SignedBatch, byzlogv1.Ack) (*pipeline.Submitted, error) {
	return nil, errNo
}
func (noBackend) NextSequence(context.Context, ed25519.PublicKey, string, uint32) (uint64, error) {
	return 0, errNo
}
func (noBackend) Topics(context.Context) ([]*byzlogv1.TopicInfo, error) { return nil, nil }
func (noBackend) Records(context.Context, *byzlogv1.RecordsRequest) (*byzlogv1.RecordsResponse, error) {
	return nil, errNo
}
func (noBackend) Limits(context.Context) (*byzlogv1.Limits, error)              { return nil, errNo }
func (noBackend) Height() int64                                                 { return 1 }
func (noBackend) Group(context.Context, string) (*byzlogv1.GroupOffsets, error) { return nil, errNo }
func (noBackend) Nonce(context.Context, ed25519.PublicKey) (uint64, error)      { return 0, errNo }
func (noBackend) Groups(context.Context, string, uint32) (*byzlogv1.GroupList, error) {
	return nil, errNo
}
func (noBackend) Rules(context.Context) (*byzlogv1.Rules, error) { return nil, errNo }
func (noBackend) CommitOffsets(context.Context, *byzlogv1.CommitOffsets, func()) (pipeline.Committed, error) {
	return pipeline.Committed{}, errNo
}
func (noBackend) Admin(context.Context, *byzlogv1.AdminRequest, func()) (pipeline.Committed, error) {
	return pipeline.Committed{}, errNo
}

// serve runs a face that needs SASL (any mechanism fails) until the test ends.
func serve(t *testing.T, edit func(*Config)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Default()
	cfg.Listen, cfg.Insecure, cfg.Auth = ln.Addr().String(), true, refuseAll{}
	cfg.HandshakeTimeout = 2 * time.Second
	if edit != nil {
		edit(&cfg)
	}
	s, err := New(cfg, Backend{ChainID: func() string { return "test" }, Log: noBackend{}, Reads: noBackend{}, Groups: noBackend{}, Admin: noBackend{}}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-done })
	return cfg.Listen
}

type refuseAll struct{}

func (refuseAll) Mechanisms() []string { return []string{"PLAIN"} }
func (refuseAll) Start(string) (Session, error) {
	return nil, errors.New("refused")
}

// closed says whether the server closes c within a few seconds.
func closed(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := io.ReadAll(c)
	var ne net.Error
	return err == nil || !(errors.As(err, &ne) && ne.Timeout())
}

func send(t *testing.T, c net.Conn, body []byte) {
	t.Helper()
	if _, err := c.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)); err != nil {
		t.Fatal(err)
	}
}

// TestPreAuthBounds: before a client authenticates, a request other than
// ApiVersions and SASL, or one over 64 KiB, closes the connection, and so
// does saying nothing for the handshake timeout; ApiVersions is answered.
func TestPreAuthBounds(t *testing.T) {
	addr := serve(t, nil)
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	meta := kmsg.NewPtrMetadataRequest()
	meta.SetVersion(4)
	c := dial()
	send(t, c, frame(meta, 1))
	if !closed(c) {
		t.Error("Metadata before authenticating: the connection stays open")
	}
	c = dial()
	c.Write(binary.BigEndian.AppendUint32(nil, 65<<10))
	if !closed(c) {
		t.Error("a 65 KiB request before authenticating: the connection stays open")
	}
	c = dial()
	if !closed(c) {
		t.Error("silence for the handshake timeout: the connection stays open")
	}
	c = dial()
	api := kmsg.NewPtrApiVersionsRequest()
	api.SetVersion(3)
	api.ClientSoftwareName, api.ClientSoftwareVersion = "t", "1"
	send(t, c, frame(api, 9))
	var size [4]byte
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, size[:]); err != nil {
		t.Fatalf("ApiVersions before authenticating: %v", err)
	}
}

// TestConnBounds: connections past MaxConnsPerIP are closed at once.
func TestConnBounds(t *testing.T) {
	addr := serve(t, func(c *Config) { c.MaxConnsPerIP = 2 })
	var open []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		open = append(open, c)
	}
	if !closed(open[2]) {
		t.Error("a third connection from one address with max_conns_per_ip 2 stays open")
	}
	open[0].SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	_, err := open[0].Read(make([]byte, 1))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("the first connection: read %v, want it open (a timeout)", err)
	}
}
