package core

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// GenesisState is the app_state of the genesis file.
type GenesisState struct {
	// Admins are hex ed25519 public keys; any one may sign topic creations
	// and updates.
	Admins []string `json:"admins"`
	// AdminThreshold is how many admins must sign a topic deletion or a
	// change of the admins or the validators: 1 to len(Admins); 0 or
	// absent means 1.
	AdminThreshold uint32 `json:"admin_threshold,omitempty"`
	// Limits override DefaultLimits field by field (zero keeps the default).
	Limits *GenesisLimits `json:"limits,omitempty"`
	// Topics are created at genesis.
	Topics []GenesisTopic `json:"topics,omitempty"`
	// Indexers are registered at genesis: nodes prune no block they have
	// not reported published.
	Indexers []GenesisIndexer `json:"indexers,omitempty"`
	// RulesVersion is the rules version the chain starts with, 1 to this
	// build's MaxRulesVersion; 0 or absent means 1. byzlog's own tools
	// write the newest.
	RulesVersion uint64 `json:"rules_version,omitempty"`
}

// GenesisIndexer is an indexer registered at genesis.
type GenesisIndexer struct {
	Name string `json:"name"`
	// PubKey is the hex ed25519 public key of its --progress-key.
	PubKey string `json:"pub_key"`
}

// GenesisLimits is the JSON form of Limits.
type GenesisLimits struct {
	MaxRecordBytes   uint32 `json:"max_record_bytes,omitempty"`
	MaxBatchRecords  uint32 `json:"max_batch_records,omitempty"`
	MaxBatchBytes    uint32 `json:"max_batch_bytes,omitempty"`
	MaxHeaders       uint32 `json:"max_headers,omitempty"`
	MaxBundleBatches uint32 `json:"max_bundle_batches,omitempty"`
	MaxPartitions    uint32 `json:"max_partitions,omitempty"`
	MaxCommitOffsets uint32 `json:"max_commit_offsets,omitempty"`

	MaxTxRecords              uint32 `json:"max_tx_records,omitempty"`
	MaxTxUncompressedBytes    uint32 `json:"max_tx_uncompressed_bytes,omitempty"`
	MaxBlockRecords           uint32 `json:"max_block_records,omitempty"`
	MaxBlockUncompressedBytes uint32 `json:"max_block_uncompressed_bytes,omitempty"`

	// SnapshotInterval: the state is hashed every this many blocks, for
	// state sync (0, the default: never).
	SnapshotInterval uint32 `json:"snapshot_interval,omitempty"`
}

// GenesisTopic is a topic created at genesis.
type GenesisTopic struct {
	Name             string   `json:"name"`
	Partitions       uint32   `json:"partitions"`
	MaxRecordBytes   uint32   `json:"max_record_bytes,omitempty"`
	RetentionMs      int64    `json:"retention_ms,omitempty"`
	RetentionBytes   int64    `json:"retention_bytes,omitempty"`
	AllowedProducers []string `json:"allowed_producers,omitempty"`
	Readers          []string `json:"readers,omitempty"`
}

// ParseGenesis reads the genesis app_state (empty means no admins, default
// limits, no topics) into chain params and the topics to create.
func ParseGenesis(chainID string, appState []byte) (*byzlogv1.ChainParams, []*byzlogv1.TopicState, error) {
	var g GenesisState
	if len(bytes.TrimSpace(appState)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(appState))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&g); err != nil {
			return nil, nil, fmt.Errorf("genesis app_state: %w (want {\"admins\": [hex keys], \"admin_threshold\": k, \"limits\": {...}, \"topics\": [...]})", err)
		}
	}
	if chainID == "" {
		return nil, nil, fmt.Errorf("genesis chain_id is empty")
	}
	params := &byzlogv1.ChainParams{ChainId: chainID, Limits: wire.DefaultLimits()}
	var err error
	if params.Admins, err = genesisAdmins(g.Admins); err != nil {
		return nil, nil, err
	}
	if len(params.Admins) > MaxAdmins {
		return nil, nil, fmt.Errorf("genesis app_state admins: %d keys, at most %d", len(params.Admins), MaxAdmins)
	}
	if g.AdminThreshold > uint32(max(len(params.Admins), 1)) {
		return nil, nil, fmt.Errorf("genesis app_state admin_threshold %d is more than the %d admins listed", g.AdminThreshold, len(params.Admins))
	}
	params.AdminThreshold = max(g.AdminThreshold, 1)
	for i, x := range g.Indexers {
		k, err := parseKey(x.PubKey)
		if err != nil {
			return nil, nil, fmt.Errorf("genesis app_state indexers[%d]: %w", i, err)
		}
		params.Indexers = append(params.Indexers, &byzlogv1.Indexer{PubKey: k, Name: x.Name})
	}
	if params.Indexers, err = GenesisIndexers(params.Indexers); err != nil {
		return nil, nil, fmt.Errorf("genesis app_state indexers: %w", err)
	}
	if g.RulesVersion > MaxRulesVersion {
		return nil, nil, fmt.Errorf("genesis app_state rules_version %d: this byzlog-app knows versions 1 to %d", g.RulesVersion, MaxRulesVersion)
	}
	params.RulesVersion = g.RulesVersion
	overrideLimits(params.Limits, g.Limits)
	if err := validateLimits(params.Limits); err != nil {
		return nil, nil, fmt.Errorf("genesis app_state limits: %w", err)
	}
	var topics []*byzlogv1.TopicState
	seen := map[string]bool{}
	for i, t := range g.Topics {
		cfg, err := genesisTopic(params.Limits, i, t)
		if err != nil {
			return nil, nil, err
		}
		if seen[t.Name] {
			return nil, nil, fmt.Errorf("genesis app_state topics[%d]: topic %q is listed twice", i, t.Name)
		}
		seen[t.Name] = true
		topics = append(topics, &byzlogv1.TopicState{Name: t.Name, Config: cfg})
	}
	return params, topics, nil
}

// genesisAdmins parses the admins' hex keys, sorted, each listed once.
func genesisAdmins(hexKeys []string) ([][]byte, error) {
	var admins [][]byte
	for i, s := range hexKeys {
		k, err := parseKey(s)
		if err != nil {
			return nil, fmt.Errorf("genesis app_state admins[%d]: %w", i, err)
		}
		admins = append(admins, k)
	}
	sort.Slice(admins, func(i, j int) bool { return bytes.Compare(admins[i], admins[j]) < 0 })
	for i := 1; i < len(admins); i++ {
		if bytes.Equal(admins[i-1], admins[i]) {
			return nil, fmt.Errorf("genesis app_state admins: key %x is listed twice", admins[i])
		}
	}
	return admins, nil
}

// overrideLimits sets every limit genesis gives (zero keeps the default).
func overrideLimits(d *byzlogv1.Limits, l *GenesisLimits) {
	if l == nil {
		return
	}
	for _, f := range []struct {
		v   uint32
		dst *uint32
	}{
		{l.MaxRecordBytes, &d.MaxRecordBytes}, {l.MaxBatchRecords, &d.MaxBatchRecords}, {l.MaxBatchBytes, &d.MaxBatchBytes},
		{l.MaxHeaders, &d.MaxHeaders}, {l.MaxBundleBatches, &d.MaxBundleBatches}, {l.MaxPartitions, &d.MaxPartitions},
		{l.MaxCommitOffsets, &d.MaxCommitOffsets}, {l.MaxTxRecords, &d.MaxTxRecords},
		{l.MaxTxUncompressedBytes, &d.MaxTxUncompressedBytes}, {l.MaxBlockRecords, &d.MaxBlockRecords},
		{l.MaxBlockUncompressedBytes, &d.MaxBlockUncompressedBytes}, {l.SnapshotInterval, &d.SnapshotInterval},
	} {
		if f.v != 0 {
			*f.dst = f.v
		}
	}
}

// genesisTopic is the config of genesis topic i, checked as a create would.
func genesisTopic(l *byzlogv1.Limits, i int, t GenesisTopic) (*byzlogv1.TopicConfig, error) {
	cfg := &byzlogv1.TopicConfig{
		Partitions: t.Partitions, MaxRecordBytes: t.MaxRecordBytes,
		RetentionMs: t.RetentionMs, RetentionBytes: t.RetentionBytes,
	}
	for j, s := range t.AllowedProducers {
		k, err := parseKey(s)
		if err != nil {
			return nil, fmt.Errorf("genesis app_state topics[%d].allowed_producers[%d]: %w", i, j, err)
		}
		cfg.AllowedProducers = append(cfg.AllowedProducers, k)
	}
	for j, s := range t.Readers {
		k, err := parseKey(s)
		if err != nil {
			return nil, fmt.Errorf("genesis app_state topics[%d].readers[%d]: %w", i, j, err)
		}
		cfg.Readers = append(cfg.Readers, k)
	}
	if r := checkTopicName(t.Name); !r.OK() {
		return nil, fmt.Errorf("genesis app_state topics[%d]: %s", i, r.Log)
	}
	if r := checkTopicConfig(l, cfg, MaxRulesVersion); !r.OK() {
		return nil, fmt.Errorf("genesis app_state topics[%d] (%s): %s", i, t.Name, r.Log)
	}
	return cfg, nil
}

func parseKey(s string) ([]byte, error) {
	k, err := hex.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("key %q is not hex: %w", s, err)
	}
	if len(k) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("key %q is %d bytes, an ed25519 public key is %d", s, len(k), ed25519.PublicKeySize)
	}
	return k, nil
}

func validateLimits(l *byzlogv1.Limits) error {
	switch {
	case l.MaxBatchBytes > 64<<20:
		return fmt.Errorf("max_batch_bytes (%d) must be at most 64 MiB", l.MaxBatchBytes)
	case l.MaxRecordBytes > l.MaxBatchBytes:
		return fmt.Errorf("max_record_bytes (%d) must not exceed max_batch_bytes (%d)", l.MaxRecordBytes, l.MaxBatchBytes)
	case l.MaxPartitions > 1<<16:
		return fmt.Errorf("max_partitions (%d) must be at most 65536", l.MaxPartitions)
	case l.MaxTxRecords > l.MaxBlockRecords:
		return fmt.Errorf("max_tx_records (%d) must not exceed max_block_records (%d)", l.MaxTxRecords, l.MaxBlockRecords)
	case l.MaxTxUncompressedBytes > l.MaxBlockUncompressedBytes || l.MaxBatchBytes > l.MaxTxUncompressedBytes:
		return fmt.Errorf("max_batch_bytes (%d) <= max_tx_uncompressed_bytes (%d) <= max_block_uncompressed_bytes (%d) must hold",
			l.MaxBatchBytes, l.MaxTxUncompressedBytes, l.MaxBlockUncompressedBytes)
	case l.MaxBlockUncompressedBytes > 512<<20 || l.MaxBlockRecords > 2_000_000:
		return fmt.Errorf("max_block_uncompressed_bytes (%d) must be at most 512 MiB and max_block_records (%d) at most 2,000,000", l.MaxBlockUncompressedBytes, l.MaxBlockRecords)
	case l.SnapshotInterval != 0 && l.SnapshotInterval < 2*wire.StateRootLag:
		return fmt.Errorf("snapshot_interval (%d) must be 0 (no snapshots) or at least %d: a state root is committed %d blocks after its height", l.SnapshotInterval, 2*wire.StateRootLag, wire.StateRootLag)
	case l.SnapshotInterval != 0 && l.MaxRecordBytes > wire.MaxSnapshotRecordBytes:
		return fmt.Errorf("max_record_bytes (%d) must be at most %d with snapshot_interval (%d) set: a stored record travels in one state-sync chunk, which must stay under the 4 MiB of a node's gRPC ABCI client", l.MaxRecordBytes, wire.MaxSnapshotRecordBytes, l.SnapshotInterval)
	}
	return nil
}
