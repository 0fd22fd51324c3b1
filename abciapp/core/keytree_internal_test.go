package core

import (
	"bytes"
	"testing"

	"github.com/byzlog/byzlog/protos/chain/stateproof"
)

// TestStateProofLayout: what package stateproof checks is what the state
// machine writes: the column families' bytes and the key tree root's item
// in the meta root.
func TestStateProofLayout(t *testing.T) {
	if stateproof.CFMeta != byte(CFMeta) || stateproof.CFProducers != byte(CFProducers) {
		t.Fatalf("stateproof's column families %d, %d; core's %d, %d", stateproof.CFMeta, stateproof.CFProducers, CFMeta, CFProducers)
	}
	root := bytes.Repeat([]byte{7}, 32)
	if got, want := stateproof.KeyRootItem(root), metaItem(Change{CF: CFMeta, Key: keyKeyTree, Value: root}); !bytes.Equal(got, want) {
		t.Fatalf("stateproof.KeyRootItem = %x, the meta root's item %x", got, want)
	}
	if !bytes.HasPrefix(stateproof.TopicLeaf("t"), []byte{0}) || bytes.HasPrefix(treeLeaf(CFMeta, topicKey("t")), []byte{0}) {
		t.Fatal("a topic's leaf and a state entry's leaf must not share a first byte")
	}
}
