package kafka

import (
	"errors"
	"fmt"
	"sort"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// handledMin is the lowest version the face serves of each request it
// serves. The highest is the Kafka 2.8 level (kversion.V2_8_0), which
// librdkafka, franz-go and the Java client all speak, or kmsg's if lower.
var handledMin = map[int16]int16{
	0:  0, // Produce: from v0, or librdkafka does not compress (v0-2 carry old message sets, refused per partition)
	1:  4, // Fetch: v4 is the first to carry v2 record batches
	2:  1, // ListOffsets: v0 answers lists of offsets
	3:  0, // Metadata
	17: 0, // SaslHandshake: v0 is followed by raw SASL frames, v1 by SaslAuthenticate requests (librdkafka needs v0 listed)
	18: 0, // ApiVersions
	36: 0, // SaslAuthenticate
	8:  0, // OffsetCommit
	9:  1, // OffsetFetch: v0 read offsets from ZooKeeper
	10: 0, // FindCoordinator
	11: 0, // JoinGroup
	12: 0, // Heartbeat
	13: 0, // LeaveGroup
	14: 0, // SyncGroup
	19: 0, // CreateTopics
	20: 0, // DeleteTopics
	22: 0, // InitProducerId: idempotent and transactional producers
	24: 0, // AddPartitionsToTxn
	25: 0, // AddOffsetsToTxn
	26: 0, // EndTxn
	28: 0, // TxnOffsetCommit
	32: 0, // DescribeConfigs
	33: 0, // AlterConfigs
	37: 0, // CreatePartitions
	44: 0, // IncrementalAlterConfigs
	15: 0, // DescribeGroups
	16: 0, // ListGroups
	21: 0, // DeleteRecords
	23: 0, // OffsetForLeaderEpoch
	35: 0, // DescribeLogDirs
	42: 0, // DeleteGroups
	47: 0, // OffsetDelete
	60: 0, // DescribeCluster
	50: 0, // DescribeUserScramCredentials: the users file's users
	51: 0, // AlterUserScramCredentials: refused, the users file is the operator's
}

// handledSince30 is handledMin for the requests Kafka 2.8 does not have:
// KIP-664's transaction admin, from Kafka 3.0. The highest version served
// is the Kafka 3.0 level (kversion.V3_0_0), or kmsg's if lower.
var handledSince30 = map[int16]int16{
	61: 0, // DescribeProducers
	65: 0, // DescribeTransactions
	66: 0, // ListTransactions
}

type versionRange struct{ min, max int16 }

// versions is what ApiVersions advertises, in key order.
var versions = func() map[int16]versionRange {
	out := map[int16]versionRange{}
	for _, level := range []struct {
		name    string
		caps    *kversion.Versions
		handled map[int16]int16
	}{
		{"2.8", kversion.V2_8_0(), handledMin},
		{"3.0", kversion.V3_0_0(), handledSince30},
	} {
		for key, lo := range level.handled {
			hi, ok := level.caps.LookupMaxKeyVersion(key)
			if !ok {
				panic(fmt.Sprintf("kafka %s has no request key %d", level.name, key))
			}
			if _, dup := out[key]; dup {
				panic(fmt.Sprintf("request key %d is listed at two Kafka levels", key))
			}
			if m := kmsg.RequestForKey(key).MaxVersion(); m < hi {
				hi = m
			}
			out[key] = versionRange{lo, hi}
		}
	}
	return out
}()

func apiKeys() []kmsg.ApiVersionsResponseApiKey {
	keys := make([]kmsg.ApiVersionsResponseApiKey, 0, len(versions))
	for k, r := range versions {
		keys = append(keys, kmsg.ApiVersionsResponseApiKey{ApiKey: k, MinVersion: r.min, MaxVersion: r.max})
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].ApiKey < keys[j].ApiKey })
	return keys
}

// unsupportedVersionError is an ApiVersions request of a version the face
// does not speak: it is answered at v0 with UNSUPPORTED_VERSION and the
// versions it does, so the client can pick one.
type unsupportedVersionError struct{ resp kmsg.Response }

func (e *unsupportedVersionError) Error() string { return "unsupported ApiVersions version" }

// parseRequest decodes one request frame: the header (key, version,
// correlation id, client id, tags) and the body.
func parseRequest(body []byte) (kmsg.Request, int32, error) {
	r := kbin.Reader{Src: body}
	key, version, corr := r.Int16(), r.Int16(), r.Int32()
	vr, ok := versions[key]
	if key == 18 && (!ok || version < vr.min || version > vr.max) {
		resp := kmsg.NewPtrApiVersionsResponse()
		resp.Version = 0
		resp.ErrorCode = kerr.UnsupportedVersion.Code
		resp.ApiKeys = apiKeys()
		return nil, corr, &unsupportedVersionError{resp: resp}
	}
	if !ok {
		return nil, corr, fmt.Errorf("request key %d is not served (served: %v)", key, servedKeys())
	}
	if version < vr.min || version > vr.max {
		return nil, corr, fmt.Errorf("request key %d version %d is outside the served %d..%d", key, version, vr.min, vr.max)
	}
	req := kmsg.RequestForKey(key)
	req.SetVersion(version)
	r.NullableString() // client id
	if req.IsFlexible() {
		kmsg.SkipTags(&r)
	}
	if err := r.Complete(); err != nil {
		return nil, corr, fmt.Errorf("request header: %w", err)
	}
	if err := req.ReadFrom(r.Src); err != nil {
		return nil, corr, fmt.Errorf("request key %d v%d: %w", key, version, err)
	}
	return req, corr, nil
}

// headerClientID is the client id of a request frame's header ("" when
// null or cut short).
func headerClientID(body []byte) string {
	r := kbin.Reader{Src: body}
	r.Int16()
	r.Int16()
	r.Int32()
	if id := r.NullableString(); id != nil {
		return *id
	}
	return ""
}

func servedKeys() []int16 {
	keys := make([]int16, 0, len(versions))
	for k := range versions {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	return keys
}

var errNotServed = errors.New("request not served")
