package receipt

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cometbft/cometbft/crypto/ed25519"
	"github.com/cometbft/cometbft/light/provider"
	cmtproto "github.com/cometbft/cometbft/proto/tendermint/types"
	cmtversion "github.com/cometbft/cometbft/proto/tendermint/version"
	cmttypes "github.com/cometbft/cometbft/types"
	"github.com/cometbft/cometbft/version"
)

// Signed chains for the tests: ed25519 validators (CometBFT's MockPV)
// sign every header as CometBFT's consensus would, a precommit each, so
// the headers are what a gateway relays from a real chain.

const testChainID = "receipt-test"

// chainStart is the time of every test chain's first header; each next
// header is a second later.
var chainStart = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// testKeys are the validators' keys the tests make sets of: the same in
// every run and every fuzzing process, so a failing input stays one.
var testKeys = sync.OnceValue(func() []cmttypes.MockPV {
	keys := make([]cmttypes.MockPV, 8)
	for i := range keys {
		keys[i] = cmttypes.NewMockPVWithParams(ed25519.GenPrivKeyFromSecret([]byte{byte(i)}), false, false)
	}
	return keys
})

// valSet is a validator set and the keys that sign for it, in the set's
// order.
type valSet struct {
	set  *cmttypes.ValidatorSet
	keys []cmttypes.PrivValidator
}

// validators makes the set of testKeys[i] for each i, each of power 10.
func validators(idx ...int) valSet {
	vals := make([]*cmttypes.Validator, len(idx))
	byAddr := map[string]cmttypes.PrivValidator{}
	for j, i := range idx {
		k := testKeys()[i]
		vals[j] = k.ExtractIntoValidator(10)
		byAddr[string(vals[j].Address)] = k
	}
	vs := valSet{set: cmttypes.NewValidatorSet(vals)}
	for _, v := range vs.set.Validators {
		vs.keys = append(vs.keys, byAddr[string(v.Address)])
	}
	return vs
}

// makeChain makes light blocks 1 to len(sets) of chainID, header h
// signed by sets[h-1], which it names as its validators (and the next
// set as its next). edit, when not nil, changes each header before it is
// signed. Block h is at index h-1.
func makeChain(t testing.TB, chainID string, sets []valSet, edit func(*cmttypes.Header)) []*cmttypes.LightBlock {
	t.Helper()
	var out []*cmttypes.LightBlock
	var last cmttypes.BlockID
	for i, vs := range sets {
		next := vs
		if i+1 < len(sets) {
			next = sets[i+1]
		}
		h := &cmttypes.Header{
			Version: cmtversion.Consensus{Block: version.BlockProtocol}, ChainID: chainID,
			Height: int64(i + 1), Time: chainStart.Add(time.Duration(i) * time.Second), LastBlockID: last,
			ValidatorsHash: vs.set.Hash(), NextValidatorsHash: next.set.Hash(),
			AppHash: bytes.Repeat([]byte{byte(i)}, 32), ProposerAddress: vs.set.Validators[0].Address,
		}
		if edit != nil {
			edit(h)
		}
		lb := sign(t, h, vs)
		last = lb.Commit.BlockID
		out = append(out, lb)
	}
	return out
}

// sign makes the light block of h, signed by every validator of vs.
func sign(t testing.TB, h *cmttypes.Header, vs valSet) *cmttypes.LightBlock {
	t.Helper()
	id := cmttypes.BlockID{Hash: h.Hash(), PartSetHeader: cmttypes.PartSetHeader{Total: 1, Hash: bytes.Repeat([]byte{7}, 32)}}
	votes := cmttypes.NewVoteSet(h.ChainID, h.Height, 0, cmtproto.PrecommitType, vs.set)
	ec, err := cmttypes.MakeExtCommit(id, h.Height, 0, votes, vs.keys, h.Time.Add(time.Second), false)
	if err != nil {
		t.Fatalf("sign header %d: %v", h.Height, err)
	}
	return &cmttypes.LightBlock{SignedHeader: &cmttypes.SignedHeader{Header: h, Commit: ec.ToCommit()}, ValidatorSet: vs.set}
}

// repeat is n times vs.
func repeat(vs valSet, n int) []valSet {
	out := make([]valSet, n)
	for i := range out {
		out[i] = vs
	}
	return out
}

// forged is lb with its first signature altered, as a gateway that made
// the header up would have to serve it.
func forged(lb *cmttypes.LightBlock) *cmttypes.LightBlock {
	c := *lb.Commit
	c.Signatures = append([]cmttypes.CommitSig(nil), c.Signatures...)
	sig := append([]byte(nil), c.Signatures[0].Signature...)
	sig[0] ^= 1
	c.Signatures[0].Signature = sig
	return &cmttypes.LightBlock{SignedHeader: &cmttypes.SignedHeader{Header: lb.Header, Commit: &c}, ValidatorSet: lb.ValidatorSet}
}

// signedBy is lb with only the first n signatures of its commit kept.
func signedBy(lb *cmttypes.LightBlock, n int) *cmttypes.LightBlock {
	c := *lb.Commit
	c.Signatures = append([]cmttypes.CommitSig(nil), c.Signatures...)
	for i := n; i < len(c.Signatures); i++ {
		c.Signatures[i] = cmttypes.NewCommitSigAbsent()
	}
	return &cmttypes.LightBlock{SignedHeader: &cmttypes.SignedHeader{Header: lb.Header, Commit: &c}, ValidatorSet: lb.ValidatorSet}
}

// withValidators is lb carrying vs as its validator set, whatever its
// header names.
func withValidators(lb *cmttypes.LightBlock, vs valSet) *cmttypes.LightBlock {
	return &cmttypes.LightBlock{SignedHeader: lb.SignedHeader, ValidatorSet: vs.set}
}

// chainSource serves a chain's light blocks, as a gateway relays them (or
// a liar), and records the heights asked for.
type chainSource struct {
	name   string
	blocks []*cmttypes.LightBlock // block h at index h-1
	serve  map[int64]*cmttypes.LightBlock
	err    error // every answer's, when set

	mu    sync.Mutex
	asked []int64
}

var _ provider.Provider = (*chainSource)(nil)

func (s *chainSource) ChainID() string { return testChainID }
func (s *chainSource) String() string  { return s.name }

func (s *chainSource) ReportEvidence(context.Context, cmttypes.Evidence) error { return nil }

func (s *chainSource) LightBlock(_ context.Context, height int64) (*cmttypes.LightBlock, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked = append(s.asked, height)
	if s.err != nil {
		return nil, s.err
	}
	if lb, ok := s.serve[height]; ok {
		return lb, nil
	}
	if height == 0 {
		height = int64(len(s.blocks))
	}
	if height < 1 || height > int64(len(s.blocks)) {
		return nil, provider.ErrHeightTooHigh
	}
	return s.blocks[height-1], nil
}

// heights returns the heights asked for since the last call.
func (s *chainSource) heights() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := fmt.Sprint(s.asked)
	s.asked = nil
	return out
}
