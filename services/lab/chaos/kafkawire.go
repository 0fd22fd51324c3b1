package chaos

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"maps"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// produceWatch reads a Kafka client's Produce traffic off its connections,
// to know when the client may send a batch again: franz-go retries
// retriable errors inside the client, and tells its caller nothing unless
// a record fails for good. A failure is an answer to a Produce request
// that carries an error for any partition, or a connection that breaks
// (or is closed, or fails a read or a write) with Produce requests
// unanswered, or a dial that fails; it is counted before the client reads
// the bytes that tell it, so a send that is unresolved across it sees the
// count change by the time its outcome comes. It also keeps the most
// Produce requests it saw in flight on one connection.
type produceWatch struct {
	failures    atomic.Int64
	maxInFlight atomic.Int64

	mu    sync.Mutex
	kinds map[string]int // failures by kind, for the row's notes
}

func (w *produceWatch) fail(kind string) {
	w.failures.Add(1)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.kinds == nil {
		w.kinds = map[string]int{}
	}
	w.kinds[kind]++
}

// failureKinds is a copy of the failures by kind.
func (w *produceWatch) failureKinds() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.kinds)
}

// inFlight raises the most Produce requests seen in flight to n.
func (w *produceWatch) inFlight(n int) {
	for m := w.maxInFlight.Load(); int64(n) > m; m = w.maxInFlight.Load() {
		if w.maxInFlight.CompareAndSwap(m, int64(n)) {
			return
		}
	}
}

// dialer dials brokers over TLS (tlsCfg nil: plaintext) and watches each
// connection; it stands in for kgo.DialTLSConfig, whose connections are
// the client's own.
func (w *produceWatch) dialer(tlsCfg *tls.Config) func(ctx context.Context, network, host string) (net.Conn, error) {
	nd := &net.Dialer{Timeout: 10 * time.Second}
	return func(ctx context.Context, network, host string) (net.Conn, error) {
		var conn net.Conn
		var err error
		if tlsCfg == nil {
			conn, err = nd.DialContext(ctx, network, host)
		} else {
			cfg := tlsCfg.Clone()
			if cfg.ServerName == "" {
				if h, _, serr := net.SplitHostPort(host); serr == nil {
					cfg.ServerName = h
				}
			}
			conn, err = (&tls.Dialer{NetDialer: nd, Config: cfg}).DialContext(ctx, network, host)
		}
		if err != nil {
			w.fail("dial failed")
			return nil, err
		}
		return &watchedConn{Conn: conn, w: w, pending: map[int32]int16{}}, nil
	}
}

// watchedConn parses the request frames the client writes (size, key,
// version, correlation id) and the response frames it reads (size,
// correlation id), and decodes the responses to Produce requests.
type watchedConn struct {
	net.Conn
	w *produceWatch

	mu      sync.Mutex
	out, in []byte          // bytes of frames not yet whole
	pending map[int32]int16 // Produce requests unanswered: correlation id -> version
	broken  bool
}

func (c *watchedConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.out = append(c.out, p...)
	for {
		frame, rest, ok := nextFrame(c.out)
		if !ok {
			break
		}
		if len(frame) >= 8 && int16(binary.BigEndian.Uint16(frame[0:])) == 0 { // Produce
			c.pending[int32(binary.BigEndian.Uint32(frame[4:]))] = int16(binary.BigEndian.Uint16(frame[2:]))
			c.w.inFlight(len(c.pending))
		}
		c.out = rest
	}
	c.out = compact(c.out)
	c.mu.Unlock()
	n, err := c.Conn.Write(p)
	if err != nil {
		c.broke()
	}
	return n, err
}

func (c *watchedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	c.in = append(c.in, p[:n]...)
	for {
		frame, rest, ok := nextFrame(c.in)
		if !ok {
			break
		}
		if len(frame) >= 4 {
			corr := int32(binary.BigEndian.Uint32(frame))
			if version, ok := c.pending[corr]; ok {
				delete(c.pending, corr)
				if kind := produceAnswerError(version, frame[4:]); kind != "" {
					c.w.fail(kind)
				}
			}
		}
		c.in = rest
	}
	c.in = compact(c.in)
	c.mu.Unlock()
	if err != nil {
		c.broke()
	}
	return n, err
}

func (c *watchedConn) Close() error {
	c.broke()
	return c.Conn.Close()
}

// broke counts a failure once if Produce requests are unanswered.
func (c *watchedConn) broke() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.broken && len(c.pending) > 0 {
		c.broken = true
		c.w.fail("connection broken")
	}
}

// nextFrame splits a size-prefixed Kafka frame off b.
func nextFrame(b []byte) (frame, rest []byte, ok bool) {
	if len(b) < 4 {
		return nil, b, false
	}
	n := int(int32(binary.BigEndian.Uint32(b)))
	if n < 0 || len(b)-4 < n {
		return nil, b, false
	}
	return b[4 : 4+n], b[4+n:], true
}

// compact copies a short tail to a fresh slice, so a long-lived buffer
// does not pin every frame read through it.
func compact(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return append([]byte(nil), b...)
}

// produceAnswerError decodes a Produce response of version (the bytes
// after the correlation id) and returns the first partition's error, or
// "" when every partition's answer is without error.
func produceAnswerError(version int16, b []byte) string {
	resp := kmsg.NewPtrProduceResponse()
	resp.SetVersion(version)
	r := kbin.Reader{Src: b}
	if resp.IsFlexible() {
		kmsg.SkipTags(&r) // the response header's tags
	}
	if r.Complete() != nil || resp.ReadFrom(r.Src) != nil {
		return "answer that does not decode"
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.TypedErrorForCode(p.ErrorCode); err != nil {
				return err.Message
			}
		}
	}
	return ""
}
