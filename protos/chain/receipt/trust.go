package receipt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cometbft/cometbft/light/provider"
	cmttypes "github.com/cometbft/cometbft/types"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// Trust is what a client believes about the chain without asking a
// gateway: the chain it signs for and, unless verification is off, the
// root of trust its receipts are checked from. It comes from the client's
// configuration, never from a gateway: a gateway that named the chain
// could have requests signed for another one.
type Trust struct {
	root   Root
	verify bool
}

// TrustGenesis trusts the chain of a genesis file: receipts are checked
// against headers verified from the first header its validators signed.
func TrustGenesis(path string) (Trust, error) {
	r, err := GenesisRoot(path)
	if err != nil {
		return Trust{}, err
	}
	return Trust{root: r, verify: true}, nil
}

// TrustHeader trusts the chain from a header the operator checked: its
// height and hash (hex, as CometBFT's RPC prints it).
func TrustHeader(chainID string, height int64, hash string) (Trust, error) {
	r, err := HashRoot(chainID, height, hash)
	if err != nil {
		return Trust{}, err
	}
	return Trust{root: r, verify: true}, nil
}

// TrustGateway signs for chainID and takes receipts on the gateway's
// word: nothing is verified, so a lying gateway can acknowledge records it
// dropped. It saves one block of latency per receipt (the header that
// proves a block's results is the next one) and verifying headers;
// use it only with a gateway you run yourself.
func TrustGateway(chainID string) Trust {
	return Trust{root: Root{ChainID: chainID}}
}

// ChainID is the chain the client signs for.
func (t Trust) ChainID() string { return t.root.ChainID }

// Verifies reports whether receipts are checked.
func (t Trust) Verifies() bool { return t.verify }

// Validate says what is missing; who names the client.
func (t Trust) Validate(who string) error {
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

// Verifier checks receipts against headers verified through the gateways
// (which relay them and need not be trusted).
type Verifier struct {
	headers verifiedHeaders
	wait    time.Duration // how long a header may take to appear
}

// verifiedHeaders is what a Verifier checks receipts against: headers
// verified from a root of trust (headerVerifier).
type verifiedHeaders interface {
	// Verify returns the header at height, verified.
	Verify(ctx context.Context, height int64) (*cmttypes.LightBlock, error)
	// Root is the height of the root of trust; 0 while not known.
	Root() int64
}

// NewVerifier checks receipts through gws (the first is asked for
// headers, the others take over in turn when it fails); wait bounds how
// long a header may take to appear. It returns nil for a Trust that does
// not verify.
func NewVerifier(t Trust, gws []byzlogv1.GatewayClient, wait time.Duration) (*Verifier, error) {
	if !t.verify {
		return nil, nil
	}
	provs := make([]provider.Provider, len(gws))
	for i, gw := range gws {
		provs[i] = &gatewayProvider{gw: gw, chainID: t.root.ChainID, name: fmt.Sprintf("gateway %d", i), wait: wait}
	}
	h, err := newHeaderVerifier(t.root, provs)
	if err != nil {
		return nil, err
	}
	return &Verifier{headers: h, wait: wait}, nil
}

// Header verifies the header at height, trying again until ctx is done:
// right after a block the next header takes a moment, and a gateway that
// is failing over may not serve one at once. A root of trust every
// gateway says is pruned (ErrRootPruned) fails at once.
func (v *Verifier) Header(ctx context.Context, height int64) (*cmttypes.LightBlock, error) {
	backoff := 50 * time.Millisecond
	for {
		lb, err := v.headers.Verify(ctx, height)
		if err == nil {
			return lb, nil
		}
		if errors.Is(err, ErrRootPruned) {
			return nil, fmt.Errorf("%w: header %d: %w", ErrUnverified, height, err)
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: header %d: %v", ErrUnverified, height, err)
		}
		backoff = min(2*backoff, time.Second)
	}
}

// Result verifies the header above height and returns the data and code
// of tx index's result in block height, proven by p.
func (v *Verifier) Result(ctx context.Context, height int64, index uint32, p *byzlogv1.ResultProof) ([]byte, uint32, error) {
	if height <= 0 {
		return nil, 0, fmt.Errorf("%w: height %d", ErrUnverified, height)
	}
	next, err := v.Header(ctx, height+1)
	if err != nil {
		return nil, 0, err
	}
	res, err := CheckResult(next.Header, index, p)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %v", ErrUnverified, err)
	}
	return res.Data, res.Code, nil
}

// Tx checks that tx was committed, with code 0, at height and index.
func (v *Verifier) Tx(ctx context.Context, tx []byte, height int64, index uint32, p *byzlogv1.ResultProof) error {
	_, code, err := v.Result(ctx, height, index, p)
	if err != nil {
		return err
	}
	hdr, err := v.Header(ctx, height)
	if err != nil {
		return err
	}
	if err := CheckTx(hdr.Header, index, tx, p); err != nil {
		return fmt.Errorf("%w: %v", ErrUnverified, err)
	}
	if code != 0 {
		return fmt.Errorf("%w: the chain refused the transaction (code %d)", ErrUnverified, code)
	}
	return nil
}

// Nonce checks a gateway's GetNonce answer for key. Nonce 0 needs no
// proof; any other comes with the committed transaction, signed by key,
// that used the nonce before it. A nonce shown so is at most the key's
// next: a request signed for it is never one for a future nonce that a
// gateway could keep back and play later (a stale one the chain refuses).
func (v *Verifier) Nonce(ctx context.Context, key []byte, n *byzlogv1.NonceResponse) error {
	next := n.GetNextNonce()
	if next == 0 {
		return nil
	}
	if n.GetUsedPruned() {
		// Pruning only removes heights below the ones still served, and
		// the root of trust is served: a gateway that calls a height at or
		// after it pruned is lying. Below it nothing can be checked.
		if root := v.headers.Root(); n.GetUsedHeight() >= root {
			return fmt.Errorf("%w: nonce %d: the gateway says block %d, which used nonce %d, is pruned, but it is not below the root of trust at %d", ErrUnverified, next, n.GetUsedHeight(), next-1, root)
		}
		return nil
	}
	k, used, ok := wire.NonceUse(n.GetUsedTx())
	if !ok || !bytes.Equal(k, key) || used != next-1 {
		return fmt.Errorf("%w: nonce %d came without a signed transaction of this key that used nonce %d", ErrUnverified, next, next-1)
	}
	if err := v.Tx(ctx, n.GetUsedTx(), n.GetUsedHeight(), n.GetUsedTxIndex(), n.GetUsedProof()); err != nil {
		return fmt.Errorf("nonce %d: the transaction that used nonce %d: %w", next, next-1, err)
	}
	return nil
}

// ExpiryBlocks is how many blocks past the chain's height a signed admin
// request or offset commit stays valid (about a minute at localnet's
// ~0.5 s blocks): a gateway that kept a signed body back cannot play it
// later than that.
const ExpiryBlocks = 120

// Expiry is the expiry height for a body signed now: the gateway's height
// plus ExpiryBlocks, with the height's header verified when v is not nil
// (so a gateway cannot stretch the window); 0, no expiry, before the first
// block. A gateway that names another chain than chainID is refused.
func Expiry(ctx context.Context, gw byzlogv1.GatewayClient, v *Verifier, chainID string) (int64, error) {
	hs, err := gw.Health(ctx, &byzlogv1.HealthRequest{})
	if err != nil {
		return 0, fmt.Errorf("ask the gateway for the chain's height: %w", err)
	}
	if hs.ChainId != chainID {
		return 0, fmt.Errorf("the gateway serves chain %q, this client trusts %q", hs.ChainId, chainID)
	}
	if hs.Height <= 0 {
		return 0, nil
	}
	if v != nil {
		if _, err := v.Header(ctx, hs.Height); err != nil {
			return 0, fmt.Errorf("the gateway's height %d: %w", hs.Height, err)
		}
	}
	return hs.Height + ExpiryBlocks, nil
}
