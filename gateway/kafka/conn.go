package kafka

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// conn is one client connection. Requests are read in order and each is
// started before the next is read (start: what must happen in request
// order, such as placing a Produce's batches or an OffsetCommit's nonce);
// then they finish concurrently, and their responses are written in
// request order, as a Kafka broker does.
type conn struct {
	s   *Server
	nc  net.Conn
	log zerolog.Logger

	// principal is who the connection acts as; nil until authenticated.
	principal *Principal
	mechanism string  // chosen by SaslHandshake
	session   Session // the SASL exchange in progress
	// rawSASL: a SaslHandshake v0 chose the mechanism, so the frames that
	// follow are bare SASL messages until the exchange ends.
	rawSASL bool
	// commits counts the connection's offset commits not yet answered: an
	// OffsetFetch starts once those sent before it are done, so it sees
	// them. Only read's goroutine adds to it.
	commits sync.WaitGroup
	// clientID is the client id of the connection's first request that
	// has one (DescribeGroups shows it); only read's goroutine writes it,
	// before the requests that read it start.
	clientID string
	// sessKey is the connection's key in the fetch session cache
	// (fetchsession.go), under its lock; 0 until the first fetch.
	sessKey uint64
}

// maxClientID bounds the client id a connection's members are shown with.
const maxClientID = 255

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// client is who a group member is, as DescribeGroups shows it.
func (c *conn) client() memberClient {
	return memberClient{id: c.clientID, host: "/" + remoteIP(c.nc)}
}

// pending is a request whose response is owed, in order.
type pending struct {
	key     int16
	corr    int32
	size    int64 // budget held until the response is written
	done    chan struct{}
	resp    kmsg.Response // nil: nothing to write (acks=0)
	fatal   error         // close the connection instead of answering
	flexHdr bool          // the response header carries tagged fields
	raw     []byte        // a bare SASL reply (rawSASL), written as is
	// closeAfter closes the connection once the response is written (a
	// failed login: Kafka closes then too).
	closeAfter bool
}

func newConn(s *Server, nc net.Conn) *conn {
	c := &conn{s: s, nc: nc, log: s.log.With().Str("remote", nc.RemoteAddr().String()).Logger()}
	if s.cfg.Auth == nil {
		c.principal = &Principal{Name: "anonymous", Key: s.cfg.AnonymousKey, Admin: s.cfg.AnonymousAdmin}
	}
	return c
}

func (c *conn) serve(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		<-ctx.Done()
		c.nc.Close()
	}()
	if c.s.cfg.TLS != nil {
		tc := tls.Server(c.nc, c.s.cfg.TLS)
		_ = tc.SetDeadline(time.Now().Add(c.s.cfg.HandshakeTimeout))
		if err := tc.HandshakeContext(ctx); err != nil {
			c.log.Debug().Err(err).Msg("kafka tls handshake failed")
			return
		}
		_ = tc.SetDeadline(time.Time{})
		c.nc = tc
	}
	out := make(chan *pending, c.s.cfg.MaxInFlight)
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		c.write(ctx, out)
		cancel() // a failed write ends the connection
	}()
	err := c.read(ctx, out)
	close(out)
	<-writerDone
	if err != nil && !errors.Is(err, io.EOF) && ctx.Err() == nil {
		c.log.Debug().Err(err).Msg("kafka connection closed")
	}
}

// read reads requests until the connection ends, queues a pending
// response for each in order, and starts its handling.
func (c *conn) read(ctx context.Context, out chan<- *pending) error {
	authDeadline := time.Now().Add(c.s.cfg.HandshakeTimeout)
	for {
		p, body, err := c.readFrame(ctx, authDeadline)
		if err != nil {
			return err
		}
		if c.rawSASL {
			reply, err := c.rawStep(body)
			if err != nil {
				c.s.buffered.Release(p.size)
				return err
			}
			p.raw = reply
			close(p.done)
			out <- p
			continue
		}
		req, corr, err := parseRequest(body)
		p.corr = corr
		if err != nil {
			var uv *unsupportedVersionError
			if !errors.As(err, &uv) {
				c.s.buffered.Release(p.size)
				return err
			}
			p.key, p.resp = 18, uv.resp
			close(p.done)
			out <- p
			continue
		}
		p.key = req.Key()
		p.flexHdr = req.IsFlexible() && p.key != 18
		if c.clientID == "" {
			c.clientID = truncate(headerClientID(body), maxClientID)
		}
		if c.principal == nil && !isAuthKey(p.key) {
			c.s.buffered.Release(p.size)
			return fmt.Errorf("request key %d before authenticating", p.key)
		}
		select {
		case out <- p:
		case <-ctx.Done():
			c.s.buffered.Release(p.size)
			return ctx.Err()
		}
		rest := c.start(ctx, req)
		if isAuthKey(p.key) || c.principal == nil {
			// Authentication changes what later requests may do: finish it
			// before reading on.
			c.finish(ctx, p, rest)
			continue
		}
		go c.finish(ctx, p, rest)
	}
}

// readFrame reads one size-prefixed request, within the size bounds and
// deadlines that hold before authentication (authDeadline) or after it,
// and takes its size from the server's buffer budget. The pending it
// returns holds that size: whoever drops the request releases it.
func (c *conn) readFrame(ctx context.Context, authDeadline time.Time) (*pending, []byte, error) {
	var size [4]byte
	deadline := time.Now().Add(c.s.cfg.IdleTimeout)
	if c.principal == nil {
		deadline = authDeadline
	}
	_ = c.nc.SetReadDeadline(deadline)
	if _, err := io.ReadFull(c.nc, size[:]); err != nil {
		return nil, nil, err
	}
	n := int32(binary.BigEndian.Uint32(size[:]))
	limit := c.s.cfg.MaxRequestBytes
	if c.principal == nil {
		limit = c.s.cfg.MaxPreAuthBytes
	}
	least := int32(8) // a request header
	if c.rawSASL {
		least = 0
	}
	if n < least || n > limit {
		return nil, nil, fmt.Errorf("request of %d bytes is outside %d..%d", n, least, limit)
	}
	if err := c.s.buffered.Acquire(ctx, int64(n)); err != nil {
		return nil, nil, err
	}
	p := &pending{size: int64(n), done: make(chan struct{})}
	body := make([]byte, n)
	_ = c.nc.SetReadDeadline(time.Now().Add(c.s.cfg.RequestReadTimeout))
	if _, err := io.ReadFull(c.nc, body); err != nil {
		c.s.buffered.Release(p.size)
		return nil, nil, err
	}
	return p, body, nil
}

func isAuthKey(key int16) bool { return key == 18 || key == 17 || key == 36 }

func (c *conn) finish(ctx context.Context, p *pending, rest answerer) {
	defer close(p.done)
	p.resp, p.fatal = rest(ctx)
	if r, ok := p.resp.(*kmsg.SASLAuthenticateResponse); ok && r.ErrorCode != 0 {
		p.closeAfter = true
	}
}

// write writes each pending response in order as it is ready.
func (c *conn) write(ctx context.Context, in <-chan *pending) {
	var buf []byte
	failed := false
	for p := range in {
		<-p.done // handlers end with ctx, so this ends when the connection does
		c.s.buffered.Release(p.size)
		switch {
		case failed:
			continue
		case p.fatal != nil:
			c.log.Info().Err(p.fatal).Int16("key", p.key).Msg("kafka request ends the connection")
			failed = true
			c.nc.Close()
			continue
		case p.raw != nil:
			buf = binary.BigEndian.AppendUint32(buf[:0], uint32(len(p.raw)))
			buf = append(buf, p.raw...)
		case p.resp == nil:
			continue
		default:
			buf = appendResponse(buf[:0], p)
		}
		_ = c.nc.SetWriteDeadline(time.Now().Add(c.s.cfg.WriteTimeout))
		if _, err := c.nc.Write(buf); err != nil || p.closeAfter {
			failed = true
			c.nc.Close()
		}
	}
}

func appendResponse(buf []byte, p *pending) []byte {
	buf = append(buf, 0, 0, 0, 0, 0, 0, 0, 0) // size, correlation id
	if p.flexHdr {
		buf = append(buf, 0) // no tagged fields
	}
	buf = p.resp.AppendTo(buf)
	binary.BigEndian.PutUint32(buf[:4], uint32(len(buf)-4))
	binary.BigEndian.PutUint32(buf[4:8], uint32(p.corr))
	return buf
}
