// Package app adapts byzlog's state machine (core) and its store to CometBFT's
// ABCI, and serves it over gRPC or CometBFT's socket protocol. It owns the
// FinalizeBlock/Commit split: FinalizeBlock computes and stages the next state,
// Commit persists it in one synced write, so a crash between the two loses
// only what CometBFT will replay. It holds no rules of its own: every decision
// about a transaction is core's.
package app

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"time"

	abci "github.com/cometbft/cometbft/abci/types"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/abciapp/bundles"
	"github.com/byzlog/byzlog/abciapp/core"
	"github.com/byzlog/byzlog/abciapp/failpoint"
	"github.com/byzlog/byzlog/abciapp/mempool"
	"github.com/byzlog/byzlog/abciapp/store"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// AppVersion is the version of the state machine's rules; it changes when a
// block would be executed differently.
const AppVersion uint64 = 1

// Version is the software version reported by Info.
const Version = "0.1.0"

var _ abci.Application = (*App)(nil)

// App is byzlog's ABCI application. CometBFT calls it from several
// connections at once: reads (CheckTx, proposals, queries) share a read lock,
// FinalizeBlock and Commit take the write lock. The stateless part of every
// transaction (decoding, signatures, decompression: core.Precheck) runs
// before any lock is taken, so an attacker's expensive transactions never
// hold up a block.
//
// The app keeps its own mempool (mempool.Pool; CometBFT's mempool.type =
// "app"): CheckTx and InsertTx admit into it, ReapTxs hands CometBFT what to
// gossip, and PrepareProposal builds the block from it.
type App struct {
	abci.BaseApplication

	log     zerolog.Logger
	store   *store.Store
	poolCfg mempool.Config

	mu        sync.RWMutex
	closed    bool
	committed core.State
	params    *byzlogv1.ChainParams // nil until InitChain; never changes after
	pool      *mempool.Pool         // nil until params are known
	staged    *core.Outcome         // set by FinalizeBlock, persisted and cleared by Commit
	stagedTxs [][]byte              // the staged block's transactions, for snapshots
	stagedIDs [][sha256.Size]byte   // and their hashes, for the mempool and /tx
	lastTxs   [][]byte              // failpoints builds only: the last block's txs, for a Byzantine replay
	roots     *stateRoots
	checked   prechecked // ProcessProposal's prechecks, for FinalizeBlock
	recent    recentTxs  // where this node's last committed transactions are (/tx)
	stagedAt  int64      // the staged block's time, for snapshots
	restore   *restoring // a snapshot being applied (OfferSnapshot on)
	retain    int64
	pruning   *byzlogv1.Pruning // the last Commit's retain height and why (/pruning)

	// Bundles out of consensus (refs.go).
	bundles      *bundles.Store
	peers        []BundlePeer
	gossipWait   time.Duration
	refuseAfter  time.Duration
	proposed     proposals               // bundles this node referenced in its own proposals
	stagedRefs   []bundles.Hash          // the staged block's references, in order
	stagedFetch  map[bundles.Hash][]byte // and the bundles fetched for it
	done         chan struct{}           // closed by Close: ends waits for bundles
	closeBundles sync.Once
}

// Config is the app's node-local configuration.
type Config struct {
	// Mempool bounds the app's mempool.
	Mempool mempool.Config
	// BundleDir holds the bundles blocks reference (rules version 3): a
	// RocksDB of its own (package bundles), block data, not state.
	BundleDir string
	// SnapshotDir holds the checkpoints of the state the chain hashes
	// (genesis snapshot_interval), and SnapshotKeep how many of them stay.
	SnapshotDir  string
	SnapshotKeep int
	// RetainBlocks > 0 turns pruning on: CometBFT may drop blocks older
	// than the last RetainBlocks, but never one at or after the oldest
	// snapshot kept or one a registered indexer has not published
	// (core.RetainHeight). 0 keeps every block.
	RetainBlocks int64
	// Peers are the other nodes a bundle a block references is fetched
	// from when this node lacks it (rules version 3): a proposal's bundle
	// that did not arrive by gossip, or a decided block's this node never
	// held (it voted nil, restarted or is catching up). Every answer is
	// checked against the reference's hash, so any node will do, trusted
	// or not; with none, a validator waits for gossip only.
	Peers []BundlePeer
	// GossipWait is how long ProcessProposal waits for a referenced bundle
	// to arrive by gossip before it asks Peers; RefuseAfter how long in all
	// before it refuses the proposal for a bundle still missing.
	GossipWait, RefuseAfter time.Duration
}

// BundlePeer is another node's /bundles query (wire.PathBundles): the
// bundles named by hashes, in order, nil for one it does not hold. What it
// answers is checked by the caller; it may lie.
type BundlePeer interface {
	Bundles(ctx context.Context, hashes [][sha256.Size]byte) ([][]byte, error)
	String() string
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{Mempool: mempool.Default(), SnapshotKeep: 2, GossipWait: 500 * time.Millisecond, RefuseAfter: 3 * time.Second}
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.SnapshotKeep < 1 || c.SnapshotKeep > 100 {
		return fmt.Errorf("snapshot keep (%d): must be between 1 and 100", c.SnapshotKeep)
	}
	if c.BundleDir == "" {
		return errors.New("bundle dir is empty: give the app a directory for the bundles blocks reference (byzlog-app --bundle-dir)")
	}
	if c.GossipWait < 0 || c.RefuseAfter < c.GossipWait {
		return fmt.Errorf("bundle waits: gossip wait (%s) must be at least 0 and at most refuse-after (%s)", c.GossipWait, c.RefuseAfter)
	}
	if c.RetainBlocks < 0 || (c.RetainBlocks > 0 && c.RetainBlocks < MinRetainBlocks) {
		return fmt.Errorf("retain blocks (%d): 0 keeps every block, otherwise keep at least %d", c.RetainBlocks, MinRetainBlocks)
	}
	return c.Mempool.Validate()
}

// MinRetainBlocks is the fewest blocks pruning may keep: a restarted node
// replays from the blocks it holds, and a peer that fell behind catches up
// from them.
const MinRetainBlocks = 100

// errClosed is returned by calls that arrive while or after the app shuts down.
var errClosed = errors.New("byzlog-app is shutting down")

// New returns an App over the given open store.
func New(st *store.Store, log zerolog.Logger, cfg Config) (*App, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	last, err := st.Last()
	if err != nil {
		return nil, fmt.Errorf("load committed state: %w", err)
	}
	bs, err := bundles.Open(cfg.BundleDir)
	if err != nil {
		return nil, err
	}
	a := &App{log: log, store: st, poolCfg: cfg.Mempool, committed: core.State{Height: last.Height, AppHash: last.AppHash},
		roots: newStateRoots(cfg.SnapshotDir, cfg.SnapshotKeep, log), retain: cfg.RetainBlocks,
		bundles: bs, peers: cfg.Peers, gossipWait: cfg.GossipWait, refuseAfter: cfg.RefuseAfter, done: make(chan struct{})}
	ok := false
	defer func() {
		if !ok {
			_ = bs.Close()
		}
	}()
	if last.Height > 0 {
		params, err := core.LoadParams(st)
		if err != nil {
			return nil, fmt.Errorf("load chain params of committed height %d: %w", last.Height, err)
		}
		if err := a.setParams(params); err != nil {
			return nil, err
		}
		if err := a.resumeRoots(params.Limits); err != nil {
			return nil, err
		}
	} else if params, err := core.LoadParams(st); err == nil {
		// InitChain ran, no block committed yet.
		if err := a.setParams(params); err != nil {
			return nil, err
		}
	}
	ok = true
	return a, nil
}

// resumeRoots, at start, hashes again the states a coming block needs the
// root of; the committed height's own checkpoint is taken again if a crash
// came between its commit and its checkpoint.
func (a *App) resumeRoots(l *byzlogv1.Limits) error {
	for _, h := range pending(l, a.committed.Height) {
		_, rootErr := os.Stat(filepath.Join(a.roots.heightDir(h), "root"))
		if h == a.committed.Height && rootErr != nil {
			if err := a.roots.checkpoint(a.store, h); err != nil {
				return err
			}
			continue
		}
		a.roots.hash(h)
	}
	return nil
}

// setParams remembers the chain's params and starts the mempool.
func (a *App) setParams(params *byzlogv1.ChainParams) error {
	if params.Limits.GetSnapshotInterval() > 0 && a.roots.dir == "" {
		return fmt.Errorf("the chain hashes its state every %d blocks (genesis snapshot_interval) and byzlog-app has no --snapshot-dir to keep the checkpoints in", params.Limits.SnapshotInterval)
	}
	pool, err := mempool.New(a.poolCfg, params)
	if err != nil {
		return err
	}
	a.params, a.pool = params, pool
	return nil
}

// chain returns the params and the mempool, or an error before InitChain.
func (a *App) chain() (*byzlogv1.ChainParams, *mempool.Pool, error) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if a.closed {
		return nil, nil, errClosed
	}
	if a.params == nil {
		return nil, nil, errors.New("the chain has no params yet: InitChain has not run")
	}
	return a.params, a.pool, nil
}

// Close waits for the calls in progress, then closes the store. Later calls
// fail instead of touching a closed database.
func (a *App) Close() error {
	a.closeBundles.Do(func() { close(a.done) }) // a FinalizeBlock waiting for bundles gives up
	a.roots.wg.Wait()                           // no hashing left reading a checkpoint
	a.roots.closeServed()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil
	}
	a.closed = true
	return errors.Join(a.store.Close(), a.bundles.Close())
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
		return nil, fmt.Errorf("InitChain on a store that has committed height %d: this data directory belongs to a running chain; give the app an empty data_dir for a new chain", a.committed.Height)
	}
	params, topics, err := core.ParseGenesis(req.ChainId, req.AppStateBytes)
	if err != nil {
		return nil, err
	}

	validators, err := genesisValidators(req.Validators)
	if err != nil {
		return nil, err
	}
	if err := a.store.Apply(core.InitChain(params, topics, validators...)); err != nil {
		return nil, err
	}
	if err := a.setParams(params); err != nil {
		return nil, err
	}
	a.log.Info().Str("chain_id", params.ChainId).Int("admins", len(params.Admins)).Uint32("admin_threshold", params.AdminThreshold).
		Int("validators", len(validators)).Int("topics", len(topics)).Msg("genesis")
	return &abci.ResponseInitChain{}, nil
}

// CheckTx admits a transaction that arrived by RPC into the app's mempool:
// the stateless checks first, with no lock held, then admission on top of
// committed state and what the mempool already holds (mempool.Pool.Add).
func (a *App) CheckTx(_ context.Context, req *abci.RequestCheckTx) (resp *abci.ResponseCheckTx, err error) {
	defer a.recoverTx("check_tx", req.Tx, func(r core.Result) { resp, err = checkTxResponse(r), nil })
	r, err := a.admit(req.Tx, true)
	if err != nil {
		return nil, fmt.Errorf("check tx: %w", err)
	}
	return checkTxResponse(r), nil
}

func checkTxResponse(r core.Result) *abci.ResponseCheckTx {
	return &abci.ResponseCheckTx{Code: uint32(r.Code), Log: r.Log, Data: r.Data, Codespace: codespace(r)}
}

// InsertTx admits a transaction a peer gossiped.
func (a *App) InsertTx(_ context.Context, req *abci.RequestInsertTx) (resp *abci.ResponseInsertTx, err error) {
	defer a.recoverTx("insert_tx", req.Tx, func(r core.Result) { resp, err = &abci.ResponseInsertTx{Code: uint32(r.Code)}, nil })
	r, err := a.admit(req.Tx, false)
	if err != nil {
		return nil, fmt.Errorf("insert tx: %w", err)
	}
	if !r.OK() {
		a.log.Debug().Stringer("code", r.Code).Str("reason", r.Log).Msg("refused a gossiped transaction")
	}
	return &abci.ResponseInsertTx{Code: uint32(r.Code)}, nil
}

// admit prechecks tx with no lock held, then adds it to the mempool.
func (a *App) admit(tx []byte, local bool) (core.Result, error) {
	params, pool, err := a.chain()
	if err != nil {
		return core.Result{}, err
	}
	c := core.Precheck(params, tx, false)
	if !c.Result().OK() {
		return c.Result(), nil
	}
	if c.ProposerOnly() {
		// Unsigned: taken by RPC, anyone could fill mempools with expiries
		// of transactions not yet due, each refused only in a block.
		return core.Result{Code: wire.CodeBadTxnState, Log: "a TxnExpire is not taken by RPC or gossip: a block's proposer adds it once the transaction's timeout has passed by the block's time"}, nil
	}
	var r core.Result
	err = a.read(func() (err error) {
		r, err = pool.Add(a.store, a.committed.Height, c, local)
		return err
	})
	return r, err
}

// ReapTxs hands CometBFT the transactions to gossip to peers: those that
// arrived here by RPC and are ready, once each.
func (a *App) ReapTxs(_ context.Context, req *abci.RequestReapTxs) (*abci.ResponseReapTxs, error) {
	_, pool, err := a.chain()
	if err != nil {
		return &abci.ResponseReapTxs{}, nil
	}
	return &abci.ResponseReapTxs{Txs: withhold(pool.Reap(req.MaxBytes))}, nil
}

// PrepareProposal proposes the mempool's ready transactions, in order,
// that are valid and fit the block's byte and inflated budgets. The
// transactions CometBFT offers (none with mempool.type = "app") are ignored:
// the app's mempool holds everything its CheckTx admitted.
func (a *App) PrepareProposal(_ context.Context, req *abci.RequestPrepareProposal) (resp *abci.ResponsePrepareProposal, err error) {
	defer a.recoverBlock("prepare_proposal", req.Height, func() { resp, err = &abci.ResponsePrepareProposal{}, nil })
	var txs [][]byte
	var refs bool
	var pool *mempool.Pool
	err = a.read(func() error {
		pool = a.pool
		if a.pool == nil {
			return errors.New("the chain has no params yet: InitChain has not run")
		}
		v, err := core.RulesAt(a.store, req.Height)
		if err != nil {
			return err
		}
		refs = v >= core.RefsRulesVersion
		checked, err := a.pool.Proposal(a.store, a.committed.Height)
		if err != nil {
			return err
		}
		if v >= core.TxnRulesVersion {
			// Transactions past their timeout are aborted first: the
			// block's time decides, and nobody else need ask.
			due, err := core.DueTxns(a.store, req.Time.UnixNano(), core.MaxExpiriesPerBlock)
			if err != nil {
				return err
			}
			expiries := make([]*core.Checked, len(due))
			for i, tx := range due {
				expiries[i] = core.Precheck(a.params, tx, false)
			}
			checked = append(expiries, checked...)
		}
		b := core.Block{Height: req.Height, TimeUnixNano: req.Time.UnixNano(), Checked: checked}
		for _, c := range checked {
			b.Txs = append(b.Txs, c.Tx)
		}
		if refs {
			// Referenced, a block's bundles fill what a validator takes
			// (refBudget), and only what the block carries counts
			// against CometBFT's block.max_bytes (req.MaxTxBytes): a
			// reference is 34 bytes.
			txs, err = core.PrepareRefs(a.store, b, refBudget(a.params), req.MaxTxBytes, true)
			return err
		}
		txs, err = core.Prepare(a.store, b, req.MaxTxBytes)
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
	if refs {
		txs = carriedWithin(a.toRefs(req.Height, txs, pool), req.MaxTxBytes)
	}
	return &abci.ResponsePrepareProposal{Txs: txs}, nil
}

// ProcessProposal re-validates every transaction of a proposed block against
// committed state, in order: a Byzantine proposer cannot get an invalid one
// committed. A block a correct proposer made is always accepted.
func (a *App) ProcessProposal(ctx context.Context, req *abci.RequestProcessProposal) (resp *abci.ResponseProcessProposal, err error) {
	// A proposal the app cannot check is not accepted.
	defer a.recoverBlock("process_proposal", req.Height, func() {
		resp, err = &abci.ResponseProcessProposal{Status: abci.ResponseProcessProposal_REJECT}, nil
	})
	params, pool, err := a.chain()
	if err != nil {
		return nil, fmt.Errorf("process proposal %d: %w", req.Height, err)
	}
	reject := func(err error, msg string) (*abci.ResponseProcessProposal, error) {
		a.log.Warn().Err(err).Int64("height", req.Height).Hex("proposer", req.ProposerAddress).Msg(msg)
		return &abci.ResponseProcessProposal{Status: abci.ResponseProcessProposal_REJECT}, nil
	}
	txs := req.Txs
	refs, err := a.refsOn(req.Height)
	if err != nil {
		return nil, fmt.Errorf("process proposal %d: %w", req.Height, err)
	}
	var res *resolved
	var committed [][]byte // with references resolved: the block as committed
	if refs {
		if res, err = a.resolve(ctx, req.Height, req.Txs, time.Now().Add(a.refuseAfter)); err != nil {
			return reject(err, "rejecting a proposal whose bundles this node cannot get")
		}
		txs, committed = res.txs, req.Txs
	}
	// Records are kept: FinalizeBlock takes them from the cache if this
	// proposal is decided.
	b := core.Block{Height: req.Height, TimeUnixNano: req.Time.UnixNano(), Txs: txs, Checked: a.checked.check(params, pool, req.Height, txs, committed, true)}
	if refs {
		if err := refsName(req.Txs, b.Checked); err != nil {
			return reject(err, "rejecting a proposal with a reference to what a block may not reference")
		}
	}
	var bad int
	var r core.Result
	err = a.read(func() (err error) {
		bad, r, err = core.Verify(a.store, b)
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
	// The vote promises the bundles: held durably, or no vote. Written
	// only for a block this node would vote for.
	if refs {
		if err := a.persist(req.Height, res, req.Txs); err != nil {
			return reject(err, "rejecting a proposal whose bundles this node cannot hold durably")
		}
	}
	return &abci.ResponseProcessProposal{Status: abci.ResponseProcessProposal_ACCEPT}, nil
}

// FinalizeBlock executes a decided block and stages the result for Commit.
func (a *App) FinalizeBlock(ctx context.Context, req *abci.RequestFinalizeBlock) (*abci.ResponseFinalizeBlock, error) {
	params, pool, err := a.chain()
	if err != nil {
		return nil, fmt.Errorf("finalize block %d: %w", req.Height, err)
	}
	txs, r := req.Txs, &resolved{}
	var committed [][]byte // with references resolved: the block as committed
	if refs, err := a.refsOn(req.Height); err != nil {
		return nil, fmt.Errorf("finalize block %d: %w", req.Height, err)
	} else if refs {
		// Decided: f+1 correct validators hold every bundle; ask until
		// one answers.
		if r, err = a.resolve(ctx, req.Height, req.Txs, time.Time{}); err != nil {
			return nil, fmt.Errorf("finalize block %d: %w", req.Height, err)
		}
		txs, committed = r.txs, req.Txs
	}
	// Decoding, signatures and decompression need no state: done before
	// the write lock, so CheckTx and queries are held up only by execution;
	// done once, by ProcessProposal, if this node saw the proposal.
	checked := a.checked.check(params, pool, req.Height, txs, committed, false)
	defer a.checked.done(req.Height)
	var root *byzlogv1.StateRoot
	if h, due := core.StateRootDue(params.Limits, req.Height); due {
		if root, err = a.roots.root(h); err != nil {
			return nil, fmt.Errorf("finalize block %d: %w", req.Height, err)
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, errClosed
	}
	failpoint.Crash(failpoint.FinalizeStart, req.Height)
	a.remember(req)
	out, err := core.Execute(a.store, a.committed, core.Block{Height: req.Height, TimeUnixNano: req.Time.UnixNano(), Txs: txs, Checked: checked, StateRoot: root, MaxRules: maxRules()})
	if err != nil {
		// CometBFT stops on it; say why here too, where operators look.
		a.log.Error().Err(err).Int64("height", req.Height).Msg("cannot execute the decided block")
		return nil, fmt.Errorf("finalize block: %w", err)
	}
	a.staged, a.stagedTxs, a.stagedAt = &out, txs, req.Time.UnixNano()
	a.stagedRefs, a.stagedFetch = r.refs, r.fetched
	a.stagedIDs = make([][sha256.Size]byte, len(checked))
	for i, c := range checked {
		a.stagedIDs[i] = c.Hash
	}
	results := make([]*abci.ExecTxResult, len(out.Results))
	for i, r := range out.Results {
		results[i] = &abci.ExecTxResult{Code: uint32(r.Code), Log: r.Log, Data: r.Data, Codespace: codespace(r), Events: events(r.Events)}
	}
	appHash := out.State.AppHash
	if failpoint.Hit(failpoint.WrongAppHash, req.Height) {
		appHash = append([]byte{appHash[0] ^ 0xff}, appHash[1:]...)
		a.log.Warn().Int64("height", req.Height).Msg("failpoint: answering a wrong app hash")
	}
	updates := make([]abci.ValidatorUpdate, len(out.ValidatorUpdates))
	for i, v := range out.ValidatorUpdates {
		updates[i] = abci.Ed25519ValidatorUpdate(v.PubKey, v.Power)
		a.log.Info().Int64("height", req.Height).Hex("pub_key", v.PubKey).Int64("power", v.Power).Msg("validator update")
	}
	return &abci.ResponseFinalizeBlock{TxResults: results, AppHash: appHash, ValidatorUpdates: updates}, nil
}

// genesisValidators is CometBFT's genesis validator set as the app keeps
// it: ed25519 keys only (core.GenesisValidators).
func genesisValidators(vs []abci.ValidatorUpdate) ([]*byzlogv1.Validator, error) {
	out := make([]*byzlogv1.Validator, len(vs))
	for i, v := range vs {
		key := v.PubKey.GetEd25519()
		if key == nil {
			return nil, fmt.Errorf("genesis validator %d has a %T key; byzlog takes ed25519 validator keys", i, v.PubKey.Sum)
		}
		out[i] = &byzlogv1.Validator{PubKey: key, Power: v.Power}
	}
	return core.GenesisValidators(out)
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
	next, staged := a.staged.State, a.staged
	failpoint.Crash(failpoint.CommitBeforeWrite, next.Height)
	// Bundles first: once the state says the height committed, its
	// bundles are indexed (and proposals never decided dropped).
	if err := a.bundles.Commit(next.Height, a.stagedRefs, a.stagedFetch); err != nil {
		return nil, err
	}
	a.stagedRefs, a.stagedFetch = nil, nil
	if err := a.store.Commit(store.Committed{Height: next.Height, AppHash: next.AppHash}, a.staged.Changes); err != nil {
		return nil, err
	}
	failpoint.Crash(failpoint.CommitAfterWrite, next.Height)
	a.committed, a.staged = next, nil
	if a.pool != nil {
		a.pool.Committed(next.Height, a.stagedIDs)
	}
	a.recent.committed(next.Height, a.stagedIDs)
	if a.params != nil && core.SnapshotHeight(a.params.Limits, next.Height) {
		if err := a.roots.checkpoint(a.store, next.Height); err != nil {
			return nil, fmt.Errorf("commit %d: checkpoint the state to hash: %w", next.Height, err)
		}
	}
	if a.params != nil {
		// Snapshots are for others to join by: a failure costs them, not
		// this node's commit.
		if err := a.snapshotBlocks(staged, core.Block{Height: next.Height, TimeUnixNano: a.stagedAt, Txs: a.stagedTxs}); err != nil {
			a.log.Warn().Err(err).Int64("height", next.Height).Msg("could not save what a snapshot needs; it will not be offered")
		}
	}
	a.stagedTxs, a.stagedIDs = nil, nil
	a.log.Debug().Int64("height", next.Height).Hex("app_hash", next.AppHash).Msg("committed")
	p, err := a.retainHeight(next.Height)
	if err != nil {
		return nil, fmt.Errorf("commit %d: %w", next.Height, err)
	}
	if p.RetainHeight > 0 {
		if _, err := a.bundles.Prune(p.RetainHeight); err != nil {
			return nil, fmt.Errorf("commit %d: %w", next.Height, err)
		}
	}
	return &abci.ResponseCommit{RetainHeight: p.RetainHeight}, nil
}

// retainHeight works out, after committing height, the height CometBFT may
// prune below (core.RetainHeight), logs what holds it back when that
// changes, and keeps it for /pruning.
func (a *App) retainHeight(height int64) (*byzlogv1.Pruning, error) {
	var p *byzlogv1.Pruning
	if a.retain == 0 {
		p = core.RetainHeight(height, 0, 0, nil)
	} else {
		ix, err := core.LoadIndexers(a.store)
		if err != nil {
			return nil, fmt.Errorf("load the registered indexers: %w", err)
		}
		p = core.RetainHeight(height, a.retain, a.roots.oldestSnapshot(), ix)
	}
	if a.pruning == nil || a.pruning.HeldBy != p.HeldBy {
		a.log.Info().Int64("height", height).Int64("retain_height", p.RetainHeight).Str("held_by", p.HeldBy).
			Int64("retain_blocks", p.RetainBlocks).Int64("oldest_snapshot", p.OldestSnapshot).Msg("block retention")
	}
	a.pruning = p
	return p, nil
}

// Query answers reads of committed state; the paths are wire.QueryPaths.
func (a *App) Query(_ context.Context, req *abci.RequestQuery) (resp *abci.ResponseQuery, err error) {
	defer a.recoverTx("query", req.Data, func(r core.Result) {
		resp, err = &abci.ResponseQuery{Code: uint32(r.Code), Log: r.Log, Codespace: wire.Codespace}, nil
	})
	switch req.Path {
	case wire.PathTx:
		return a.queryTx(req.Data), nil
	case wire.PathBundles:
		return a.queryBundles(req.Data), nil
	}
	var value []byte
	var r core.Result
	var height int64
	err = a.read(func() (err error) {
		height = a.committed.Height
		if req.Path == wire.PathPruning {
			p := a.pruning
			if p == nil {
				p = &byzlogv1.Pruning{Height: height, RetainBlocks: a.retain, HeldBy: "no block committed since start"}
			}
			value, err = proto.Marshal(p)
			return err
		}
		value, r, err = core.Query(a.store, a.committed, req.Path, req.Data)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("query %s: %w", req.Path, err)
	}
	return &abci.ResponseQuery{Code: uint32(r.Code), Log: r.Log, Codespace: codespace(r), Value: value, Height: height}, nil
}

// queryTx answers wire.PathTx: where the transaction whose SHA-256 hash is
// data committed, among those this node committed since it started.
func (a *App) queryTx(data []byte) *abci.ResponseQuery {
	refuse := func(code wire.Code, format string, args ...any) *abci.ResponseQuery {
		return &abci.ResponseQuery{Code: uint32(code), Log: fmt.Sprintf(format, args...), Codespace: wire.Codespace}
	}
	if len(data) != sha256.Size {
		return refuse(wire.CodeBadQuery, "%s takes a transaction's SHA-256 hash (%d bytes), got %d bytes", wire.PathTx, sha256.Size, len(data))
	}
	at, ok := a.recent.find([sha256.Size]byte(data))
	if !ok {
		return refuse(wire.CodeNotFound, "this node has not committed transaction %X since it started (it remembers the last %d)", data, maxRecentTxs)
	}
	return &abci.ResponseQuery{Key: data, Height: at.height, Index: int64(at.index)}
}

func codespace(r core.Result) string {
	if r.OK() {
		return ""
	}
	return wire.Codespace
}

func events(es []core.Event) []abci.Event {
	if len(es) == 0 {
		return nil
	}
	out := make([]abci.Event, len(es))
	for i, e := range es {
		out[i].Type = e.Type
		for _, at := range e.Attrs {
			out[i].Attributes = append(out[i].Attributes, abci.EventAttribute{Key: at.Key, Value: at.Value})
		}
	}
	return out
}

// recoverTx turns a panic while handling one client's input into a
// refusal of that input, so that no transaction or query, however built,
// stops the app. The cause is a bug: it is logged with the input's hash.
func (a *App) recoverTx(method string, input []byte, refuse func(core.Result)) {
	p := recover()
	if p == nil {
		return
	}
	sum := sha256.Sum256(input)
	a.log.Error().Str("method", method).Str("panic", fmt.Sprint(p)).Hex("input_sha256", sum[:]).Str("stack", string(debug.Stack())).
		Msg("refused an input the app failed on")
	refuse(core.Result{Code: wire.CodeInternal, Log: "the app failed on this input and refused it; the node's log has the details"})
}

// recoverBlock does the same for a proposal: a block the app fails on is
// neither proposed nor accepted. FinalizeBlock has no such guard: a decided
// block that cannot be executed must stop the node, not diverge.
func (a *App) recoverBlock(method string, height int64, refuse func()) {
	p := recover()
	if p == nil {
		return
	}
	a.log.Error().Str("method", method).Int64("height", height).Str("panic", fmt.Sprint(p)).Str("stack", string(debug.Stack())).
		Msg("the app failed on a proposal")
	refuse()
}
