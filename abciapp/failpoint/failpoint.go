// Package failpoint lets test builds of byzlog-app crash or misbehave at
// named points, to prove that crashes lose nothing and that honest
// validators reject a Byzantine proposer. Failpoints exist only in binaries
// built with `-tags failpoints`; in every other build each call is an empty
// function the compiler removes, and the environment is never read.
//
// A test build reads BYZLOG_FAILPOINTS, a comma-separated list of
// name[@height][=value] terms: "commit-after-write@12" crashes the process
// (SIGKILL to itself) when it reaches that point at height 12;
// "byzantine-proposer=replay" turns on a misbehaviour with a mode;
// "commit-delay=700" makes every Commit wait 700 ms before it starts.
package failpoint

import (
	"fmt"
	"strconv"
	"strings"
)

// EnvVar names the environment variable test builds read.
const EnvVar = "BYZLOG_FAILPOINTS"

// Points where byzlog-app can be made to crash.
const (
	// CommitBeforeWrite: in Commit, before the block's RocksDB write.
	CommitBeforeWrite = "commit-before-write"
	// CommitAfterWrite: in Commit, after the synced write, before answering.
	CommitAfterWrite = "commit-after-write"
	// FinalizeStart: at the start of FinalizeBlock (the previous Commit done).
	FinalizeStart = "finalize-start"
	// ByzantineProposer: PrepareProposal adds an invalid transaction; the
	// value says which kind (forged, replay, oversized, unknown-topic),
	// optionally with the topic to write to: "forged:orders".
	ByzantineProposer = "byzantine-proposer"
	// WrongAppHash: FinalizeBlock answers CometBFT with a corrupted app hash
	// at that height (the app's own state stays right): a validator whose
	// app lies about its state, which must halt or be outvoted.
	WrongAppHash = "wrong-app-hash"
	// CommitDelay: Commit sleeps value milliseconds before taking the
	// app's lock, widening the window in which CometBFT has stored a block
	// and its results that queries do not see yet.
	CommitDelay = "commit-delay"
	// MaxRules makes the app execute rules versions up to value only, as
	// an older byzlog-app would (a rolling upgrade's old binary).
	MaxRules = "max-rules"
	// BundleLiar makes the app misbehave with the bundles blocks reference
	// (rules version 3): "withhold" never gossips a bundle it would
	// reference (its peers must fetch what it proposes from it);
	// "corrupt" answers every /bundles query with corrupted bytes.
	BundleLiar = "bundle-liar"
)

type term struct {
	name   string
	height int64 // 0: any height
	value  string
}

func parse(s string) ([]term, error) {
	var out []term
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		var t term
		t.name, t.value, _ = strings.Cut(part, "=")
		if name, h, ok := strings.Cut(t.name, "@"); ok {
			height, err := strconv.ParseInt(h, 10, 64)
			if err != nil || height <= 0 {
				return nil, fmt.Errorf("%s %q: height %q is not a positive integer", EnvVar, part, h)
			}
			t.name, t.height = name, height
		}
		switch t.name {
		case CommitBeforeWrite, CommitAfterWrite, FinalizeStart, ByzantineProposer, WrongAppHash:
		case BundleLiar:
			if t.value != "withhold" && t.value != "corrupt" {
				return nil, fmt.Errorf("%s %q: want %s=withhold or %s=corrupt", EnvVar, part, BundleLiar, BundleLiar)
			}
		case CommitDelay:
			if ms, err := strconv.Atoi(t.value); err != nil || ms <= 0 {
				return nil, fmt.Errorf("%s %q: want %s=MILLISECONDS, a positive integer", EnvVar, part, CommitDelay)
			}
		case MaxRules:
			if v, err := strconv.ParseUint(t.value, 10, 64); err != nil || v == 0 {
				return nil, fmt.Errorf("%s %q: want %s=VERSION, a positive integer", EnvVar, part, MaxRules)
			}
		default:
			return nil, fmt.Errorf("%s %q: unknown failpoint %q", EnvVar, part, t.name)
		}
		out = append(out, t)
	}
	return out, nil
}
