package chaos

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// pipeConn is a net.Conn that reads what the test queued and keeps what
// the client wrote.
type pipeConn struct {
	net.Conn
	in      bytes.Buffer
	out     bytes.Buffer
	readErr error
}

func (c *pipeConn) Read(p []byte) (int, error) {
	if c.in.Len() == 0 && c.readErr != nil {
		return 0, c.readErr
	}
	return c.in.Read(p)
}
func (c *pipeConn) Write(p []byte) (int, error) { return c.out.Write(p) }
func (c *pipeConn) Close() error                { return nil }

// request is a request frame: size, key, version, correlation id, a null
// client id.
func request(key, version int16, corr int32) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(key))
	b = binary.BigEndian.AppendUint16(b, uint16(version))
	b = binary.BigEndian.AppendUint32(b, uint32(corr))
	b = binary.BigEndian.AppendUint16(b, 0xffff)
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...)
}

// produceAnswer is a Produce response frame of version for corr, its one
// partition answered with code.
func produceAnswer(version int16, corr int32, code int16) []byte {
	resp := kmsg.NewPtrProduceResponse()
	resp.Version = version
	t := kmsg.NewProduceResponseTopic()
	t.Topic = "t"
	p := kmsg.NewProduceResponseTopicPartition()
	p.ErrorCode = code
	t.Partitions = append(t.Partitions, p)
	resp.Topics = append(resp.Topics, t)
	b := binary.BigEndian.AppendUint32(nil, uint32(corr))
	if resp.IsFlexible() {
		b = append(b, 0) // no header tags
	}
	b = resp.AppendTo(b)
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...)
}

// TestProduceWatch: what the watch counts as a failure, however the
// frames are cut into reads and writes.
func TestProduceWatch(t *testing.T) {
	notLeader := kerr.NotEnoughReplicas.Code
	for _, tc := range []struct {
		name      string
		writes    [][]byte
		reads     []byte
		readErr   error
		close     bool
		failures  int64
		inFlight  int64
		leftAfter int // Produce requests still unanswered
	}{
		{"three in flight, answered without error (v9, flexible)",
			[][]byte{request(0, 9, 1), request(0, 9, 2), request(0, 9, 3)},
			cat(produceAnswer(9, 1, 0), produceAnswer(9, 2, 0), produceAnswer(9, 3, 0)), nil, false, 0, 3, 0},
		{"an answer with an error (v7)",
			[][]byte{request(0, 7, 1), request(0, 7, 2)},
			cat(produceAnswer(7, 1, 0), produceAnswer(7, 2, notLeader)), nil, false, 1, 2, 0},
		{"other requests are not Produce's",
			[][]byte{request(3, 9, 1), request(0, 9, 2)},
			cat([]byte{0, 0, 0, 5, 0, 0, 0, 1, 0}, produceAnswer(9, 2, 0)), nil, false, 0, 1, 0},
		{"a connection that breaks with a request unanswered",
			[][]byte{request(0, 9, 1), request(0, 9, 2)},
			produceAnswer(9, 1, 0), io.ErrUnexpectedEOF, false, 1, 2, 1},
		{"a connection closed with a request unanswered",
			[][]byte{request(0, 9, 1)}, nil, nil, true, 1, 1, 1},
		{"a connection closed with nothing unanswered",
			[][]byte{request(0, 9, 1)}, produceAnswer(9, 1, 0), nil, true, 0, 1, 0},
		{"frames cut anywhere",
			split(cat(request(0, 9, 1), request(0, 9, 2))),
			cat(produceAnswer(9, 1, 0), produceAnswer(9, 2, notLeader)), nil, false, 1, 2, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &produceWatch{}
			pc := &pipeConn{readErr: tc.readErr}
			c := &watchedConn{Conn: pc, w: w, pending: map[int32]int16{}}
			for _, b := range tc.writes {
				if _, err := c.Write(b); err != nil {
					t.Fatal(err)
				}
			}
			pc.in.Write(tc.reads)
			buf := make([]byte, 3) // reads cut frames too
			for {
				if _, err := c.Read(buf); err != nil {
					break
				}
			}
			if tc.close {
				_ = c.Close()
			}
			if got := w.failures.Load(); got != tc.failures {
				t.Errorf("failures = %d (%v), want %d", got, w.failureKinds(), tc.failures)
			}
			if got := w.maxInFlight.Load(); got != tc.inFlight {
				t.Errorf("most in flight = %d, want %d", got, tc.inFlight)
			}
			if len(c.pending) != tc.leftAfter {
				t.Errorf("unanswered = %d, want %d", len(c.pending), tc.leftAfter)
			}
			if !bytes.Equal(pc.out.Bytes(), cat(tc.writes...)) {
				t.Error("the watch changed what the client wrote")
			}
		})
	}
}

func cat(bs ...[]byte) []byte { return bytes.Join(bs, nil) }

// split cuts b into writes of 1, 2, 3, ... bytes.
func split(b []byte) [][]byte {
	var out [][]byte
	for n := 1; len(b) > 0; n++ {
		n := min(n, len(b))
		out = append(out, b[:n])
		b = b[n:]
	}
	return out
}
