// Package app adapts byzlog's state machine (core) and its store to CometBFT's
// ABCI, and serves it over gRPC or CometBFT's socket protocol. It owns the
// FinalizeBlock/Commit split: FinalizeBlock computes and stages the next state,
// Commit persists it, so a crash between the two loses only what CometBFT will
// replay. It holds no consensus logic of its own.
package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	abci "github.com/cometbft/cometbft/abci/types"
	"github.com/rs/zerolog"

	"github.com/byzlog/byzlog/abciapp/core"
	"github.com/byzlog/byzlog/abciapp/store"
)

// AppVersion is the version of the state machine's rules; it changes when a
// block would be executed differently.
const AppVersion uint64 = 1

// Version is the software version reported by Info.
const Version = "0.1.0"

var _ abci.Application = (*App)(nil)

// App is byzlog's ABCI application. CometBFT calls it from several
// connections at once; a mutex serialises them.
type App struct {
	abci.BaseApplication

	log   zerolog.Logger
	store *store.Store

	mu        sync.Mutex
	closed    bool
	committed core.State
	staged    *core.Outcome // set by FinalizeBlock, persisted and cleared by Commit
}

// errClosed is returned by calls that arrive while or after the app shuts down.
var errClosed = errors.New("byzlog-app is shutting down")

// Close waits for the call in progress, then closes the store. Later calls
// that need the store fail instead of touching a closed database.
func (a *App) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil
	}
	a.closed = true
	return a.store.Close()
}

// New returns an App over the given open store.
func New(st *store.Store, log zerolog.Logger) (*App, error) {
	last, err := st.Last()
	if err != nil {
		return nil, fmt.Errorf("load committed state: %w", err)
	}
	return &App{log: log, store: st, committed: core.State{Height: last.Height, AppHash: last.AppHash}}, nil
}

// Info tells CometBFT where the app's state stands, so it replays exactly the
// blocks the app has not committed.
func (a *App) Info(context.Context, *abci.RequestInfo) (*abci.ResponseInfo, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.log.Info().Int64("height", a.committed.Height).Hex("app_hash", a.committed.AppHash).Msg("info")
	return &abci.ResponseInfo{
		Data:             "byzlog",
		Version:          Version,
		AppVersion:       AppVersion,
		LastBlockHeight:  a.committed.Height,
		LastBlockAppHash: a.committed.AppHash,
	}, nil
}

// CheckTx is the mempool's cheap filter.
func (a *App) CheckTx(_ context.Context, req *abci.RequestCheckTx) (*abci.ResponseCheckTx, error) {
	r := core.ValidateTx(req.Tx)
	return &abci.ResponseCheckTx{Code: uint32(r.Code), Log: r.Log, Codespace: codespace(r)}, nil
}

// PrepareProposal proposes the valid transactions that fit the byte budget.
// Mempool recheck is off in byzlog's node configs, so a transaction that
// became invalid is dropped here instead of being proposed.
func (a *App) PrepareProposal(_ context.Context, req *abci.RequestPrepareProposal) (*abci.ResponsePrepareProposal, error) {
	txs := make([][]byte, 0, len(req.Txs))
	var size int64
	for _, tx := range req.Txs {
		if size+int64(len(tx)) > req.MaxTxBytes {
			break
		}
		if !core.ValidateTx(tx).OK() {
			continue
		}
		size += int64(len(tx))
		txs = append(txs, tx)
	}
	return &abci.ResponsePrepareProposal{Txs: txs}, nil
}

// ProcessProposal re-validates every transaction of a proposed block: a
// Byzantine proposer cannot get an invalid one committed.
func (a *App) ProcessProposal(_ context.Context, req *abci.RequestProcessProposal) (*abci.ResponseProcessProposal, error) {
	for i, tx := range req.Txs {
		if r := core.ValidateTx(tx); !r.OK() {
			a.log.Warn().Int64("height", req.Height).Int("tx", i).Stringer("code", r.Code).Str("reason", r.Log).
				Hex("proposer", req.ProposerAddress).Msg("rejecting proposal with an invalid transaction")
			return &abci.ResponseProcessProposal{Status: abci.ResponseProcessProposal_REJECT}, nil
		}
	}
	return &abci.ResponseProcessProposal{Status: abci.ResponseProcessProposal_ACCEPT}, nil
}

// FinalizeBlock executes a decided block and stages the result for Commit.
func (a *App) FinalizeBlock(_ context.Context, req *abci.RequestFinalizeBlock) (*abci.ResponseFinalizeBlock, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, errClosed
	}
	out, err := core.Apply(a.committed, core.Block{Height: req.Height, Txs: req.Txs})
	if err != nil {
		return nil, fmt.Errorf("finalize block: %w", err)
	}
	a.staged = &out
	results := make([]*abci.ExecTxResult, len(out.Results))
	for i, r := range out.Results {
		results[i] = &abci.ExecTxResult{Code: uint32(r.Code), Log: r.Log, Codespace: codespace(r)}
	}
	return &abci.ResponseFinalizeBlock{TxResults: results, AppHash: out.State.AppHash}, nil
}

// Commit persists the state staged by FinalizeBlock.
func (a *App) Commit(context.Context, *abci.RequestCommit) (*abci.ResponseCommit, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, errClosed
	}
	if a.staged == nil {
		return nil, fmt.Errorf("commit: no block was finalized since the last commit at height %d", a.committed.Height)
	}
	next := a.staged.State
	if err := a.store.Commit(store.Committed{Height: next.Height, AppHash: next.AppHash}); err != nil {
		return nil, err
	}
	a.committed, a.staged = next, nil
	a.log.Debug().Int64("height", next.Height).Hex("app_hash", next.AppHash).Msg("committed")
	return &abci.ResponseCommit{}, nil
}

// Query answers read requests; path "/state" returns the committed height
// and app hash as JSON.
func (a *App) Query(_ context.Context, req *abci.RequestQuery) (*abci.ResponseQuery, error) {
	switch req.Path {
	case "/state":
		a.mu.Lock()
		st := a.committed
		a.mu.Unlock()
		v, err := json.Marshal(struct {
			Height  int64  `json:"height"`
			AppHash string `json:"app_hash"`
		}{st.Height, fmt.Sprintf("%X", st.AppHash)})
		if err != nil {
			return nil, fmt.Errorf("encode state: %w", err)
		}
		return &abci.ResponseQuery{Value: v, Height: st.Height}, nil
	}
	return &abci.ResponseQuery{
		Code:      uint32(core.CodeUnknownQuery),
		Codespace: core.Codespace,
		Log:       fmt.Sprintf("unknown query path %q; this version answers \"/state\"", req.Path),
	}, nil
}

func codespace(r core.Result) string {
	if r.OK() {
		return ""
	}
	return core.Codespace
}
