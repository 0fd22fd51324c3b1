package core

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// refOverlay is the overlay's meaning in its plainest form: one map of each
// key's last change, range deletes recorded in order, the change set sorted
// by (CF, Key). The overlay keeps record changes in runs instead; they must
// agree on every read and every change set.
type refOverlay struct {
	parent Reader
	writes map[string]Change
	ranges []RangeDelete
}

func (r *refOverlay) Get(cf CF, key []byte) ([]byte, error) {
	if c, ok := r.writes[wkey(cf, key)]; ok {
		if c.Delete {
			return nil, nil
		}
		return c.Value, nil
	}
	for _, d := range r.ranges {
		if d.CF == cf && bytes.Compare(key, d.Start) >= 0 && bytes.Compare(key, d.End) < 0 {
			return nil, nil
		}
	}
	return r.parent.Get(cf, key)
}

func (r *refOverlay) change(c Change) { r.writes[wkey(c.CF, c.Key)] = c }

func (r *refOverlay) deleteRange(cf CF, start, end []byte) {
	for k, c := range r.writes {
		if c.CF == cf && bytes.Compare(c.Key, start) >= 0 && bytes.Compare(c.Key, end) < 0 {
			delete(r.writes, k)
		}
	}
	r.ranges = append(r.ranges, RangeDelete{CF: cf, Start: start, End: end})
}

func (r *refOverlay) mergeInto(p *refOverlay) {
	for _, d := range r.ranges {
		p.deleteRange(d.CF, d.Start, d.End)
	}
	for _, c := range r.writes {
		p.change(c)
	}
}

func (r *refOverlay) changeSet() ChangeSet {
	var out []Change
	for _, c := range r.writes {
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b Change) int { return compareChanges(&a, &b) })
	return ChangeSet{RangeDeletes: append([]RangeDelete(nil), r.ranges...), Changes: out}
}

// committed answers every key, so that a read that wrongly falls through
// to it after a delete shows.
type committed struct{}

func (committed) Get(cf CF, key []byte) ([]byte, error) {
	return []byte(fmt.Sprintf("committed %d %x", cf, key)), nil
}

// TestOverlayMatchesAMap drives the overlay and the reference with the same
// random blocks: transactions (child overlays, merged or dropped) that
// append records to a few partitions in offset order, now and then out of
// order, rewrite or delete a record, delete a topic's range or part of a
// partition (as retention does) and append again, write keys shorter than
// an offset and other column families; and writes made to the block's
// overlay directly. Every read and the block's change set must agree.
func TestOverlayMatchesAMap(t *testing.T) {
	topics := []string{"a", "ab", "b"}
	for seed := uint64(1); seed <= 300; seed++ {
		rng := rand.New(rand.NewPCG(seed, 19))
		block, ref := newOverlay(committed{}), &refOverlay{parent: committed{}, writes: map[string]Change{}}
		next := map[string]uint64{}
		randomKey := func() []byte {
			topic, p := topics[rng.IntN(len(topics))], uint32(rng.IntN(3))
			prefix := string(recordPrefix(topic, p))
			off := next[prefix]
			switch rng.IntN(10) {
			case 0: // an earlier offset again
				off = uint64(rng.IntN(int(off) + 1))
			default:
				next[prefix]++
			}
			return recordKey(topic, p, off)
		}
		for tx := 0; tx < 12; tx++ {
			child, refChild := newOverlay(block), &refOverlay{parent: ref, writes: map[string]Change{}}
			for op := rng.IntN(40); op >= 0; op-- {
				var c Change
				switch k := rng.IntN(24); {
				case k == 0:
					start, end := topicRecords(topics[rng.IntN(len(topics))])
					child.deleteRange(CFRecords, start, end)
					refChild.deleteRange(CFRecords, start, end)
					continue
				case k == 20: // the oldest records of a partition, as retention deletes them
					topic, p := topics[rng.IntN(len(topics))], uint32(rng.IntN(3))
					start, end := recordKey(topic, p, 0), recordKey(topic, p, uint64(rng.IntN(6)))
					child.deleteRange(CFRecords, start, end)
					refChild.deleteRange(CFRecords, start, end)
					continue
				case k == 21:
					c = Change{CF: CFRecords, Key: []byte(fmt.Sprint("s", rng.IntN(3))), Value: []byte(fmt.Sprint(seed, tx, op))}
				case k == 22: // straight into the block, as a block's own steps write
					c = Change{CF: CFRecords, Key: randomKey(), Value: []byte(fmt.Sprint("block", seed, tx, op))}
					block.change(c)
					ref.change(c)
					continue
				case k == 1:
					c = Change{CF: CFRecords, Key: randomKey(), Delete: true}
				case k < 4:
					c = Change{CF: CF(1 + 2*rng.IntN(2)), Key: []byte(fmt.Sprint("k", rng.IntN(8))), Value: []byte(fmt.Sprint(seed, tx, op))}
				default:
					c = Change{CF: CFRecords, Key: randomKey(), Value: []byte(fmt.Sprint(seed, tx, op))}
				}
				child.change(c)
				refChild.change(c)
			}
			for i := 0; i < 6; i++ {
				cf, key := CFRecords, randomKey()
				switch i {
				case 0:
					cf, key = CFMeta, []byte(fmt.Sprint("k", rng.IntN(8)))
				case 1:
					key = []byte(fmt.Sprint("s", rng.IntN(3)))
				}
				got, _ := child.Get(cf, key)
				want, _ := refChild.Get(cf, key)
				if !bytes.Equal(got, want) {
					t.Fatalf("seed %d tx %d: Get(%d, %q) = %q, want %q", seed, tx, cf, key, got, want)
				}
			}
			if rng.IntN(4) > 0 {
				child.mergeInto(block)
				refChild.mergeInto(ref)
			}
		}
		if got, want := block.changeSet(), ref.changeSet(); !reflect.DeepEqual(got, want) {
			t.Fatalf("seed %d: change set\n%v\nwant\n%v", seed, got, want)
		}
	}
}
