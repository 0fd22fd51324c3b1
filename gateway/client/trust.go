package client

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/cometbft/cometbft/light/provider"
	cmtproto "github.com/cometbft/cometbft/proto/tendermint/types"
	cmttypes "github.com/cometbft/cometbft/types"
	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/abciapp/core"
	"github.com/byzlog/byzlog/indexer/chain"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

// Trust is what a client believes about the chain without asking a
// gateway: the chain it signs for and, unless verification is off, the
// root of trust its receipts are checked from. It comes from the client's
// configuration, never from a gateway: a gateway that named the chain
// could have requests signed for another one.
type Trust struct {
	root   chain.Root
	verify bool
}

// TrustGenesis trusts the chain of a genesis file: receipts are checked
// against headers verified from the first header its validators signed.
func TrustGenesis(path string) (Trust, error) {
	r, err := chain.GenesisRoot(path)
	if err != nil {
		return Trust{}, err
	}
	return Trust{root: r, verify: true}, nil
}

// TrustHeader trusts the chain from a header the operator checked: its
// height and hash (hex, as CometBFT's RPC prints it).
func TrustHeader(chainID string, height int64, hash string) (Trust, error) {
	r, err := chain.HashRoot(chainID, height, hash)
	if err != nil {
		return Trust{}, err
	}
	return Trust{root: r, verify: true}, nil
}

// TrustGateway signs for chainID and takes receipts on the gateway's
// word: nothing is verified, so a lying gateway can acknowledge records it
// dropped. It saves one block of latency per receipt (the header that
// proves a block's results is the next one) and the light client's work;
// use it only with a gateway you run yourself.
func TrustGateway(chainID string) Trust {
	return Trust{root: chain.Root{ChainID: chainID}}
}

// ChainID is the chain the client signs for.
func (t Trust) ChainID() string { return t.root.ChainID }

// Verifies reports whether receipts are checked.
func (t Trust) Verifies() bool { return t.verify }

func (t Trust) validate(who string) error {
	if t.root.ChainID == "" {
		return fmt.Errorf("%s: no trust: give TrustGenesis, TrustHeader or TrustGateway (the chain id comes from the client's configuration, not from a gateway)", who)
	}
	return nil
}

// ErrUnverified means a gateway's receipt did not check against the
// chain: its proof is missing or false, or the proven result is another
// batch's or says something else. The records may or may not have been
// written; the receipt proves nothing, so they are not acknowledged.
var ErrUnverified = errors.New("receipt not verified against the chain")

// verifier checks receipts against headers a light client verified
// through the gateways (which relay them and need not be trusted).
type verifier struct {
	headers *chain.Headers
	wait    time.Duration // how long a header may take to appear
}

func newVerifier(t Trust, gws []byzlogv1.GatewayClient, wait time.Duration) (*verifier, error) {
	if !t.verify {
		return nil, nil
	}
	provs := make([]provider.Provider, len(gws))
	for i, gw := range gws {
		provs[i] = &gatewayProvider{gw: gw, chainID: t.root.ChainID, name: fmt.Sprintf("gateway %d", i), wait: wait}
	}
	h, err := chain.NewHeaders(chain.Config{Root: t.root, Log: zerolog.Nop()}, provs...)
	if err != nil {
		return nil, err
	}
	return &verifier{headers: h, wait: wait}, nil
}

// header verifies the header at height, trying again until ctx is done:
// right after a block the next header takes a moment, and a gateway that
// is failing over may not serve one at once.
func (v *verifier) header(ctx context.Context, height int64) (*cmttypes.LightBlock, error) {
	backoff := 50 * time.Millisecond
	for {
		lb, err := v.headers.Verify(ctx, height)
		if err == nil {
			return lb, nil
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: header %d: %v", ErrUnverified, height, err)
		}
		backoff = min(2*backoff, time.Second)
	}
}

// resultAt verifies the header above height and returns the result of tx
// index in block height, proven by p.
func (v *verifier) resultAt(ctx context.Context, height int64, index uint32, p *byzlogv1.ResultProof) (*cmttypes.LightBlock, []byte, uint32, error) {
	if height <= 0 {
		return nil, nil, 0, fmt.Errorf("%w: height %d", ErrUnverified, height)
	}
	next, err := v.header(ctx, height+1)
	if err != nil {
		return nil, nil, 0, err
	}
	res, err := chain.CheckResult(next.Header, index, p)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("%w: %v", ErrUnverified, err)
	}
	return next, res.Data, res.Code, nil
}

// batch checks a produce receipt for the signed batch of n records and
// returns where the chain says it landed.
func (v *verifier) batch(ctx context.Context, sb *byzlogv1.SignedBatch, body *byzlogv1.BatchBody, n int, rc *byzlogv1.Receipt) (*byzlogv1.BatchResult, error) {
	_, data, code, err := v.resultAt(ctx, rc.GetHeight(), rc.GetTxIndex(), rc.GetProof())
	if err != nil {
		return nil, err
	}
	var out byzlogv1.TxOutcome
	if err := proto.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("%w: the proven result is not a produce outcome: %v", ErrUnverified, err)
	}
	j := rc.GetProof().GetBatchIndex()
	if int(j) >= len(out.Batches) {
		return nil, fmt.Errorf("%w: the proven transaction has %d batches, the receipt names batch %d", ErrUnverified, len(out.Batches), j)
	}
	br := out.Batches[j]
	digest := sha256.Sum256(sb.Body)
	switch {
	case !bytesEqual(br.Producer, sb.ProducerKey) || !bytesEqual(br.BodySha256, digest[:]):
		return nil, fmt.Errorf("%w: the proven result at height %d is another batch's (producer %x, body digest %x)", ErrUnverified, rc.GetHeight(), br.Producer, br.BodySha256)
	case br.Topic != body.Topic || br.Partition != body.Partition || br.Sequence != body.Sequence:
		return nil, fmt.Errorf("%w: the proven result is of %s/%d sequence %d", ErrUnverified, br.Topic, br.Partition, br.Sequence)
	case !(code == 0 && br.Code == 0) && !(br.Duplicate && br.Code == uint32(core.CodeDuplicate)):
		return nil, fmt.Errorf("%w: the chain did not write this batch at height %d (code %d)", ErrUnverified, rc.GetHeight(), br.Code)
	case int(br.RecordCount) != n:
		return nil, fmt.Errorf("%w: the chain wrote %d records of this batch, it has %d", ErrUnverified, br.RecordCount, n)
	case br.BaseOffset != rc.GetBaseOffset():
		return nil, fmt.Errorf("%w: the receipt says offset %d, the chain %d", ErrUnverified, rc.GetBaseOffset(), br.BaseOffset)
	}
	// A gateway answering a retry as a duplicate proves it with the
	// original write's result: written there, a duplicate here.
	if rc.GetDuplicate() && !br.Duplicate {
		br = proto.Clone(br).(*byzlogv1.BatchResult)
		br.Duplicate = true
	}
	return br, nil
}

// tx checks that tx was committed, with code 0, at height and index.
func (v *verifier) tx(ctx context.Context, tx []byte, height int64, index uint32, p *byzlogv1.ResultProof) error {
	_, _, code, err := v.resultAt(ctx, height, index, p)
	if err != nil {
		return err
	}
	hdr, err := v.header(ctx, height)
	if err != nil {
		return err
	}
	if err := chain.CheckTx(hdr.Header, index, tx, p); err != nil {
		return fmt.Errorf("%w: %v", ErrUnverified, err)
	}
	if code != 0 {
		return fmt.Errorf("%w: the chain refused the transaction (code %d)", ErrUnverified, code)
	}
	return nil
}

func bytesEqual(a, b []byte) bool { return string(a) == string(b) }

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
		if status.Code(err) != codes.OutOfRange {
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
