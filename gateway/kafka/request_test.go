package kafka

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// frame is a request body as a client sends it, without the size prefix.
func frame(req kmsg.Request, corr int32) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(req.Key()))
	b = binary.BigEndian.AppendUint16(b, uint16(req.GetVersion()))
	b = binary.BigEndian.AppendUint32(b, uint32(corr))
	b = append(b, 0, 4, 't', 'e', 's', 't') // client id
	if req.IsFlexible() {
		b = append(b, 0)
	}
	return req.AppendTo(b)
}

func TestParseRequest(t *testing.T) {
	meta := kmsg.NewPtrMetadataRequest()
	meta.SetVersion(9) // flexible
	meta.Topics = []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr("k")}}
	produce := kmsg.NewPtrProduceRequest()
	produce.SetVersion(3)
	oldFetch := kmsg.NewPtrFetchRequest()
	oldFetch.SetVersion(3)
	describeTxns := kmsg.NewPtrDescribeTransactionsRequest() // flexible from v0
	describeTxns.TransactionalIDs = []string{"tx1"}
	apiV9 := kmsg.NewPtrApiVersionsRequest()
	apiV9.SetVersion(9)
	for _, tc := range []struct {
		name    string
		body    []byte
		wantKey int16
		wantErr string
	}{
		{"metadata v9", frame(meta, 7), 3, ""},
		{"produce v3", frame(produce, 8), 0, ""},
		{"describe transactions v0", frame(describeTxns, 10), 65, ""},
		{"fetch below v4", frame(oldFetch, 9), 0, "version 3 is outside the served 4.."},
		{"unknown key", []byte{0x7f, 0x7f, 0, 0, 0, 0, 0, 1}, 0, "request key 32639 is not served"},
		{"truncated header", []byte{0, 3, 0, 1, 0, 0, 0, 1, 0}, 0, "request header"},
		{"truncated body", frame(meta, 7)[:16], 0, "request key 3 v9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _, err := parseRequest(tc.body)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("parseRequest = %v, want error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseRequest = %v", err)
			}
			if req.Key() != tc.wantKey {
				t.Fatalf("parseRequest key = %d, want %d", req.Key(), tc.wantKey)
			}
		})
	}
	t.Run("api versions of an unknown version", func(t *testing.T) {
		_, corr, err := parseRequest(frame(apiV9, 42))
		var uv *unsupportedVersionError
		if !errors.As(err, &uv) {
			t.Fatalf("parseRequest = %v, want unsupportedVersionError", err)
		}
		resp := uv.resp.(*kmsg.ApiVersionsResponse)
		if corr != 42 || resp.Version != 0 || resp.ErrorCode != kerr.UnsupportedVersion.Code || len(resp.ApiKeys) == 0 {
			t.Fatalf("answer corr %d v%d code %d keys %d, want corr 42 v0 UNSUPPORTED_VERSION with keys", corr, resp.Version, resp.ErrorCode, len(resp.ApiKeys))
		}
		// The v0 header: size, correlation id, no tagged fields.
		p := &pending{corr: corr, resp: resp}
		b := appendResponse(nil, p)
		if got := int32(binary.BigEndian.Uint32(b[4:8])); got != 42 {
			t.Fatalf("response correlation id = %d, want 42", got)
		}
		if code := int16(binary.BigEndian.Uint16(b[8:10])); code != kerr.UnsupportedVersion.Code {
			t.Fatalf("response error code at offset 8 = %d, want %d (header v0 has no tags)", code, kerr.UnsupportedVersion.Code)
		}
	})
}

func TestAdvertisedVersions(t *testing.T) {
	for _, tc := range []struct {
		key      int16
		min, max int16
	}{
		{0, 0, 9},  // Produce from v0, up to Kafka 2.8
		{1, 4, 12}, // Fetch
		{3, 0, 11}, // Metadata
		{18, 0, 3}, // ApiVersions
		{17, 0, 1}, // SaslHandshake
		{36, 0, 2}, // SaslAuthenticate
		{2, 1, 6},  // ListOffsets
		{61, 0, 0}, // DescribeProducers: Kafka 3.0, newer than 2.8
		{65, 0, 0}, // DescribeTransactions
		{66, 0, 0}, // ListTransactions (kmsg has up to v2, Kafka 3.0 v0)
	} {
		got, ok := versions[tc.key]
		if !ok || got.min != tc.min || got.max != tc.max {
			t.Errorf("versions[%d] = %d..%d (listed %v), want %d..%d", tc.key, got.min, got.max, ok, tc.min, tc.max)
		}
	}
	listed := map[int16]kmsg.ApiVersionsResponseApiKey{}
	for _, k := range apiKeys() {
		listed[k.ApiKey] = k
	}
	for key, r := range versions {
		if k, ok := listed[key]; !ok || k.MinVersion != r.min || k.MaxVersion != r.max {
			t.Errorf("apiKeys()[%d] = %+v (listed %v), want %d..%d", key, k, ok, r.min, r.max)
		}
	}
	if len(listed) != len(versions) {
		t.Errorf("apiKeys() lists %d keys, want the %d of versions", len(listed), len(versions))
	}
}

// TestDocumentedVersions: docs/api.md's table of served APIs is what
// ApiVersions advertises, key for key.
func TestDocumentedVersions(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "api.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	start := strings.Index(text, "**What it speaks.**")
	if start < 0 {
		t.Fatal("docs/api.md has no \"**What it speaks.**\" paragraph")
	}
	table := text[start:]
	if end := strings.Index(table, "\n\n"+"ApiVersions answers"); end >= 0 {
		table = table[:end]
	}
	cell := regexp.MustCompile(`\| ([A-Za-z]+) \((\d+)\) \| (\d+)(?:-(\d+))?`)
	documented := map[int16]versionRange{}
	for _, m := range cell.FindAllStringSubmatch(table, -1) {
		key, _ := strconv.Atoi(m[2])
		lo, _ := strconv.Atoi(m[3])
		hi := lo
		if m[4] != "" {
			hi, _ = strconv.Atoi(m[4])
		}
		if _, dup := documented[int16(key)]; dup {
			t.Errorf("docs/api.md lists %s (%d) twice", m[1], key)
		}
		if want := kmsg.NameForKey(int16(key)); !strings.EqualFold(want, m[1]) {
			t.Errorf("docs/api.md names key %d %s, want %s", key, m[1], want)
		}
		documented[int16(key)] = versionRange{int16(lo), int16(hi)}
	}
	for key, r := range versions {
		if d, ok := documented[key]; !ok || d != r {
			t.Errorf("docs/api.md: %s (%d) is %d-%d (listed %v), ApiVersions says %d-%d", kmsg.NameForKey(key), key, d.min, d.max, ok, r.min, r.max)
		}
	}
	for key := range documented {
		if _, ok := versions[key]; !ok {
			t.Errorf("docs/api.md lists %s (%d), which is not served", kmsg.NameForKey(key), key)
		}
	}
}

func FuzzParseRequest(f *testing.F) {
	meta := kmsg.NewPtrMetadataRequest()
	meta.SetVersion(9)
	f.Add(frame(meta, 1))
	produce := kmsg.NewPtrProduceRequest()
	produce.SetVersion(8)
	produce.Topics = []kmsg.ProduceRequestTopic{{Topic: "k", Partitions: []kmsg.ProduceRequestTopicPartition{{Records: []byte{1, 2, 3}}}}}
	f.Add(frame(produce, 2))
	fetch := kmsg.NewPtrFetchRequest()
	fetch.SetVersion(11)
	f.Add(frame(fetch, 3))
	f.Fuzz(func(t *testing.T, body []byte) {
		req, _, err := parseRequest(body)
		if err == nil && req == nil {
			t.Fatal("parseRequest returned neither a request nor an error")
		}
	})
}
