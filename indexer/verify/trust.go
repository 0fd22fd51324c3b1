package verify

import (
	"context"

	"github.com/cometbft/cometbft/light/provider"
	cmttypes "github.com/cometbft/cometbft/types"

	"github.com/byzlog/byzlog/protos/chain/receipt"
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
	r, err := receipt.Root{ChainID: gen.ChainID, Genesis: gen}.Resolve(ctx, providers)
	if err != nil {
		return Trust{}, err
	}
	return Trust{Height: r.Height, Hash: r.Hash}, nil
}
