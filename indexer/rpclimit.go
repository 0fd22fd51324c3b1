package indexer

import (
	"fmt"
	"io"
	"net/http"
)

// A node that lies can answer any call with a body of any size, and
// CometBFT's RPC client (and so the light client's provider) reads whole
// bodies into memory. So every response body is cut at a limit, and a
// call whose body passes it fails. (The gateway's nodes package has the
// same few lines: a little copying rather than a dependency between the
// two modules.)

// ErrResponseTooLarge is wrapped by the error of a call whose response
// passed the limit.
var ErrResponseTooLarge = fmt.Errorf("response too large")

// limitTransport caps every response body at max bytes.
type limitTransport struct {
	base http.RoundTripper
	max  int64
}

func (t limitTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if resp.ContentLength > t.max {
		resp.Body.Close()
		return nil, fmt.Errorf("%w: %s answered with %d bytes, more than max_response_bytes (%d)", ErrResponseTooLarge, req.URL.Redacted(), resp.ContentLength, t.max)
	}
	resp.Body = &limitedBody{rc: resp.Body, left: t.max, max: t.max, url: req.URL.Redacted()}
	return resp, nil
}

// limitedBody reads at most max bytes, then fails the read.
type limitedBody struct {
	rc   io.ReadCloser
	left int64
	max  int64
	url  string
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// One byte more tells a body of exactly max bytes from a longer one.
		var one [1]byte
		if n, _ := b.rc.Read(one[:]); n == 0 {
			return 0, io.EOF
		}
		return 0, fmt.Errorf("%w: the response from %s is over max_response_bytes (%d)", ErrResponseTooLarge, b.url, b.max)
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *limitedBody) Close() error { return b.rc.Close() }
