// Package keytree is a sparse Merkle tree over hashed keys: an
// authenticated map whose root commits to a set of (key, value hash)
// pairs, with proofs that a key holds a value and proofs that a key is
// absent. byzlog's state machine keeps one over the state entries clients
// ask about one at a time (a compacted key's latest record, a partition's
// offsets, a producer's sequence) and commits its root in every block, so
// a single entry proves against an app hash.
//
// The tree is canonical: a leaf sits at the shallowest depth where its
// subtree holds no other leaf, an inner node exists only above two or
// more leaves, so the root depends on the set of pairs alone, never on
// the order they were written in. Keys are placed by SHA-256(key), so the
// depth of n keys is about log2(n) whatever keys a client chooses.
//
//	leaf  = SHA-256(0x00 || SHA-256(key) || value hash)
//	inner = SHA-256(0x01 || left || right)
//	empty = 32 zero bytes
//
// It is pure: nodes live in a Store the caller gives (byzlog's is the
// block's write overlay), and it never does I/O or reads a clock. A Tree
// writes through to the store; a Batch keeps the nodes it touches in
// memory until Flush. Verify is all a client links.
package keytree

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// HashSize is the size of every hash in the tree.
const HashSize = sha256.Size

// MaxDepth bounds a path: a proof with more siblings is a lie.
const MaxDepth = 8 * HashSize

// Store holds the tree's nodes under byte keys. Get returns nil for a key
// it does not hold; an error means the store is broken.
type Store interface {
	Get(key []byte) ([]byte, error)
	Put(key, value []byte)
	Delete(key []byte)
}

// Tree is one tree whose nodes are the store's keys under prefix.
type Tree struct {
	store  Store
	prefix []byte
	// nodes, in a Batch, holds every node read or changed since the
	// batch began, by store key (a node deleted: not present, dirty).
	nodes map[string]*node
}

// New is the tree whose nodes are under prefix in store.
func New(store Store, prefix []byte) Tree { return Tree{store: store, prefix: prefix} }

var empty = make([]byte, HashSize)

// Empty is the root of a tree with no keys.
func Empty() []byte { return bytes.Clone(empty) }

// Path is where key sits: SHA-256(key).
func Path(key []byte) []byte {
	h := sha256.Sum256(key)
	return h[:]
}

// ValueHash is the value hash of a value stored under a key: SHA-256(value).
func ValueHash(value []byte) []byte {
	h := sha256.Sum256(value)
	return h[:]
}

func leafHash(path, valueHash []byte) []byte {
	h := sha256.New()
	h.Write([]byte{0})
	h.Write(path)
	h.Write(valueHash)
	return h.Sum(nil)
}

func innerHash(left, right []byte) []byte {
	h := sha256.New()
	h.Write([]byte{1})
	h.Write(left)
	h.Write(right)
	return h.Sum(nil)
}

func bit(path []byte, d int) int { return int(path[d/8]>>(7-d%8)) & 1 }

// node is a stored node: a leaf (path, value hash) or an inner node (its
// children's hashes).
type node struct {
	leaf        bool
	a, b        []byte // leaf: path, value hash; inner: left, right
	hash        []byte
	present     bool
	depth       int
	positionKey []byte
	path        []byte // a path through the node: where its children are
	dirty       bool   // changed in a batch, not yet written
}

func (n *node) child(side int) []byte {
	if side == 0 {
		return n.a
	}
	return n.b
}

func (n *node) setChild(side int, h []byte) {
	if side == 0 {
		n.a = h
	} else {
		n.b = h
	}
}

// childPosition is the store key of the node on side of inner node n.
func (t Tree) childPosition(n *node, side int) []byte {
	p := n.path
	if bit(p, n.depth) != side {
		p = flip(p, n.depth)
	}
	return t.position(n.depth+1, p)
}

func (n *node) encode() []byte {
	kind := byte(1)
	if n.leaf {
		kind = 0
	}
	out := make([]byte, 0, 1+2*HashSize)
	out = append(out, kind)
	out = append(out, n.a...)
	return append(out, n.b...)
}

// sum is the node's hash, computed when first asked for: a node loaded on
// the way down is usually written again (its hash recomputed then), so
// loading does not hash it.
func (n *node) sum() []byte {
	if n.hash == nil {
		n.rehash()
	}
	return n.hash
}

func (n *node) rehash() {
	if n.leaf {
		n.hash = leafHash(n.a, n.b)
	} else {
		n.hash = innerHash(n.a, n.b)
	}
}

// position is the store key of the node at depth d on path: the prefix,
// the depth, and the path's first d bits.
func (t Tree) position(d int, path []byte) []byte {
	n := (d + 7) / 8
	out := make([]byte, 0, len(t.prefix)+2+n)
	out = append(out, t.prefix...)
	out = binary.BigEndian.AppendUint16(out, uint16(d))
	out = append(out, path[:n]...)
	if d%8 != 0 {
		out[len(out)-1] &= byte(0xff << (8 - d%8))
	}
	return out
}

func (t Tree) load(d int, path []byte) (*node, error) {
	key := t.position(d, path)
	if n, ok := t.nodes[string(key)]; ok {
		return n, nil
	}
	v, err := t.store.Get(key)
	if err != nil {
		return nil, err
	}
	n := &node{depth: d, positionKey: key, path: path}
	if t.nodes != nil {
		t.nodes[string(key)] = n
	}
	if v == nil {
		return n, nil
	}
	if len(v) != 1+2*HashSize || v[0] > 1 {
		return nil, fmt.Errorf("key tree node %x is malformed (%d bytes)", key, len(v))
	}
	n.present, n.leaf = true, v[0] == 0
	n.a, n.b = bytes.Clone(v[1:1+HashSize]), bytes.Clone(v[1+HashSize:])
	return n, nil
}

// save writes n at its place. In a batch it is kept, its hash (and its
// parent's hash of it) computed when the batch is flushed.
func (t Tree) save(n *node) {
	if t.nodes != nil {
		n.hash, n.dirty = nil, true
		t.nodes[string(n.positionKey)] = n
		return
	}
	n.rehash()
	t.store.Put(n.positionKey, n.encode())
}

// drop deletes n from its place.
func (t Tree) drop(n *node) {
	if t.nodes != nil {
		t.nodes[string(n.positionKey)] = &node{positionKey: n.positionKey, depth: n.depth, path: n.path, dirty: true}
		return
	}
	t.store.Delete(n.positionKey)
}

// ref is what a parent holds of n, just saved: its hash, or in a batch
// nil, "changed: hash it at the flush".
func (t Tree) ref(n *node) []byte {
	if t.nodes != nil {
		return nil
	}
	return n.hash
}

// resolve is n's hash, in a batch hashing first its changed children
// (those its parent holds as nil), from the bottom up.
func (t Tree) resolve(n *node) ([]byte, error) {
	if n.hash != nil {
		return n.hash, nil
	}
	if !n.leaf {
		for side := range 2 {
			if n.child(side) != nil {
				continue
			}
			c, ok := t.nodes[string(t.childPosition(n, side))]
			if !ok || !c.present {
				return nil, fmt.Errorf("key tree node %x: a changed child is missing", n.positionKey)
			}
			h, err := t.resolve(c)
			if err != nil {
				return nil, err
			}
			n.setChild(side, h)
		}
	}
	n.rehash()
	return n.hash, nil
}

// Root is the tree's root hash.
func (t Tree) Root() ([]byte, error) {
	n, err := t.load(0, empty)
	if err != nil || !n.present {
		return Empty(), err
	}
	if t.nodes != nil {
		h, err := t.resolve(n)
		return bytes.Clone(h), err
	}
	return n.sum(), nil
}

// descend walks from the root along path to the first node that is not
// inner (a leaf, or nothing), returning the inner nodes passed and it.
func (t Tree) descend(path []byte) ([]*node, *node, error) {
	var inners []*node
	for d := 0; d <= MaxDepth; d++ {
		n, err := t.load(d, path)
		if err != nil {
			return nil, nil, err
		}
		if !n.present || n.leaf {
			return inners, n, nil
		}
		if d == MaxDepth {
			break
		}
		inners = append(inners, n)
	}
	return nil, nil, errors.New("key tree is deeper than a path: the store is corrupt")
}

// Batch is a tree whose changes stay in memory until Flush: a block that
// changes thousands of keys hashes and writes each changed node once,
// where Set and Delete on a Tree rewrite and rehash the whole path of
// every key. Reads see its changes; its store must not change meanwhile.
type Batch struct{ t Tree }

// Batch begins a batch of changes to t.
func (t Tree) Batch() *Batch {
	t.nodes = map[string]*node{}
	return &Batch{t: t}
}

// Set puts key's value hash in the tree.
func (b *Batch) Set(key, valueHash []byte) error { return b.t.Set(key, valueHash) }

// Delete removes key from the tree.
func (b *Batch) Delete(key []byte) error { return b.t.Delete(key) }

// Root is the root hash of the tree with the batch's changes.
func (b *Batch) Root() ([]byte, error) { return b.t.Root() }

// Flush hashes the changed nodes and writes them to the store, in key
// order, and begins the batch anew.
func (b *Batch) Flush() error {
	keys := make([]string, 0, len(b.t.nodes))
	for k, n := range b.t.nodes {
		if n.dirty {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		n := b.t.nodes[k]
		if !n.present {
			b.t.store.Delete(n.positionKey)
			continue
		}
		if _, err := b.t.resolve(n); err != nil {
			return err
		}
		b.t.store.Put(n.positionKey, n.encode())
	}
	clear(b.t.nodes)
	return nil
}

// Set puts key's value hash in the tree.
func (t Tree) Set(key, valueHash []byte) error {
	if len(valueHash) != HashSize {
		return fmt.Errorf("key tree: value hash is %d bytes, want %d", len(valueHash), HashSize)
	}
	path := Path(key)
	inners, end, err := t.descend(path)
	if err != nil {
		return err
	}
	leaf := &node{present: true, leaf: true, a: path, b: bytes.Clone(valueHash), path: path}
	var top *node
	switch {
	case !end.present || bytes.Equal(end.a, path):
		leaf.depth, leaf.positionKey = end.depth, end.positionKey
		t.save(leaf)
		top = leaf
	default:
		top = t.split(end, leaf)
	}
	t.up(inners, path, t.ref(top))
	return nil
}

// split puts leaf beside other, the leaf now at its place: both go below
// the first bit their paths differ at, under a chain of inner nodes from
// other's depth down to that bit. It returns the chain's top.
func (t Tree) split(other, leaf *node) *node {
	path := leaf.a
	j := other.depth
	for bit(path, j) == bit(other.a, j) {
		j++
	}
	moved := &node{present: true, leaf: true, a: other.a, b: other.b, depth: j + 1, positionKey: t.position(j+1, other.a), path: other.a}
	leaf.depth, leaf.positionKey = j+1, t.position(j+1, path)
	t.save(moved)
	t.save(leaf)
	below := &node{present: true, depth: j, positionKey: t.position(j, path), path: path}
	below.setChild(bit(path, j), t.ref(leaf))
	below.setChild(1-bit(path, j), t.ref(moved))
	t.save(below)
	for d := j - 1; d >= other.depth; d-- {
		n := &node{present: true, depth: d, positionKey: t.position(d, path), a: empty, b: empty, path: path}
		n.setChild(bit(path, d), t.ref(below))
		t.save(n)
		below = n
	}
	return below
}

// up writes h as the child on path of the deepest of inners, and each
// one's new hash into the one above.
func (t Tree) up(inners []*node, path, h []byte) {
	for i := len(inners) - 1; i >= 0; i-- {
		n := inners[i]
		n.setChild(bit(path, n.depth), h)
		t.save(n)
		h = t.ref(n)
	}
}

// Delete removes key from the tree; a key it does not hold is no change.
// The tree stays canonical: a leaf left alone below an inner node moves
// up to where its subtree holds only it.
func (t Tree) Delete(key []byte) error {
	path := Path(key)
	inners, end, err := t.descend(path)
	if err != nil {
		return err
	}
	if !end.present || !bytes.Equal(end.a, path) {
		return nil
	}
	t.drop(end)
	h := empty
	var carry *node // a leaf moving up, its place not yet written
	for i := len(inners) - 1; i >= 0; i-- {
		n := inners[i]
		side := bit(path, n.depth)
		other := n.child(1 - side)
		switch {
		case carry == nil && bytes.Equal(h, empty):
			sib, err := t.load(n.depth+1, flip(path, n.depth))
			if err != nil {
				return err
			}
			if sib.present && sib.leaf {
				t.drop(sib)
				t.drop(n)
				carry, h = sib, sib.sum()
				continue
			}
		case carry != nil && bytes.Equal(other, empty):
			t.drop(n)
			continue
		case carry != nil:
			carry.depth, carry.positionKey, carry.path = n.depth+1, t.position(n.depth+1, carry.a), carry.a
			t.save(carry)
			carry = nil
		}
		n.setChild(side, h)
		t.save(n)
		h = t.ref(n)
	}
	if carry != nil {
		carry.depth, carry.positionKey, carry.path = 0, t.position(0, carry.a), carry.a
		t.save(carry)
	}
	return nil
}

// flip is path with bit d flipped: the sibling's side at depth d+1.
func flip(path []byte, d int) []byte {
	out := bytes.Clone(path)
	out[d/8] ^= 1 << (7 - d%8)
	return out
}

// Proof shows what a tree holds at one key: the sibling hashes from the
// root down, and the leaf found at the end of them (nil: an empty
// subtree). The leaf is the key's own when the key is present, another
// key's (whose path shares the siblings' depth of bits) or nothing when it
// is absent.
type Proof struct {
	Siblings      [][]byte
	LeafPath      []byte
	LeafValueHash []byte
}

// Prove is the proof of what the tree holds at key.
func (t Tree) Prove(key []byte) (*Proof, error) {
	path := Path(key)
	inners, end, err := t.descend(path)
	if err != nil {
		return nil, err
	}
	p := &Proof{Siblings: make([][]byte, len(inners))}
	for i, n := range inners {
		p.Siblings[i] = n.child(1 - bit(path, n.depth))
	}
	if end.present {
		p.LeafPath, p.LeafValueHash = end.a, end.b
	}
	return p, nil
}

// ErrProof means a proof does not show the claimed value under the root.
var ErrProof = errors.New("key tree proof does not hold")

// Verify checks that p shows key holding valueHash in the tree with root
// (valueHash nil: that the tree does not hold key).
func (p *Proof) Verify(root, key, valueHash []byte) error {
	if p == nil {
		return fmt.Errorf("%w: no proof", ErrProof)
	}
	if len(p.Siblings) > MaxDepth {
		return fmt.Errorf("%w: %d siblings, a path has at most %d", ErrProof, len(p.Siblings), MaxDepth)
	}
	path := Path(key)
	h := empty
	switch {
	case p.LeafPath == nil && p.LeafValueHash == nil:
		if valueHash != nil {
			return fmt.Errorf("%w: it shows the key absent", ErrProof)
		}
	case len(p.LeafPath) != HashSize || len(p.LeafValueHash) != HashSize:
		return fmt.Errorf("%w: its leaf is malformed", ErrProof)
	case bytes.Equal(p.LeafPath, path):
		if valueHash == nil {
			return fmt.Errorf("%w: it shows the key present", ErrProof)
		}
		if !bytes.Equal(p.LeafValueHash, valueHash) {
			return fmt.Errorf("%w: it shows another value under the key", ErrProof)
		}
		h = leafHash(path, valueHash)
	default:
		if valueHash != nil {
			return fmt.Errorf("%w: it shows another key where the key would be", ErrProof)
		}
		for d := range p.Siblings {
			if bit(p.LeafPath, d) != bit(path, d) {
				return fmt.Errorf("%w: its leaf is off the key's path at depth %d", ErrProof, d)
			}
		}
		h = leafHash(p.LeafPath, p.LeafValueHash)
	}
	for d := len(p.Siblings) - 1; d >= 0; d-- {
		s := p.Siblings[d]
		if len(s) != HashSize {
			return fmt.Errorf("%w: sibling %d is %d bytes", ErrProof, d, len(s))
		}
		if bit(path, d) == 0 {
			h = innerHash(h, s)
		} else {
			h = innerHash(s, h)
		}
	}
	if !bytes.Equal(h, root) {
		return fmt.Errorf("%w: it leads to root %X, not %X", ErrProof, h, root)
	}
	return nil
}
