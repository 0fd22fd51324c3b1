package core

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
)

// Record runs: how CFRecords holds a partition's log.
//
// Under rules version RunsRulesVersion and later, a batch's records are
// stored in runs: the stored records of consecutive offsets, up to
// MaxRunBytes of them, under the key of the run's last offset. Before it,
// each record had its own key, which reads as a run of one; both forms
// read the same (scanRecords), so a log written across the upgrade needs
// no migration. Keying a run by its last offset keeps every read a forward
// seek: the first key at or after recordKey(o) is the run that holds o.
// And a range delete of [recordKey(a), recordKey(b)) drops exactly the runs
// that end below b; a run that straddles b stays, with its records below b
// hidden by the partition's log start offset.
//
// A run's value is runMarker, the number of records (uvarint), then each
// stored record, its length first (uvarint). A stored record on its own
// is a StoredRecord's protobuf encoding, which never starts with 0x00 (a
// field tag is at least 0x08), so the first byte tells the forms apart.
//
// A record compaction removed (rules version CompactRulesVersion on,
// compact.go) stays in its run as removedMarker and its 32-byte leaf hash:
// offsets and the block's Merkle tree stay, its bytes go. A StoredRecord's
// encoding never starts with 0x01 either. Reads skip it (scanRecords).
//
// The layout is part of the state root (the snapshot chunks are the
// store's keys and values), so every validator must store a block's
// records the same way: it changes with the rules version, at one height.

// MaxRunBytes bounds a run's stored records, so that a run travels in one
// state-sync chunk (wire.MaxSnapshotRecordBytes) and reading one record of
// it reads little else. A record larger than this is a run of one.
const MaxRunBytes = 64 << 10

// runMarker is the first byte of a run of more than one record.
const runMarker = 0x00

// removedMarker is the first byte of a removed record's place in a run:
// then its leaf hash.
const removedMarker = 0x01

// removedLen is a removed record's place's size.
const removedLen = 1 + sha256.Size

// removedPlace is what stands for rec once compaction removed it.
func removedPlace(rec []byte) []byte { return append([]byte{removedMarker}, leafHash(rec)...) }

// isRemoved reports whether a stored record is a removed one's place.
func isRemoved(rec []byte) bool { return len(rec) == removedLen && rec[0] == removedMarker }

// appendRuns splits records (stored records of offsets first, first+1,
// ...) into runs of at most MaxRunBytes and calls put with each run's key
// offset (its last) and value. A run of one record is the record itself.
func appendRuns(first uint64, records [][]byte, put func(last uint64, value []byte)) {
	for len(records) > 0 {
		n, size := 1, len(records[0])
		for n < len(records) && size+len(records[n]) <= MaxRunBytes {
			size += len(records[n])
			n++
		}
		put(first+uint64(n-1), encodeRun(records[:n]))
		first += uint64(n)
		records = records[n:]
	}
}

// encodeRun is the stored value of a run of records. Each records[i] is
// made a slice of it, so that the block holds the records' bytes once.
func encodeRun(records [][]byte) []byte {
	if len(records) == 1 {
		return records[0]
	}
	size := 1 + binary.MaxVarintLen64
	for _, r := range records {
		size += binary.MaxVarintLen64 + len(r)
	}
	out := make([]byte, 0, size)
	out = append(out, runMarker)
	out = binary.AppendUvarint(out, uint64(len(records)))
	for i, r := range records {
		out = binary.AppendUvarint(out, uint64(len(r)))
		out = append(out, r...) // within cap: no copy moves what came before
		records[i] = out[len(out)-len(r) : len(out) : len(out)]
	}
	return out
}

var errEmptyRecord = errors.New("empty stored value")

// runHeader is how many records a stored value holds and, for a run of
// more than one, the framed records after its count (nil for a record on
// its own). The count is checked against the value's size, not each
// record's framing.
func runHeader(v []byte) (count int, body []byte, err error) {
	if len(v) == 0 {
		return 0, nil, errEmptyRecord
	}
	if v[0] != runMarker {
		return 1, nil, nil
	}
	n, k := binary.Uvarint(v[1:])
	// Each record takes at least 2 bytes (its length and one byte): a
	// count past that is corrupt, and allocates nothing.
	if k <= 0 || n < 2 || n > uint64(len(v)-1-k)/2 {
		return 0, nil, fmt.Errorf("record run of %d bytes: bad record count", len(v))
	}
	return int(n), v[1+k:], nil
}

// decodeRun calls fn with each stored record of a stored value, in
// offset order, and i its index, until fn returns false; n is the number
// of records the value holds. The slices alias v. A malformed value is an
// error and calls fn for none of its records.
func decodeRun(v []byte, fn func(i int, rec []byte) bool) (n int, err error) {
	count, rest, err := runHeader(v)
	if err != nil {
		return 0, err
	}
	if rest == nil {
		fn(0, v)
		return 1, nil
	}
	// Check the framing before calling fn: a caller never sees part of a
	// malformed run.
	recs := make([][]byte, 0, count)
	for range count {
		l, k := binary.Uvarint(rest)
		if k <= 0 || l == 0 || l > uint64(len(rest)-k) {
			return 0, fmt.Errorf("record run of %d bytes: record %d is cut short or empty", len(v), len(recs))
		}
		recs = append(recs, rest[k:k+int(l)])
		rest = rest[k+int(l):]
	}
	if len(rest) != 0 {
		return 0, fmt.Errorf("record run of %d bytes: %d bytes after its %d records", len(v), len(rest), count)
	}
	for i, r := range recs {
		if !fn(i, r) {
			break
		}
	}
	return len(recs), nil
}

// decodeStored is decodeRun with removed records' places: fn gets their
// leaf hash, and removed true.
func decodeStored(v []byte, fn func(i int, rec []byte, removed bool) bool) (int, error) {
	return decodeRun(v, func(i int, rec []byte) bool {
		if isRemoved(rec) {
			return fn(i, rec[1:], true)
		}
		return fn(i, rec, false)
	})
}

// removeFromRun returns the stored value v (a run whose first offset is
// first, or one record) with the records at offsets (ascending, each in
// the run) replaced by their places. A place stays as it is.
func removeFromRun(v []byte, first uint64, offsets []uint64) ([]byte, uint64, error) {
	var recs [][]byte
	var freed uint64
	next := 0
	if _, err := decodeRun(v, func(i int, rec []byte) bool {
		if next < len(offsets) && first+uint64(i) == offsets[next] {
			next++
			if !isRemoved(rec) {
				freed += uint64(len(rec))
				rec = removedPlace(rec)
			}
		}
		recs = append(recs, rec)
		return true
	}); err != nil {
		return nil, 0, err
	}
	if next != len(offsets) {
		return nil, 0, fmt.Errorf("offset %d is not in the run from %d of %d records", offsets[next], first, len(recs))
	}
	if len(recs) == 1 {
		return bytes.Clone(recs[0]), freed, nil
	}
	return encodeRun(recs), freed, nil
}

// runLen is the number of records a stored value holds, without checking
// each one's framing.
func runLen(v []byte) (int, error) {
	n, _, err := runHeader(v)
	return n, err
}

// scanRecords calls fn with each stored record of topic-partition p from
// offset from on, in offset order, until fn returns false, whether the
// records are stored one a key or in runs. The slices are only valid
// during the call. It reads what is stored: below the partition's log
// start offset there may be records retention has deleted but a run that
// straddles the start still holds; callers start at or above it.
func scanRecords(s Scanner, topic string, p uint32, from uint64, fn func(offset uint64, rec []byte) bool) error {
	return scanStored(s, topic, p, from, func(offset uint64, rec []byte, removed bool) bool {
		return removed || fn(offset, rec)
	})
}

// scanStored is scanRecords with the places of records compaction
// removed: fn gets their leaf hash, and removed true.
func scanStored(s Scanner, topic string, p uint32, from uint64, fn func(offset uint64, rec []byte, removed bool) bool) error {
	prefix := recordPrefix(topic, p)
	var ferr error
	err := s.Scan(CFRecords, recordKey(topic, p, from), prefixEnd(prefix), func(k, v []byte) bool {
		if len(k) != len(prefix)+8 {
			ferr = fmt.Errorf("record key %x is malformed", k)
			return false
		}
		last := binary.BigEndian.Uint64(k[len(prefix):])
		n, err := runLen(v)
		if err != nil {
			ferr = fmt.Errorf("records of %s/%d ending at offset %d: %w", topic, p, last, err)
			return false
		}
		if uint64(n-1) > last {
			ferr = fmt.Errorf("records of %s/%d ending at offset %d: a run of %d records would start below offset 0", topic, p, last, n)
			return false
		}
		first := last - uint64(n-1)
		more := true
		if _, err := decodeStored(v, func(i int, rec []byte, removed bool) bool {
			if o := first + uint64(i); o >= from {
				more = fn(o, rec, removed)
			}
			return more
		}); err != nil {
			ferr = fmt.Errorf("records of %s/%d ending at offset %d: %w", topic, p, last, err)
			return false
		}
		return more
	})
	return firstErr(err, ferr)
}
