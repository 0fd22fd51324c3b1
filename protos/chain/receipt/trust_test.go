package receipt

import (
	"context"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	cmttypes "github.com/cometbft/cometbft/types"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

// chainGateway relays a chain's light blocks as a gateway does, and says
// the chain's height and id. Only the calls a Verifier and Expiry make are
// served.
type chainGateway struct {
	byzlogv1.GatewayClient
	chainID string
	blocks  []*cmttypes.LightBlock // block h at index h-1
	serve   map[int64]*cmttypes.LightBlock
	height  int64 // the height Health says
}

func (g *chainGateway) GetLightBlock(_ context.Context, req *byzlogv1.LightBlockRequest, _ ...grpc.CallOption) (*byzlogv1.LightBlockResponse, error) {
	lb, ok := g.serve[req.Height]
	if !ok && (req.Height < 1 || req.Height > int64(len(g.blocks))) {
		return nil, status.Errorf(codes.OutOfRange, "height %d is not committed yet", req.Height)
	}
	if !ok {
		lb = g.blocks[req.Height-1]
	}
	pb, err := lb.ToProto()
	if err != nil {
		return nil, err
	}
	b, err := pb.Marshal()
	return &byzlogv1.LightBlockResponse{LightBlock: b}, err
}

func (g *chainGateway) Health(context.Context, *byzlogv1.HealthRequest, ...grpc.CallOption) (*byzlogv1.HealthResponse, error) {
	return &byzlogv1.HealthResponse{ChainId: g.chainID, Height: g.height}, nil
}

// TestVerifierChecksReceipts: a receipt checks against the header above
// its block, verified through the gateway from the root of trust; one
// whose proof, result or header is not the chain's is unverified.
func TestVerifierChecksReceipts(t *testing.T) {
	txs, r, _, _ := block(5)
	blocks := makeChain(t, testChainID, repeat(validators(0, 1, 2, 3), 10), func(h *cmttypes.Header) {
		switch h.Height {
		case 7:
			h.DataHash = txs.Hash()
		case 8:
			h.LastResultsHash = r.Hash()
		}
	})
	trust, err := TrustHeader(testChainID, 1, hex.EncodeToString(blocks[0].Hash()))
	if err != nil {
		t.Fatal(err)
	}
	verifier := func(gw *chainGateway) *Verifier {
		v, err := NewVerifier(trust, []byzlogv1.GatewayClient{gw}, 50*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		v.headers.(*headerVerifier).now = func() time.Time { return blocks[9].Time }
		return v
	}
	honest := verifier(&chainGateway{chainID: testChainID, blocks: blocks})
	liar := verifier(&chainGateway{chainID: testChainID, blocks: blocks, serve: map[int64]*cmttypes.LightBlock{8: forged(blocks[7])}})
	proof := func(i int) *byzlogv1.ResultProof { return r.Prove(i, 0, true) }
	for _, tc := range []struct {
		name    string
		v       *Verifier
		check   func(ctx context.Context, v *Verifier) error
		wantErr string // "": verified
	}{
		{"a result", honest, func(ctx context.Context, v *Verifier) error {
			data, code, err := v.Result(ctx, 7, 2, proof(2))
			if err == nil && (string(data) != "data 2" || code != 0) {
				t.Errorf("Result = %q, code %d; want data 2, code 0", data, code)
			}
			return err
		}, ""},
		{"a transaction", honest, func(ctx context.Context, v *Verifier) error { return v.Tx(ctx, txs[2], 7, 2, proof(2)) }, ""},
		{"a transaction the chain refused", honest, func(ctx context.Context, v *Verifier) error { return v.Tx(ctx, txs[1], 7, 1, proof(1)) }, "the chain refused the transaction (code 1)"},
		{"another transaction's proof", honest, func(ctx context.Context, v *Verifier) error { return v.Tx(ctx, txs[2], 7, 2, proof(3)) }, "the proof is of tx 3"},
		{"another transaction", honest, func(ctx context.Context, v *Verifier) error { return v.Tx(ctx, txs[3], 7, 2, proof(2)) }, "is not this transaction"},
		{"no height", honest, func(ctx context.Context, v *Verifier) error { _, _, err := v.Result(ctx, 0, 2, proof(2)); return err }, "height 0"},
		{"a header not committed yet", honest, func(ctx context.Context, v *Verifier) error { _, _, err := v.Result(ctx, 10, 0, proof(0)); return err }, "header 11"},
		{"a forged header", liar, func(ctx context.Context, v *Verifier) error { _, _, err := v.Result(ctx, 7, 2, proof(2)); return err }, "wrong signature"},
		{"a used nonce said pruned at the root", honest, func(ctx context.Context, v *Verifier) error {
			return v.Nonce(ctx, []byte("key"), &byzlogv1.NonceResponse{NextNonce: 3, UsedHeight: 1, UsedPruned: true})
		}, "not below the root of trust at 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			err := tc.check(ctx, tc.v)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("%s: %v, want verified", tc.name, err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, ErrUnverified)):
				t.Fatalf("%s: %v, want an ErrUnverified with %q", tc.name, err, tc.wantErr)
			}
		})
	}
}

// TestExpiry: the expiry of a signed body is ExpiryBlocks past the
// gateway's height, verified when there is a verifier, and never taken
// from a gateway of another chain.
func TestExpiry(t *testing.T) {
	blocks := makeChain(t, testChainID, repeat(validators(0, 1, 2, 3), 10), nil)
	trust, err := TrustHeader(testChainID, 1, hex.EncodeToString(blocks[0].Hash()))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		gw      *chainGateway
		verify  bool
		want    int64
		wantErr string
	}{
		{"verified", &chainGateway{chainID: testChainID, blocks: blocks, height: 10}, true, 10 + ExpiryBlocks, ""},
		{"on the gateway's word", &chainGateway{chainID: testChainID, height: 10}, false, 10 + ExpiryBlocks, ""},
		{"before the first block", &chainGateway{chainID: testChainID}, true, 0, ""},
		{"a height the gateway cannot show", &chainGateway{chainID: testChainID, blocks: blocks, height: 11}, true, 0, "the gateway's height 11"},
		{"another chain", &chainGateway{chainID: "another-chain", blocks: blocks, height: 10}, true, 0, `the gateway serves chain "another-chain"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			var v *Verifier
			if tc.verify {
				if v, err = NewVerifier(trust, []byzlogv1.GatewayClient{tc.gw}, 50*time.Millisecond); err != nil {
					t.Fatal(err)
				}
				v.headers.(*headerVerifier).now = func() time.Time { return blocks[9].Time }
			}
			got, err := Expiry(ctx, tc.gw, v, testChainID)
			if got != tc.want || (err == nil) != (tc.wantErr == "") || err != nil && !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Expiry = %d, %v; want %d, %q", got, err, tc.want, tc.wantErr)
			}
		})
	}
}
