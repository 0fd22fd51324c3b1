package pipeline

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/gateway/nodes"
	"github.com/byzlog/byzlog/protos/wire"
)

// Query routing: a query is answered as f+1 nodes whose apps have
// committed a given height answer it, byte for byte (a rejection too): one
// node's word could make a consumer group resume at offsets of its
// choosing, or a topic look missing. The height is the last block whose
// results the gateway matched, so a client reads its own writes.

// queryRouter sends queries to the nodes and picks the agreed answer.
type queryRouter struct {
	pool          *nodes.Pool
	waits         Waits // QueryRounds, QueryRetry and CatchUp*
	disagreements prometheus.Counter
}

// Query runs an ABCI query on the nodes (queryRouter). The nodes must
// have committed every block this gateway has acknowledged from (read
// your writes).
func (g *Gateway) Query(ctx context.Context, path string, req, resp proto.Message) error {
	_, err := g.queries.at(ctx, path, req, resp, g.seenHeight())
	return err
}

// seenHeight is the last block whose results the gateway matched: every
// receipt it gave is at or below it.
func (g *Gateway) seenHeight() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.txs.height
}

// queryAnswer is one node's answer to a query.
type queryAnswer struct {
	code   uint32
	log    string
	value  []byte
	height int64
}

// at answers the query as f+1 nodes whose apps have committed minHeight
// answer it. Nodes a block apart may differ on a value that just changed,
// so the nodes are asked again, up to QueryRounds times, until f+1 agree. It
// returns the lowest height among the agreeing answers.
func (q *queryRouter) at(ctx context.Context, path string, req, resp proto.Message, minHeight int64) (int64, error) {
	var data []byte
	if req != nil {
		var err error
		if data, err = proto.Marshal(req); err != nil {
			return 0, errorf(ErrInvalid, "encode query: %v", err)
		}
	}
	need := quorum(q.pool.Len())
	var lastErr error
	for round := 0; round < q.waits.QueryRounds; round++ {
		if round > 0 {
			select {
			case <-time.After(q.waits.QueryRetry):
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
		answers, errs := q.ask(ctx, path, data, minHeight)
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		win, low, split, err := agree(answers, errs, need)
		if win == nil {
			if err != nil {
				lastErr = err
			}
			continue
		}
		if split {
			q.disagreements.Inc()
		}
		if win.code != 0 {
			return 0, rejected(wire.Code(win.code), win.log)
		}
		if err := proto.Unmarshal(win.value, resp); err != nil {
			return 0, errorf(ErrInternal, "%d nodes answered %s with bytes that do not decode: %v", need, path, err)
		}
		return low, nil
	}
	return 0, errorf(ErrUnavailable, "%s: fewer than %d CometBFT nodes that committed height %d gave the same answer (last: %v); retry", path, need, minHeight, lastErr)
}

// ask sends the query to every node at once: answers[i] is node i's
// answer if its app has committed minHeight, else errs[i] says why not.
// A node whose call fails is marked down.
func (q *queryRouter) ask(ctx context.Context, path string, data []byte, minHeight int64) ([]*queryAnswer, []error) {
	all := q.pool.All()
	answers := make([]*queryAnswer, len(all))
	errs := make([]error, len(all))
	var wg sync.WaitGroup
	for i, n := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := n.Client.ABCIQuery(ctx, path, data)
			switch {
			case err != nil:
				if ctx.Err() == nil {
					q.pool.MarkDown(n, err)
				}
				errs[i] = err
			case res.Response.Height < minHeight:
				errs[i] = fmt.Errorf("node %s has not committed height %d", n.Addr, minHeight)
			default:
				answers[i] = &queryAnswer{code: res.Response.Code, log: res.Response.Log, value: res.Response.Value, height: res.Response.Height}
			}
		}()
	}
	wg.Wait()
	return answers, errs
}

// agree picks, in node order, the first answer that need nodes gave byte
// for byte (code and value), with the lowest height among those that gave
// it; split says other answers were seen before it. With none, win is nil
// and err says why: the last node's error, or that answers differ (nil
// when there was no node at all).
func agree(answers []*queryAnswer, errs []error, need int) (win *queryAnswer, low int64, split bool, err error) {
	votes := map[string][]*queryAnswer{}
	for i, a := range answers {
		if a == nil {
			err = errs[i]
			continue
		}
		k := fmt.Sprintf("%d/%x", a.code, a.value)
		votes[k] = append(votes[k], a)
		if len(votes[k]) < need {
			continue
		}
		low = a.height
		for _, b := range votes[k] {
			low = min(low, b.height)
		}
		return a, low, len(votes) > 1, nil
	}
	if len(votes) > 0 {
		err = fmt.Errorf("%d different answers, fewer than %d nodes agree on one", len(votes), need)
	}
	return nil, 0, false, err
}

// caughtUp waits up to Waits.CatchUpTimeout for node n's app to have committed height h. It
// asks the app, not CometBFT's /status: CometBFT stores a block before the
// app applies and commits it, so its latest height can be one block ahead
// of the state that queries and CheckTx see.
func (q *queryRouter) caughtUp(ctx context.Context, n *nodes.Node, h int64) bool {
	deadline := time.Now().Add(q.waits.CatchUpTimeout)
	for {
		cctx, cancel := context.WithTimeout(ctx, q.waits.CatchUpCallTimeout)
		res, err := n.Client.ABCIQuery(cctx, wire.PathState, nil)
		cancel()
		if err == nil && res.Response.Height >= h {
			return true
		}
		if err != nil || time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(q.waits.CatchUpPoll)
	}
}
