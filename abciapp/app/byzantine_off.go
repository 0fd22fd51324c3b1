//go:build !failpoints

package app

import (
	abci "github.com/cometbft/cometbft/abci/types"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

// misbehave is only compiled into failpoints test builds.
func (a *App) misbehave(_ string, txs [][]byte) [][]byte { return txs }

func (a *App) remember(*abci.RequestFinalizeBlock) {}

// withhold and lie are only compiled into failpoints test builds.
func withhold(txs [][]byte) [][]byte          { return txs }
func lie(*byzlogv1.Bundles) *byzlogv1.Bundles { return nil }

// maxRules is the newest rules version this build executes: 0, its own.
func maxRules() uint64 { return 0 }
