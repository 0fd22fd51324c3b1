package core

import (
	"bytes"
	"crypto/ed25519"
	"encoding/binary"
	"fmt"

	"google.golang.org/protobuf/proto"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// Query answers a read of committed state st held in s. A bad request gets a
// result code and a message; an error means the store is broken.
func Query(s Scanner, st State, path string, data []byte) ([]byte, Result, error) {
	q, ok := queries[path]
	if !ok {
		return nil, reject(wire.CodeUnknownQuery, "unknown query path %q; the paths are %v", path, wire.QueryPaths), nil
	}
	return q(s, st, data)
}

// query answers one path: the request bytes in, the response bytes out.
type query func(s Scanner, st State, data []byte) ([]byte, Result, error)

// queries are the handlers by path (looked up, never ranged over).
var queries = map[string]query{
	wire.PathState:    queryState,
	wire.PathTopics:   func(s Scanner, _ State, _ []byte) ([]byte, Result, error) { return queryTopics(s) },
	wire.PathTopic:    decoded(queryTopic),
	wire.PathRecords:  decoded(queryRecords),
	wire.PathGroup:    decoded(func(s Scanner, req *byzlogv1.GroupRequest) ([]byte, Result, error) { return queryGroup(s, req.Group) }),
	wire.PathGroups:   decoded(queryGroups),
	wire.PathTxns:     decoded(queryTxns),
	wire.PathProducer: decoded(queryProducer),
	wire.PathNonce:    decoded(queryNonce),
	wire.PathProof:    decoded(queryProof),
	wire.PathDigest:   decoded(queryDigest),
	wire.PathLatest: func(s Scanner, st State, data []byte) ([]byte, Result, error) {
		return decoded(func(s Scanner, req *byzlogv1.LatestRequest) ([]byte, Result, error) { return queryLatest(s, st, req) })(s, st, data)
	},
	wire.PathProducerProof: func(s Scanner, st State, data []byte) ([]byte, Result, error) {
		return decoded(func(s Scanner, req *byzlogv1.ProducerRequest) ([]byte, Result, error) {
			return queryProducerProof(s, st, req)
		})(s, st, data)
	},
	wire.PathAdmins: func(s Scanner, _ State, _ []byte) ([]byte, Result, error) {
		params, err := LoadParams(s)
		if err != nil {
			return nil, Result{}, err
		}
		set, err := loadAdmins(s, params)
		if err != nil {
			return nil, Result{}, err
		}
		return marshal(set), Result{Code: wire.CodeOK}, nil
	},
	wire.PathRules: func(s Scanner, _ State, _ []byte) ([]byte, Result, error) {
		r, err := LoadRules(s)
		if err != nil {
			return nil, Result{}, err
		}
		return marshal(r), Result{Code: wire.CodeOK}, nil
	},
	wire.PathIndexers: func(s Scanner, _ State, _ []byte) ([]byte, Result, error) {
		set, err := LoadIndexers(s)
		if err != nil {
			return nil, Result{}, err
		}
		return marshal(set), Result{Code: wire.CodeOK}, nil
	},
	wire.PathValidators: func(s Scanner, _ State, _ []byte) ([]byte, Result, error) {
		set, err := LoadValidators(s)
		if err != nil {
			return nil, Result{}, err
		}
		return marshal(set), Result{Code: wire.CodeOK}, nil
	},
}

// decoded makes a query of a handler of one request message: a request
// that does not decode is a bad query.
func decoded[R any, PR interface {
	*R
	proto.Message
}](handle func(Scanner, PR) ([]byte, Result, error)) query {
	return func(s Scanner, _ State, data []byte) ([]byte, Result, error) {
		req := PR(new(R))
		if r := decodeQuery(data, req); !r.OK() {
			return nil, r, nil
		}
		return handle(s, req)
	}
}

func queryState(s Scanner, st State, _ []byte) ([]byte, Result, error) {
	params, err := LoadParams(s)
	if err != nil {
		return nil, Result{}, err
	}
	return marshal(&byzlogv1.AppState{Height: st.Height, AppHash: st.AppHash, Params: params}), Result{}, nil
}

func queryTopic(s Scanner, req *byzlogv1.TopicRequest) ([]byte, Result, error) {
	t, err := loadTopic(s, req.Name)
	if err != nil {
		return nil, Result{}, err
	}
	if t == nil {
		return nil, reject(wire.CodeUnknownTopic, "topic %q does not exist", req.Name), nil
	}
	info, err := topicInfo(s, t)
	if err != nil {
		return nil, Result{}, err
	}
	return marshal(info), Result{}, nil
}

func queryProducer(s Scanner, req *byzlogv1.ProducerRequest) ([]byte, Result, error) {
	if len(req.ProducerKey) != ed25519.PublicKeySize {
		return nil, reject(wire.CodeBadQuery, "producer_key is %d bytes, an ed25519 public key is %d", len(req.ProducerKey), ed25519.PublicKeySize), nil
	}
	if k := req.Kafka; k != nil && (k.ProducerId < 1 || k.Epoch < 0 || k.Epoch > wire.MaxKafkaEpoch) {
		return nil, reject(wire.CodeBadQuery, "kafka producer id %d epoch %d: want an id of 1 or more and an epoch in 0..%d", k.ProducerId, k.Epoch, wire.MaxKafkaEpoch), nil
	}
	var ps byzlogv1.ProducerState
	if _, err := getProto(s, CFProducers, producerKey(req.ProducerKey, req.Topic, req.Partition, req.Kafka), &ps); err != nil {
		return nil, Result{}, err
	}
	return marshal(&ps), Result{}, nil
}

func queryNonce(s Scanner, req *byzlogv1.NonceRequest) ([]byte, Result, error) {
	if len(req.Key) != ed25519.PublicKeySize {
		return nil, reject(wire.CodeBadQuery, "key is %d bytes, an ed25519 public key is %d", len(req.Key), ed25519.PublicKeySize), nil
	}
	n, at, err := loadNonceState(s, req.Key)
	if err != nil {
		return nil, Result{}, err
	}
	return marshal(&byzlogv1.NonceResponse{NextNonce: n, UsedHeight: at}), Result{}, nil
}

func queryProof(s Scanner, req *byzlogv1.ProofRequest) ([]byte, Result, error) {
	p, r, err := proveRecord(s, req)
	if err != nil || !r.OK() {
		return nil, r, err
	}
	return marshal(p), Result{}, nil
}

func queryDigest(s Scanner, req *byzlogv1.DigestRequest) ([]byte, Result, error) {
	raw, err := s.Get(CFMeta, digestKey(req.Height))
	if err != nil {
		return nil, Result{}, err
	}
	if raw == nil {
		return nil, reject(wire.CodeNotFound, "no block digest for height %d (not committed yet, or before this node's state)", req.Height), nil
	}
	return raw, Result{}, nil
}

func decodeQuery(data []byte, m proto.Message) Result {
	if err := proto.Unmarshal(data, m); err != nil {
		return reject(wire.CodeBadQuery, "query data is not a %s: %v", m.ProtoReflect().Descriptor().FullName(), err)
	}
	return Result{}
}

func queryTopics(s Scanner) ([]byte, Result, error) {
	var list byzlogv1.TopicList
	var decodeErr error
	err := s.Scan(CFMeta, prefixTopic, prefixEnd(prefixTopic), func(_, v []byte) bool {
		var t byzlogv1.TopicState
		if decodeErr = proto.Unmarshal(v, &t); decodeErr != nil {
			return false
		}
		list.Topics = append(list.Topics, &byzlogv1.TopicInfo{Name: t.Name, Config: t.Config, CreatedHeight: t.CreatedHeight})
		return true
	})
	if err = firstErr(err, decodeErr); err != nil {
		return nil, Result{}, fmt.Errorf("list topics: %w", err)
	}
	for i, ti := range list.Topics {
		full, err := topicInfo(s, &byzlogv1.TopicState{Name: ti.Name, Config: ti.Config, CreatedHeight: ti.CreatedHeight})
		if err != nil {
			return nil, Result{}, err
		}
		list.Topics[i] = full
	}
	return marshal(&list), Result{}, nil
}

func topicInfo(r Reader, t *byzlogv1.TopicState) (*byzlogv1.TopicInfo, error) {
	info := &byzlogv1.TopicInfo{Name: t.Name, Config: t.Config, CreatedHeight: t.CreatedHeight}
	for p := uint32(0); p < t.GetConfig().GetPartitions(); p++ {
		var ps byzlogv1.PartitionState
		if _, err := getProto(r, CFMeta, partitionKey(t.Name, p), &ps); err != nil {
			return nil, err
		}
		info.Partitions = append(info.Partitions, &byzlogv1.PartitionInfo{
			Partition: p, LogStartOffset: logStart(&ps), NextOffset: ps.NextOffset, SizeBytes: ps.SizeBytes,
			LastStableOffset: lastStable(&ps), CleanOffset: ps.CleanOffset, Compacted: ps.Compacted,
		})
	}
	return info, nil
}

// queryPartition checks that a query names a topic that exists and one of
// its partitions, and otherwise returns the rejection that says which is
// missing.
func queryPartition(r Reader, topic string, partition uint32) (Result, error) {
	t, code, missing, err := topicPartition(r, topic, partition)
	switch {
	case err != nil:
		return Result{}, err
	case code == wire.CodeUnknownTopic:
		return reject(code, "topic %q does not exist", topic), nil
	case t == nil:
		return reject(code, "%s", missing), nil
	}
	return Result{}, nil
}

func queryRecords(s Scanner, req *byzlogv1.RecordsRequest) ([]byte, Result, error) {
	if r, err := queryPartition(s, req.Topic, req.Partition); err != nil || !r.OK() {
		return nil, r, err
	}
	maxRecords, maxBytes := int(req.MaxRecords), int(req.MaxBytes)
	if maxRecords == 0 || maxRecords > wire.DefaultQueryRecords {
		maxRecords = wire.DefaultQueryRecords
	}
	if maxBytes == 0 {
		maxBytes = wire.DefaultQueryBytes
	}
	if maxBytes > wire.MaxQueryBytes {
		return nil, reject(wire.CodeBadQuery, "max_bytes (%d) must be at most %d", maxBytes, wire.MaxQueryBytes), nil
	}
	var ps byzlogv1.PartitionState
	if _, err := getProto(s, CFMeta, partitionKey(req.Topic, req.Partition), &ps); err != nil {
		return nil, Result{}, err
	}
	if start := logStart(&ps); req.Offset < start {
		return nil, reject(wire.CodeOffsetOutOfRange, "offset %d of %s/%d is below the log start offset %d: retention or DeleteRecords deleted it", req.Offset, req.Topic, req.Partition, start), nil
	}
	if req.Offset > ps.NextOffset {
		return nil, reject(wire.CodeOffsetOutOfRange, "offset %d of %s/%d is beyond the log end offset %d", req.Offset, req.Topic, req.Partition, ps.NextOffset), nil
	}
	resp := &byzlogv1.RecordsResponse{LogStartOffset: logStart(&ps), NextOffset: ps.NextOffset, LastStableOffset: lastStable(&ps), ReadTo: req.Offset}
	// Holes compaction left count against the byte budget at their size
	// in the store, so a read over many of them stays bounded.
	size, ended := 0, true
	err := scanStored(s, req.Topic, req.Partition, req.Offset, func(o uint64, v []byte, removed bool) bool {
		if size > 0 && size+len(v) > maxBytes {
			ended = false
			return false
		}
		size += len(v)
		resp.ReadTo = o + 1
		if !removed {
			resp.Records = append(resp.Records, append([]byte(nil), v...))
		}
		if len(resp.Records) == maxRecords {
			ended = false
			return false
		}
		return true
	})
	if err != nil {
		return nil, Result{}, fmt.Errorf("read records of %s/%d: %w", req.Topic, req.Partition, err)
	}
	if ended {
		resp.ReadTo = ps.NextOffset
	}
	if req.Aborted {
		if resp.Aborted, err = abortedIn(s, req.Topic, req.Partition, resp.Records); err != nil {
			return nil, Result{}, err
		}
	}
	return marshal(resp), Result{}, nil
}

// Bounds of a "/groups" page.
const (
	defaultGroupsPage = 1000
	maxGroupsPage     = 10000
)

// queryGroups lists the groups with committed offsets, a page at a time.
func queryGroups(s Scanner, req *byzlogv1.GroupsRequest) ([]byte, Result, error) {
	limit := int(req.Limit)
	switch {
	case limit == 0:
		limit = defaultGroupsPage
	case limit > maxGroupsPage:
		return nil, reject(wire.CodeBadQuery, "limit (%d) must be at most %d", limit, maxGroupsPage), nil
	}
	start := groupKey(req.StartAfter)
	if req.StartAfter != "" {
		start = append(start, 0) // the first key after it
	}
	list := &byzlogv1.GroupList{}
	err := s.Scan(CFMeta, start, prefixEnd(prefixGroup), func(k, v []byte) bool {
		if len(list.Groups) == limit {
			list.More = true
			return false
		}
		list.Groups = append(list.Groups, &byzlogv1.GroupEntry{Group: string(k[len(prefixGroup):]), OwnerKey: append([]byte(nil), v...)})
		return true
	})
	if err != nil {
		return nil, Result{}, err
	}
	return marshal(list), Result{Code: wire.CodeOK}, nil
}

func queryGroup(s Scanner, group string) ([]byte, Result, error) {
	if r := checkGroupName(group); !r.OK() {
		return nil, Result{Code: wire.CodeBadQuery, Log: r.Log}, nil
	}
	owner, err := s.Get(CFMeta, groupKey(group))
	if err != nil {
		return nil, Result{}, err
	}
	if owner == nil {
		return nil, reject(wire.CodeNotFound, "group %q has committed no offsets", group), nil
	}
	resp := &byzlogv1.GroupOffsets{Group: group, OwnerKey: owner}
	start, end := groupOffsets(group)
	var decodeErr error
	err = s.Scan(CFOffsets, start, end, func(k, v []byte) bool {
		rest := k[len(start):]
		i := bytes.IndexByte(rest, 0)
		if i < 0 || len(rest) != i+5 {
			decodeErr = fmt.Errorf("offset key %x is malformed", k)
			return false
		}
		var g byzlogv1.GroupOffset
		if decodeErr = proto.Unmarshal(v, &g); decodeErr != nil {
			return false
		}
		resp.Offsets = append(resp.Offsets, &byzlogv1.PartitionOffset{
			Topic: string(rest[:i]), Partition: binary.BigEndian.Uint32(rest[i+1:]), Offset: g.Offset, Metadata: g.Metadata,
		})
		return true
	})
	if err = firstErr(err, decodeErr); err != nil {
		return nil, Result{}, fmt.Errorf("read offsets of group %q: %w", group, err)
	}
	return marshal(resp), Result{}, nil
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
