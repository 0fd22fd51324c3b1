package core

import (
	"fmt"

	"github.com/klauspost/compress/zstd"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// zstdDecoder is shared and stateless between calls; DecodeAll runs on the
// caller's goroutine (concurrency 1), so the core starts none. DecodeAll never
// writes past cap(dst), which decompress sets to the declared size, however
// many frames follow; WithDecoderMaxMemory is a second fence at the largest
// max_batch_bytes genesis may set.
var zstdDecoder, _ = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
	zstd.WithDecodeAllCapLimit(true), zstd.WithDecoderMaxMemory(64<<20))

// decompress returns records inflated per codec, refusing to produce more
// than limit bytes: a decompression bomb fails here, bounded, instead of
// filling memory.
func decompress(codec byzlogv1.Codec, records []byte, limit int) ([]byte, error) {
	switch codec {
	case byzlogv1.Codec_CODEC_NONE:
		return records, nil
	case byzlogv1.Codec_CODEC_ZSTD:
		if allowed := wire.InflateAllowance(len(records)); limit > allowed {
			return nil, fmt.Errorf("declares %d bytes uncompressed from %d compressed, more than the chain's ratio of %d allows (%d)",
				limit, len(records), wire.MaxCompressionRatio, allowed)
		}
		h := zstd.Header{}
		if err := h.Decode(records); err != nil {
			return nil, fmt.Errorf("records are not a zstd frame: %v", err)
		}
		if !h.HasFCS {
			return nil, fmt.Errorf("the zstd frame does not declare its content size; encode with the size (as zstd's single-shot encoders do)")
		}
		if h.FrameContentSize != uint64(limit) {
			return nil, fmt.Errorf("zstd frame holds %d bytes, the batch declares %d", h.FrameContentSize, limit)
		}
		out, err := zstdDecoder.DecodeAll(records, make([]byte, 0, limit))
		if err != nil {
			return nil, fmt.Errorf("records do not decompress with zstd within the declared %d bytes: %v", limit, err)
		}
		return out, nil
	}
	return nil, fmt.Errorf("codec %d is not one this version knows (none = 0, zstd = 1)", codec)
}
