package nodes

import (
	"context"
	"fmt"
	"time"

	ctypes "github.com/cometbft/cometbft/rpc/core/types"
)

// Outcome is how a Broadcast ended.
type Outcome int

const (
	// Accepted: Node's CheckTx passed (Result.Code 0).
	Accepted Outcome = iota
	// Refused: Node's CheckTx refused it (Result), and the refusal
	// stands: Quorum nodes gave the same code, or Policy.Stands says one
	// is enough.
	Refused
	// Held: Node already holds the same transaction (Classify).
	Held
	// Full: Node's mempool is full.
	Full
	// Stopped: the context ended.
	Stopped
	// Failed: no node took the transaction, and no refusal stands; Err
	// is the last error or refusal.
	Failed
)

// Policy is how Broadcast judges the nodes' answers.
type Policy struct {
	// Timeout bounds each call to a node.
	Timeout time.Duration
	// Quorum is how many nodes must refuse with the same code for a
	// refusal to stand: one node's refusal is its word, and a liar could
	// refuse every transaction.
	Quorum int
	// Stands reports whether a refusal with code stands from one node
	// (the caller settles it some other way). Nil: none does.
	Stands func(code uint32) bool
	// Behind reports whether a refusal with code may only mean the node is
	// behind; then, once per Broadcast, CatchUp waits for the node, and if
	// it reports true the node is asked again. Either may be nil.
	Behind  func(code uint32) bool
	CatchUp func(ctx context.Context, n *Node) bool
	// CodeName names a code in errors (nil: its number).
	CodeName func(code uint32) string
}

// Submission is what Broadcast did.
type Submission struct {
	Outcome Outcome
	Node    *Node                     // the node whose answer ended it (not for Stopped, Failed)
	Result  *ctypes.ResultBroadcastTx // Accepted, Refused: Node's CheckTx answer
	Err     error                     // Failed: the last error or refusal
}

// Broadcast submits tx to the nodes in turn, a healthy one first (Pick),
// then the others (Others), until one's CheckTx answers it in a way that
// settles it (Outcome). A node whose call fails is marked down.
func (p *Pool) Broadcast(ctx context.Context, tx []byte, pol Policy) Submission {
	var lastErr error
	waited := false
	refusals := map[uint32]int{}
	first := p.Pick()
	for _, n := range append([]*Node{first}, p.Others(first)...) {
		res, err := n.broadcast(ctx, tx, pol.Timeout)
		if err == nil && res.Code != 0 && !waited && pol.Behind != nil && pol.Behind(res.Code) {
			waited = true
			if pol.CatchUp != nil && pol.CatchUp(ctx, n) {
				res, err = n.broadcast(ctx, tx, pol.Timeout)
			}
		}
		if err != nil {
			switch Classify(err) {
			case AlreadyHeld:
				return Submission{Outcome: Held, Node: n}
			case MempoolFull:
				return Submission{Outcome: Full, Node: n}
			}
			if ctx.Err() != nil {
				return Submission{Outcome: Stopped}
			}
			p.MarkDown(n, err)
			lastErr = err
			continue
		}
		if res.Code == 0 {
			return Submission{Outcome: Accepted, Node: n, Result: res}
		}
		refusals[res.Code]++
		if (pol.Stands != nil && pol.Stands(res.Code)) || refusals[res.Code] >= pol.Quorum {
			return Submission{Outcome: Refused, Node: n, Result: res}
		}
		lastErr = fmt.Errorf("node %s refused it (%s: %s), which fewer than %d nodes confirm", n.Addr, pol.name(res.Code), res.Log, pol.Quorum)
	}
	return Submission{Outcome: Failed, Err: lastErr}
}

func (pol Policy) name(code uint32) string {
	if pol.CodeName != nil {
		return pol.CodeName(code)
	}
	return fmt.Sprint(code)
}

// broadcast is one BroadcastTxSync bounded by timeout.
func (n *Node) broadcast(ctx context.Context, tx []byte, timeout time.Duration) (*ctypes.ResultBroadcastTx, error) {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return n.BroadcastTxSync(cctx, tx)
}
