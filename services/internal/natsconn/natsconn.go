// Package natsconn is how byzlog's commands connect to NATS: a user with a
// password read from a file, and TLS checked against a CA, as NATS's own
// authentication and TLS do them. The localnet's NATS asks for both; any
// NATS server a user runs may ask for either.
package natsconn

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"

	"github.com/byzlog/byzlog/indexer/natsauth"
	"github.com/byzlog/byzlog/services/internal/keyfile"
)

// LocalnetURL is the NATS of `make run`'s localnet: the default --nats.
const LocalnetURL = "nats://127.0.0.1:4222"

// Flags are a NATS client's credentials and TLS.
type Flags struct {
	// User and PasswordFile: NATS user/password authentication (empty
	// User: none). The file holds the password on its first line.
	User, PasswordFile string
	// CA is the PEM CA NATS's TLS certificate is checked against (empty:
	// the system's roots, when the server asks for TLS).
	CA string
	// Insecure leaves CA out: TLS only if the server asks for it. Commands
	// set it from their --insecure.
	Insecure bool
	// KeyFile, when set, connects as that byzlog key's reader user: NATS's
	// nkey challenge signed with the key, for topics whose readers list it
	// (natsauth). User and PasswordFile are then not used.
	KeyFile string
}

// Add registers the flags, with d's values as defaults.
func (f *Flags) Add(fs *pflag.FlagSet, d Flags) {
	*f = d
	fs.StringVar(&f.User, "nats-user", d.User, "NATS user (empty: no user/password authentication)")
	fs.StringVar(&f.PasswordFile, "nats-password-file", d.PasswordFile, "file whose first line is the NATS user's password")
	fs.StringVar(&f.CA, "nats-tls-ca", d.CA, "PEM CA NATS's TLS certificate is checked against (empty: the system's roots)")
}

// AddKeyFile registers --nats-key-file, for commands that read topics.
func (f *Flags) AddKeyFile(fs *pflag.FlagSet) {
	fs.StringVar(&f.KeyFile, "nats-key-file", "", "byzlog key file (byzlog keygen): connect to NATS as that key's reader user (nkey), to read topics whose --reader lists it, instead of --nats-user")
}

// Options are the nats.Connect options the flags say. A default password
// file or CA that does not exist is left out (a server that needs them
// then says so); one given on the command line must exist.
func (f Flags) Options(fs *pflag.FlagSet) ([]nats.Option, error) {
	var opts []nats.Option
	switch {
	case f.KeyFile != "":
		k, err := keyfile.Read(f.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("--nats-key-file: %w", err)
		}
		if opts, err = natsauth.ReaderOptions(k); err != nil {
			return nil, fmt.Errorf("--nats-key-file: %w", err)
		}
	case f.User != "":
		pw := ""
		if f.PasswordFile != "" {
			b, err := os.ReadFile(f.PasswordFile)
			switch {
			case err == nil:
				pw, _, _ = strings.Cut(string(b), "\n")
				pw = strings.TrimSpace(pw)
			case errors.Is(err, os.ErrNotExist) && !fs.Changed("nats-password-file"):
			default:
				return nil, fmt.Errorf("--nats-password-file: %w", err)
			}
		}
		if pw != "" || fs.Changed("nats-user") {
			opts = append(opts, nats.UserInfo(f.User, pw))
		}
	}
	if f.CA != "" && !f.Insecure {
		if _, err := os.Stat(f.CA); err == nil || fs.Changed("nats-tls-ca") {
			opts = append(opts, nats.RootCAs(f.CA))
		}
	}
	return opts, nil
}
