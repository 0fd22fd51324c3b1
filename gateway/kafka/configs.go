package kafka

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// Topic configs as Kafka names them. The ones byzlog honours map onto the
// chain's TopicConfig (topicSettings); a change goes to the chain as an
// UpdateTopic signed by an admin principal, as CreateTopics does. Kafka's
// other topic configs are taken and ignored (ignoredConfigs: they tune
// segments, replicas and flushing, which the chain does for every
// validator alike); a name Kafka does not know is refused, as Kafka
// refuses it.

// topicSetting is one Kafka topic config byzlog honours.
type topicSetting struct {
	name string
	typ  kmsg.ConfigType
	doc  string
	// get is c's value as Kafka writes it, and whether it is the default.
	get func(c *byzlogv1.TopicConfig, l *byzlogv1.Limits) (string, bool)
	// set parses v into c.
	set func(c *byzlogv1.TopicConfig, v string, l *byzlogv1.Limits) error
	// reset puts the default back.
	reset func(c *byzlogv1.TopicConfig)
}

// noBound is Kafka's "no bound" for the timestamp configs (Long.MAX).
const noBound = math.MaxInt64

// maxChainMs is the largest duration in ms the chain keeps (a count of
// nanoseconds in an int64); a bound from it on is no bound.
const maxChainMs = math.MaxInt64 / 1_000_000

var topicSettings = []topicSetting{
	{
		name: "cleanup.policy", typ: kmsg.ConfigTypeList,
		doc: "delete: records go when retention.ms or retention.bytes says; compact: the chain keeps the latest record of each key (records need a key), and retention is off; compact,delete: both",
		get: func(c *byzlogv1.TopicConfig, _ *byzlogv1.Limits) (string, bool) {
			return wire.CleanupPolicyName(c.CleanupPolicy), c.CleanupPolicy == byzlogv1.CleanupPolicy_CLEANUP_DELETE
		},
		set: func(c *byzlogv1.TopicConfig, v string, _ *byzlogv1.Limits) error {
			p, err := wire.ParseCleanupPolicy(v)
			c.CleanupPolicy = p
			return err
		},
		reset: func(c *byzlogv1.TopicConfig) { c.CleanupPolicy = byzlogv1.CleanupPolicy_CLEANUP_DELETE },
	},
	{
		name: "delete.retention.ms", typ: kmsg.ConfigTypeLong,
		doc: "on a compacted topic, how long a tombstone (a record with a key and no value) stays once compaction passed it",
		get: func(c *byzlogv1.TopicConfig, _ *byzlogv1.Limits) (string, bool) {
			return strconv.FormatInt(wire.DeleteRetentionMs(c), 10), c.DeleteRetentionMs == nil
		},
		set: func(c *byzlogv1.TopicConfig, v string, _ *byzlogv1.Limits) error {
			n, err := parseLong(v, 0, noBound)
			n = min(n, maxChainMs)
			c.DeleteRetentionMs = &n
			return err
		},
		reset: func(c *byzlogv1.TopicConfig) { c.DeleteRetentionMs = nil },
	},
	{
		name: "min.compaction.lag.ms", typ: kmsg.ConfigTypeLong,
		doc: "on a compacted topic, the least time a record stays after its block before compaction may remove it",
		get: func(c *byzlogv1.TopicConfig, _ *byzlogv1.Limits) (string, bool) {
			return strconv.FormatInt(c.MinCompactionLagMs, 10), c.MinCompactionLagMs == 0
		},
		set: func(c *byzlogv1.TopicConfig, v string, _ *byzlogv1.Limits) error {
			n, err := parseLong(v, 0, noBound)
			c.MinCompactionLagMs = min(n, maxChainMs)
			return err
		},
		reset: func(c *byzlogv1.TopicConfig) { c.MinCompactionLagMs = 0 },
	},
	{
		name: "max.compaction.lag.ms", typ: kmsg.ConfigTypeLong,
		doc: "on a compacted topic, the longest a superseded record may stay: the chain compacts at every block, within a bounded work a block, so this holds while compaction keeps up",
		get: func(c *byzlogv1.TopicConfig, _ *byzlogv1.Limits) (string, bool) {
			if c.MaxCompactionLagMs == 0 {
				return strconv.FormatInt(noBound, 10), true
			}
			return strconv.FormatInt(c.MaxCompactionLagMs, 10), false
		},
		set: func(c *byzlogv1.TopicConfig, v string, _ *byzlogv1.Limits) error {
			n, err := parseLong(v, 1, noBound)
			c.MaxCompactionLagMs = n
			if n >= maxChainMs {
				c.MaxCompactionLagMs = 0
			}
			return err
		},
		reset: func(c *byzlogv1.TopicConfig) { c.MaxCompactionLagMs = 0 },
	},
	{
		name: "retention.ms", typ: kmsg.ConfigTypeLong,
		doc: "records whose block time is older than this are deleted, by the chain; -1 keeps them forever (byzlog's default)",
		get: func(c *byzlogv1.TopicConfig, _ *byzlogv1.Limits) (string, bool) {
			if c.RetentionMs == 0 {
				return "-1", true
			}
			return strconv.FormatInt(c.RetentionMs, 10), false
		},
		set: func(c *byzlogv1.TopicConfig, v string, _ *byzlogv1.Limits) error {
			n, err := parseLong(v, -1, maxChainMs)
			c.RetentionMs = max(n, 0)
			if n == 0 {
				c.RetentionMs = 1 // Kafka's 0 deletes at once; the chain's 0 is forever
			}
			return err
		},
		reset: func(c *byzlogv1.TopicConfig) { c.RetentionMs = 0 },
	},
	{
		name: "retention.bytes", typ: kmsg.ConfigTypeLong,
		doc: "a partition larger than this drops its oldest records, by the chain; -1 is no limit",
		get: func(c *byzlogv1.TopicConfig, _ *byzlogv1.Limits) (string, bool) {
			if c.RetentionBytes == 0 {
				return "-1", true
			}
			return strconv.FormatInt(c.RetentionBytes, 10), false
		},
		set: func(c *byzlogv1.TopicConfig, v string, _ *byzlogv1.Limits) error {
			n, err := parseLong(v, -1, math.MaxInt64)
			c.RetentionBytes = max(n, 0)
			if n == 0 {
				c.RetentionBytes = 1 // Kafka's 0 keeps nothing; the chain's 0 is no limit
			}
			return err
		},
		reset: func(c *byzlogv1.TopicConfig) { c.RetentionBytes = 0 },
	},
	{
		name: "max.message.bytes", typ: kmsg.ConfigTypeInt,
		doc: "the largest record (key, value and headers); past the chain's max_record_bytes, records are written in chunks",
		get: func(c *byzlogv1.TopicConfig, l *byzlogv1.Limits) (string, bool) {
			if c.MaxRecordBytes == 0 {
				return strconv.FormatUint(uint64(l.GetMaxRecordBytes()), 10), true
			}
			return strconv.FormatUint(uint64(c.MaxRecordBytes), 10), false
		},
		set: func(c *byzlogv1.TopicConfig, v string, l *byzlogv1.Limits) error {
			n, err := parseLong(v, 1, math.MaxInt32)
			// At or past the chain's bound the topic keeps the chain's, and
			// the face writes larger records in chunks (chunks.go).
			c.MaxRecordBytes = uint32(n)
			if n >= int64(l.GetMaxRecordBytes()) {
				c.MaxRecordBytes = 0
			}
			return err
		},
		reset: func(c *byzlogv1.TopicConfig) { c.MaxRecordBytes = 0 },
	},
	{
		name: "compression.type", typ: kmsg.ConfigTypeString,
		doc: "the codec Fetch serves batches with: producer (each batch as its producer compressed it), uncompressed, gzip, snappy, lz4 or zstd",
		get: func(c *byzlogv1.TopicConfig, _ *byzlogv1.Limits) (string, bool) {
			if c.CompressionType == "" || c.CompressionType == "producer" {
				return "producer", c.CompressionType == ""
			}
			return c.CompressionType, false
		},
		set: func(c *byzlogv1.TopicConfig, v string, _ *byzlogv1.Limits) error {
			if _, ok := codecs[v]; !ok && v != "producer" {
				return fmt.Errorf("compression.type %q: want producer, uncompressed, gzip, snappy, lz4 or zstd", v)
			}
			c.CompressionType = v
			return nil
		},
		reset: func(c *byzlogv1.TopicConfig) { c.CompressionType = "" },
	},
	{
		name: "message.timestamp.type", typ: kmsg.ConfigTypeString,
		doc: "CreateTime: a record's timestamp is its producer's; LogAppendTime: the time of the block that committed it",
		get: func(c *byzlogv1.TopicConfig, _ *byzlogv1.Limits) (string, bool) {
			if c.TimestampType == byzlogv1.TimestampType_TIMESTAMP_LOG_APPEND_TIME {
				return "LogAppendTime", false
			}
			return "CreateTime", true
		},
		set: func(c *byzlogv1.TopicConfig, v string, _ *byzlogv1.Limits) error {
			switch v {
			case "CreateTime":
				c.TimestampType = byzlogv1.TimestampType_TIMESTAMP_CREATE_TIME
			case "LogAppendTime":
				c.TimestampType = byzlogv1.TimestampType_TIMESTAMP_LOG_APPEND_TIME
			default:
				return fmt.Errorf("message.timestamp.type %q: want CreateTime or LogAppendTime", v)
			}
			return nil
		},
		reset: func(c *byzlogv1.TopicConfig) { c.TimestampType = byzlogv1.TimestampType_TIMESTAMP_CREATE_TIME },
	},
	boundSetting("message.timestamp.before.max.ms", "before", func(c *byzlogv1.TopicConfig) *int64 { return &c.TimestampBeforeMaxMs }),
	boundSetting("message.timestamp.after.max.ms", "after", func(c *byzlogv1.TopicConfig) *int64 { return &c.TimestampAfterMaxMs }),
	{
		name: "message.timestamp.difference.max.ms", typ: kmsg.ConfigTypeLong,
		doc: "deprecated by Kafka: sets both message.timestamp.before.max.ms and message.timestamp.after.max.ms",
		get: func(c *byzlogv1.TopicConfig, _ *byzlogv1.Limits) (string, bool) {
			if c.TimestampBeforeMaxMs != 0 && c.TimestampBeforeMaxMs == c.TimestampAfterMaxMs {
				return strconv.FormatInt(c.TimestampBeforeMaxMs, 10), false
			}
			return strconv.FormatInt(noBound, 10), true
		},
		set: func(c *byzlogv1.TopicConfig, v string, _ *byzlogv1.Limits) error {
			n, err := parseBound(v)
			c.TimestampBeforeMaxMs, c.TimestampAfterMaxMs = n, n
			return err
		},
		reset: func(*byzlogv1.TopicConfig) {},
	},
}

// boundSetting is a timestamp bound: Long.MAX (or anything past what the
// chain keeps) is no bound, the chain's 0.
func boundSetting(name, side string, field func(*byzlogv1.TopicConfig) *int64) topicSetting {
	return topicSetting{
		name: name, typ: kmsg.ConfigTypeLong,
		doc: "on a CreateTime topic, the chain refuses a batch with a record stamped more than this " + side + " its block's time (INVALID_TIMESTAMP)",
		get: func(c *byzlogv1.TopicConfig, _ *byzlogv1.Limits) (string, bool) {
			if v := *field(c); v != 0 {
				return strconv.FormatInt(v, 10), false
			}
			return strconv.FormatInt(noBound, 10), true
		},
		set: func(c *byzlogv1.TopicConfig, v string, _ *byzlogv1.Limits) error {
			n, err := parseBound(v)
			*field(c) = n
			return err
		},
		reset: func(c *byzlogv1.TopicConfig) { *field(c) = 0 },
	}
}

// ignoredConfigs are Kafka's topic configs byzlog takes and ignores.
var ignoredConfigs = []string{
	"file.delete.delay.ms", "flush.messages", "flush.ms",
	"follower.replication.throttled.replicas", "index.interval.bytes",
	"leader.replication.throttled.replicas", "local.retention.bytes", "local.retention.ms",
	"message.downconversion.enable", "message.format.version",
	"min.cleanable.dirty.ratio", "min.insync.replicas", "preallocate",
	"remote.storage.enable", "segment.bytes", "segment.index.bytes", "segment.jitter.ms",
	"segment.ms", "unclean.leader.election.enable",
}

func setting(name string) *topicSetting {
	for i := range topicSettings {
		if topicSettings[i].name == name {
			return &topicSettings[i]
		}
	}
	return nil
}

// errUnknownConfig is a config name Kafka does not know either.
var errUnknownConfig = errors.New("unknown topic config")

// setConfig sets one Kafka config on c: nil for an ignored one, an error
// that says what is wrong for a bad name or value.
func setConfig(c *byzlogv1.TopicConfig, name string, value *string, l *byzlogv1.Limits) error {
	s := setting(name)
	switch {
	case s == nil && slices.Contains(ignoredConfigs, name):
		return nil
	case s == nil:
		return fmt.Errorf("%w %q: byzlog honours %s and ignores Kafka's other topic configs", errUnknownConfig, name, strings.Join(settingNames(), ", "))
	case value == nil:
		s.reset(c)
		return nil
	}
	if err := s.set(c, *value, l); err != nil {
		return fmt.Errorf("%s=%s: %w", name, *value, err)
	}
	return nil
}

func settingNames() []string {
	out := make([]string, len(topicSettings))
	for i, s := range topicSettings {
		out[i] = s.name
	}
	return out
}

func parseLong(v string, lo, hi int64) (int64, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a whole number", v)
	}
	if n < lo || n > hi {
		return 0, fmt.Errorf("%d is out of range %d..%d", n, lo, hi)
	}
	return n, nil
}

// parseBound reads a timestamp bound: 0 up to Long.MAX, where anything past
// the chain's largest is no bound (0).
func parseBound(v string) (int64, error) {
	n, err := parseLong(v, 0, noBound)
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, fmt.Errorf("0 would refuse every record not stamped at its block's exact millisecond; want 1 or more (%d: no bound)", int64(noBound))
	}
	if n >= maxChainMs {
		return 0, nil
	}
	return n, nil
}

// describeTopic lists c's configs as DescribeConfigs answers them: names
// nil or empty for all.
func describeTopic(c *byzlogv1.TopicConfig, l *byzlogv1.Limits, names []string, docs bool) []kmsg.DescribeConfigsResponseResourceConfig {
	var out []kmsg.DescribeConfigsResponseResourceConfig
	for _, s := range topicSettings {
		if len(names) > 0 && !slices.Contains(names, s.name) {
			continue
		}
		v, isDefault := s.get(c, l)
		rc := kmsg.NewDescribeConfigsResponseResourceConfig()
		rc.Name, rc.Value, rc.IsDefault, rc.ConfigType = s.name, kmsg.StringPtr(v), isDefault, s.typ
		rc.Source = kmsg.ConfigSourceDynamicTopicConfig
		if isDefault {
			rc.Source = kmsg.ConfigSourceDefaultConfig
		}
		if docs {
			rc.Documentation = kmsg.StringPtr(s.doc)
		}
		out = append(out, rc)
	}
	return out
}

// alterCleanupPolicy appends value's policies to cleanup.policy, the one
// list config byzlog keeps, or subtracts them (IncrementalAlterConfigs'
// APPEND and SUBTRACT); a list left empty is refused.
func alterCleanupPolicy(c *byzlogv1.TopicConfig, name string, value *string, add bool) error {
	if name != "cleanup.policy" || value == nil {
		return fmt.Errorf("append or subtract of %s: only cleanup.policy is a list", name)
	}
	have := map[string]bool{}
	for p := range strings.SplitSeq(wire.CleanupPolicyName(c.CleanupPolicy), ",") {
		have[p] = true
	}
	for p := range strings.SplitSeq(*value, ",") {
		p = strings.TrimSpace(p)
		if p != "delete" && p != "compact" {
			return fmt.Errorf("cleanup.policy %q: want delete or compact", *value)
		}
		have[p] = add
	}
	var list []string
	for _, p := range []string{"compact", "delete"} {
		if have[p] {
			list = append(list, p)
		}
	}
	if len(list) == 0 {
		return errors.New("cleanup.policy would be empty: keep delete or compact")
	}
	p, err := wire.ParseCleanupPolicy(strings.Join(list, ","))
	c.CleanupPolicy = p
	return err
}
