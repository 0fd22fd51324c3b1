package kafka

import (
	"encoding/binary"
	"errors"
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
	} {
		got := versions[tc.key]
		if got.min != tc.min || got.max != tc.max {
			t.Errorf("versions[%d] = %d..%d, want %d..%d", tc.key, got.min, got.max, tc.min, tc.max)
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
