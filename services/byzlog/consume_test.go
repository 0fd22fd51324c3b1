package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/byzlog/byzlog/indexer/layout"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

var consumeBase = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// consumeNATS starts a NATS server holding topic t: partitions 0 and 1,
// offsets 0..4, offset o committed at consumeBase + o seconds.
func consumeNATS(t *testing.T) (string, jetstream.JetStream) {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: layout.StreamName("t"), Subjects: []string{layout.TopicSubjects("t")}}); err != nil {
		t.Fatal(err)
	}
	keys := [][]byte{nil, []byte("a b"), {}, []byte("-"), []byte("k4")}
	values := [][]byte{[]byte("plain value"), []byte("two\nlines"), {0xff, 0x00}, []byte(`"quoted"`), nil}
	for o := uint64(0); o < 5; o++ {
		for p := uint32(0); p < 2; p++ {
			r := &byzlogv1.StoredRecord{Topic: "t", Partition: p, Offset: o, Height: int64(o) + 10,
				TimestampUnixNano: consumeBase.Add(time.Duration(o) * time.Second).UnixNano(), CreateTimeUnixNano: consumeBase.UnixNano(),
				Key: keys[o], Value: values[o], ProducerKey: bytes.Repeat([]byte{0xab}, 32), Sequence: 7,
				Headers: []*byzlogv1.RecordHeader{{Key: "h", Value: []byte{0xfe}}}}
			if _, err := js.PublishMsg(ctx, layout.Message(r)); err != nil {
				t.Fatal(err)
			}
		}
	}
	return s.ClientURL(), js
}

func runConsume(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	cmd := newRootCommand()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(append([]string{"consume"}, args...))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := cmd.ExecuteContext(ctx)
	return out.String(), errOut.String(), err
}

func TestConsumeCommand(t *testing.T) {
	url, js := consumeNATS(t)
	for _, tc := range []struct {
		name    string
		args    []string
		out     string // exact stdout, when set
		lines   int    // else the number of lines
		wantErr string
	}{
		{"plain output", []string{"t", "--partition", "0", "--count", "5"},
			"0 0 - plain value\n0 1 \"a b\" \"two\\nlines\"\n0 2 \"\" \"\\xff\\x00\"\n0 3 \"-\" \"\\\"quoted\\\"\"\n0 4 k4 \n", 0, ""},
		{"offset", []string{"t", "--offset", "3", "--count", "4"}, "0 3 \"-\" \"\\\"quoted\\\"\"\n1 3 \"-\" \"\\\"quoted\\\"\"\n0 4 k4 \n1 4 k4 \n", 0, ""},
		{"since a time", []string{"t", "--since", consumeBase.Add(3500 * time.Millisecond).Format(time.RFC3339Nano), "--partition", "1", "--count", "1"}, "1 4 k4 \n", 0, ""},
		{"since a duration ago", []string{"t", "--since", "1h", "--timeout", "300ms"}, "", 10, ""},
		{"timeout ends a read of everything", []string{"t", "--timeout", "300ms"}, "", 10, ""},
		{"timeout before count", []string{"t", "--timeout", "300ms", "--count", "11"}, "", 10, "after 10 of 11 records"},
		{"key file needs a group", []string{"t", "--key-file", "x"}, "", 0, "give --group too"},
		{"one start only", []string{"t", "--offset", "1", "--from-beginning"}, "", 0, "none of the others can be"},
		{"unknown topic", []string{"nope", "--count", "1"}, "", 0, "topic not indexed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := runConsume(t, append(tc.args, "--nats", url)...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("consume %v = %v, want an error saying %q", tc.args, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("consume %v = %v", tc.args, err)
			}
			if tc.out != "" && out != tc.out {
				t.Errorf("consume %v printed\n%s\nwant\n%s", tc.args, out, tc.out)
			}
			if tc.lines > 0 && strings.Count(out, "\n") != tc.lines {
				t.Errorf("consume %v printed %d lines, want %d:\n%s", tc.args, strings.Count(out, "\n"), tc.lines, out)
			}
		})
	}

	t.Run("json", func(t *testing.T) {
		out, _, err := runConsume(t, "t", "--json", "--partition", "1", "--count", "3", "--nats", url)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 3 {
			t.Fatalf("printed %q, want 3 lines", out)
		}
		var first, third map[string]any
		if err := json.Unmarshal([]byte(lines[0]), &first); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(lines[2]), &third); err != nil {
			t.Fatal(err)
		}
		want := map[string]any{"topic": "t", "partition": 1.0, "offset": 0.0, "height": 10.0, "timestamp": "2030-01-02T03:04:05Z",
			"create_time": "2030-01-02T03:04:05Z", "producer": strings.Repeat("ab", 32), "sequence": 7.0, "value": "plain value",
			"headers": []any{map[string]any{"key": "h", "value_base64": "/g=="}}}
		if fmt.Sprint(first) != fmt.Sprint(want) {
			t.Errorf("first record = %v, want %v", first, want)
		}
		if third["key"] != "" || third["value_base64"] != "/wA=" || third["value"] != nil {
			t.Errorf("third record = %v, want key \"\" and value_base64 /wA=", third)
		}
	})

	t.Run("group resumes", func(t *testing.T) {
		out, _, err := runConsume(t, "t", "--group", "cli", "--from-beginning", "--partition", "0", "--count", "2", "--nats", url)
		if err != nil || !strings.HasPrefix(out, "0 0 ") || strings.Count(out, "\n") != 2 {
			t.Fatalf("first run printed %q, %v, want offsets 0 and 1", out, err)
		}
		// The group's consumer exists now: no gateway is asked for offsets.
		out, _, err = runConsume(t, "t", "--group", "cli", "--partition", "0", "--timeout", "300ms", "--nats", url, "--gateway", "127.0.0.1:1", "--insecure")
		if err != nil || !strings.HasPrefix(out, "0 2 ") || strings.Count(out, "\n") != 3 {
			t.Fatalf("second run printed %q, %v, want offsets 2 to 4", out, err)
		}
	})

	t.Run("malformed message", func(t *testing.T) {
		if _, err := js.PublishMsg(context.Background(), &nats.Msg{Subject: layout.Subject("t", 1), Data: []byte("?")}); err != nil {
			t.Fatal(err)
		}
		out, errOut, err := runConsume(t, "t", "--offset", "4", "--partition", "1", "--timeout", "300ms", "--nats", url)
		if err == nil || !strings.Contains(errOut, "Byzlog-Offset") || out != "1 4 k4 \n" {
			t.Fatalf("consume printed %q and %q, %v, want record 4, the malformed message reported, and an error", out, errOut, err)
		}
	})
}

func TestPlain(t *testing.T) {
	for _, tc := range []struct {
		in      string
		spaceOK bool
		want    string
	}{
		{"abc", false, "abc"}, {"a b", false, `"a b"`}, {"a b", true, "a b"}, {"", false, `""`}, {"", true, ""},
		{"-", false, `"-"`}, {"-", true, "-"}, {"é", false, "é"}, {"\t", true, `"\t"`}, {"\xff", true, `"\xff"`}, {`"x`, true, `"\"x"`},
	} {
		if got := plain([]byte(tc.in), tc.spaceOK); got != tc.want {
			t.Errorf("plain(%q, %v) = %s, want %s", tc.in, tc.spaceOK, got, tc.want)
		}
	}
}

func TestParseSince(t *testing.T) {
	now := time.Date(2030, 5, 6, 7, 8, 9, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Time
		ok   bool
	}{
		{"10m", now.Add(-10 * time.Minute), true},
		{"2030-01-02T03:04:05Z", time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC), true},
		{"2030-01-02T03:04:05.5+01:00", time.Date(2030, 1, 2, 2, 4, 5, 5e8, time.UTC), true},
		{"-5m", time.Time{}, false}, {"yesterday", time.Time{}, false},
	} {
		got, err := parseSince(tc.in, now)
		if (err == nil) != tc.ok || !got.Equal(tc.want) {
			t.Errorf("parseSince(%q) = %v, %v, want %v (ok %v)", tc.in, got, err, tc.want, tc.ok)
		}
	}
}
