package gateway

import (
	"context"
	"errors"
	"fmt"

	"github.com/cometbft/cometbft/light/provider"
	lighthttp "github.com/cometbft/cometbft/light/provider/http"
	cmttypes "github.com/cometbft/cometbft/types"

	"github.com/byzlog/byzlog/gateway/nodes"
)

// LightBlock relays the signed header and validator set at height (0: the
// height f+1 nodes have reached) from the first node that serves one. It
// checks nothing but the form: the client's light client checks the
// signatures, so a node or gateway that lies here is caught there.
func (g *Gateway) LightBlock(ctx context.Context, height int64) (*cmttypes.LightBlock, error) {
	if height < 0 {
		return nil, errorf(ErrInvalid, "height %d: want 0 (the latest) or a height", height)
	}
	if height == 0 {
		height = g.pool.Height()
	}
	first := g.pool.Pick()
	var errs []error
	tooHigh := 0
	for _, n := range append([]*nodes.Node{first}, g.pool.Others(first)...) {
		lb, err := lighthttp.NewWithClient(g.pool.ChainID(), n.Client).LightBlock(ctx, height)
		if err == nil {
			return lb, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, provider.ErrHeightTooHigh) || errors.Is(err, provider.ErrLightBlockNotFound) {
			tooHigh++
		}
		errs = append(errs, fmt.Errorf("%s: %w", n.Addr, err))
	}
	if tooHigh == len(errs) {
		return nil, errorf(ErrOutOfRange, "no node has a signed header at height %d yet", height)
	}
	return nil, errorf(ErrUnavailable, "no node served the light block at height %d: %v", height, errors.Join(errs...))
}
