package core

import (
	"fmt"
	"strconv"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// Rules versions. A change to how a block is executed (a new result code,
// a new check) ships in a byzlog-app that knows the new version and runs
// the old rules until the chain switches: an admin request with the
// threshold (ScheduleUpgrade) names the version and a height at least
// wire.MinUpgradeLead blocks ahead, validators replace their binaries one
// by one before it, and from that height every block runs the new rules.
// A build that does not know the version refuses to execute the block at
// that height (Execute fails: the node stops) rather than compute another
// app hash. Version 2 is the first change: an admin request signed twice
// by one admin is refused as duplicate_signer instead of malformed_tx.
// Version 3 lets blocks carry references to large bundles instead of the
// bundles (byzlogv1.Tx.bundle_ref): the app resolves them before core sees
// the block, so core executes the same transactions either way, and a
// reference in a block of an earlier version is malformed. Version 4
// stores a batch's records in runs, many under one key (runs.go): the same
// records, results and proofs, but another layout of the store, which the
// state root covers, so all validators must switch at one height. Version 5
// keeps Kafka's difference between null and empty: a record's key, value or
// header value sent present and empty is stored empty (before, as null,
// which is all a proto3 field without presence could say), and an offset
// commit may name any offset, past the log end too, as Kafka's does (before,
// offset_beyond_end). Version 6 keeps what Kafka clients see of a batch: a
// Kafka producer's codec is stored with its records (kafka_codec), a topic's
// compression_type, timestamp_type and timestamp bounds are checked when set,
// and a batch whose create times pass the bounds is refused (bad_timestamp).
// Version 7 takes CreateTopics, version 8 Kafka transactions (txn.go), and
// version 9 compacted topics (compact.go): a topic's cleanup_policy and
// compaction settings are checked when set, a compacted topic refuses
// records without a key (no_key), and compaction runs at every block's
// start. Version 10 keeps the key tree (keytree.go): every block commits
// to a tree of topics', partitions', compacted keys' and producers' state
// entries, so one entry proves against an app hash. A new chain may start at any version this build knows
// (genesis rules_version).
//
// The version is the app's, not CometBFT's: Info's app_version, which
// CometBFT writes into headers, stays 1 (changing it needs every node's
// CometBFT state to switch at one height too).

// MaxRulesVersion is the newest rules version this build executes.
const MaxRulesVersion uint64 = 10

// CreateTopicsRulesVersion is the first rules version that takes a
// CreateTopics admin request (many topics, all or none, in one
// transaction).
const CreateTopicsRulesVersion uint64 = 7

// KafkaTopicsRulesVersion is the first rules version that stores a Kafka
// batch's codec with its records, checks a topic's Kafka settings and
// refuses records whose create time is out of the topic's bounds.
const KafkaTopicsRulesVersion uint64 = 6

// KafkaRulesVersion is the first rules version that stores empty keys,
// values and header values as empty, not null, and takes offset commits
// past the log end.
const KafkaRulesVersion uint64 = 5

// RunsRulesVersion is the first rules version that stores records in runs
// (runs.go) instead of one a key.
const RunsRulesVersion uint64 = 4

// RefsRulesVersion is the first rules version whose blocks may reference
// bundles (byzlogv1.Tx.bundle_ref) instead of carrying them.
const RefsRulesVersion uint64 = 3

var keyRules = []byte("rules")

// LoadRules reads the rules version in force and any upgrade scheduled
// (version 1 since genesis when none was ever scheduled).
func LoadRules(r Reader) (*byzlogv1.Rules, error) {
	var s byzlogv1.Rules
	ok, err := getProto(r, CFMeta, keyRules, &s)
	if err != nil {
		return nil, err
	}
	if !ok {
		s.Version = 1 // a chain whose genesis named no version
	}
	return &s, nil
}

// RulesAt is the rules version of a block at height on the committed
// state r: the scheduled one from its height on.
func RulesAt(r Reader, height int64) (uint64, error) {
	s, err := LoadRules(r)
	if err != nil {
		return 0, err
	}
	if s.NextHeight != 0 && height >= s.NextHeight {
		return s.NextVersion, nil
	}
	return s.Version, nil
}

// switchRules, at the start of block b, puts a scheduled version in force
// when b reaches its height, and refuses a version past max (0: this
// build's MaxRulesVersion).
func switchRules(r Reader, o *overlay, height int64, max uint64) error {
	s, err := LoadRules(r)
	if err != nil {
		return err
	}
	if s.NextHeight != 0 && height >= s.NextHeight {
		s = &byzlogv1.Rules{Version: s.NextVersion, Since: height}
		o.put(CFMeta, keyRules, marshal(s))
	}
	if max == 0 {
		max = MaxRulesVersion
	}
	if s.Version > max {
		return fmt.Errorf("block %d runs rules version %d (in force since height %d), and this byzlog-app executes at most version %d: replace it with a build that knows version %d", height, s.Version, s.Since, max, s.Version)
	}
	return nil
}

// scheduleUpgrade applies a ScheduleUpgrade at height.
func scheduleUpgrade(o *overlay, height int64, u *byzlogv1.ScheduleUpgrade) (Result, error) {
	s, err := LoadRules(o)
	if err != nil {
		return Result{}, err
	}
	switch {
	case u.RulesVersion == 0 && s.NextHeight == 0:
		return reject(wire.CodeBadUpgrade, "no upgrade is scheduled to cancel (query %s)", wire.PathRules), nil
	case u.RulesVersion == 0:
		s.NextVersion, s.NextHeight = 0, 0
	case u.RulesVersion <= s.Version:
		return reject(wire.CodeBadUpgrade, "rules version %d is in force; an upgrade must name a later one, not %d", s.Version, u.RulesVersion), nil
	case height > 0 && u.Height < height+wire.MinUpgradeLead:
		return reject(wire.CodeBadUpgrade, "upgrade height %d is too soon: at least %d blocks after this one (%d), so every validator can replace its byzlog-app first", u.Height, wire.MinUpgradeLead, height), nil
	default:
		s.NextVersion, s.NextHeight = u.RulesVersion, u.Height
	}
	o.put(CFMeta, keyRules, marshal(s))
	return Result{Code: wire.CodeOK, Events: []Event{{Type: "byzlog.admin", Attrs: []Attr{
		{"op", "schedule_upgrade"}, {"rules_version", strconv.FormatUint(u.RulesVersion, 10)}, {"height", strconv.FormatInt(u.Height, 10)}}}}}, nil
}
