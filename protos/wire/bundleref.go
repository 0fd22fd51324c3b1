package wire

import "crypto/sha256"

// MinBundleRefBytes is the smallest transaction a block may reference
// instead of carrying (rules version 3), a chain rule: a reference must
// name a ProduceBundle of at least this many bytes. Below it the 34-byte
// reference saves little, and the bound makes a block's references at
// most its bundle-byte budget / MinBundleRefBytes, checked before any is
// looked up or fetched.
const MinBundleRefBytes = 1024

// MaxBlockBundleBytes bounds the bytes of the bundles one block
// references (rules version 3), a chain rule: a proposer builds within it
// and a validator refuses a block past it, checking the references' count
// against it before it looks any up. A block that carries its bundles is
// bounded by CometBFT's block.max_bytes (4 MiB by default); this keeps a
// Byzantine proposer's referenced block within 4× of that, whatever
// max_block_uncompressed_bytes allows.
const MaxBlockBundleBytes = 16 << 20

// A bundle reference is the Tx envelope with only bundle_ref set: field 5,
// length-delimited, 32 bytes. Its encoding is fixed, so it is recognised
// and made without a protobuf round trip.
const bundleRefLen = 2 + sha256.Size

var bundleRefPrefix = [2]byte{5<<3 | 2, sha256.Size}

// BundleRef returns the SHA-256 a block transaction references when tx is
// a bundle reference (byzlogv1.Tx.bundle_ref), exactly as NewBundleRef
// encodes it.
func BundleRef(tx []byte) (sum [sha256.Size]byte, ok bool) {
	if len(tx) != bundleRefLen || tx[0] != bundleRefPrefix[0] || tx[1] != bundleRefPrefix[1] {
		return sum, false
	}
	copy(sum[:], tx[2:])
	return sum, true
}

// NewBundleRef is the block transaction that references the transaction
// whose SHA-256 is sum.
func NewBundleRef(sum [sha256.Size]byte) []byte {
	out := make([]byte, 0, bundleRefLen)
	out = append(out, bundleRefPrefix[:]...)
	return append(out, sum[:]...)
}
