package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/byzlog/byzlog/gateway/kafka/sasl"
	"github.com/byzlog/byzlog/services/internal/keyfile"
)

// TestKafkaUser: the entry kafka-user prints, in a users file, logs in
// with PLAIN and the password it read; an empty password is refused.
func TestKafkaUser(t *testing.T) {
	dir := t.TempDir()
	if _, err := keyfile.Generate(filepath.Join(dir, "alice.key")); err != nil {
		t.Fatal(err)
	}
	run := func(stdin string) (string, error) {
		cmd := newKafkaUserCommand()
		var out bytes.Buffer
		cmd.SetIn(strings.NewReader(stdin))
		cmd.SetOut(&out)
		cmd.SetArgs([]string{"--name", "alice", "--key-file", "alice.key", "--iterations", "4096"})
		err := cmd.Execute()
		return out.String(), err
	}
	if _, err := run("\n"); err == nil || !strings.Contains(err.Error(), "no password") {
		t.Fatalf("kafka-user with an empty password = %v, want refused", err)
	}
	out, err := run("hunter2\n")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "hunter2") {
		t.Fatal("the entry holds the password")
	}
	var e sasl.Entry
	if err := json.Unmarshal([]byte(out), &e); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(sasl.File{Users: []sasl.Entry{e}})
	path := filepath.Join(dir, "users.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	users, err := sasl.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := users.Start(sasl.Plain)
	if _, done, err := s.Step([]byte("\x00alice\x00hunter2")); !done || err != nil {
		t.Fatalf("PLAIN login = done %v, %v", done, err)
	}
}

func TestParseBrokers(t *testing.T) {
	for _, tc := range []struct {
		in, want string
	}{
		{"0=127.0.0.1:9092,1=127.0.0.1:9093", ""},
		{"", ""},
		{"x=127.0.0.1:9092", "want ID=host:port"},
		{"0=127.0.0.1", "not host:port"},
		{"0=0.0.0.0:9092", "unspecified host"},
		{"0=h:0", "not 1-65535"},
	} {
		_, err := parseBrokers(tc.in)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("parseBrokers(%q) = %v, want %q", tc.in, err, tc.want)
		}
	}
}
