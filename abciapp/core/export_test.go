package core

import "github.com/byzlog/byzlog/protos/chain/keytree"

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
// holds and returns its root and the root the last block stored, which
// must be the same: a block that missed an entry's change, or a tree that
// kept a stale node, shows here.
func KeyTreeFromScratch(s Scanner) (fresh, stored []byte, err error) {
	topics := map[string]keytree.Tree{}
	top := keytree.New(mapTreeStore{}, nil)
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
					t = keytree.New(mapTreeStore{}, nil)
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
	stored, err = s.Get(CFMeta, keyKeyTree)
	return fresh, stored, err
}

// SetKeyTreeMigrationStep makes the key tree take n older entries a block
// while it is built, until the returned func puts the bound back.
func SetKeyTreeMigrationStep(n int) (restore func()) {
	keyTreeMigrationStep = n
	return func() { keyTreeMigrationStep = MaxKeyTreeMigration }
}
