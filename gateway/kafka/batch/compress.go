package batch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/golang/snappy"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// ratioFloor is the compressed size below which the ratio bound counts
// this many bytes, as the chain's bound does (wire.MaxCompressionRatio):
// a small batch may inflate to MaxCompressionRatio × 64 KiB (capped by
// MaxUncompressedBytes), so 3 MiB of zeros gzipped to 3 KB is taken.
const ratioFloor = 64 << 10

// inflate returns a batch's records uncompressed, never producing more than
// the limits allow: the smaller of MaxUncompressedBytes and
// MaxCompressionRatio times the compressed size (at least ratioFloor).
func inflate(codec Codec, b []byte, lim Limits) ([]byte, error) {
	if codec == CodecNone {
		if len(b) > lim.MaxUncompressedBytes {
			return nil, fmt.Errorf("%w: %d bytes of records, at most %d", ErrTooLarge, len(b), lim.MaxUncompressedBytes)
		}
		return b, nil
	}
	limit := min(int64(lim.MaxUncompressedBytes), int64(lim.MaxCompressionRatio)*int64(max(len(b), ratioFloor)))
	var out []byte
	var err error
	switch codec {
	case CodecGzip:
		out, err = inflateGzip(b, limit)
	case CodecSnappy:
		out, err = inflateSnappy(b, limit)
	case CodecLz4:
		out, err = readLimited(lz4.NewReader(bytes.NewReader(b)), limit)
	case CodecZstd:
		out, err = inflateZstd(b, limit)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", codec, err)
	}
	return out, nil
}

// readLimited reads r to its end, failing once it yields more than limit.
// Its buffer doubles as it fills, so reading n bytes allocates about 2n.
func readLimited(r io.Reader, limit int64) ([]byte, error) {
	out := make([]byte, 0, min(limit+1, 64<<10))
	for {
		if len(out) == cap(out) {
			if int64(len(out)) > limit {
				return nil, fmt.Errorf("%w: inflates past %d bytes (the batch's bound: at most %d bytes, or %d bytes per compressed byte)", ErrTooLarge, limit, limit, limit)
			}
			grown := make([]byte, len(out), min(2*int64(cap(out)), limit+1))
			copy(grown, out)
			out = grown
		}
		n, err := r.Read(out[len(out):cap(out)])
		out = out[:len(out)+n]
		if errors.Is(err, io.EOF) {
			if int64(len(out)) > limit {
				return nil, fmt.Errorf("%w: inflates past %d bytes (the batch's bound)", ErrTooLarge, limit)
			}
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
	}
}

func inflateGzip(b []byte, limit int64) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	defer zr.Close()
	return readLimited(zr, limit)
}

var zstdDecoders = sync.Pool{New: func() any {
	// Windows past 8 MiB are refused: no batch needs one, and a
	// decoder's memory follows its window.
	d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(8<<20), zstd.WithDecoderLowmem(true))
	if err != nil {
		panic(err) // only for invalid options
	}
	return d
}}

func inflateZstd(b []byte, limit int64) ([]byte, error) {
	d := zstdDecoders.Get().(*zstd.Decoder)
	defer zstdDecoders.Put(d)
	if err := d.Reset(bytes.NewReader(b)); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return readLimited(d, limit)
}

// xerialMagic starts the framing Kafka's Java client puts around snappy
// blocks: the magic, then a version and a compatible version (4 bytes
// each), then blocks of [4-byte big-endian length][snappy block].
var xerialMagic = []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0}

func inflateSnappy(b []byte, limit int64) ([]byte, error) {
	if !bytes.HasPrefix(b, xerialMagic) {
		return snappyBlock(nil, b, limit)
	}
	if len(b) < 16 {
		return nil, fmt.Errorf("%w: xerial header of %d bytes", ErrCorrupt, len(b))
	}
	var out []byte
	for rest := b[16:]; len(rest) > 0; {
		if len(rest) < 4 {
			return nil, fmt.Errorf("%w: xerial chunk length cut short", ErrCorrupt)
		}
		n := binary.BigEndian.Uint32(rest)
		if uint64(n) > uint64(len(rest)-4) {
			return nil, fmt.Errorf("%w: xerial chunk of %d bytes with %d left", ErrCorrupt, n, len(rest)-4)
		}
		var err error
		if out, err = snappyBlock(out, rest[4:4+n], limit-int64(len(out))); err != nil {
			return nil, err
		}
		rest = rest[4+n:]
	}
	return out, nil
}

// snappyBlock appends one snappy block to dst, checking its declared length
// against limit before decoding it.
func snappyBlock(dst, block []byte, limit int64) ([]byte, error) {
	n, err := snappy.DecodedLen(block)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if int64(n) > limit {
		return nil, fmt.Errorf("%w: a snappy block inflates to %d bytes, past the batch's bound of %d", ErrTooLarge, n, limit)
	}
	out, err := snappy.Decode(nil, block)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return append(dst, out...), nil
}

// deflate is b compressed with codec, framed as Kafka's own clients frame
// it, so that every client reads it: gzip, snappy in the xerial framing
// the Java client writes (and librdkafka and franz-go read), an LZ4 frame,
// a zstd frame.
func deflate(codec Codec, b []byte) []byte {
	switch codec {
	case CodecGzip:
		var out bytes.Buffer
		w := gzipWriters.Get().(*gzip.Writer)
		defer gzipWriters.Put(w)
		w.Reset(&out)
		// Writing to a bytes.Buffer does not fail.
		_, _ = w.Write(b)
		_ = w.Close()
		return out.Bytes()
	case CodecSnappy:
		return xerialFrame(b)
	case CodecLz4:
		return lz4Frame(b)
	case CodecZstd:
		return zstdEncoder().EncodeAll(b, make([]byte, 0, len(b)/2+64))
	}
	return b
}

var gzipWriters = sync.Pool{New: func() any {
	w, _ := gzip.NewWriterLevel(nil, gzip.DefaultCompression)
	return w
}}

var zstdEncoder = sync.OnceValue(func() *zstd.Encoder {
	// Options that are constants cannot fail.
	e, _ := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
	return e
})

// xerialChunk is the uncompressed size of one snappy block in a xerial
// frame: the Java client's default block size.
const xerialChunk = 32 << 10

// xerialFrame is b as snappy blocks in the xerial framing.
func xerialFrame(b []byte) []byte {
	out := append([]byte(nil), xerialMagic...)
	out = binary.BigEndian.AppendUint32(out, 1) // version
	out = binary.BigEndian.AppendUint32(out, 1) // compatible version
	for len(b) > 0 {
		n := min(len(b), xerialChunk)
		block := snappy.Encode(nil, b[:n])
		out = binary.BigEndian.AppendUint32(out, uint32(len(block)))
		out = append(out, block...)
		b = b[n:]
	}
	return out
}

var lz4Writers = sync.Pool{New: func() any { return lz4.NewWriter(nil) }}

// lz4Frame is b as one LZ4 frame.
func lz4Frame(b []byte) []byte {
	var out bytes.Buffer
	w := lz4Writers.Get().(*lz4.Writer)
	defer lz4Writers.Put(w)
	w.Reset(&out)
	// Writing to a bytes.Buffer does not fail.
	_, _ = w.Write(b)
	_ = w.Close()
	return out.Bytes()
}
