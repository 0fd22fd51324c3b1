package wire

import "crypto/sha256"

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
