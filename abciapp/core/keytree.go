package core

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/byzlog/byzlog/protos/chain/keytree"
	"github.com/byzlog/byzlog/protos/chain/stateproof"
)

// The key tree (rules version 10 on) commits to the state entries a
// client asks about one at a time, so that each proves against an app
// hash on its own: a topic's config (t/), its partitions' states (p/) and
// its compacted keys' index entries (ck/), and producers' sequence states
// (s/, ks/ in CFProducers). The state root covers the whole state, but
// only every snapshot interval and only as a whole.
//
// A topic's entries are in a tree of their own (nodes under
// prefixTopicTree+topic+0), whose root is the value hash of the topic's
// leaf in the key tree (nodes under prefixKeyTree): deleting a topic drops
// its whole tree with one range delete, however many keys it indexed.
// Producers' entries are leaves of the key tree. A leaf's key is the
// column family's byte and the state key; its value hash SHA-256 of the
// stored value. Every block writes the key tree's root under keyKeyTree,
// one of its meta items, so the app hash commits to it; the tree's nodes
// are derived from that root's entries and are not meta items (metaItems
// skips prefixTree), as digests are not.
//
// A chain that switches to rules version 10 has entries from before: the
// tree takes them MaxKeyTreeMigration a block, in key order, from the
// cursor under keyKeyTreeMigration, and proofs are refused until it has
// taken them all. Entries a block writes meanwhile go in at once, as
// always; one taken again later is the same leaf.

// KeyTreeRulesVersion is the first rules version with the key tree.
const KeyTreeRulesVersion uint64 = 10

// MaxKeyTreeMigration bounds the older entries a block adds to the key tree
// while a chain that switched to rules version 10 builds it.
const MaxKeyTreeMigration = 10000

// MaxKeyTreeMigrationBytes bounds the stored records a block reads while
// it builds the tree (an index entry from before rules version 10 needs
// its record's leaf hash, read from the record's run).
const MaxKeyTreeMigrationBytes = 64 << 20

// keyTreeMigrationStep is MaxKeyTreeMigration but in tests.
var keyTreeMigrationStep = MaxKeyTreeMigration

var (
	prefixTree          = []byte("kt/")
	prefixKeyTree       = []byte("kt/0/")
	prefixTopicTree     = []byte("kt/t/")
	keyKeyTree          = stateproof.KeyTreeKey
	keyKeyTreeMigration = []byte("keytree-migration")
)

// topicTreePrefix is where topic's tree keeps its nodes.
func topicTreePrefix(topic string) []byte { return cat(prefixTopicTree, []byte(topic), []byte{0}) }

// treeLeaf is the key of a state entry in its tree.
func treeLeaf(cf CF, key []byte) []byte { return stateproof.Leaf(byte(cf), key) }

// topicLeaf is a topic's leaf in the key tree.
func topicLeaf(topic string) []byte { return stateproof.TopicLeaf(topic) }

// treeEntry says where a state entry goes: in the key tree (topic ""), in
// a topic's tree, or nowhere (ok false).
func treeEntry(cf CF, key []byte) (topic string, ok bool) {
	switch cf {
	case CFProducers:
		return "", bytes.HasPrefix(key, prefixProducer) || bytes.HasPrefix(key, prefixKafkaProducer)
	case CFMeta:
		for _, p := range [][]byte{prefixTopic, prefixPartition, prefixCompactKey} {
			if !bytes.HasPrefix(key, p) {
				continue
			}
			name := key[len(p):]
			if p[0] != prefixTopic[0] {
				i := bytes.IndexByte(name, 0)
				if i < 0 {
					return "", false
				}
				name = name[:i]
			}
			return string(name), len(name) > 0
		}
	}
	return "", false
}

// treeStore is a keytree.Store over the overlay's CFMeta.
type treeStore struct{ o *overlay }

func (s treeStore) Get(k []byte) ([]byte, error) { return s.o.Get(CFMeta, k) }
func (s treeStore) Put(k, v []byte)              { s.o.put(CFMeta, bytes.Clone(k), v) }
func (s treeStore) Delete(k []byte)              { s.o.del(CFMeta, bytes.Clone(k)) }

func keyTree(o *overlay) keytree.Tree { return keytree.New(treeStore{o}, prefixKeyTree) }

func topicTree(o *overlay, topic string) keytree.Tree {
	return keytree.New(treeStore{o}, topicTreePrefix(topic))
}

// entryChange is one state entry to set in a tree, or to delete (no value:
// the store reads an empty value as none, so the tree holds none either;
// a partition or producer state of zeros is its absence).
type entryChange struct {
	cf    CF
	key   []byte
	value []byte
}

// updateKeyTree brings the key tree up to the block's writes (and, while a
// chain builds it, up to a bounded number of older entries), then writes
// its root. It runs at the end of a block, after every other write. Each
// tree is changed in a batch: a node the block changes is hashed and
// written once, however many of its keys changed.
func updateKeyTree(s Scanner, o *overlay) error {
	byTopic := map[string][]entryChange{}
	var topics []string
	add := func(topic string, c entryChange) {
		if _, ok := byTopic[topic]; !ok {
			topics = append(topics, topic)
		}
		byTopic[topic] = append(byTopic[topic], c)
	}
	for _, c := range o.writes {
		if topic, ok := treeEntry(c.CF, c.Key); ok {
			add(topic, entryChange{cf: c.CF, key: c.Key, value: c.Value})
		}
	}
	// A topic deleted in the block dropped its tree (deleteTopic) and
	// deleted its config, a write seen above: its leaf goes, or takes the
	// tree's new root if the topic was created again.
	if err := migrateKeyTree(s, o, add); err != nil {
		return err
	}
	slices.Sort(topics)
	top := keyTree(o).Batch()
	for _, topic := range topics {
		changes := byTopic[topic]
		slices.SortFunc(changes, func(a, b entryChange) int {
			if a.cf != b.cf {
				return int(a.cf) - int(b.cf)
			}
			return bytes.Compare(a.key, b.key)
		})
		if topic == "" {
			if err := applyEntries(top, changes); err != nil {
				return err
			}
			continue
		}
		tt := topicTree(o, topic).Batch()
		if err := applyEntries(tt, changes); err != nil {
			return err
		}
		root, err := tt.Root()
		if err == nil {
			err = tt.Flush()
		}
		if err != nil {
			return err
		}
		if bytes.Equal(root, keytree.Empty()) {
			err = top.Delete(topicLeaf(topic))
		} else {
			err = top.Set(topicLeaf(topic), root)
		}
		if err != nil {
			return fmt.Errorf("key tree: topic %s: %w", topic, err)
		}
	}
	root, err := top.Root()
	if err == nil {
		err = top.Flush()
	}
	if err != nil {
		return err
	}
	o.put(CFMeta, keyKeyTree, root)
	return nil
}

// applyEntries sets or deletes each change's entry in t, in order; a change
// with no key (a topic's tree dropped) sets nothing.
func applyEntries(t *keytree.Batch, changes []entryChange) error {
	for _, c := range changes {
		if c.key == nil {
			continue
		}
		leaf := treeLeaf(c.cf, c.key)
		var err error
		if len(c.value) == 0 {
			err = t.Delete(leaf)
		} else {
			err = t.Set(leaf, keytree.ValueHash(c.value))
		}
		if err != nil {
			return fmt.Errorf("key tree: entry %x: %w", leaf, err)
		}
	}
	return nil
}

// migrationRanges are the state entries the key tree holds, in the order
// a chain switching to it takes them: each a column family and prefix.
var migrationRanges = []struct {
	cf     CF
	prefix []byte
}{{CFMeta, prefixCompactKey}, {CFMeta, prefixPartition}, {CFMeta, prefixTopic}, {CFProducers, prefixKafkaProducer}, {CFProducers, prefixProducer}}

// migrateKeyTree hands add up to MaxKeyTreeMigration committed entries
// from where the last block stopped (the first block under the key tree
// starts at the beginning; a chain that started under it has nothing to
// take but its genesis topics), and saves where it stopped, or that it is
// done. Each entry is taken as the block leaves it. An index entry
// written before rules version 10 (9 bytes: no leaf hash) is written
// again with its record's leaf hash, or dropped when retention removed its
// record (as the sweep would).
func migrateKeyTree(s Scanner, o *overlay, add func(string, entryChange)) error {
	cursor, err := s.Get(CFMeta, keyKeyTreeMigration)
	if err != nil {
		return err
	}
	started, err := s.Get(CFMeta, keyKeyTree)
	if err != nil || (started != nil && cursor == nil) {
		return err // done
	}
	phase, after := 0, []byte(nil)
	if len(cursor) > 0 {
		phase, after = int(cursor[0]), cursor[1:]
	}
	n, read := 0, 0
	for ; phase < len(migrationRanges); phase, after = phase+1, nil {
		r := migrationRanges[phase]
		start := r.prefix
		if after != nil {
			start = cat(after, []byte{0})
		}
		var last []byte
		var bad error
		full := func() bool { return n == keyTreeMigrationStep || read >= MaxKeyTreeMigrationBytes }
		err := s.Scan(r.cf, start, prefixEnd(r.prefix), func(k, _ []byte) bool {
			if full() {
				return false
			}
			n++
			last = bytes.Clone(k)
			var b int
			b, bad = migrateEntry(s, o, r.cf, last, add)
			read += b
			return bad == nil
		})
		if err = firstErr(err, bad); err != nil {
			return fmt.Errorf("key tree migration: %w", err)
		}
		if full() {
			o.put(CFMeta, keyKeyTreeMigration, cat([]byte{byte(phase)}, last))
			return nil
		}
	}
	if cursor != nil {
		o.del(CFMeta, keyKeyTreeMigration)
	}
	return nil
}

// migrateEntry hands add one committed entry as the block leaves it, and
// returns the stored bytes it read to do so.
func migrateEntry(s Scanner, o *overlay, cf CF, key []byte, add func(string, entryChange)) (int, error) {
	topic, ok := treeEntry(cf, key)
	if !ok {
		return 0, nil
	}
	v, err := o.Get(cf, key)
	if err != nil || len(v) == 0 {
		return 0, err // deleted in this block: the block's own change says so
	}
	read := 0
	if cf == CFMeta && bytes.HasPrefix(key, prefixCompactKey) && len(v) == 9 {
		if v, read, err = indexEntryWithLeaf(s, o, key, v); err != nil {
			return read, err
		}
		if v == nil {
			o.del(cf, key)
		} else {
			o.put(cf, key, v)
		}
	}
	add(topic, entryChange{cf: cf, key: key, value: v})
	return read, nil
}

// indexEntryWithLeaf is a 9-byte key index entry with its record's leaf
// hash added, or nil when the record is gone, and the bytes of the run it
// read.
func indexEntryWithLeaf(s Scanner, o *overlay, key, v []byte) ([]byte, int, error) {
	name := key[len(prefixCompactKey):]
	i := bytes.IndexByte(name, 0)
	if i < 0 || len(name) < i+5 {
		return nil, 0, fmt.Errorf("key index entry %x is malformed", key)
	}
	topic, p := string(name[:i]), be32At(name[i+1:])
	e, err := decodeKeyEntry(v)
	if err != nil {
		return nil, 0, err
	}
	rec, read, err := storedRecordAt(s, o, topic, p, e.offset)
	if err != nil || rec == nil {
		return nil, read, err
	}
	e.leaf = leafHash(rec)
	return e.value(), read, nil
}
