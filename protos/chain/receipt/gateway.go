package receipt

import (
	"context"
	"fmt"
	"time"

	"github.com/cometbft/cometbft/light/provider"
	cmtproto "github.com/cometbft/cometbft/proto/tendermint/types"
	cmttypes "github.com/cometbft/cometbft/types"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

// gatewayProvider is a light block source that asks a gateway, which
// relays from its nodes. A block not yet committed is waited for (up to
// wait): a receipt's proof needs the header after its block.
type gatewayProvider struct {
	gw      byzlogv1.GatewayClient
	chainID string
	name    string
	wait    time.Duration
}

var _ provider.Provider = (*gatewayProvider)(nil)

func (p *gatewayProvider) ChainID() string { return p.chainID }
func (p *gatewayProvider) String() string  { return p.name }

// ReportEvidence is not relayed: a gateway has nowhere trusted to send it.
func (p *gatewayProvider) ReportEvidence(context.Context, cmttypes.Evidence) error { return nil }

func (p *gatewayProvider) LightBlock(ctx context.Context, height int64) (*cmttypes.LightBlock, error) {
	deadline := time.Now().Add(p.wait)
	backoff := 20 * time.Millisecond
	for {
		resp, err := p.gw.GetLightBlock(ctx, &byzlogv1.LightBlockRequest{Height: height})
		if err == nil {
			return p.decode(resp.GetLightBlock(), height)
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		switch status.Code(err) {
		case codes.NotFound:
			return nil, provider.ErrLightBlockNotFound // pruned
		case codes.OutOfRange:
		case codes.Unimplemented:
			return nil, provider.ErrBadLightBlock{Reason: fmt.Errorf("%s does not relay light blocks (GetLightBlock): a byzlog-gateway too old to verify receipts through; upgrade it, or trust it (TrustGateway)", p.name)}
		default:
			return nil, provider.ErrNoResponse
		}
		if time.Now().After(deadline) {
			return nil, provider.ErrHeightTooHigh
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}

func (p *gatewayProvider) decode(b []byte, height int64) (*cmttypes.LightBlock, error) {
	var pb cmtproto.LightBlock
	if err := pb.Unmarshal(b); err != nil {
		return nil, provider.ErrBadLightBlock{Reason: fmt.Errorf("does not decode: %w", err)}
	}
	lb, err := cmttypes.LightBlockFromProto(&pb)
	if err != nil {
		return nil, provider.ErrBadLightBlock{Reason: err}
	}
	if err := lb.ValidateBasic(p.chainID); err != nil {
		return nil, provider.ErrBadLightBlock{Reason: err}
	}
	if height != 0 && lb.Height != height {
		return nil, provider.ErrBadLightBlock{Reason: fmt.Errorf("asked for height %d, got %d", height, lb.Height)}
	}
	return lb, nil
}
