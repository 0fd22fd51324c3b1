package indexer

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/cometbft/cometbft/light/provider"
	cmttypes "github.com/cometbft/cometbft/types"
)

// Trust is a light client root of trust: the hash of the header at Height.
type Trust struct {
	Height int64
	Hash   []byte
}

// TrustGenesis derives the root of trust from genesis alone: the header at
// height 1 must be signed by more than two thirds of the genesis
// validators. Each provider is asked in turn; one that serves a header the
// genesis validators did not sign is skipped, with the reason kept.
func TrustGenesis(ctx context.Context, gen *cmttypes.GenesisDoc, providers []provider.Provider) (Trust, error) {
	vals := make([]*cmttypes.Validator, len(gen.Validators))
	for i, v := range gen.Validators {
		vals[i] = cmttypes.NewValidator(v.PubKey, v.Power)
	}
	set := cmttypes.NewValidatorSet(vals)
	var errs []error
	for _, p := range providers {
		lb, err := p.LightBlock(ctx, 1)
		if err == nil {
			err = checkGenesisBlock(gen.ChainID, set, lb)
		}
		if err == nil {
			return Trust{Height: 1, Hash: lb.Hash()}, nil
		}
		if ctx.Err() != nil {
			return Trust{}, ctx.Err()
		}
		errs = append(errs, fmt.Errorf("%s: %w", p, err))
	}
	return Trust{}, fmt.Errorf("no node served a height-1 header signed by the genesis validators: %w", errors.Join(errs...))
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
