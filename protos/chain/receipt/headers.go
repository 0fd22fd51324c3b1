package receipt

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/cometbft/cometbft/light/provider"
	cmttypes "github.com/cometbft/cometbft/types"
)

// maxVerified bounds the headers a headerVerifier keeps: a client's
// receipts name recent heights, each verified from the one nearest below,
// and every light block holds its validator set and commit.
const maxVerified = 1000

// headerVerifier verifies headers from a root of trust by the rules of
// CometBFT's light client in its default, skipping mode (verifyHeader): a
// header is verified straight from the nearest verified one below it when
// more than a third of that one's validators signed it, otherwise through
// headers between them (bisection); a header below every verified one is
// verified backwards, by hash, from the nearest above. The light blocks
// come from the providers, one at a time: the one that failed last hands
// over to the next, as the light client's primary does. Safe for
// concurrent use; calls are serialized.
type headerVerifier struct {
	root      Root // as configured: a genesis root is resolved at the first call
	providers []provider.Provider
	period    time.Duration    // trusting period
	now       func() time.Time // the clock headers are checked against

	mu       sync.Mutex
	started  bool                   // the root's light block is verified
	verified []*cmttypes.LightBlock // by height, at most maxVerified
	next     int                    // the provider asked first
}

// newHeaderVerifier verifies headers from root served by providers (at
// least one).
func newHeaderVerifier(root Root, providers []provider.Provider) (*headerVerifier, error) {
	if err := root.Validate(); err != nil {
		return nil, err
	}
	if len(providers) == 0 {
		return nil, errors.New("verify headers: no source of light blocks")
	}
	return &headerVerifier{root: root, providers: providers, period: DefaultTrustingPeriod, now: time.Now}, nil
}

// Root is the height of the root of trust (0 before a genesis root is
// resolved).
func (v *headerVerifier) Root() int64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.root.Height
}

// Verify returns the header at height, verified.
func (v *headerVerifier) Verify(ctx context.Context, height int64) (*cmttypes.LightBlock, error) {
	if height <= 0 {
		return nil, fmt.Errorf("verify header %d: heights start at 1", height)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := v.start(ctx); err != nil {
		return nil, err
	}
	i, found := v.find(height)
	if found {
		return v.verified[i], nil
	}
	p := v.providers[v.next]
	target, err := v.fetch(ctx, p, height)
	if err == nil {
		if i > 0 {
			err = v.skip(ctx, p, v.verified[i-1], target, v.now())
		} else {
			err = v.backwards(ctx, p, v.verified[0], target)
		}
	}
	if err != nil {
		v.next = (v.next + 1) % len(v.providers)
		return nil, fmt.Errorf("verify header %d through %s: %w", height, p, err)
	}
	return target, nil
}

// start verifies the root's light block, resolving a genesis root first:
// its hash is the root's and more than two thirds of its validators signed
// it. Each provider is asked in turn.
func (v *headerVerifier) start(ctx context.Context) error {
	if v.started {
		return nil
	}
	if v.root.Genesis != nil {
		r, err := v.root.Resolve(ctx, v.providers)
		if err != nil {
			return err
		}
		v.root = r
	}
	var errs []error
	pruned := 0
	for range v.providers {
		p := v.providers[v.next]
		lb, err := v.fetch(ctx, p, v.root.Height)
		if err == nil {
			err = checkRoot(v.root, lb)
		}
		if err == nil {
			v.started = true
			v.remember(lb)
			return nil
		}
		if errors.Is(err, provider.ErrLightBlockNotFound) {
			pruned++
		}
		errs = append(errs, fmt.Errorf("%s: %w", p, err))
		v.next = (v.next + 1) % len(v.providers)
		if ctx.Err() != nil {
			break
		}
	}
	return fmt.Errorf("verify the root of trust at height %d: %w", v.root.Height, allPruned(len(v.providers), pruned, errs))
}

// checkRoot checks that lb is the header the root names, signed by more
// than two thirds of its validators.
func checkRoot(r Root, lb *cmttypes.LightBlock) error {
	if !bytes.Equal(lb.Hash(), r.Hash) {
		return fmt.Errorf("header %d hashes to %X, the root of trust is %X", lb.Height, lb.Hash(), r.Hash)
	}
	if err := lb.ValidatorSet.VerifyCommitLight(r.ChainID, lb.Commit.BlockID, lb.Height, lb.Commit); err != nil {
		return fmt.Errorf("header %d is not signed by its validators: %w", lb.Height, err)
	}
	return nil
}

// fetch asks p for the light block at height and checks that it is one:
// well formed, of the chain, at that height, with the validators its
// header names. Whether it is the chain's is for the caller to verify.
func (v *headerVerifier) fetch(ctx context.Context, p provider.Provider, height int64) (*cmttypes.LightBlock, error) {
	lb, err := p.LightBlock(ctx, height)
	switch {
	case err != nil:
		return nil, fmt.Errorf("light block %d: %w", height, err)
	case lb == nil:
		return nil, fmt.Errorf("light block %d: an empty answer", height)
	}
	if err := lb.ValidateBasic(v.root.ChainID); err != nil {
		return nil, fmt.Errorf("light block %d: %w", height, err)
	}
	if lb.Height != height {
		return nil, fmt.Errorf("asked for light block %d, got %d", height, lb.Height)
	}
	return lb, nil
}

// skip verifies target from trusted, a verified header below it, as
// CometBFT's light client does (verifySkipping): straight when it can, and
// when too few of the trusted validators signed target, first a header
// 9/16 of the way to it, and so on down until one verifies; then on from
// there. Every header it verifies is kept.
func (v *headerVerifier) skip(ctx context.Context, p provider.Provider, trusted, target *cmttypes.LightBlock, now time.Time) error {
	pending := []*cmttypes.LightBlock{target} // the last is tried next
	for len(pending) > 0 {
		next := pending[len(pending)-1]
		err := verifyHeader(trusted, next, v.period, now, MaxClockDrift)
		switch {
		case err == nil:
			trusted, pending = next, pending[:len(pending)-1]
			v.remember(next)
		case errors.Is(err, errTooLittleTrust):
			// Only a header two or more above trusted fails so: the pivot
			// lies strictly between them.
			pivot := trusted.Height + (next.Height-trusted.Height)*9/16
			lb, err := v.fetch(ctx, p, pivot)
			if err != nil {
				return fmt.Errorf("bisect from header %d to %d: %w", trusted.Height, next.Height, err)
			}
			pending = append(pending, lb)
		default:
			return fmt.Errorf("from header %d: %w", trusted.Height, err)
		}
	}
	return nil
}

// backwards verifies target from above, a verified header above it, by
// hash, one header at a time (CometBFT's light client does the same below
// its first trusted header). Only target is kept: the headers between
// would push recent ones out.
func (v *headerVerifier) backwards(ctx context.Context, p provider.Provider, above, target *cmttypes.LightBlock) error {
	verified := above.Header
	for h := above.Height - 1; h > target.Height; h-- {
		lb, err := v.fetch(ctx, p, h)
		if err != nil {
			return fmt.Errorf("verify back from header %d: %w", above.Height, err)
		}
		if err := verifyBackwards(lb.Header, verified); err != nil {
			return fmt.Errorf("verify back from header %d: %w", above.Height, err)
		}
		verified = lb.Header
	}
	if err := verifyBackwards(target.Header, verified); err != nil {
		return fmt.Errorf("verify back from header %d: %w", above.Height, err)
	}
	v.remember(target)
	return nil
}

// find returns where height is, or would be, among the verified headers.
func (v *headerVerifier) find(height int64) (int, bool) {
	return slices.BinarySearchFunc(v.verified, height, func(lb *cmttypes.LightBlock, h int64) int {
		return cmp.Compare(lb.Height, h)
	})
}

// remember keeps lb, a verified header, as a point to verify others from.
// Past maxVerified, the lowest other header goes: receipts name recent
// heights.
func (v *headerVerifier) remember(lb *cmttypes.LightBlock) {
	i, found := v.find(lb.Height)
	if found {
		return
	}
	v.verified = slices.Insert(v.verified, i, lb)
	if len(v.verified) > maxVerified {
		drop := 0
		if i == 0 {
			drop = 1
		}
		v.verified = slices.Delete(v.verified, drop, drop+1)
	}
}
