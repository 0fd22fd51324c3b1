package core_test

import (
	"bytes"
	"crypto/sha256"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/byzlog/byzlog/abciapp/core"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// TestRejectionOfAnyTopicNameIsValidUTF8 is issue 13's crash input: a
// rejection message cut at a byte limit used to land inside a multi-byte
// rune, and marshalling the invalid UTF-8 panicked the app. Every cut must
// leave valid UTF-8, whatever the name.
func TestRejectionOfAnyTopicNameIsValidUTF8(t *testing.T) {
	c := newChain(t, "")
	c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 1})
	p := wire.NewSigner(key("p"), chainID)
	names := []string{strings.Repeat("\x01", 59) + strings.Repeat("a", 6)}
	// Every alignment of the cut against the ellipsis and escapes.
	for n := 0; n < 80; n++ {
		names = append(names, strings.Repeat("\x01", n)+strings.Repeat("a", 80-n), strings.Repeat("é", n)+"\x02"+strings.Repeat("a", n%7))
	}
	for _, name := range names {
		tx := bundle(t, batch(t, p, name, 0, 0, records("a")), batch(t, p, "t", 0, 0, records("b")))
		r := c.check(tx)
		if r.OK() || !utf8.ValidString(r.Log) {
			t.Fatalf("Check(bundle for topic %q) = %s, valid UTF-8 log %v; want a rejection in valid UTF-8", name, r.Code, utf8.ValidString(r.Log))
		}
		if res := c.block(tx)[0]; res.OK() || !utf8.ValidString(res.Log) {
			t.Fatalf("Execute(bundle for topic %q) = %s, valid UTF-8 log %v", name, res.Code, utf8.ValidString(res.Log))
		}
	}
}

// headerBomb is a batch of n records that carry maxHeaders empty headers
// each: 2 bytes a header on the wire, ~90 once decoded.
func headerBomb(t testing.TB, s *wire.Signer, seq uint64, n, headers int) *byzlogv1.SignedBatch {
	recs := make([]*byzlogv1.Record, n)
	for i := range recs {
		recs[i] = &byzlogv1.Record{Headers: make([]*byzlogv1.RecordHeader, headers)}
		for j := range recs[i].Headers {
			recs[i].Headers[j] = &byzlogv1.RecordHeader{}
		}
	}
	return batch(t, s, "t", 0, seq, recs)
}

// TestHeadersAreChargedToTheBudget: issue 13's header bomb. 100 records of
// 64 empty headers are 13 KB on the wire and ~600 KB in the heap; a chain
// whose transactions may inflate to 64 KiB must refuse them before decoding.
func TestHeadersAreChargedToTheBudget(t *testing.T) {
	c := newChain(t, `{"limits": {"max_record_bytes": 65536, "max_batch_bytes": 65536, "max_tx_uncompressed_bytes": 65536, "max_block_uncompressed_bytes": 131072}, "topics": [{"name": "t", "partitions": 1}]}`)
	p := wire.NewSigner(key("p"), chainID)
	bomb := bundle(t, headerBomb(t, p, 0, 100, 64))
	if r := c.check(bomb); r.Code != wire.CodeBundleTooLarge {
		t.Errorf("Check(100 records × 64 empty headers, 64 KiB budget) = %s %q, want %s", r.Code, r.Log, wire.CodeBundleTooLarge)
	}
	if r := c.block(bomb)[0]; r.Code != wire.CodeBundleTooLarge {
		t.Errorf("Execute(header bomb) = %s, want %s", r.Code, wire.CodeBundleTooLarge)
	}
	// Within the budget, headers are fine.
	small := bundle(t, headerBomb(t, p, 0, 5, 64))
	c.must(small)
	params, err := core.LoadParams(c.store)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := core.Precheck(params, small, false).Cost, int64(5*64*core.HeaderHeap); got < want {
		t.Errorf("Precheck(5 records × 64 headers).Cost = %d, want at least %d", got, want)
	}
}

// TestPendingAdmitsOnlyWhatCanCommit: the mempool's rule. A transaction is
// admitted only if it applies on top of committed state and what is already
// pending; a future sequence waits, a pending one is never a duplicate.
func TestPendingAdmitsOnlyWhatCanCommit(t *testing.T) {
	c := newChain(t, "")
	c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 1})
	p := wire.NewSigner(key("p"), chainID)
	committedBatch := batch(t, p, "t", 0, 0, records("committed"))
	c.must(bundle(t, committedBatch))
	params, err := core.LoadParams(c.store)
	if err != nil {
		t.Fatal(err)
	}
	pend := core.NewPending(c.store, params, c.state.Height+1)
	add := func(tx []byte) (core.Result, bool) {
		t.Helper()
		r, waiting, err := pend.Add(core.Precheck(params, tx, false))
		if err != nil {
			t.Fatal(err)
		}
		return r, waiting
	}
	seq1 := bundle(t, batch(t, p, "t", 0, 1, records("a")))
	for _, tc := range []struct {
		name    string
		tx      []byte
		code    wire.Code
		waiting bool
	}{
		{"committed batch again", bundle(t, committedBatch), wire.CodeDuplicate, false},
		{"another batch under a committed sequence", bundle(t, batch(t, p, "t", 0, 0, records("again"))), wire.CodeSequenceReused, false},
		{"next sequence", seq1, wire.CodeOK, false},
		{"same sequence in another bundle", bundle(t, batch(t, p, "t", 0, 1, records("b"))), wire.CodePending, false},
		{"one ahead of pending", bundle(t, batch(t, p, "t", 0, 3, records("c"))), wire.CodeSequenceGap, true},
		{"far ahead", bundle(t, batch(t, p, "t", 0, 2+wire.MaxLookahead+1, records("d"))), wire.CodeSequenceGap, false},
		{"next after pending", bundle(t, batch(t, p, "t", 0, 2, records("e"))), wire.CodeOK, false},
		{"admin nonce ahead", c.adminTx(c.admin, 5, &byzlogv1.DeleteTopic{Name: "t"}), wire.CodeBadNonce, true},
		{"admin nonce used", c.adminTx(c.admin, 0, &byzlogv1.DeleteTopic{Name: "t"}), wire.CodeBadNonce, false},
	} {
		r, waiting := add(tc.tx)
		if r.Code != tc.code || waiting != tc.waiting {
			t.Errorf("Pending.Add(%s) = %s waiting %v (%s), want %s waiting %v", tc.name, r.Code, waiting, r.Log, tc.code, tc.waiting)
		}
		if r.Code == wire.CodePending && (len(r.Data) > 0 && outcome(t, r).Batches[0].Duplicate) {
			t.Errorf("Pending.Add(%s) answered a pending batch as a duplicate", tc.name)
		}
	}
}

// TestReusedSequenceIsNotADuplicate is issue 14's third finding: a
// different batch signed under an already committed sequence (an SDK that
// re-signs a freed sequence while an old copy is still queued) used to be
// answered with the old batch's offsets, and its records were lost. Only
// the same body is a duplicate.
func TestReusedSequenceIsNotADuplicate(t *testing.T) {
	c := newChain(t, "")
	c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 1})
	p := wire.NewSigner(key("p"), chainID)
	first := batch(t, p, "t", 0, 0, records("first"))
	c.must(bundle(t, first))
	reused := bundle(t, batch(t, p, "t", 0, 0, records("other records, same sequence")))
	for name, r := range map[string]core.Result{"Check": c.check(reused), "Execute": c.block(reused)[0]} {
		if r.Code != wire.CodeSequenceReused {
			t.Errorf("%s(another batch under committed sequence 0) = %s %q, want %s", name, r.Code, r.Log, wire.CodeSequenceReused)
		}
		if br := outcome(t, r).Batches[0]; br.Duplicate || br.RecordCount != 0 {
			t.Errorf("%s(reused sequence) outcome = %+v, want no duplicate and no offsets", name, br)
		}
	}
	for name, r := range map[string]core.Result{"Check": c.check(bundle(t, first)), "Execute": c.block(bundle(t, first))[0]} {
		if br := outcome(t, r).Batches[0]; r.Code != wire.CodeDuplicate || !br.Duplicate || br.BaseOffset != 0 || br.RecordCount != 1 {
			t.Errorf("%s(the same batch again) = %s %+v, want a duplicate at offset 0", name, r.Code, br)
		}
	}
}

// TestSignedBodiesExpire is part of issue 14's fourth finding: an admin
// client signs whatever nonce its gateway reports, so a gateway could keep
// requests signed for future nonces and play them later. A body that names
// an expiry height commits up to that height and never after.
func TestSignedBodiesExpire(t *testing.T) {
	c := newChain(t, "")
	c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 1})
	c.block() // height 2
	next := c.state.Height + 1
	nonce := c.nextNonce(c.admin)
	req, err := c.admin.AdminUntil(nonce, next-1, &byzlogv1.CreateTopic{Name: "late", Config: &byzlogv1.TopicConfig{Partitions: 1}})
	if err != nil {
		t.Fatal(err)
	}
	late, err := wire.AdminTx(req)
	if err != nil {
		t.Fatal(err)
	}
	params, err := core.LoadParams(c.store)
	if err != nil {
		t.Fatal(err)
	}
	if r, _, err := core.NewPending(c.store, params, next).Add(core.Precheck(params, late, false)); err != nil || r.Code != wire.CodeBodyExpired {
		t.Errorf("Pending.Add(admin request expired at %d, next block %d) = %s %v, want %s", next-1, next, r.Code, err, wire.CodeBodyExpired)
	}
	if r := c.block(late)[0]; r.Code != wire.CodeBodyExpired {
		t.Errorf("Execute(admin request expired at %d) at height %d = %s %q, want %s", next-1, next, r.Code, r.Log, wire.CodeBodyExpired)
	}
	// The expired request used no nonce: the next one may take it.
	req, err = c.admin.AdminUntil(nonce, c.state.Height+1, &byzlogv1.CreateTopic{Name: "in-time", Config: &byzlogv1.TopicConfig{Partitions: 1}})
	if err != nil {
		t.Fatal(err)
	}
	inTime, err := wire.AdminTx(req)
	if err != nil {
		t.Fatal(err)
	}
	if r := c.block(inTime)[0]; !r.OK() {
		t.Errorf("Execute(admin request that expires at this height) = %s %q, want ok", r.Code, r.Log)
	}
}

// TestResultsNameTheirBatch: a receipt is proven from a block's results, so
// each batch's result names the batch it is for (producer key and body
// digest), whether it was written, answered as a duplicate or refused. A
// result without them could be shown to any client as its own.
func TestResultsNameTheirBatch(t *testing.T) {
	c := newChain(t, "")
	c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 1})
	p, q := wire.NewSigner(key("p"), chainID), wire.NewSigner(key("q"), chainID)
	a, b := batch(t, p, "t", 0, 0, records("a")), batch(t, q, "t", 0, 0, records("b"))
	gap := batch(t, q, "t", 0, 5, records("gap"))
	for _, tc := range []struct {
		name string
		tx   []byte
		want []*byzlogv1.SignedBatch
	}{
		{"written", bundle(t, a, b), []*byzlogv1.SignedBatch{a, b}},
		{"duplicate", bundle(t, a), []*byzlogv1.SignedBatch{a}},
		{"refused", bundle(t, gap, a), []*byzlogv1.SignedBatch{gap, a}},
	} {
		o := outcome(t, c.block(tc.tx)[0])
		for i, sb := range tc.want {
			d := sha256.Sum256(sb.Body)
			if br := o.Batches[i]; !bytes.Equal(br.Producer, sb.ProducerKey) || !bytes.Equal(br.BodySha256, d[:]) {
				t.Errorf("%s: result %d names producer %x body %x, want %x %x", tc.name, i, br.Producer, br.BodySha256, sb.ProducerKey, d)
			}
		}
	}
}
