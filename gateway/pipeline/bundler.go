package pipeline

import "time"

// bundler is the bundling stage: requests go in, closed bundles come out.
// It holds no goroutine and reads no clock; the driver (runBundler) passes
// the time in, waits for requests and for due, and takes each closed
// bundle once it has an in-flight slot for it, as etcd raft's RawNode hands
// out a Ready and is told to Advance.
//
// A bundle opens with its first request and closes when its linger has
// passed since it opened, when it holds maxBatches requests, or when the
// next request would take it over maxBytes; that request is carried, and
// opens the next bundle only when the closed one has been taken (advance),
// so its linger starts when the bundler is collecting again.
type bundler struct {
	maxBytes   int
	maxBatches int
	linger     time.Duration

	open   []*request // the bundle being collected
	size   int        // bytes of open
	due    time.Time  // when open's linger ends
	closed []*request // the bundle waiting to be taken
	carry  *request   // the request that did not fit closed
}

func newBundler(maxBytes, maxBatches int, linger time.Duration) *bundler {
	return &bundler{maxBytes: maxBytes, maxBatches: maxBatches, linger: linger}
}

// add puts r in the open bundle at now, or opens one with it. Call it only
// while no bundle is ready.
func (b *bundler) add(r *request, now time.Time) {
	if len(b.open) > 0 && b.size+r.size > b.maxBytes {
		b.carry = r
		b.close()
		return
	}
	b.put(r, now)
}

func (b *bundler) put(r *request, now time.Time) {
	if len(b.open) == 0 {
		b.due = now.Add(b.linger)
	}
	b.open, b.size = append(b.open, r), b.size+r.size
	if len(b.open) >= b.maxBatches {
		b.close()
	}
}

func (b *bundler) close() {
	b.closed, b.open, b.size, b.due = b.open, nil, 0, time.Time{}
}

// tick closes the open bundle if its linger has passed at now.
func (b *bundler) tick(now time.Time) {
	if len(b.open) > 0 && b.closed == nil && !now.Before(b.due) {
		b.close()
	}
}

// ready is the closed bundle waiting to be taken, or nil.
func (b *bundler) ready() []*request { return b.closed }

// advance says the driver took the ready bundle at now: a carried request
// opens the next bundle.
func (b *bundler) advance(now time.Time) {
	b.closed = nil
	if r := b.carry; r != nil {
		b.carry = nil
		b.put(r, now)
	}
}

// deadline is when the open bundle's linger ends; ok is false when no
// bundle is open (or one is ready: nothing is collected until it is taken).
func (b *bundler) deadline() (due time.Time, ok bool) {
	if len(b.open) == 0 || b.closed != nil {
		return time.Time{}, false
	}
	return b.due, true
}

// drain returns every request the bundler holds, ready first, and empties
// it (the gateway is stopping).
func (b *bundler) drain() []*request {
	var out []*request
	out = append(out, b.closed...)
	out = append(out, b.open...)
	if b.carry != nil {
		out = append(out, b.carry)
	}
	*b = bundler{maxBytes: b.maxBytes, maxBatches: b.maxBatches, linger: b.linger}
	return out
}
