package client

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// scriptedGateway answers Produce from a script, one answer per call, and
// reports the chain's next sequence as nextSeq.
type scriptedGateway struct {
	byzlogv1.GatewayClient // nil: any other call panics
	name                   string
	mu                     *sync.Mutex
	calls                  *[]string // gateway names in call order
	answers                *[]answer
	nextSeq                uint64
}

type answer struct {
	rc  *byzlogv1.Receipt
	err error
}

func (g scriptedGateway) Produce(_ context.Context, req *byzlogv1.ProduceRequest, _ ...grpc.CallOption) (*byzlogv1.ProduceResponse, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	*g.calls = append(*g.calls, g.name)
	if len(*g.answers) == 0 {
		return nil, status.Error(codes.Unavailable, "script ran out")
	}
	a := (*g.answers)[0]
	*g.answers = (*g.answers)[1:]
	return &byzlogv1.ProduceResponse{Receipt: a.rc}, a.err
}

func (g scriptedGateway) GetProducerState(context.Context, *byzlogv1.ProducerRequest, ...grpc.CallOption) (*byzlogv1.ProducerState, error) {
	return &byzlogv1.ProducerState{NextSequence: g.nextSeq}, nil
}

// TestSendBatch drives one batch of two records through scripted gateway
// answers: what the records resolve to, which gateways were tried in
// which order, and the sequence the partition moves to.
func TestSendBatch(t *testing.T) {
	committed := &byzlogv1.Receipt{Topic: "t", Partition: 0, BaseOffset: 40, Height: 9, Ack: byzlogv1.Ack_ACK_COMMIT}
	unavailable := status.Error(codes.Unavailable, "node down")
	full := status.Error(codes.ResourceExhausted, "queue full")
	refused := status.Error(codes.InvalidArgument, "sequence_gap")
	for _, tc := range []struct {
		name    string
		answers []answer
		nextSeq uint64 // the chain's, for a rejection after an uncertain attempt
		wantErr error  // nil: the records got committed's offsets
		wantGWs []string
		wantSeq uint64 // the partition's sequence after the batch (it was 5)
	}{
		{name: "first gateway commits", answers: []answer{{rc: committed}},
			wantGWs: []string{"a"}, wantSeq: 6},
		{name: "fails over to the next gateway", answers: []answer{{err: unavailable}, {rc: committed}},
			wantGWs: []string{"a", "b"}, wantSeq: 6},
		{name: "a refusal before any uncertain attempt is final and keeps the sequence", answers: []answer{{err: refused}},
			wantErr: refused, wantGWs: []string{"a"}, wantSeq: 5},
		{name: "a queue-full refusal was not sent, so a later refusal is still final", answers: []answer{{err: full}, {err: refused}},
			wantErr: refused, wantGWs: []string{"a", "b"}, wantSeq: 5},
		{name: "after an attempt that may have landed, a refusal is retried until a duplicate answers", answers: []answer{{err: unavailable}, {err: refused}, {rc: committed}},
			wantGWs: []string{"a", "b", "a"}, wantSeq: 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var calls []string
			answers := append([]answer(nil), tc.answers...)
			gw := func(name string) byzlogv1.GatewayClient {
				return scriptedGateway{name: name, mu: &mu, calls: &calls, answers: &answers, nextSeq: tc.nextSeq}
			}
			p := testProducer(t, gw("a"), gw("b"))
			pt := &partition{topic: "t", num: 0, seq: 5, known: true}
			b := batch{recs: []*byzlogv1.Record{{Value: []byte("x")}, {Value: []byte("y")}}, futs: []*Future{{done: make(chan struct{})}, {done: make(chan struct{})}}}
			p.pending.Add(len(b.futs))
			p.sendBatch(pt, b)
			for i, f := range b.futs {
				rc, err := f.Wait(context.Background())
				switch {
				case tc.wantErr != nil && !errors.Is(err, tc.wantErr) && status.Code(err) != status.Code(tc.wantErr):
					t.Errorf("record %d: err %v; want %v", i, err, tc.wantErr)
				case tc.wantErr == nil && (err != nil || rc.Offset != 40+uint64(i) || rc.Height != 9):
					t.Errorf("record %d: %+v, %v; want offset %d at height 9", i, rc, err, 40+i)
				}
			}
			if !slices.Equal(calls, tc.wantGWs) {
				t.Errorf("gateways tried %v; want %v", calls, tc.wantGWs)
			}
			if pt.seq != tc.wantSeq {
				t.Errorf("partition sequence %d; want %d", pt.seq, tc.wantSeq)
			}
			p.pending.Wait() // every record released
		})
	}
}

// TestRejectedAfterUncertainAsksTheChain: once an attempt may have been
// committed, a refusal fails the batch only after the request timeout, and
// only if the chain shows the sequence still free.
func TestRejectedAfterUncertainAsksTheChain(t *testing.T) {
	refused := status.Error(codes.InvalidArgument, "sequence_gap")
	for _, tc := range []struct {
		name    string
		since   time.Duration // how long ago the uncertain attempt was
		nextSeq uint64
		want    bool
	}{
		{"within the request timeout: retry", time.Millisecond, 5, false},
		{"past it, sequence still free: final", time.Hour, 5, true},
		{"past it, sequence taken (it landed): retry for the duplicate", time.Hour, 6, false},
	} {
		var mu sync.Mutex
		var calls []string
		var answers []answer
		p := testProducer(t, scriptedGateway{name: "a", mu: &mu, calls: &calls, answers: &answers, nextSeq: tc.nextSeq})
		since := time.Now().Add(-tc.since)
		if got := p.rejected(&partition{topic: "t", seq: 5}, refused, &since); got != tc.want {
			t.Errorf("%s: rejected = %v; want %v", tc.name, got, tc.want)
		}
	}
}

func testProducer(t *testing.T, gws ...byzlogv1.GatewayClient) *Producer {
	t.Helper()
	_, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	o := defaults()
	o.backoff, o.maxBackoff, o.requestTimeout = time.Millisecond, time.Millisecond, time.Second
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return &Producer{o: o, gws: gws, signer: wire.NewSigner(key, "test-chain"), chainID: "test-chain", ctx: ctx, cancel: cancel}
}

// TestProduceFunc: a record produced with a callback has it called once,
// with the record's own receipt or the batch's error, in the batch's
// order; a record refused at once has it called before ProduceFunc
// returns.
func TestProduceFunc(t *testing.T) {
	committed := &byzlogv1.Receipt{Topic: "t", Partition: 0, BaseOffset: 40, Height: 9, Ack: byzlogv1.Ack_ACK_COMMIT}
	refused := status.Error(codes.InvalidArgument, "sequence_gap")
	for _, tc := range []struct {
		name    string
		answer  answer
		wantErr error
	}{
		{"committed", answer{rc: committed}, nil},
		{"refused", answer{err: refused}, refused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var calls []string
			answers := []answer{tc.answer}
			p := testProducer(t, scriptedGateway{name: "a", mu: &mu, calls: &calls, answers: &answers})
			type outcome struct {
				i   int
				rc  Receipt
				err error
			}
			var got []outcome
			b := batch{recs: []*byzlogv1.Record{{Value: []byte("x")}, {Value: []byte("y")}, {Value: []byte("z")}}}
			for i := range b.recs {
				b.futs = append(b.futs, &Future{then: func(rc Receipt, err error) { got = append(got, outcome{i, rc, err}) }})
			}
			p.pending.Add(len(b.futs))
			p.sendBatch(&partition{topic: "t", num: 0, seq: 5, known: true}, b)
			p.pending.Wait()
			if len(got) != len(b.recs) {
				t.Fatalf("%d callbacks for %d records: %+v", len(got), len(b.recs), got)
			}
			for n, o := range got {
				switch {
				case o.i != n:
					t.Errorf("callback %d was record %d's: out of order", n, o.i)
				case tc.wantErr != nil && status.Code(o.err) != status.Code(tc.wantErr):
					t.Errorf("record %d: err %v; want %v", o.i, o.err, tc.wantErr)
				case tc.wantErr == nil && (o.err != nil || o.rc.Offset != 40+uint64(o.i) || o.rc.Height != 9):
					t.Errorf("record %d: %+v, %v; want offset %d at height 9", o.i, o.rc, o.err, 40+o.i)
				}
			}
		})
	}
	p := testProducer(t)
	called := false
	p.ProduceFunc(context.Background(), &Record{Value: []byte("no topic")}, func(_ Receipt, err error) {
		called = status.Code(err) == codes.InvalidArgument
	})
	if !called {
		t.Error("a record without a topic did not have its callback called with INVALID_ARGUMENT before ProduceFunc returned")
	}
}

// refusingGateway answers GetProducerState with err.
type refusingGateway struct {
	byzlogv1.GatewayClient
	err error
}

func (g refusingGateway) GetProducerState(context.Context, *byzlogv1.ProducerRequest, ...grpc.CallOption) (*byzlogv1.ProducerState, error) {
	return nil, g.err
}

// TestNextSequencePassesRefusals: a gateway that refuses the sequence
// read is passed over for the next, and only when every gateway has
// refused in a row is the read an error (it was the first refusal).
func TestNextSequencePassesRefusals(t *testing.T) {
	refused := status.Error(codes.FailedPrecondition, "the chain runs rules version 9")
	var mu sync.Mutex
	var calls []string
	var answers []answer
	p := testProducer(t, refusingGateway{err: refused}, scriptedGateway{name: "b", mu: &mu, calls: &calls, answers: &answers, nextSeq: 7})
	if next, err := p.nextSequence(&partition{topic: "t"}, time.Time{}); err != nil || next != 7 {
		t.Errorf("one refusing gateway of two: %d, %v; want 7 from the other", next, err)
	}
	q := testProducer(t, refusingGateway{err: refused}, refusingGateway{err: refused})
	if _, err := q.nextSequence(&partition{topic: "t"}, time.Time{}); status.Code(errors.Unwrap(err)) != codes.FailedPrecondition && !strings.Contains(fmt.Sprint(err), "every gateway refused") {
		t.Errorf("every gateway refusing: %v; want the refusal", err)
	}
}
