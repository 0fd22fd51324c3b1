//go:build failpoints

package app

import (
	"crypto/ed25519"
	"crypto/rand"
	"strconv"
	"strings"

	abci "github.com/cometbft/cometbft/abci/types"
	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/abciapp/core"
	"github.com/byzlog/byzlog/abciapp/failpoint"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// misbehave makes this validator a Byzantine proposer (test builds only):
// it puts an invalid transaction of the given kind at the head of its
// proposal, which every honest validator's ProcessProposal must reject.
// The value is kind[:topic]: the bad batches write to topic, or to the
// chain's first topic when none is named.
func (a *App) misbehave(value string, txs [][]byte) [][]byte {
	kind, target, _ := strings.Cut(value, ":")
	var bad []byte
	switch kind {
	case "replay":
		if len(a.lastTxs) == 0 {
			return txs
		}
		bad = a.lastTxs[0]
	case "forged":
		bad = a.signedBadly(target, func(s *wire.Signer, chain, topic string) *byzlogv1.SignedBatch {
			b, _ := s.Batch(topic, 0, 0, byzlogv1.Codec_CODEC_NONE, []*byzlogv1.Record{{Value: []byte("FORGED")}})
			b.Signature = make([]byte, ed25519.SignatureSize)
			return b
		})
	case "oversized":
		bad = a.signedBadly(target, func(s *wire.Signer, chain, topic string) *byzlogv1.SignedBatch {
			b, _ := s.Batch(topic, 0, 0, byzlogv1.Codec_CODEC_NONE, []*byzlogv1.Record{{Value: make([]byte, wire.DefaultLimits().MaxRecordBytes+1)}})
			return b
		})
	case "unknown-topic":
		bad = a.signedBadly(target, func(s *wire.Signer, chain, topic string) *byzlogv1.SignedBatch {
			b, _ := s.Batch("no-such-topic", 0, 0, byzlogv1.Codec_CODEC_NONE, []*byzlogv1.Record{{Value: []byte("FORGED")}})
			return b
		})
	default:
		return txs
	}
	if bad == nil {
		return txs
	}
	a.log.Warn().Str("kind", kind).Msg("failpoint: proposing an invalid transaction")
	return append([][]byte{bad}, txs...)
}

// signedBadly builds a bundle with a fresh key for target, or the chain's
// first topic.
func (a *App) signedBadly(target string, build func(s *wire.Signer, chain, topic string) *byzlogv1.SignedBatch) []byte {
	params, err := core.LoadParams(a.store)
	if err != nil {
		return nil
	}
	v, _, err := core.Query(a.store, a.committed, wire.PathTopics, nil)
	if err != nil {
		return nil
	}
	var list byzlogv1.TopicList
	if proto.Unmarshal(v, &list) != nil || len(list.Topics) == 0 {
		return nil
	}
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil
	}
	topic := list.Topics[0].Name
	if target != "" {
		topic = target
	}
	tx, err := wire.BundleTx(build(wire.NewSigner(key, params.ChainId), params.ChainId, topic))
	if err != nil {
		return nil
	}
	return tx
}

// remember keeps the last block's transactions for "replay".
func (a *App) remember(req *abci.RequestFinalizeBlock) {
	if len(req.Txs) > 0 {
		a.lastTxs = req.Txs
	}
}

// maxRules is the newest rules version this build executes: failpoint
// max-rules=N makes a test build act as an older byzlog-app that knows
// only versions up to N (0: its own).
func maxRules() uint64 {
	v, ok := failpoint.Value(failpoint.MaxRules)
	if !ok {
		return 0
	}
	n, _ := strconv.ParseUint(v, 10, 64)
	return n
}

// withhold, with failpoint bundle-liar=withhold, keeps from gossip every
// transaction a proposal would reference: only this node holds them, and
// its peers must fetch what it proposes.
func withhold(txs [][]byte) [][]byte {
	if v, _ := failpoint.Value(failpoint.BundleLiar); v != "withhold" {
		return txs
	}
	out := txs[:0:0]
	for _, tx := range txs {
		if len(tx) < wire.MinBundleRefBytes {
			out = append(out, tx)
		}
	}
	return out
}

// lie, with failpoint bundle-liar=corrupt, is a /bundles answer with every
// bundle corrupted (nil: answer truthfully).
func lie(b *byzlogv1.Bundles) *byzlogv1.Bundles {
	if v, _ := failpoint.Value(failpoint.BundleLiar); v != "corrupt" {
		return nil
	}
	out := &byzlogv1.Bundles{Bundles: make([][]byte, len(b.Bundles))}
	for i, x := range b.Bundles {
		if len(x) > 0 {
			out.Bundles[i] = append([]byte{x[0] ^ 0xff}, x[1:]...)
		}
	}
	return out
}
