package lightclient

import (
	"testing"
	"time"

	"github.com/cometbft/cometbft/crypto/ed25519"
	dbs "github.com/cometbft/cometbft/light/store/db"
	"github.com/cometbft/cometbft/types"
)

// TestLightStorePrunesWithoutDeadlock fills a light store on lightDB past
// its pruning size and prunes it, as the light client does after every
// verified header once it holds PruningSize: on a bare MemDB the first
// Prune deadlocks (its iterator holds the read lock its batch write waits
// for).
func TestLightStorePrunesWithoutDeadlock(t *testing.T) {
	st := dbs.New(newLightDB(), "test-chain")
	val := types.NewValidator(ed25519.GenPrivKey().PubKey(), 1)
	vals := types.NewValidatorSet([]*types.Validator{val})
	for h := int64(1); h <= 300; h++ {
		lb := &types.LightBlock{
			SignedHeader: &types.SignedHeader{
				Header: &types.Header{ChainID: "test-chain", Height: h, Time: time.Unix(h, 0), ValidatorsHash: vals.Hash()},
				Commit: &types.Commit{Height: h},
			},
			ValidatorSet: vals,
		}
		if err := st.SaveLightBlock(lb); err != nil {
			t.Fatalf("save light block %d: %v", h, err)
		}
	}
	done := make(chan error, 1)
	go func() { done <- st.Prune(100) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Prune did not return within 10 s: the store's iterator and batch write deadlock")
	}
	if n := st.Size(); n != 100 {
		t.Fatalf("store holds %d light blocks after Prune(100), want 100", n)
	}
	first, err1 := st.FirstLightBlockHeight()
	last, err2 := st.LastLightBlockHeight()
	if err1 != nil || err2 != nil || first != 201 || last != 300 {
		t.Fatalf("store holds heights %d..%d (%v, %v) after Prune(100), want 201..300", first, last, err1, err2)
	}
}
