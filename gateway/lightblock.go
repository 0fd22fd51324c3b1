package gateway

import (
	"context"
	"errors"
	"fmt"

	"github.com/cometbft/cometbft/light/provider"
	lighthttp "github.com/cometbft/cometbft/light/provider/http"
	cmttypes "github.com/cometbft/cometbft/types"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/byzlog/byzlog/gateway/nodes"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

// LightBlock relays the signed header and validator set at height (0: the
// height f+1 nodes have reached) from the first node that serves one. It
// checks nothing but the form: the client's light client checks the
// signatures, so a node or gateway that lies here is caught there.
func (g *Gateway) LightBlock(ctx context.Context, height int64) (*cmttypes.LightBlock, error) {
	if height < 0 {
		return nil, status.Errorf(codes.InvalidArgument, "height %d: want 0 (the latest) or a height", height)
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
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		if errors.Is(err, provider.ErrHeightTooHigh) || errors.Is(err, provider.ErrLightBlockNotFound) {
			tooHigh++
		}
		errs = append(errs, fmt.Errorf("%s: %w", n.Addr, err))
	}
	if tooHigh == len(errs) {
		return nil, status.Errorf(codes.OutOfRange, "no node has a signed header at height %d yet", height)
	}
	return nil, status.Errorf(codes.Unavailable, "no node served the light block at height %d: %v", height, errors.Join(errs...))
}

// GetLightBlock relays a light block (see Gateway.LightBlock).
func (s *Service) GetLightBlock(ctx context.Context, req *byzlogv1.LightBlockRequest) (*byzlogv1.LightBlockResponse, error) {
	lb, err := s.g.LightBlock(ctx, req.GetHeight())
	if err != nil {
		return nil, err
	}
	pb, err := lb.ToProto()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "encode light block %d: %v", lb.Height, err)
	}
	b, err := pb.Marshal()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "encode light block %d: %v", lb.Height, err)
	}
	return &byzlogv1.LightBlockResponse{LightBlock: b}, nil
}
