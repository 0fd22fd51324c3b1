package core

import (
	"bytes"
	"crypto/ed25519"
	"fmt"
	"slices"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// Governance: who may sign admin requests (the admin set, k of n) and who
// validates (the validator set the app hands CometBFT). Both live in
// CFMeta, start from genesis and change only by admin requests that carry
// the admin set's threshold of signatures.

var (
	keyAdmins     = []byte("admins")
	keyValidators = []byte("validators")
)

const (
	// MinValidators is the smallest validator set a change may leave when
	// it removes a validator: 3f+1 with f = 1.
	MinValidators = 4
	// MaxValidatorPower bounds one validator's power, so that no sum of
	// powers comes near CometBFT's MaxTotalVotingPower (MaxInt64/8).
	MaxValidatorPower = int64(1) << 40
	// MaxValidators bounds the validator set the app tracks.
	MaxValidators = 256
	// MaxAdmins bounds the admin set.
	MaxAdmins = 64
)

// loadAdmins reads the admin set; a store from before admin sets were kept
// reads the genesis admins with threshold 1.
func loadAdmins(r Reader, params *byzlogv1.ChainParams) (*byzlogv1.AdminSet, error) {
	var s byzlogv1.AdminSet
	ok, err := getProto(r, CFMeta, keyAdmins, &s)
	if err != nil {
		return nil, err
	}
	if !ok {
		return genesisAdminSet(params), nil
	}
	return &s, nil
}

func genesisAdminSet(params *byzlogv1.ChainParams) *byzlogv1.AdminSet {
	return &byzlogv1.AdminSet{Admins: params.Admins, Threshold: max(params.AdminThreshold, 1)}
}

// LoadValidators reads the validator set the app keeps.
func LoadValidators(r Reader) (*byzlogv1.ValidatorSet, error) {
	var s byzlogv1.ValidatorSet
	if _, err := getProto(r, CFMeta, keyValidators, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// GenesisValidators checks and sorts the validators CometBFT's InitChain
// gives, for InitChain.
func GenesisValidators(vs []*byzlogv1.Validator) ([]*byzlogv1.Validator, error) {
	out := slices.Clone(vs)
	slices.SortFunc(out, func(a, b *byzlogv1.Validator) int { return bytes.Compare(a.PubKey, b.PubKey) })
	for i, v := range out {
		switch {
		case len(v.PubKey) != ed25519.PublicKeySize:
			return nil, fmt.Errorf("genesis validator %x: byzlog takes ed25519 validator keys (32 bytes), this one is %d bytes", v.PubKey, len(v.PubKey))
		case v.Power <= 0 || v.Power > MaxValidatorPower:
			return nil, fmt.Errorf("genesis validator %x: power %d, want 1 to %d", v.PubKey, v.Power, MaxValidatorPower)
		case i > 0 && bytes.Equal(out[i-1].PubKey, v.PubKey):
			return nil, fmt.Errorf("genesis validator %x is listed twice", v.PubKey)
		}
	}
	if len(out) > MaxValidators {
		return nil, fmt.Errorf("genesis lists %d validators, byzlog takes at most %d", len(out), MaxValidators)
	}
	return out, nil
}

// dangerous says whether op needs the admin set's threshold, and names it.
func dangerous(body *byzlogv1.AdminBody) (string, bool) {
	switch body.Op.(type) {
	case *byzlogv1.AdminBody_CreateTopic:
		return "create_topic", false
	case *byzlogv1.AdminBody_CreateTopics:
		return "create_topics", false
	case *byzlogv1.AdminBody_UpdateTopic:
		return "update_topic", false
	case *byzlogv1.AdminBody_DeleteTopic:
		return "delete_topic", true
	case *byzlogv1.AdminBody_DeleteRecords:
		// Before rules version 6 an operation the chain does not know,
		// which is dangerous too: the same answer either way.
		return "delete_records", true
	case *byzlogv1.AdminBody_SetValidator:
		return "set_validator", true
	case *byzlogv1.AdminBody_SetAdmins:
		return "set_admins", true
	case *byzlogv1.AdminBody_ScheduleUpgrade:
		return "schedule_upgrade", true
	case *byzlogv1.AdminBody_SetIndexer:
		// Registering only keeps more blocks; unregistering lets nodes
		// prune what that indexer has not published.
		if body.GetSetIndexer().Remove {
			return "unregister_indexer", true
		}
		return "register_indexer", false
	}
	return "unknown", true
}

// checkSigners checks that every signer of req is a distinct admin and that
// there are enough of them for op. The signatures themselves were verified
// without state (decodeTx).
func checkSigners(admins *byzlogv1.AdminSet, req *byzlogv1.AdminRequest, op string, needsThreshold bool, rules uint64) Result {
	keys := [][]byte{req.AdminKey}
	for _, c := range req.Cosignatures {
		keys = append(keys, c.AdminKey)
	}
	for i, k := range keys {
		if !slices.ContainsFunc(admins.Admins, func(a []byte) bool { return bytes.Equal(a, k) }) {
			return reject(wire.CodeNotAdmin, "key %x is not an admin of this chain (query %s for the admin set)", k, wire.PathAdmins)
		}
		for _, earlier := range keys[:i] {
			if bytes.Equal(earlier, k) {
				code := wire.CodeMalformedTx
				if rules >= 2 {
					code = wire.CodeDuplicateSigner
				}
				return reject(code, "admin key %x signs the request twice; each signature must come from another admin", k)
			}
		}
	}
	need := 1
	if needsThreshold {
		need = int(admins.Threshold)
	}
	if len(keys) < need {
		return reject(wire.CodeBelowThreshold, "%s needs %d of the %d admins' signatures, the request carries %d: have more admins cosign the same body (byzlog admin cosign)",
			op, need, len(admins.Admins), len(keys))
	}
	return Result{Code: wire.CodeOK}
}

// setAdmins replaces the admin set.
func setAdmins(o *overlay, s *byzlogv1.SetAdmins) Result {
	n := len(s.Admins)
	if n == 0 || n > MaxAdmins {
		return reject(wire.CodeBadAdminSet, "the admin set must hold 1 to %d keys, this one holds %d", MaxAdmins, n)
	}
	keys := slices.Clone(s.Admins)
	slices.SortFunc(keys, bytes.Compare)
	for i, k := range keys {
		if len(k) != ed25519.PublicKeySize {
			return reject(wire.CodeBadAdminSet, "admin key %x is %d bytes, an ed25519 public key is %d", k, len(k), ed25519.PublicKeySize)
		}
		if i > 0 && bytes.Equal(keys[i-1], k) {
			return reject(wire.CodeBadAdminSet, "admin key %x is listed twice", k)
		}
	}
	if s.Threshold == 0 || int(s.Threshold) > n {
		return reject(wire.CodeBadAdminSet, "threshold %d: want 1 to the number of admins, %d", s.Threshold, n)
	}
	o.put(CFMeta, keyAdmins, marshal(&byzlogv1.AdminSet{Admins: keys, Threshold: s.Threshold}))
	return Result{Code: wire.CodeOK}
}

// setValidator applies one validator change to the set in o, measured
// against start, the set before the block: the block's changes together
// may move at most a third of start's power, and a removal may not leave
// fewer than MinValidators.
func setValidator(o *overlay, start *byzlogv1.ValidatorSet, height int64, s *byzlogv1.SetValidator) (Result, error) {
	if len(s.PubKey) != ed25519.PublicKeySize {
		return reject(wire.CodeBadValidatorChange, "validator key is %d bytes; byzlog takes ed25519 consensus keys (32 bytes)", len(s.PubKey)), nil
	}
	if s.Power < 0 || s.Power > MaxValidatorPower {
		return reject(wire.CodeBadValidatorChange, "power %d: want 0 (remove) to %d", s.Power, MaxValidatorPower), nil
	}
	set, err := LoadValidators(o)
	if err != nil {
		return Result{}, err
	}
	i, found := slices.BinarySearchFunc(set.Validators, s.PubKey, func(v *byzlogv1.Validator, k []byte) int { return bytes.Compare(v.PubKey, k) })
	switch {
	case !found && s.Power == 0:
		return reject(wire.CodeBadValidatorChange, "validator %x is not in the set; there is nothing to remove", s.PubKey), nil
	case found && set.Validators[i].Power == s.Power:
		return reject(wire.CodeBadValidatorChange, "validator %x already has power %d", s.PubKey, s.Power), nil
	}
	next := slices.Clone(set.Validators)
	switch {
	case s.Power == 0:
		next = slices.Delete(next, i, i+1)
	case found:
		next[i] = &byzlogv1.Validator{PubKey: s.PubKey, Power: s.Power}
	default:
		next = slices.Insert(next, i, &byzlogv1.Validator{PubKey: s.PubKey, Power: s.Power})
	}
	if s.Power == 0 && len(next) < MinValidators {
		return reject(wire.CodeBadValidatorChange, "removing validator %x would leave %d validators; byzlog keeps at least %d (3f+1 with f = 1): add one first", s.PubKey, len(next), MinValidators), nil
	}
	if len(next) > MaxValidators {
		return reject(wire.CodeBadValidatorChange, "the set would hold %d validators, byzlog takes at most %d", len(next), MaxValidators), nil
	}
	if len(start.Validators) == 0 {
		return reject(wire.CodeBadValidatorChange, "this chain's state holds no validator set (it was created before byzlog kept one), so no change can be checked: start a new chain"), nil
	}
	total, moved := totalPower(start.Validators), movedPower(start.Validators, next)
	if 3*moved > total {
		return reject(wire.CodeBadValidatorChange, "this block's validator changes would move %d of the %d voting power, more than a third: change less at once, over several blocks", moved, total), nil
	}
	o.put(CFMeta, keyValidators, marshal(&byzlogv1.ValidatorSet{Validators: next, Height: height}))
	return Result{Code: wire.CodeOK}, nil
}

func totalPower(vs []*byzlogv1.Validator) int64 {
	var t int64
	for _, v := range vs {
		t += v.Power
	}
	return t
}

// movedPower is the sum of every validator's power change from a to b
// (both sorted by key).
func movedPower(a, b []*byzlogv1.Validator) int64 {
	var moved int64
	for _, u := range ValidatorUpdates(a, b) {
		old := int64(0)
		if i, ok := slices.BinarySearchFunc(a, u.PubKey, func(v *byzlogv1.Validator, k []byte) int { return bytes.Compare(v.PubKey, k) }); ok {
			old = a[i].Power
		}
		d := u.Power - old
		if d < 0 {
			d = -d
		}
		moved += d
	}
	return moved
}

// ValidatorUpdates is what turns set a into set b (both sorted by key), in
// key order: CometBFT's validator updates, power 0 for a removal.
func ValidatorUpdates(a, b []*byzlogv1.Validator) []*byzlogv1.Validator {
	var out []*byzlogv1.Validator
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		var c int
		switch {
		case i == len(a):
			c = 1
		case j == len(b):
			c = -1
		default:
			c = bytes.Compare(a[i].PubKey, b[j].PubKey)
		}
		switch {
		case c < 0:
			out = append(out, &byzlogv1.Validator{PubKey: a[i].PubKey})
			i++
		case c > 0:
			out = append(out, b[j])
			j++
		default:
			if a[i].Power != b[j].Power {
				out = append(out, b[j])
			}
			i++
			j++
		}
	}
	return out
}
