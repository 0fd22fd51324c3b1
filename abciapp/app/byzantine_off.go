//go:build !failpoints

package app

import abci "github.com/cometbft/cometbft/abci/types"

// misbehave is only compiled into failpoints test builds.
func (a *App) misbehave(_ string, txs [][]byte) [][]byte { return txs }

func (a *App) remember(*abci.RequestFinalizeBlock) {}

// maxRules is the newest rules version this build executes: 0, its own.
func maxRules() uint64 { return 0 }
