// Package core is byzlog's replicated state machine: given a read view of
// the committed state and a block decided by consensus, it returns each
// transaction's result, the events, the change set to persist and the next
// app hash. Every validator runs it and must reach the same answer, so it
// never performs I/O, reads a clock, draws random numbers, starts goroutines,
// iterates maps in their own order or uses floats. Time comes from the block
// header. The ABCI adapter and the store do all I/O around it.
package core

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// State is the part of the committed state that identifies it: the last
// committed height and the app hash after it.
type State struct {
	Height  int64
	AppHash []byte
}

// Block is a block as consensus decided (or a proposer proposes) it.
type Block struct {
	Height int64
	// TimeUnixNano is the block time from the header: the log-append time of
	// every record in the block, and the clock retention runs on.
	TimeUnixNano int64
	Txs          [][]byte
	// Checked optionally holds Txs already prechecked (Precheck; with their
	// records for Execute), one per tx, so that a caller can do the
	// expensive stateless work outside its locks. Nil: prechecked here.
	Checked []*Checked
	// StateRoot is the root of the state StateRootLag blocks before, which
	// a block of a height StateRootDue names must carry (the app hashes
	// the state in the background); nil at every other height.
	StateRoot *byzlogv1.StateRoot
	// MaxRules is the newest rules version the caller executes (0: this
	// build's MaxRulesVersion); a block past it fails Execute.
	MaxRules uint64
}

// checked returns the block's prechecked transactions.
func (b Block) checked(params *byzlogv1.ChainParams, keepRecords bool) ([]*Checked, error) {
	if b.Checked == nil {
		return precheckAll(params, b.Txs, keepRecords), nil
	}
	if len(b.Checked) != len(b.Txs) {
		return nil, fmt.Errorf("block %d: %d prechecked transactions for %d txs", b.Height, len(b.Checked), len(b.Txs))
	}
	return b.Checked, nil
}

// Result is the outcome of one transaction.
type Result struct {
	Code wire.Code
	// Log says what was wrong, in words a client can act on; empty on success.
	Log string
	// Data is the serialized TxOutcome of a ProduceBundle (offsets, or which
	// batch was rejected and why).
	Data   []byte
	Events []Event
}

// OK reports whether the transaction was accepted.
func (r Result) OK() bool { return r.Code == wire.CodeOK }

// Event is an ABCI event: a type and ordered attributes.
type Event struct {
	Type  string
	Attrs []Attr
}

// Attr is one event attribute.
type Attr struct{ Key, Value string }

// Outcome is what executing a block produces.
type Outcome struct {
	// State is the state after the block, to be persisted with Changes.
	State State
	// Results holds one result per transaction, in block order.
	Results []Result
	// Changes is everything the block writes.
	Changes ChangeSet
	// Digest is what the app hash commits to.
	Digest Digest
	// ValidatorUpdates are the block's changes of the validator set, in key
	// order (power 0 removes): FinalizeBlock hands them to CometBFT.
	ValidatorUpdates []*byzlogv1.Validator
	// StateRootProof is, in a block that carries a state root, the path
	// of its item in the meta root: for the snapshot's metadata.
	StateRootProof *byzlogv1.MerkleProof
}

// mode says how strictly a transaction is checked against state.
type mode int

const (
	// modeBlock: in a block, every rule holds exactly (sequences and nonces
	// are the next ones) and effects are written.
	modeBlock mode = iota
	// modeMempool: CheckTx against committed state. Sequences and nonces may
	// run ahead (earlier ones may still be in the mempool); nothing is written.
	modeMempool
	// modePool: the app's mempool admitting a transaction on top of the
	// ones it holds. Effects are written as in a block, so each sequence
	// and nonce must be exactly the next one after committed state and the
	// pool; one that is ahead sets waiting, and one that a pending
	// transaction already holds is CodePending, never a duplicate.
	modePool
)

var deterministic = proto.MarshalOptions{Deterministic: true}

func marshal(m proto.Message) []byte {
	b, err := deterministic.Marshal(m)
	if err != nil {
		// Marshalling a valid in-memory message cannot fail; if it does the
		// binary is broken and must stop rather than diverge.
		panic(fmt.Sprintf("marshal %T: %v", m, err))
	}
	return b
}

// LoadParams reads the chain params InitChain stored.
func LoadParams(r Reader) (*byzlogv1.ChainParams, error) {
	b, err := r.Get(CFMeta, keyParams)
	if err != nil {
		return nil, err
	}
	if b == nil {
		return nil, fmt.Errorf("chain params missing: InitChain has not run on this store")
	}
	var p byzlogv1.ChainParams
	if err := proto.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("decode chain params: %w", err)
	}
	return &p, nil
}

// InitChain returns the change set that sets up genesis state: chain params,
// the admin set, the genesis topics and the validators (GenesisValidators).
func InitChain(params *byzlogv1.ChainParams, topics []*byzlogv1.TopicState, validators ...*byzlogv1.Validator) ChangeSet {
	o := newOverlay(emptyReader{})
	o.put(CFMeta, keyParams, marshal(params))
	o.put(CFMeta, keyAdmins, marshal(genesisAdminSet(params)))
	if len(params.Indexers) > 0 {
		o.put(CFMeta, keyIndexers, marshal(&byzlogv1.IndexerSet{Indexers: params.Indexers}))
	}
	if params.RulesVersion > 1 {
		o.put(CFMeta, keyRules, marshal(&byzlogv1.Rules{Version: params.RulesVersion}))
	}
	if len(validators) > 0 {
		o.put(CFMeta, keyValidators, marshal(&byzlogv1.ValidatorSet{Validators: validators}))
	}
	for _, t := range topics {
		writeTopic(o, t, 0)
	}
	return o.changeSet()
}

type emptyReader struct{}

func (emptyReader) Get(CF, []byte) ([]byte, error) { return nil, nil }

// Execute runs block b on the committed state r (whose identity is prev):
// retention from the block time, then every transaction in order. It returns
// the results, the change set and the next state. An error means the
// caller or the store is broken (a height out of sequence, a read failure),
// never that a transaction is bad: bad transactions get a result code.
func Execute(r Scanner, prev State, b Block) (Outcome, error) {
	if prev.Height != 0 && b.Height != prev.Height+1 {
		return Outcome{}, fmt.Errorf("execute block %d: the committed height is %d, expected block %d", b.Height, prev.Height, prev.Height+1)
	}
	if b.Height <= 0 {
		return Outcome{}, fmt.Errorf("execute block %d: heights start at 1", b.Height)
	}
	params, err := LoadParams(r)
	if err != nil {
		return Outcome{}, err
	}
	ex := newExecutor(r, params, b)
	if err := switchRules(r, ex.block, b.Height, b.MaxRules); err != nil {
		return Outcome{}, fmt.Errorf("execute block %d: %w", b.Height, err)
	}
	// Retention and compaction first, on committed state, from the block
	// time. Prepare and Verify skip them: no transaction's validity depends
	// on what they remove.
	rules, err := ex.rulesVersion()
	if err != nil {
		return Outcome{}, fmt.Errorf("execute block %d: %w", b.Height, err)
	}
	topics, err := listTopics(r) // one read of the topics for both
	if err != nil {
		return Outcome{}, fmt.Errorf("execute block %d: %w", b.Height, err)
	}
	if err := retain(r, ex.block, topics, b.TimeUnixNano, rules); err != nil {
		return Outcome{}, fmt.Errorf("execute block %d: %w", b.Height, err)
	}
	if err := compact(r, ex.block, topics, b.TimeUnixNano, rules); err != nil {
		return Outcome{}, fmt.Errorf("execute block %d: %w", b.Height, err)
	}
	checked, err := b.checked(params, true)
	if err != nil {
		return Outcome{}, err
	}
	results := make([]Result, len(b.Txs))
	for i, c := range checked {
		if results[i], err = ex.apply(c); err != nil {
			return Outcome{}, fmt.Errorf("execute block %d tx %d: %w", b.Height, i, err)
		}
	}
	root, due := StateRootDue(params.Limits, b.Height)
	switch {
	case due && (b.StateRoot == nil || b.StateRoot.Height != root):
		return Outcome{}, fmt.Errorf("execute block %d: it must carry the state root of height %d (snapshot_interval %d), and carries %v", b.Height, root, params.Limits.SnapshotInterval, b.StateRoot)
	case !due && b.StateRoot != nil:
		return Outcome{}, fmt.Errorf("execute block %d: it carries a state root, and none is due", b.Height)
	case due:
		ex.block.put(CFMeta, stateRootKey(root), marshal(b.StateRoot))
	}
	updates, err := blockValidatorUpdates(r, ex.block)
	if err != nil {
		return Outcome{}, fmt.Errorf("execute block %d: %w", b.Height, err)
	}
	if rules >= KeyTreeRulesVersion {
		if err := updateKeyTree(r, ex.block); err != nil {
			return Outcome{}, fmt.Errorf("execute block %d: %w", b.Height, err)
		}
	}
	changes := ex.block.changeSet()
	digest := digestOf(prev.AppHash, b.Height, ex.appended, changes)
	// The digest is stored with the block's writes: inserted at its place in
	// the sorted change set rather than sorting the whole set again.
	var proof *byzlogv1.MerkleProof
	if due {
		// Of the items the meta root was made of (the digest's is not).
		if proof, err = stateRootProof(changes, b.StateRoot); err != nil {
			return Outcome{}, fmt.Errorf("execute block %d: %w", b.Height, err)
		}
	}
	stored := digest.proto()
	if rules >= KeyTreeRulesVersion {
		if stored.KeyRoot, stored.KeyRootProof, err = keyRootProof(changes); err != nil {
			return Outcome{}, fmt.Errorf("execute block %d: %w", b.Height, err)
		}
	}
	changes.Changes = insertChange(changes.Changes, Change{CF: CFMeta, Key: digestKey(b.Height), Value: marshal(stored)})
	return Outcome{
		State:   State{Height: b.Height, AppHash: digest.AppHash()},
		Results: results,
		Changes: changes,
		Digest:  digest,

		ValidatorUpdates: updates,
		StateRootProof:   proof,
	}, nil
}

// blockValidatorUpdates is how the block changed the validator set.
func blockValidatorUpdates(committed Reader, block *overlay) ([]*byzlogv1.Validator, error) {
	if _, changed := block.writes[wkey(CFMeta, keyValidators)]; !changed {
		return nil, nil
	}
	before, err := LoadValidators(committed)
	if err != nil {
		return nil, err
	}
	after, err := LoadValidators(block)
	if err != nil {
		return nil, err
	}
	return ValidatorUpdates(before.Validators, after.Validators), nil
}

// Prepare picks, in order, the transactions of txs that are valid in a block
// on top of r and fit in maxBytes: what a correct proposer proposes.
func Prepare(r Reader, b Block, maxBytes int64) ([][]byte, error) {
	return PrepareRefs(r, b, maxBytes, maxBytes, false)
}

// PrepareRefs is Prepare for a block whose produce bundles of at least
// wire.MinBundleRefBytes go out as references when refs is set (rules
// version 3 on): the transactions picked hold at most maxBytes resolved,
// and at most maxWire as the block carries them, a reference counting its
// own 34 bytes. So a proposer fills a block to the bundle bytes validators
// take (the caller's maxBytes) while CometBFT's block.max_bytes bounds only
// what the block itself carries.
func PrepareRefs(r Reader, b Block, maxBytes, maxWire int64, refs bool) ([][]byte, error) {
	params, err := LoadParams(r)
	if err != nil {
		return nil, err
	}
	checked, err := b.checked(params, false)
	if err != nil {
		return nil, err
	}
	ex := newExecutor(r, params, b)
	ex.bounded, ex.countOnly = true, true
	var picked [][]byte
	var size, carried int64
	for i, tx := range b.Txs {
		// CometBFT counts each tx as a protobuf bytes field: tag, length, data.
		full, onWire := TxWireSize(tx), TxWireSize(tx)
		if refs && len(tx) >= wire.MinBundleRefBytes && checked[i].IsBundle() {
			onWire = refWireSize
		}
		if size+full > maxBytes || carried+onWire > maxWire {
			continue // a smaller one further on may still fit
		}
		res, err := ex.apply(checked[i])
		if err != nil {
			return nil, err
		}
		if res.OK() {
			picked = append(picked, tx)
			size += full
			carried += onWire
		}
	}
	return picked, nil
}

// refWireSize is what a bundle reference costs a block: tag, length and
// the reference's bytes (wire.NewBundleRef).
var refWireSize = TxWireSize(wire.NewBundleRef([32]byte{}))

// Verify checks a proposed block: every transaction must be valid in order.
// It returns the index and result of the first invalid one, or -1.
func Verify(r Reader, b Block) (int, Result, error) {
	params, err := LoadParams(r)
	if err != nil {
		return 0, Result{}, err
	}
	checked, err := b.checked(params, false)
	if err != nil {
		return 0, Result{}, err
	}
	ex := newExecutor(r, params, b)
	ex.bounded, ex.countOnly = true, true
	for i, c := range checked {
		res, err := ex.apply(c)
		if err != nil {
			return 0, Result{}, err
		}
		if !res.OK() {
			return i, res, nil
		}
	}
	return -1, Result{}, nil
}

// TxWireSize is what tx costs a block as CometBFT counts it: a protobuf
// bytes field (tag, length, data).
func TxWireSize(tx []byte) int64 { return int64(1 + protowire.SizeVarint(uint64(len(tx))) + len(tx)) }

// Check is CheckTx: the stateless checks plus the cheap stateful ones against
// committed state (known topic and partition, allowed producer, sequence not
// already committed, admin key, nonce not already used). It writes nothing.
func Check(r Reader, tx []byte) (Result, error) {
	params, err := LoadParams(r)
	if err != nil {
		return Result{}, err
	}
	ex := newExecutor(r, params, Block{})
	ex.mode = modeMempool
	return ex.apply(Precheck(params, tx, false))
}

// Pending is the state a mempool's transactions would leave on top of
// committed state, if they were committed in the order added. A mempool
// admits a transaction only if it applies on top of Pending, so that what it
// holds can always be proposed, in order, and never jams a block.
type Pending struct {
	ex *executor
}

// NewPending starts a Pending on the committed state r, for transactions
// that will commit at nextHeight or later (expiry heights are checked
// against it).
func NewPending(r Reader, params *byzlogv1.ChainParams, nextHeight int64) *Pending {
	ex := newExecutor(r, params, Block{Height: nextHeight})
	ex.mode, ex.countOnly = modePool, true
	return &Pending{ex: ex}
}

// Add applies c on top of the pending state. When c is refused, waiting
// says whether it failed only because an earlier sequence or nonce (at most
// MaxLookahead ahead) has not arrived, so that it may become valid.
func (p *Pending) Add(c *Checked) (res Result, waiting bool, err error) {
	res, err = p.ex.apply(c)
	return res, !res.OK() && p.ex.waiting, err
}
