package core

import (
	"fmt"

	"github.com/byzlog/byzlog/protos/chain/keytree"
)

// CountAborted counts topic/p's aborted-range keys, under both of their
// orders (abortedKey and abortEndKey), for tests outside the package.
func CountAborted(s Scanner, topic string, p uint32) (int, error) {
	n := 0
	for _, pre := range [][]byte{prefixAborted, prefixAbortEnd} {
		prefix := cat(pre, []byte(topic), []byte{0}, be32(p))
		if err := s.Scan(CFMeta, prefix, prefixEnd(prefix), func(_, _ []byte) bool { n++; return true }); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// IndexedKeys lists the keys topic/p's compaction index holds, in order,
// for tests outside the package.
func IndexedKeys(s Scanner, topic string, p uint32) ([]string, error) {
	var keys []string
	prefix := compactPartitionPrefix(prefixCompactKey, topic, p)
	err := s.Scan(CFMeta, prefix, prefixEnd(prefix), func(k, _ []byte) bool {
		keys = append(keys, string(k[len(prefix):]))
		return true
	})
	return keys, err
}

// mapTreeStore is a keytree.Store in a map, for trees built from scratch.
type mapTreeStore map[string][]byte

func (m mapTreeStore) Get(k []byte) ([]byte, error) { return m[string(k)], nil }
func (m mapTreeStore) Put(k, v []byte)              { m[string(k)] = v }
func (m mapTreeStore) Delete(k []byte)              { delete(m, string(k)) }

// KeyTreeFromScratch builds the key tree afresh from every entry the state
// holds and returns its root and the root the last block stored (nil while
// the tree is being built), which must be the same, and an error when the
// tree's nodes in the state are not exactly the fresh tree's: a block that
// missed an entry's change, or a tree that left a node behind, shows here.
func KeyTreeFromScratch(s Scanner) (fresh, stored []byte, err error) {
	nodes := mapTreeStore{}
	topics := map[string]keytree.Tree{}
	top := keytree.New(nodes, prefixKeyTree)
	for _, r := range migrationRanges {
		var bad error
		err := s.Scan(r.cf, r.prefix, prefixEnd(r.prefix), func(k, v []byte) bool {
			topic, ok := treeEntry(r.cf, k)
			if !ok || len(v) == 0 {
				return true
			}
			t := top
			if topic != "" {
				if t, ok = topics[topic]; !ok {
					t = keytree.New(nodes, topicTreePrefix(topic))
					topics[topic] = t
				}
			}
			bad = t.Set(treeLeaf(r.cf, k), keytree.ValueHash(v))
			return bad == nil
		})
		if err = firstErr(err, bad); err != nil {
			return nil, nil, err
		}
	}
	for name, t := range topics {
		root, err := t.Root()
		if err != nil {
			return nil, nil, err
		}
		if err := top.Set(topicLeaf(name), root); err != nil {
			return nil, nil, err
		}
	}
	fresh, err = top.Root()
	if err != nil {
		return nil, nil, err
	}
	if migrating, err := s.Get(CFMeta, keyKeyTreeMigration); err != nil || migrating != nil {
		return fresh, nil, err
	}
	if stored, err = s.Get(CFMeta, keyKeyTree); err != nil || stored == nil {
		return fresh, stored, err
	}
	held := 0
	var bad error
	err = s.Scan(CFMeta, prefixTree, prefixEnd(prefixTree), func(k, v []byte) bool {
		held++
		if w, ok := nodes[string(k)]; !ok || string(w) != string(v) {
			bad = fmt.Errorf("the state holds key tree node %x, which a tree built afresh does not (or not so)", k)
		}
		return bad == nil
	})
	if err = firstErr(err, bad); err == nil && held != len(nodes) {
		err = fmt.Errorf("the state holds %d key tree nodes, a tree built afresh %d", held, len(nodes))
	}
	return fresh, stored, err
}

// SetKeyTreeMigrationStep makes the key tree take n older entries a block
// while it is built, until the returned func puts the bound back.
func SetKeyTreeMigrationStep(n int) (restore func()) {
	keyTreeMigrationStep = n
	return func() { keyTreeMigrationStep = MaxKeyTreeMigration }
}
