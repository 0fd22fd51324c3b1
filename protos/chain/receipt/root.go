package receipt

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/cometbft/cometbft/light/provider"
	cmttypes "github.com/cometbft/cometbft/types"
)

// Root is a root of trust: what a client believes about the chain without
// asking anyone. It comes from the client's own configuration, never from a
// node or gateway: either the chain's genesis (the header at height 1 must
// be signed by its validators), or a header the operator checked, by
// height and hash.
type Root struct {
	ChainID string
	Height  int64
	Hash    []byte
	// Genesis, when set, stands for Height and Hash: they are taken from
	// the first header its validators signed.
	Genesis *cmttypes.GenesisDoc
}

// GenesisRoot reads a genesis file as a root of trust.
func GenesisRoot(path string) (Root, error) {
	gen, err := cmttypes.GenesisDocFromFile(path)
	if err != nil {
		return Root{}, fmt.Errorf("genesis %s: %w", path, err)
	}
	return Root{ChainID: gen.ChainID, Genesis: gen}, nil
}

// HashRoot is a root of trust at a header the operator checked; hash is
// hex, as CometBFT's RPC prints it.
func HashRoot(chainID string, height int64, hash string) (Root, error) {
	h, err := hex.DecodeString(hash)
	if err != nil {
		return Root{}, fmt.Errorf("trust hash %q is not hex: %w", hash, err)
	}
	r := Root{ChainID: chainID, Height: height, Hash: h}
	return r, r.Validate()
}

// Validate says what is missing.
func (r Root) Validate() error {
	switch {
	case r.ChainID == "":
		return errors.New("root of trust: the chain id is empty")
	case r.Genesis != nil:
		if r.Genesis.ChainID != r.ChainID {
			return fmt.Errorf("root of trust: chain id %q, but the genesis is of %q", r.ChainID, r.Genesis.ChainID)
		}
		return nil
	case r.Height <= 0 || len(r.Hash) != 32:
		return fmt.Errorf("root of trust: give a genesis, or a height (%d) > 0 and a 32-byte header hash (%d bytes)", r.Height, len(r.Hash))
	}
	return nil
}

// ErrRootPruned means every source said the root of trust's height is
// pruned: asking again will not bring it back, so the client needs a more
// recent root (a chain id, trust height and trust hash). A lying source can
// say so, as it can refuse to serve anything; it costs the client an error
// at once rather than a wait.
var ErrRootPruned = errors.New("the root of trust's height is pruned")

// allPruned wraps errs as ErrRootPruned when n sources were asked and each
// said the height is pruned.
func allPruned(n, pruned int, errs []error) error {
	err := errors.Join(errs...)
	if n > 0 && pruned == n {
		return fmt.Errorf("%w: %w", ErrRootPruned, err)
	}
	return err
}

// Resolve turns a genesis root into a height and hash: the header at
// height 1 that more than two thirds of the genesis validators signed.
// Each provider is asked in turn; one that serves another header is
// skipped, with the reason kept. When every one says height 1 is pruned
// the error is ErrRootPruned.
func (r Root) Resolve(ctx context.Context, providers []provider.Provider) (Root, error) {
	if r.Genesis == nil {
		return r, nil
	}
	vals := make([]*cmttypes.Validator, len(r.Genesis.Validators))
	for i, v := range r.Genesis.Validators {
		vals[i] = cmttypes.NewValidator(v.PubKey, v.Power)
	}
	set := cmttypes.NewValidatorSet(vals)
	var errs []error
	pruned := 0
	for _, p := range providers {
		lb, err := p.LightBlock(ctx, 1)
		if err == nil {
			err = checkGenesisBlock(r.ChainID, set, lb)
		}
		if err == nil {
			return Root{ChainID: r.ChainID, Height: 1, Hash: lb.Hash()}, nil
		}
		if ctx.Err() != nil {
			return Root{}, ctx.Err()
		}
		if errors.Is(err, provider.ErrLightBlockNotFound) {
			pruned++
			err = fmt.Errorf("%w: height 1 is pruned; take a recent root of trust (a chain id, trust height and trust hash) instead of genesis", err)
		}
		errs = append(errs, fmt.Errorf("%s: %w", p, err))
	}
	return Root{}, fmt.Errorf("no source served a height-1 header signed by the genesis validators: %w", allPruned(len(providers), pruned, errs))
}

func checkGenesisBlock(chainID string, set *cmttypes.ValidatorSet, lb *cmttypes.LightBlock) error {
	if err := lb.ValidateBasic(chainID); err != nil {
		return err
	}
	if !bytes.Equal(lb.ValidatorsHash, set.Hash()) {
		return fmt.Errorf("height 1 names validators %X, genesis has %X", lb.ValidatorsHash, set.Hash())
	}
	return set.VerifyCommitLight(chainID, lb.Commit.BlockID, 1, lb.Commit)
}
