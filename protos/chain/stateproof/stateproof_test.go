package stateproof

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

// FuzzVerifyLatest: any bytes a node sends as a LatestProof or a
// StateProof are refused or verified, never a panic, and never verified
// against an app hash they were not made for.
func FuzzVerifyLatest(f *testing.F) {
	seed, _ := proto.Marshal(&byzlogv1.LatestProof{State: &byzlogv1.StateProof{Height: 3, KeyRootProof: &byzlogv1.MerkleProof{Total: 1},
		Entries: []*byzlogv1.StateEntryProof{{}, {}, {}}}, Record: []byte("r")})
	f.Add(seed)
	f.Add([]byte{0x0a, 0x02, 0x08, 0x01})
	appHash := bytes.Repeat([]byte{1}, 32)
	f.Fuzz(func(t *testing.T, b []byte) {
		var lp byzlogv1.LatestProof
		if proto.Unmarshal(b, &lp) != nil {
			return
		}
		if l, err := VerifyLatest(&lp, appHash, "t", 0, []byte("k")); err == nil {
			t.Fatalf("random bytes verified as %+v", l)
		}
		if ps, err := VerifyProducerState(lp.State, appHash, &byzlogv1.ProducerRequest{ProducerKey: make([]byte, 32), Topic: "t"}); err == nil {
			t.Fatalf("random bytes verified as %v", ps)
		}
	})
}

// TestIndexEntryRoundTrip: an index entry reads back as written, with and
// without its leaf hash, and other sizes are refused.
func TestIndexEntryRoundTrip(t *testing.T) {
	for _, e := range []IndexEntry{{Offset: 7}, {Offset: 1 << 40, Tombstone: true, Leaf: bytes.Repeat([]byte{9}, 32)}} {
		got, err := DecodeIndexEntry(e.Encode())
		if err != nil || got.Offset != e.Offset || got.Tombstone != e.Tombstone || !bytes.Equal(got.Leaf, e.Leaf) {
			t.Errorf("DecodeIndexEntry(Encode(%+v)) = %+v, %v", e, got, err)
		}
	}
	if _, err := DecodeIndexEntry(make([]byte, 10)); err == nil {
		t.Error("a 10-byte entry decoded")
	}
}
