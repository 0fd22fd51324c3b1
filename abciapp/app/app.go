// Package app adapts byzlog's state machine (core) and its store to CometBFT's
// ABCI, and serves it over gRPC or CometBFT's socket protocol. It owns the
// FinalizeBlock/Commit split: FinalizeBlock computes and stages the next state,
// Commit persists it in one synced write, so a crash between the two loses
// only what CometBFT will replay. It holds no rules of its own: every decision
// about a transaction is core's.
package app

import (
	"context"
	"errors"
	"fmt"
	"sync"

	abci "github.com/cometbft/cometbft/abci/types"
	"github.com/rs/zerolog"

	"github.com/byzlog/byzlog/abciapp/core"
	"github.com/byzlog/byzlog/abciapp/failpoint"
	"github.com/byzlog/byzlog/abciapp/store"
)

// AppVersion is the version of the state machine's rules; it changes when a
// block would be executed differently.
const AppVersion uint64 = 1

// Version is the software version reported by Info.
const Version = "0.1.0"

var _ abci.Application = (*App)(nil)

// App is byzlog's ABCI application. CometBFT calls it from several
// connections at once: reads (CheckTx, proposals, queries) share a read lock,
// FinalizeBlock and Commit take the write lock.
type App struct {
	abci.BaseApplication

	log   zerolog.Logger
	store *store.Store

	mu        sync.RWMutex
	closed    bool
	committed core.State
	staged    *core.Outcome // set by FinalizeBlock, persisted and cleared by Commit
	lastTxs   [][]byte      // failpoints builds only: the last block's txs, for a Byzantine replay
}

// errClosed is returned by calls that arrive while or after the app shuts down.
var errClosed = errors.New("byzlog-app is shutting down")

// New returns an App over the given open store.
func New(st *store.Store, log zerolog.Logger) (*App, error) {
	last, err := st.Last()
	if err != nil {
		return nil, fmt.Errorf("load committed state: %w", err)
	}
	return &App{log: log, store: st, committed: core.State{Height: last.Height, AppHash: last.AppHash}}, nil
}

// Close waits for the calls in progress, then closes the store. Later calls
// fail instead of touching a closed database.
func (a *App) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil
	}
	a.closed = true
	return a.store.Close()
}

// read runs fn under the read lock, unless the app is closed.
func (a *App) read(fn func() error) error {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if a.closed {
		return errClosed
	}
	return fn()
}

// Info tells CometBFT where the app's state stands, so it replays exactly the
// blocks the app has not committed.
func (a *App) Info(context.Context, *abci.RequestInfo) (*abci.ResponseInfo, error) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	a.log.Info().Int64("height", a.committed.Height).Hex("app_hash", a.committed.AppHash).Msg("info")
	return &abci.ResponseInfo{
		Data:             "byzlog",
		Version:          Version,
		AppVersion:       AppVersion,
		LastBlockHeight:  a.committed.Height,
		LastBlockAppHash: a.committed.AppHash,
	}, nil
}

// InitChain stores the chain params and genesis topics from app_state. A bad
// app_state stops the node with a message saying what to fix.
func (a *App) InitChain(_ context.Context, req *abci.RequestInitChain) (*abci.ResponseInitChain, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, errClosed
	}
	if a.committed.Height > 0 {
		return nil, fmt.Errorf("InitChain on a store that has committed height %d: this data directory belongs to a running chain; point byzlog-app at an empty --data-dir for a new chain", a.committed.Height)
	}
	params, topics, err := core.ParseGenesis(req.ChainId, req.AppStateBytes)
	if err != nil {
		return nil, err
	}
	if err := a.store.Apply(core.InitChain(params, topics)); err != nil {
		return nil, err
	}
	a.log.Info().Str("chain_id", params.ChainId).Int("admins", len(params.Admins)).Int("topics", len(topics)).Msg("genesis")
	return &abci.ResponseInitChain{}, nil
}

// CheckTx is the mempool's filter: stateless checks plus the cheap stateful
// ones against committed state.
func (a *App) CheckTx(_ context.Context, req *abci.RequestCheckTx) (*abci.ResponseCheckTx, error) {
	var r core.Result
	err := a.read(func() (err error) {
		r, err = core.Check(a.store, req.Tx)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("check tx: %w", err)
	}
	return &abci.ResponseCheckTx{Code: uint32(r.Code), Log: r.Log, Data: r.Data, Codespace: codespace(r)}, nil
}

// PrepareProposal proposes the transactions that are valid, in order, and
// fit the byte budget. Mempool recheck is off in byzlog's node configs, so
// this is where transactions that became invalid are left out.
func (a *App) PrepareProposal(_ context.Context, req *abci.RequestPrepareProposal) (*abci.ResponsePrepareProposal, error) {
	var txs [][]byte
	err := a.read(func() (err error) {
		txs, err = core.Prepare(a.store, core.Block{Height: req.Height, TimeUnixNano: req.Time.UnixNano(), Txs: req.Txs}, req.MaxTxBytes)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("prepare proposal %d: %w", req.Height, err)
	}
	if kind, ok := failpoint.Value(failpoint.ByzantineProposer); ok {
		a.mu.RLock()
		txs = a.misbehave(kind, txs)
		a.mu.RUnlock()
	}
	return &abci.ResponsePrepareProposal{Txs: txs}, nil
}

// ProcessProposal re-validates every transaction of a proposed block against
// committed state, in order: a Byzantine proposer cannot get an invalid one
// committed. A block a correct proposer made is always accepted.
func (a *App) ProcessProposal(_ context.Context, req *abci.RequestProcessProposal) (*abci.ResponseProcessProposal, error) {
	var bad int
	var r core.Result
	err := a.read(func() (err error) {
		bad, r, err = core.Verify(a.store, core.Block{Height: req.Height, TimeUnixNano: req.Time.UnixNano(), Txs: req.Txs})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("process proposal %d: %w", req.Height, err)
	}
	if bad >= 0 {
		a.log.Warn().Int64("height", req.Height).Int("tx", bad).Stringer("code", r.Code).Str("reason", r.Log).
			Hex("proposer", req.ProposerAddress).Msg("rejecting proposal with an invalid transaction")
		return &abci.ResponseProcessProposal{Status: abci.ResponseProcessProposal_REJECT}, nil
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
	failpoint.Crash(failpoint.FinalizeStart, req.Height)
	a.remember(req)
	out, err := core.Execute(a.store, a.committed, core.Block{Height: req.Height, TimeUnixNano: req.Time.UnixNano(), Txs: req.Txs})
	if err != nil {
		return nil, fmt.Errorf("finalize block: %w", err)
	}
	a.staged = &out
	results := make([]*abci.ExecTxResult, len(out.Results))
	for i, r := range out.Results {
		results[i] = &abci.ExecTxResult{Code: uint32(r.Code), Log: r.Log, Data: r.Data, Codespace: codespace(r), Events: events(r.Events)}
	}
	appHash := out.State.AppHash
	if failpoint.Hit(failpoint.WrongAppHash, req.Height) {
		appHash = append([]byte{appHash[0] ^ 0xff}, appHash[1:]...)
		a.log.Warn().Int64("height", req.Height).Msg("failpoint: answering a wrong app hash")
	}
	return &abci.ResponseFinalizeBlock{TxResults: results, AppHash: appHash}, nil
}

// Commit persists the block staged by FinalizeBlock.
func (a *App) Commit(context.Context, *abci.RequestCommit) (*abci.ResponseCommit, error) {
	failpoint.Delay(failpoint.CommitDelay)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, errClosed
	}
	if a.staged == nil {
		return nil, fmt.Errorf("commit: no block was finalized since the last commit at height %d", a.committed.Height)
	}
	next := a.staged.State
	failpoint.Crash(failpoint.CommitBeforeWrite, next.Height)
	if err := a.store.Commit(store.Committed{Height: next.Height, AppHash: next.AppHash}, a.staged.Changes); err != nil {
		return nil, err
	}
	failpoint.Crash(failpoint.CommitAfterWrite, next.Height)
	a.committed, a.staged = next, nil
	a.log.Debug().Int64("height", next.Height).Hex("app_hash", next.AppHash).Msg("committed")
	return &abci.ResponseCommit{}, nil
}

// Query answers reads of committed state; the paths are core.QueryPaths.
func (a *App) Query(_ context.Context, req *abci.RequestQuery) (*abci.ResponseQuery, error) {
	var value []byte
	var r core.Result
	var height int64
	err := a.read(func() (err error) {
		height = a.committed.Height
		value, r, err = core.Query(a.store, a.committed, req.Path, req.Data)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("query %s: %w", req.Path, err)
	}
	return &abci.ResponseQuery{Code: uint32(r.Code), Log: r.Log, Codespace: codespace(r), Value: value, Height: height}, nil
}

func codespace(r core.Result) string {
	if r.OK() {
		return ""
	}
	return core.Codespace
}

func events(es []core.Event) []abci.Event {
	if len(es) == 0 {
		return nil
	}
	out := make([]abci.Event, len(es))
	for i, e := range es {
		out[i].Type = e.Type
		for _, at := range e.Attrs {
			out[i].Attributes = append(out[i].Attributes, abci.EventAttribute{Key: at.Key, Value: at.Value, Index: true})
		}
	}
	return out
}
