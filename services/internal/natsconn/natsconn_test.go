package natsconn

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func TestOptions(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "consumer.password")
	if err := os.WriteFile(pw, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, []byte("not used until Connect"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")
	for _, tc := range []struct {
		name     string
		defaults Flags
		args     []string
		want     int    // options
		wantErr  string // "" : none
	}{
		{"defaults that exist", Flags{User: "consumer", PasswordFile: pw, CA: ca}, nil, 2, ""},
		{"default files missing: a server that needs them says so", Flags{User: "consumer", PasswordFile: missing, CA: missing}, nil, 0, ""},
		{"a password file given that is missing", Flags{User: "consumer"}, []string{"--nats-password-file", missing}, 0, "--nats-password-file"},
		{"a user given without a password", Flags{}, []string{"--nats-user", "bob"}, 1, ""},
		{"a CA given that is missing is passed on (Connect names it)", Flags{}, []string{"--nats-tls-ca", missing}, 1, ""},
		{"no user", Flags{CA: ca}, nil, 1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
			var f Flags
			f.Add(fs, tc.defaults)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			opts, err := f.Options(fs)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Options = %v; want an error naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil || len(opts) != tc.want {
				t.Fatalf("Options = %d options, %v; want %d", len(opts), err, tc.want)
			}
		})
	}
	f := Flags{User: "consumer", PasswordFile: pw, CA: ca, Insecure: true}
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	if opts, err := f.Options(fs); err != nil || len(opts) != 1 {
		t.Fatalf("insecure: %d options, %v; want the password alone", len(opts), err)
	}
}
