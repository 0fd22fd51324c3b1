package core

// CountAborted counts topic/p's aborted-range keys, under both of their
// orders (abortedKey and abortEndKey), for tests outside the package.
func CountAborted(s Scanner, topic string, p uint32) (int, error) {
	n := 0
	for _, pre := range [][]byte{prefixAborted, prefixAbortEnd} {
		prefix := cat(pre, []byte(topic), []byte{0}, be32(p))
		if err := s.Scan(CFMeta, prefix, prefixEnd(prefix), func(_, _ []byte) bool { n++; return true }); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// IndexedKeys lists the keys topic/p's compaction index holds, in order,
// for tests outside the package.
func IndexedKeys(s Scanner, topic string, p uint32) ([]string, error) {
	var keys []string
	prefix := compactPartitionPrefix(prefixCompactKey, topic, p)
	err := s.Scan(CFMeta, prefix, prefixEnd(prefix), func(k, _ []byte) bool {
		keys = append(keys, string(k[len(prefix):]))
		return true
	})
	return keys, err
}
