package receipt

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	cmtmath "github.com/cometbft/cometbft/libs/math"
	cmttypes "github.com/cometbft/cometbft/types"
)

// The rules of CometBFT's light client (light.Verify, VerifyAdjacent,
// VerifyNonAdjacent and VerifyBackwards in cometbft/light/verifier.go),
// written again on CometBFT's types alone: the light package cannot be
// imported here (see the package comment). Like CometBFT's, they are pure
// functions of the headers, the trusting period, the clock drift and now.
// verify_test.go holds them to CometBFT's outcome on the same headers.

// trustLevel is the share of a trusted validator set that must sign a
// header more than one block ahead: more than a third holds one correct
// validator at least (light.DefaultTrustLevel).
var trustLevel = cmtmath.Fraction{Numerator: 1, Denominator: 3}

// DefaultTrustingPeriod is CometBFT's usual two thirds of a three-week
// unbonding period, rounded to a week: a header older than that is no
// longer trusted to verify others from.
const DefaultTrustingPeriod = 168 * time.Hour

// MaxClockDrift is how far past the verifier's clock a header's time may
// be (CometBFT's default is 10 s; a lagging witness of the indexer's light
// client costs twice the drift of waiting, so it is kept short).
const MaxClockDrift = 5 * time.Second

var (
	// errExpired means the trusted header is older than the trusting
	// period: its validators may have left and no longer be accountable
	// (light.ErrOldHeaderExpired).
	errExpired = errors.New("the trusted header expired")
	// errTooLittleTrust means less than trustLevel of the trusted
	// validators signed a header further ahead; one between them may
	// still verify (light.ErrNewValSetCantBeTrusted): bisect.
	errTooLittleTrust = errors.New("too few of the trusted validators signed")
)

// verifyHeader verifies untrusted, a header above trusted, from trusted
// (light.Verify): the next header must be signed by more than two thirds
// of the validators trusted names as next; one further ahead must be signed
// by more than a third of trusted's validators (errTooLittleTrust when
// not), and by more than two thirds of its own. Either way, trusted must
// be within period of now, and untrusted well formed, of trusted's chain,
// later than trusted and not later than now plus drift.
func verifyHeader(trusted, untrusted *cmttypes.LightBlock, period time.Duration, now time.Time, drift time.Duration) error {
	chainID := trusted.ChainID
	if end := trusted.Time.Add(period); !end.After(now) {
		return fmt.Errorf("%w: header %d of %v is past the trusting period of %v since %v (now %v)",
			errExpired, trusted.Height, trusted.Time, period, end, now)
	}
	if err := checkNewHeader(trusted.Header, untrusted, now, drift); err != nil {
		return err
	}
	sh := untrusted.SignedHeader
	if untrusted.Height == trusted.Height+1 {
		if !bytes.Equal(sh.ValidatorsHash, trusted.NextValidatorsHash) {
			return fmt.Errorf("header %d names validators %X, header %d named %X as the next", sh.Height, sh.ValidatorsHash, trusted.Height, trusted.NextValidatorsHash)
		}
		if err := untrusted.ValidatorSet.VerifyCommitLight(chainID, sh.Commit.BlockID, sh.Height, sh.Commit); err != nil {
			return fmt.Errorf("header %d is not signed by its validators: %w", sh.Height, err)
		}
		return nil
	}
	cache := cmttypes.NewSignatureCache()
	if err := trusted.ValidatorSet.VerifyCommitLightTrustingWithCache(chainID, sh.Commit, trustLevel, cache); err != nil {
		if cmttypes.IsErrNotEnoughVotingPowerSigned(err) {
			return fmt.Errorf("%w: header %d by header %d's validators: %v", errTooLittleTrust, sh.Height, trusted.Height, err)
		}
		return fmt.Errorf("header %d is not signed by header %d's validators: %w", sh.Height, trusted.Height, err)
	}
	// Last: the untrusted set may be made large to cost work, and the
	// check above bounds who gets this far.
	if err := untrusted.ValidatorSet.VerifyCommitLightWithCache(chainID, sh.Commit.BlockID, sh.Height, sh.Commit, cache); err != nil {
		return fmt.Errorf("header %d is not signed by its validators: %w", sh.Height, err)
	}
	return nil
}

// checkNewHeader checks what verifyHeader asks of any untrusted header
// before its signatures (verifyNewHeaderAndVals in CometBFT's light).
func checkNewHeader(trusted *cmttypes.Header, untrusted *cmttypes.LightBlock, now time.Time, drift time.Duration) error {
	if untrusted == nil || untrusted.SignedHeader == nil || untrusted.ValidatorSet == nil {
		return errors.New("a light block without its signed header or validator set")
	}
	sh := untrusted.SignedHeader
	if err := sh.ValidateBasic(trusted.ChainID); err != nil {
		return fmt.Errorf("header %d: %w", sh.Height, err)
	}
	switch {
	case sh.Height <= trusted.Height:
		return fmt.Errorf("header %d is not above the trusted header %d", sh.Height, trusted.Height)
	case !sh.Time.After(trusted.Time):
		return fmt.Errorf("header %d has time %v, not after the trusted header %d's %v", sh.Height, sh.Time, trusted.Height, trusted.Time)
	case !sh.Time.Before(now.Add(drift)):
		return fmt.Errorf("header %d has time %v, from the future (now %v, max clock drift %v)", sh.Height, sh.Time, now, drift)
	}
	if got := untrusted.ValidatorSet.Hash(); !bytes.Equal(sh.ValidatorsHash, got) {
		return fmt.Errorf("header %d names validators %X, its light block carries %X", sh.Height, sh.ValidatorsHash, got)
	}
	return nil
}

// verifyBackwards verifies untrusted, the header one below trusted, by
// hash (light.VerifyBackwards): trusted names it as its last block.
func verifyBackwards(untrusted, trusted *cmttypes.Header) error {
	if err := untrusted.ValidateBasic(); err != nil {
		return fmt.Errorf("header %d: %w", untrusted.Height, err)
	}
	switch {
	case untrusted.ChainID != trusted.ChainID:
		return fmt.Errorf("header %d belongs to chain %q, not %q", untrusted.Height, untrusted.ChainID, trusted.ChainID)
	case !untrusted.Time.Before(trusted.Time):
		return fmt.Errorf("header %d has time %v, not before the trusted header %d's %v", untrusted.Height, untrusted.Time, trusted.Height, trusted.Time)
	}
	if got := untrusted.Hash(); !bytes.Equal(got, trusted.LastBlockID.Hash) {
		return fmt.Errorf("header %d hashes to %X, the trusted header %d names %X as its last block", untrusted.Height, got, trusted.Height, trusted.LastBlockID.Hash)
	}
	return nil
}
