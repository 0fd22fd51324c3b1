package receipt

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cometbft/cometbft/light"
	cmttypes "github.com/cometbft/cometbft/types"
)

// testPeriod is the trusting period of the verification tests.
const testPeriod = time.Hour

// testChains are the chains the verification tests read, made once.
type testChains struct {
	steady []*cmttypes.LightBlock // validators A throughout
	slow   []*cmttypes.LightBlock // A, then from 5 A with one of four replaced
	jump   []*cmttypes.LightBlock // A, then from 5 three of four replaced
	early  []*cmttypes.LightBlock // A at 1, the jump's set from 2
	other  []*cmttypes.LightBlock // another chain, validators A
	frozen []*cmttypes.LightBlock // A, every header at the same time
}

func makeTestChains(t testing.TB) testChains {
	a, slow, jump := validators(0, 1, 2, 3), validators(0, 1, 2, 4), validators(3, 4, 5, 6)
	return testChains{
		steady: makeChain(t, testChainID, repeat(a, 12), nil),
		slow:   makeChain(t, testChainID, append(repeat(a, 4), repeat(slow, 8)...), nil),
		jump:   makeChain(t, testChainID, append(repeat(a, 4), repeat(jump, 8)...), nil),
		early:  makeChain(t, testChainID, append(repeat(a, 1), repeat(jump, 11)...), nil),
		other:  makeChain(t, "another-chain", repeat(a, 12), nil),
		frozen: makeChain(t, testChainID, repeat(a, 12), func(h *cmttypes.Header) { h.Time = chainStart }),
	}
}

// TestVerifyHeaderAsCometBFT verifies headers with verifyHeader and with
// CometBFT's light.Verify on the same headers, period and clock: both
// accept or both refuse, refusing for the same kind of reason where
// CometBFT names one (an expired trusted header; too few of the trusted
// validators signing), and verifyHeader says what is wrong.
func TestVerifyHeaderAsCometBFT(t *testing.T) {
	c := makeTestChains(t)
	at := func(chain []*cmttypes.LightBlock, h int64) *cmttypes.LightBlock { return chain[h-1] }
	late := at(c.steady, 12).Time.Add(time.Minute)
	for _, tc := range []struct {
		name               string
		trusted, untrusted *cmttypes.LightBlock
		now                time.Time
		wantErr            string // "": accepted
		kind               error  // errExpired, errTooLittleTrust or nil
	}{
		{"adjacent", at(c.steady, 1), at(c.steady, 2), late, "", nil},
		{"skipping, the same validators", at(c.steady, 1), at(c.steady, 9), late, "", nil},
		{"skipping over a quarter of the validators replaced", at(c.slow, 1), at(c.slow, 9), late, "", nil},
		{"adjacent over three quarters replaced", at(c.jump, 4), at(c.jump, 5), late, "", nil},
		{"skipping over three quarters replaced", at(c.jump, 1), at(c.jump, 9), late, "too few of the trusted validators signed", errTooLittleTrust},
		{"skipping from the set after the change", at(c.jump, 5), at(c.jump, 12), late, "", nil},
		{"a forged signature, adjacent", at(c.steady, 1), forged(at(c.steady, 2)), late, "header 2 is not signed by its validators: wrong signature", nil},
		{"a forged signature, skipping", at(c.steady, 1), forged(at(c.steady, 9)), late, "header 9 is not signed by header 1's validators: wrong signature", nil},
		{"signed by half, adjacent", at(c.steady, 1), signedBy(at(c.steady, 2), 2), late, "insufficient voting power", nil},
		{"signed by half, skipping", at(c.steady, 1), signedBy(at(c.steady, 9), 2), late, "header 9 is not signed by its validators", nil},
		{"signed by a quarter, skipping", at(c.steady, 1), signedBy(at(c.steady, 9), 1), late, "too few of the trusted validators signed", errTooLittleTrust},
		{"another chain's header", at(c.steady, 1), at(c.other, 2), late, `header belongs to another chain "another-chain"`, nil},
		{"another chain's header, skipping", at(c.steady, 1), at(c.other, 9), late, `header belongs to another chain "another-chain"`, nil},
		{"validators other than the header names", at(c.steady, 1), withValidators(at(c.steady, 2), validators(3, 4, 5, 6)), late, "header 2 names validators", nil},
		{"validators other than the trusted header named next", at(c.steady, 1), at(c.early, 2), late, "header 1 named", nil},
		{"the trusted header expired", at(c.steady, 1), at(c.steady, 2), at(c.steady, 1).Time.Add(testPeriod), "past the trusting period", errExpired},
		{"the trusted header expired, skipping", at(c.steady, 1), at(c.steady, 9), at(c.steady, 1).Time.Add(2 * testPeriod), "past the trusting period", errExpired},
		{"the trusted header about to expire", at(c.steady, 1), at(c.steady, 2), at(c.steady, 1).Time.Add(testPeriod - time.Nanosecond), "", nil},
		{"a header from beyond the clock drift", at(c.steady, 1), at(c.steady, 2), at(c.steady, 2).Time.Add(-MaxClockDrift), "from the future", nil},
		{"a header from within the clock drift", at(c.steady, 1), at(c.steady, 2), at(c.steady, 2).Time.Add(-MaxClockDrift + time.Nanosecond), "", nil},
		{"a header no later than the trusted one", at(c.frozen, 1), at(c.frozen, 2), late, "not after the trusted header 1", nil},
		{"a header below the trusted one", at(c.steady, 5), at(c.steady, 3), late, "not above the trusted header 5", nil},
		{"the trusted header again", at(c.steady, 5), at(c.steady, 5), late, "not above the trusted header 5", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := verifyHeader(tc.trusted, tc.untrusted, testPeriod, tc.now, MaxClockDrift)
			theirs := light.Verify(tc.trusted.SignedHeader, tc.trusted.ValidatorSet, tc.untrusted.SignedHeader, tc.untrusted.ValidatorSet,
				testPeriod, tc.now, MaxClockDrift, light.DefaultTrustLevel)
			if (got == nil) != (theirs == nil) {
				t.Fatalf("verifyHeader(%d -> %d) = %v, light.Verify = %v: they disagree", tc.trusted.Height, tc.untrusted.Height, got, theirs)
			}
			if tc.wantErr == "" {
				if got != nil {
					t.Fatalf("verifyHeader(%d -> %d) = %v, want accepted", tc.trusted.Height, tc.untrusted.Height, got)
				}
				return
			}
			if got == nil || !strings.Contains(got.Error(), tc.wantErr) {
				t.Fatalf("verifyHeader(%d -> %d) = %v, want an error with %q", tc.trusted.Height, tc.untrusted.Height, got, tc.wantErr)
			}
			if mine, cmt := errors.Is(got, errExpired), errors.As(theirs, &light.ErrOldHeaderExpired{}); mine != cmt || mine != (tc.kind == errExpired) {
				t.Errorf("verifyHeader = %v (expired: %v), light.Verify = %v (expired: %v), want expired: %v", got, mine, theirs, cmt, tc.kind == errExpired)
			}
			if mine, cmt := errors.Is(got, errTooLittleTrust), errors.As(theirs, &light.ErrNewValSetCantBeTrusted{}); mine != cmt || mine != (tc.kind == errTooLittleTrust) {
				t.Errorf("verifyHeader = %v (too little trust: %v), light.Verify = %v (too little trust: %v), want %v", got, mine, theirs, cmt, tc.kind == errTooLittleTrust)
			}
		})
	}
}

// TestVerifyBackwardsAsCometBFT: a header below a verified one is its
// last block, by hash, or refused, as CometBFT's light.VerifyBackwards.
func TestVerifyBackwardsAsCometBFT(t *testing.T) {
	c := makeTestChains(t)
	for _, tc := range []struct {
		name               string
		untrusted, trusted *cmttypes.LightBlock
		wantErr            string
	}{
		{"the last block", c.steady[4], c.steady[5], ""},
		{"another block at the height", c.slow[4], c.steady[5], "the trusted header 6 names"},
		{"another chain's block", c.other[4], c.steady[5], `belongs to chain "another-chain"`},
		{"a block no earlier", c.frozen[4], c.frozen[5], "not before the trusted header 6"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := verifyBackwards(tc.untrusted.Header, tc.trusted.Header)
			theirs := light.VerifyBackwards(tc.untrusted.Header, tc.trusted.Header)
			if (got == nil) != (theirs == nil) {
				t.Fatalf("verifyBackwards(%d <- %d) = %v, light.VerifyBackwards = %v: they disagree", tc.untrusted.Height, tc.trusted.Height, got, theirs)
			}
			if tc.wantErr == "" && got != nil || tc.wantErr != "" && (got == nil || !strings.Contains(got.Error(), tc.wantErr)) {
				t.Fatalf("verifyBackwards(%d <- %d) = %v, want %q", tc.untrusted.Height, tc.trusted.Height, got, tc.wantErr)
			}
		})
	}
}

// FuzzVerifyHeader: whatever bytes a gateway relays as a light block, they
// decode (gatewayProvider.decode) and verify from a trusted header without
// a panic, and nothing but the chain's own header verifies.
func FuzzVerifyHeader(f *testing.F) {
	c := makeTestChains(f)
	for _, lb := range []*cmttypes.LightBlock{c.steady[1], c.steady[8], forged(c.steady[1]), c.jump[8], c.other[1]} {
		pb, err := lb.ToProto()
		if err != nil {
			f.Fatal(err)
		}
		b, err := pb.Marshal()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	trusted, now := c.steady[0], c.steady[11].Time
	p := &gatewayProvider{chainID: testChainID, name: "fuzz"}
	f.Fuzz(func(t *testing.T, b []byte) {
		lb, err := p.decode(b, 0)
		if err != nil {
			return
		}
		if verifyHeader(trusted, lb, testPeriod, now, MaxClockDrift) == nil && lb.Hash().String() != c.steady[lb.Height-1].Hash().String() {
			t.Fatalf("verifyHeader accepted header %d %X, not the chain's", lb.Height, lb.Hash())
		}
	})
}
