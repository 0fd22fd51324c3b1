package pipeline

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	abci "github.com/cometbft/cometbft/abci/types"
	cmttypes "github.com/cometbft/cometbft/types"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/chain"
	"github.com/byzlog/byzlog/protos/wire"
)

var t0 = time.Unix(1000, 0)

func TestTrackerTwins(t *testing.T) {
	tr := newTracker(time.Second, 3*time.Second)
	p, twin, other := &pendingTx{hash: "a"}, &pendingTx{hash: "a"}, &pendingTx{hash: "b", deadline: t0.Add(time.Minute)}
	for _, tc := range []struct {
		p    *pendingTx
		want bool
	}{{p, true}, {twin, false}, {other, true}} {
		if got := tr.track(tc.p, t0); got != tc.want {
			t.Errorf("track(%s) = %v, want %v", tc.p.hash, got, tc.want)
		}
	}
	if p.deadline != t0.Add(3*time.Second) || other.deadline != t0.Add(time.Minute) {
		t.Errorf("deadlines %v, %v; want pending_timeout from now, and a split bundle's own kept", p.deadline, other.deadline)
	}
	if got := tr.take("a"); got != p {
		t.Fatalf("take(a) = %v, want the first transaction", got)
	}
	if tr.untrack(p) || tr.untrack(twin) {
		t.Errorf("untrack after take = true, want false: only one caller settles a transaction")
	}
	if got, want := tr.withTwins(p), []*pendingTx{twin, p}; !slices.Equal(got, want) {
		t.Errorf("withTwins(p) = %v, want the twin, then p", got)
	}
	if got := tr.withTwins(p); len(got) != 1 {
		t.Errorf("withTwins(p) again = %d transactions, want p alone", len(got))
	}
}

func TestTrackerSweep(t *testing.T) {
	for _, tc := range []struct {
		name         string
		submitted    time.Duration // before now
		deadline     time.Duration // after now
		stale, given bool
	}{
		{"fresh", 500 * time.Millisecond, time.Second, false, false},
		{"stale: sent again", 1500 * time.Millisecond, time.Second, true, false},
		{"past its deadline: given up", 1500 * time.Millisecond, -time.Millisecond, false, true},
		{"at its deadline: kept", 0, 0, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTracker(time.Second, 3*time.Second)
			now := t0.Add(time.Hour)
			p := &pendingTx{hash: "a", deadline: now.Add(tc.deadline)}
			tr.track(p, now.Add(-tc.submitted))
			stale, expired := tr.sweep(now)
			if (len(stale) == 1) != tc.stale || (len(expired) == 1) != tc.given {
				t.Fatalf("sweep = %d stale, %d expired; want stale %v, expired %v", len(stale), len(expired), tc.stale, tc.given)
			}
			if tc.stale && !p.submitted.Equal(now) {
				t.Errorf("a stale transaction's last send = %v, want now", p.submitted)
			}
			if _, still := tr.pending["a"]; still == tc.given {
				t.Errorf("tracked after sweep = %v, want %v", still, !tc.given)
			}
		})
	}
}

func TestTrackerNext(t *testing.T) {
	for _, tc := range []struct {
		name               string
		height             int64
		pending            bool
		top, agreed        int64
		wantH              int64
		wantOK             bool
		wantHeightAfterall int64
	}{
		{"pending: the next block", 10, true, 12, 12, 11, true, 10},
		{"pending, caught up with the node", 12, true, 12, 12, 0, false, 12},
		{"pending, the node ahead of the others: still read", 10, true, 1000, 12, 11, true, 10},
		{"idle: skip to the agreed height", 10, false, 20, 15, 0, false, 15},
		{"idle: no further than the node", 10, false, 14, 15, 0, false, 14},
		{"idle: never backwards", 10, false, 8, 8, 0, false, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTracker(time.Second, 3*time.Second)
			tr.matched(tc.height)
			if tc.pending {
				tr.track(&pendingTx{hash: "a"}, t0)
			}
			h, ok := tr.next(tc.top, tc.agreed)
			if h != tc.wantH || ok != tc.wantOK || tr.height != tc.wantHeightAfterall {
				t.Errorf("next(%d, %d) at %d = %d, %v (height %d), want %d, %v (height %d)", tc.top, tc.agreed, tc.height, h, ok, tr.height, tc.wantH, tc.wantOK, tc.wantHeightAfterall)
			}
		})
	}
}

// testBlock is a confirmed block at height 7 whose tx 0 has result res.
func testBlock(res *abci.ExecTxResult) *chain.Block {
	blk := cmttypes.MakeBlock(7, cmttypes.Txs{[]byte("bundle")}, &cmttypes.Commit{}, nil)
	return chain.NewBlock(blk, []*abci.ExecTxResult{res})
}

func outcome(t *testing.T, brs ...*byzlogv1.BatchResult) []byte {
	t.Helper()
	b, err := proto.Marshal(&byzlogv1.TxOutcome{Batches: brs})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func testRequests(n int) []*request {
	var reqs []*request
	for i := range n {
		reqs = append(reqs, &request{body: &byzlogv1.BatchBody{Topic: "t", Sequence: uint64(i)}})
	}
	return reqs
}

// stepKind names a step: "receipt@offset", "dup@offset", "claim", or the error's code.
func stepKind(s step) string {
	switch {
	case s.claim != nil:
		return "claim"
	case s.err != nil:
		return status.Code(s.err).String()
	case s.receipt.Duplicate:
		return fmt.Sprint("dup@", s.receipt.BaseOffset)
	}
	return fmt.Sprint("receipt@", s.receipt.BaseOffset)
}

func summary(s settlement) (steps []string, again int) {
	for _, st := range s.steps {
		steps = append(steps, stepKind(st))
	}
	return steps, len(s.again)
}

func TestCommittedSettlement(t *testing.T) {
	ok := &byzlogv1.BatchResult{Topic: "t", BaseOffset: 3, RecordCount: 1}
	for _, tc := range []struct {
		name      string
		res       func(t *testing.T) *abci.ExecTxResult
		batches   int
		wantSteps []string
		wantAgain int
	}{
		{"committed: a receipt each", func(t *testing.T) *abci.ExecTxResult {
			return &abci.ExecTxResult{Data: outcome(t, ok, &byzlogv1.BatchResult{Topic: "t", BaseOffset: 4, RecordCount: 1})}
		}, 2, []string{"receipt@3", "receipt@4"}, 0},
		{"outcome of another bundle: internal", func(t *testing.T) *abci.ExecTxResult {
			return &abci.ExecTxResult{Data: outcome(t, ok)}
		}, 2, []string{"Internal", "Internal"}, 0},
		{"rejected in the block: split", func(t *testing.T) *abci.ExecTxResult {
			return &abci.ExecTxResult{Code: uint32(wire.CodeSequenceGap), Log: "gap", Data: outcome(t,
				&byzlogv1.BatchResult{Duplicate: true, Topic: "t", BaseOffset: 1, RecordCount: 1},
				&byzlogv1.BatchResult{Code: uint32(wire.CodeSequenceGap), Log: "gap"},
				&byzlogv1.BatchResult{})}
		}, 3, []string{"dup@1", "FailedPrecondition"}, 1},
		{"rejected, no outcome: every batch fails", func(t *testing.T) *abci.ExecTxResult {
			return &abci.ExecTxResult{Code: uint32(wire.CodeBadSignature), Log: "bad"}
		}, 2, []string{"InvalidArgument", "InvalidArgument"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &pendingTx{reqs: testRequests(tc.batches)}
			s := committedSettlement(p, txAt{testBlock(tc.res(t)), 0})
			steps, again := summary(s)
			if !slices.Equal(steps, tc.wantSteps) || again != tc.wantAgain {
				t.Errorf("committedSettlement = %v, %d again; want %v, %d again", steps, again, tc.wantSteps, tc.wantAgain)
			}
			for _, st := range s.steps {
				if st.receipt != nil && (st.receipt.Height != 7 || st.receipt.Proof == nil || st.receipt.Ack != byzlogv1.Ack_ACK_COMMIT) {
					t.Errorf("receipt %v: want ack commit at height 7 with a proof", st.receipt)
				}
			}
		})
	}
}

func TestCommittedSettlementOtherTx(t *testing.T) {
	res := &abci.ExecTxResult{Code: uint32(wire.CodeNotAdmin), Log: "no"}
	p := &pendingTx{committed: func(Committed, *abci.ExecTxResult) {}}
	s := committedSettlement(p, txAt{testBlock(res), 0})
	if s.committed == nil || s.committed.Height != 7 || s.committed.Proof == nil || s.result != res || len(s.steps) != 0 {
		t.Errorf("committedSettlement(admin tx) = %+v; want its place at height 7 with a proof, and its result", s)
	}
}

// TestRejectedSettlement: a CheckTx refusal is one node's word, so its
// duplicates are claims to confirm; the rest are answered or sent again.
func TestRejectedSettlement(t *testing.T) {
	for _, tc := range []struct {
		name      string
		data      func(t *testing.T) []byte
		batches   int
		wantSteps []string
		wantAgain int
	}{
		{"duplicate, gap, innocent", func(t *testing.T) []byte {
			return outcome(t, &byzlogv1.BatchResult{Duplicate: true, Height: 3}, &byzlogv1.BatchResult{Code: uint32(wire.CodeSequenceGap)}, &byzlogv1.BatchResult{})
		}, 3, []string{"claim", "FailedPrecondition"}, 1},
		{"all innocent: all again", func(t *testing.T) []byte { return outcome(t, &byzlogv1.BatchResult{}, &byzlogv1.BatchResult{}) }, 2, nil, 2},
		{"outcome does not match", func(t *testing.T) []byte { return nil }, 2, []string{"InvalidArgument", "InvalidArgument"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &pendingTx{reqs: testRequests(tc.batches)}
			s := rejectedSettlement(p, wire.CodeBadSignature, "refused", tc.data(t), nil)
			steps, again := summary(s)
			if !slices.Equal(steps, tc.wantSteps) || again != tc.wantAgain {
				t.Errorf("rejectedSettlement = %v, %d again; want %v, %d again", steps, again, tc.wantSteps, tc.wantAgain)
			}
		})
	}
	s := rejectedSettlement(&pendingTx{failed: func(error) {}}, wire.CodeNotAdmin, "no", nil, nil)
	if status.Code(s.failed) != codes.PermissionDenied {
		t.Errorf("rejectedSettlement(admin tx).failed = %v, want PERMISSION_DENIED", s.failed)
	}
}

func TestConflictSettlement(t *testing.T) {
	reqs := testRequests(3)
	hits := map[*request]conflictHit{
		reqs[0]: {result: &byzlogv1.BatchResult{Topic: "t", BaseOffset: 5, RecordCount: 1}, same: true},
		reqs[1]: {result: &byzlogv1.BatchResult{Topic: "t", BaseOffset: 6, RecordCount: 1}},
	}
	s := conflictSettlement(&pendingTx{reqs: reqs}, testBlock(&abci.ExecTxResult{}), hits)
	steps, again := summary(s)
	if want := []string{"dup@5", "FailedPrecondition"}; !slices.Equal(steps, want) || again != 1 || s.again[0] != reqs[2] {
		t.Errorf("conflictSettlement = %v, %d again; want %v and the third batch again", steps, again, want)
	}
}

func TestFailedSettlement(t *testing.T) {
	err := status.Error(codes.Unavailable, "down")
	s := failedSettlement(&pendingTx{reqs: testRequests(2)}, err)
	if steps, again := summary(s); !slices.Equal(steps, []string{"Unavailable", "Unavailable"}) || again != 0 || s.failed != err {
		t.Errorf("failedSettlement = %v, %d again, failed %v; want every batch UNAVAILABLE", steps, again, s.failed)
	}
}

// TestCarryOutWhileStopping: the batches a settlement would send again
// (the rest of a rejected or conflicting bundle) are answered UNAVAILABLE
// once the gateway is stopping, whichever settlement made them, and the
// slot is given back. They used to wait unanswered after a rejection.
func TestCarryOutWhileStopping(t *testing.T) {
	g := &Gateway{usage: map[string]*usage{}, seqs: map[seqKey]*seqState{}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, kind := range []string{"rejected", "conflict"} {
		reqs := testRequests(2)
		for _, r := range reqs {
			r.g, r.done = g, make(chan answer, 1)
		}
		released := 0
		p := &pendingTx{reqs: reqs, release: func() { released++ }}
		var s settlement
		if kind == "rejected" {
			s = rejectedSettlement(p, wire.CodeSequenceGap, "refused", outcome(t, &byzlogv1.BatchResult{}, &byzlogv1.BatchResult{}), nil)
		} else {
			s = conflictSettlement(p, testBlock(&abci.ExecTxResult{}), map[*request]conflictHit{})
		}
		if len(s.again) != 2 {
			t.Fatalf("%s: %d batches again; want 2", kind, len(s.again))
		}
		g.carryOut(ctx, s)
		for i, r := range reqs {
			select {
			case a := <-r.done:
				if status.Code(a.err) != codes.Unavailable {
					t.Errorf("%s: batch %d answered %v; want UNAVAILABLE", kind, i, a.err)
				}
			default:
				t.Errorf("%s: batch %d left unanswered while the gateway stops", kind, i)
			}
		}
		if released != 1 {
			t.Errorf("%s: slot released %d times; want once", kind, released)
		}
	}
}
