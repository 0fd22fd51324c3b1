package core

import (
	"bytes"
	"crypto/ed25519"
	"fmt"
	"slices"
	"strconv"

	"google.golang.org/protobuf/proto"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// Indexers and pruning: the registered indexers (IndexerSet in CFMeta)
// report, each signed with its own key, the height they have published
// through. A node prunes no block a registered indexer has not reported
// published (RetainHeight), so a stopped indexer finds every block it
// needs when it comes back.

var keyIndexers = []byte("indexers")

// MaxIndexers bounds the registered indexers: each is read on every
// Commit and can hold pruning back.
const MaxIndexers = 64

// LoadIndexers reads the registered indexers.
func LoadIndexers(r Reader) (*byzlogv1.IndexerSet, error) {
	var s byzlogv1.IndexerSet
	if _, err := getProto(r, CFMeta, keyIndexers, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// checkIndexerName accepts 1 to 64 of a-z, A-Z, 0-9, '-' and '_' (the
// indexer's --id alphabet).
func checkIndexerName(name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("indexer name %s: want 1 to 64 characters", wire.Quote(name))
	}
	for _, c := range []byte(name) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("indexer name %s: use only a-z, A-Z, 0-9, '-' and '_'", wire.Quote(name))
		}
	}
	return nil
}

// GenesisIndexers checks and sorts the indexers genesis registers.
func GenesisIndexers(ix []*byzlogv1.Indexer) ([]*byzlogv1.Indexer, error) {
	out := slices.Clone(ix)
	slices.SortFunc(out, func(a, b *byzlogv1.Indexer) int { return bytes.Compare(a.PubKey, b.PubKey) })
	for i, x := range out {
		switch {
		case len(x.PubKey) != ed25519.PublicKeySize:
			return nil, fmt.Errorf("indexer %x: key is %d bytes, an ed25519 public key is %d", x.PubKey, len(x.PubKey), ed25519.PublicKeySize)
		case i > 0 && bytes.Equal(out[i-1].PubKey, x.PubKey):
			return nil, fmt.Errorf("indexer %x is listed twice", x.PubKey)
		}
		if err := checkIndexerName(x.Name); err != nil {
			return nil, err
		}
	}
	if len(out) > MaxIndexers {
		return nil, fmt.Errorf("%d indexers, at most %d", len(out), MaxIndexers)
	}
	return out, nil
}

// setIndexer registers or unregisters an indexer.
func setIndexer(o *overlay, height int64, s *byzlogv1.SetIndexer) (Result, error) {
	set, err := LoadIndexers(o)
	if err != nil {
		return Result{}, err
	}
	if len(s.PubKey) != ed25519.PublicKeySize {
		return reject(wire.CodeBadIndexerChange, "indexer key is %d bytes, an ed25519 public key is %d", len(s.PubKey), ed25519.PublicKeySize), nil
	}
	i, found := slices.BinarySearchFunc(set.Indexers, s.PubKey, func(x *byzlogv1.Indexer, k []byte) int { return bytes.Compare(x.PubKey, k) })
	op := "register_indexer"
	switch {
	case s.Remove && !found:
		return reject(wire.CodeBadIndexerChange, "indexer %x is not registered (query %s)", s.PubKey, wire.PathIndexers), nil
	case s.Remove:
		op = "unregister_indexer"
		set.Indexers = slices.Delete(set.Indexers, i, i+1)
	case found:
		return reject(wire.CodeBadIndexerChange, "indexer %x is registered already, as %s", s.PubKey, wire.Quote(set.Indexers[i].Name)), nil
	default:
		if err := checkIndexerName(s.Name); err != nil {
			return reject(wire.CodeBadIndexerChange, "%v", err), nil
		}
		if len(set.Indexers) >= MaxIndexers {
			return reject(wire.CodeBadIndexerChange, "%d indexers are registered, the most there may be; unregister one first", len(set.Indexers)), nil
		}
		set.Indexers = slices.Insert(set.Indexers, i, &byzlogv1.Indexer{PubKey: s.PubKey, Name: s.Name, RegisteredHeight: height})
	}
	o.put(CFMeta, keyIndexers, marshal(set))
	return Result{Code: wire.CodeOK, Events: []Event{{Type: "byzlog.admin", Attrs: []Attr{
		{"op", op}, {"pub_key", fmt.Sprintf("%x", s.PubKey)}, {"name", s.Name}}}}}, nil
}

// indexerProgress applies a registered indexer's report of the height it
// has published through. Heights only grow, and never reach the block
// that carries the report.
func (ex *executor) indexerProgress(o *overlay, req *byzlogv1.IndexerProgress) (Result, error) {
	var body byzlogv1.IndexerProgressBody
	if err := proto.Unmarshal(req.Body, &body); err != nil {
		return reject(wire.CodeMalformedTx, "indexer progress body is not a byzlog.v1.IndexerProgressBody: %v", err), nil
	}
	if body.ChainId != ex.params.ChainId {
		return reject(wire.CodeWrongChain, "indexer progress signed for chain %s, this is %q", wire.Quote(body.ChainId), ex.params.ChainId), nil
	}
	set, err := LoadIndexers(o)
	if err != nil {
		return Result{}, err
	}
	i, found := slices.BinarySearchFunc(set.Indexers, req.IndexerKey, func(x *byzlogv1.Indexer, k []byte) int { return bytes.Compare(x.PubKey, k) })
	if !found {
		return reject(wire.CodeNotIndexer, "key %x is not a registered indexer (query %s; an admin registers it with byzlog indexer register)", req.IndexerKey, wire.PathIndexers), nil
	}
	x := set.Indexers[i]
	switch {
	case body.PublishedHeight <= x.PublishedHeight:
		return reject(wire.CodeBadProgress, "indexer %s reported height %d already; a report must name a later height, not %d", wire.Quote(x.Name), x.PublishedHeight, body.PublishedHeight), nil
	case ex.b.Height > 0 && body.PublishedHeight >= ex.b.Height:
		return reject(wire.CodeBadProgress, "indexer %s reports height %d published, but this is block %d", wire.Quote(x.Name), body.PublishedHeight, ex.b.Height), nil
	}
	x = proto.Clone(x).(*byzlogv1.Indexer)
	x.PublishedHeight, x.ReportedHeight = body.PublishedHeight, ex.b.Height
	set.Indexers[i] = x
	o.put(CFMeta, keyIndexers, marshal(set))
	return Result{Code: wire.CodeOK, Events: []Event{{Type: "byzlog.indexer", Attrs: []Attr{
		{"name", x.Name}, {"published_height", strconv.FormatInt(x.PublishedHeight, 10)}}}}}, nil
}

// RetainHeight is what a node tells CometBFT it may prune below, after
// committing height: nothing with retainBlocks 0 (pruning off); otherwise
// at most the last retainBlocks blocks kept, and never past the oldest
// snapshot the node keeps (a node joining by state sync needs the blocks
// from there; no snapshot: nothing is pruned) or past the block a
// registered indexer has not reported published.
func RetainHeight(height, retainBlocks, oldestSnapshot int64, indexers *byzlogv1.IndexerSet) *byzlogv1.Pruning {
	p := &byzlogv1.Pruning{Height: height, RetainBlocks: retainBlocks, OldestSnapshot: oldestSnapshot, Indexers: indexers.GetIndexers()}
	if retainBlocks <= 0 {
		p.HeldBy = "off"
		return p
	}
	retain, by := height-retainBlocks+1, "retain_blocks"
	if oldestSnapshot < retain {
		retain, by = oldestSnapshot, "snapshot"
	}
	for _, x := range indexers.GetIndexers() {
		// The published block itself is kept: the indexer verifies the
		// next header from it.
		if x.PublishedHeight < retain {
			retain, by = x.PublishedHeight, "indexer "+x.Name
		}
	}
	p.HeldBy = by
	if retain > 1 {
		p.RetainHeight = retain
	}
	return p
}
