package sasl

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/xdg-go/scram"
)

// writeUsers writes a users file of entries (and alice's key) to a temp
// directory and returns its path.
func writeUsers(t *testing.T, edit func(*File)) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "alice.key"), []byte(strings.Repeat("ab", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e, err := NewEntry("alice", "alice.key", false, "s3cret", MinIterations, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	f := File{Users: []Entry{e}}
	if edit != nil {
		edit(&f)
	}
	b, _ := json.Marshal(f)
	path := filepath.Join(dir, "users.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoad(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*File)
		want string
	}{
		{"good", nil, ""},
		{"no users", func(f *File) { f.Users = nil }, "lists no user"},
		{"empty name", func(f *File) { f.Users[0].Name = "" }, "name is empty"},
		{"twice", func(f *File) { f.Users = append(f.Users, f.Users[0]) }, "listed twice"},
		{"no key file", func(f *File) { f.Users[0].KeyFile = "" }, "key_file is empty"},
		{"missing key file", func(f *File) { f.Users[0].KeyFile = "nope.key" }, "no such file"},
		{"no credential", func(f *File) { f.Users[0].ScramSHA256, f.Users[0].ScramSHA512 = nil, nil }, "no credential"},
		{"few iterations", func(f *File) { f.Users[0].ScramSHA256.Iterations = 100 }, "scram_sha_256: iterations 100"},
		{"many iterations", func(f *File) { f.Users[0].ScramSHA512.Iterations = 1 << 30 }, "scram_sha_512: iterations"},
		{"bad base64", func(f *File) { f.Users[0].ScramSHA512.Salt = "%%" }, "salt is not base64"},
		{"short key", func(f *File) { f.Users[0].ScramSHA256.StoredKey = "AAAA" }, "stored_key is 3 bytes, want 32"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(writeUsers(t, tc.edit))
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Load = %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Load = %v, want an error containing %q", err, tc.want)
			}
		})
	}
	t.Run("key file readable by others", func(t *testing.T) {
		path := writeUsers(t, nil)
		os.Chmod(filepath.Join(filepath.Dir(path), "alice.key"), 0o644)
		if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "chmod 600") {
			t.Fatalf("Load = %v, want chmod 600", err)
		}
	})
}

func TestPlain(t *testing.T) {
	users, err := Load(writeUsers(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		msg  string
		ok   bool
	}{
		{"right", "\x00alice\x00s3cret", true},
		{"authzid equals user", "alice\x00alice\x00s3cret", true},
		{"wrong password", "\x00alice\x00nope", false},
		{"unknown user", "\x00bob\x00s3cret", false},
		{"other authzid", "bob\x00alice\x00s3cret", false},
		{"malformed", "alice s3cret", false},
		{"oversized", "\x00alice\x00" + strings.Repeat("x", 2000), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := users.Start(Plain)
			if err != nil {
				t.Fatal(err)
			}
			_, done, err := s.Step([]byte(tc.msg))
			if tc.ok != (err == nil && done) {
				t.Fatalf("Step(%q) = done %v, %v; want ok %v", tc.msg, done, err, tc.ok)
			}
			if !tc.ok && !errors.Is(err, ErrAuthFailed) {
				t.Fatalf("Step(%q) = %v, want ErrAuthFailed", tc.msg, err)
			}
			if tc.ok && (s.User() == nil || s.User().Name != "alice" || len(s.User().Key) == 0) {
				t.Fatalf("User() = %+v, want alice with her key", s.User())
			}
		})
	}
}

func TestScram(t *testing.T) {
	users, err := Load(writeUsers(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, mech := range []string{ScramSHA256, ScramSHA512} {
		for _, tc := range []struct {
			user, pass string
			ok         bool
		}{{"alice", "s3cret", true}, {"alice", "wrong", false}, {"bob", "s3cret", false}} {
			t.Run(mech+"/"+tc.user+"/"+tc.pass, func(t *testing.T) {
				cl, _ := hashes[mech].NewClient(tc.user, tc.pass, "")
				conv := cl.NewConversation()
				s, err := users.Start(mech)
				if err != nil {
					t.Fatal(err)
				}
				ok, err := converse(conv, s)
				if ok != tc.ok {
					t.Fatalf("SCRAM %s as %s/%s: ok %v (%v), want %v", mech, tc.user, tc.pass, ok, err, tc.ok)
				}
				if !ok && !errors.Is(err, ErrAuthFailed) {
					t.Fatalf("SCRAM failure = %v, want ErrAuthFailed", err)
				}
			})
		}
	}
	// An unknown user is answered like a known one at the first step, with
	// the same salt each time, and fails only at the proof.
	firstReply := func(user string) string {
		cl, _ := scram.SHA512.NewClient(user, "x", "")
		msg, _ := cl.NewConversation().Step("")
		s, _ := users.Start(ScramSHA512)
		reply, done, err := s.Step([]byte(msg))
		if err != nil || done {
			t.Fatalf("first SCRAM step for %s = done %v, %v; want a server-first message", user, done, err)
		}
		salt := strings.Split(string(reply), ",")[1]
		return salt
	}
	if a, b := firstReply("nobody"), firstReply("nobody"); a != b || !strings.HasPrefix(a, "s=") {
		t.Fatalf("an unknown user's salts = %q, %q: want one salt", a, b)
	}
	if _, err := users.Start("GSSAPI"); !errors.Is(err, ErrUnsupportedMechanism) {
		t.Fatalf("Start(GSSAPI) = %v, want ErrUnsupportedMechanism", err)
	}
}

// converse runs a SCRAM exchange between a client and a server session;
// ok means the server accepted and the client verified the server.
func converse(conv *scram.ClientConversation, s Session) (bool, error) {
	msg, err := conv.Step("")
	for range 3 {
		if err != nil {
			return false, err
		}
		reply, done, err := s.Step([]byte(msg))
		if err != nil {
			return false, err
		}
		msg, err = conv.Step(string(reply))
		if done {
			return err == nil && conv.Valid() && s.User() != nil, err
		}
	}
	return false, errors.New("exchange did not end")
}

func FuzzPlain(f *testing.F) {
	users := fuzzUsers(f)
	f.Add([]byte("\x00alice\x00s3cret"))
	f.Add([]byte("a\x00b\x00c\x00d"))
	f.Fuzz(func(t *testing.T, msg []byte) {
		s, _ := users.Start(Plain)
		_, done, err := s.Step(msg)
		if done && (err != nil || s.User() == nil) {
			t.Fatalf("Step done with err %v user %v", err, s.User())
		}
	})
}

func FuzzScram(f *testing.F) {
	f.Add([]byte("n,,n=alice,r=abcdef"), []byte("c=biws,r=abcdef,p=AAAA"))
	f.Add([]byte("y,a=alice,n=alice,r=x"), []byte(""))
	f.Fuzz(func(t *testing.T, first, final []byte) {
		users := fuzzUsers(t)
		for _, mech := range []string{ScramSHA256, ScramSHA512} {
			s, _ := users.Start(mech)
			if _, done, err := s.Step(first); done || err != nil {
				continue
			}
			if _, done, err := s.Step(final); done && err == nil {
				t.Fatalf("a fuzzed proof authenticated as %v", s.User())
			}
		}
	})
}

// memUsers is alice (password s3cret) without a users file, for fuzzing.
var memUsers = sync.OnceValues(func() (*Users, error) {
	u := &User{Name: "alice", creds: map[string]scram.StoredCredentials{}}
	for _, mech := range []string{ScramSHA256, ScramSHA512} {
		c, err := NewCredential(mech, "s3cret", MinIterations, rand.Reader)
		if err != nil {
			return nil, err
		}
		if u.creds[mech], err = c.stored(hashes[mech]().Size()); err != nil {
			return nil, err
		}
	}
	return &Users{byName: map[string]*User{"alice": u}, secret: []byte("fuzz")}, nil
})

func fuzzUsers(tb testing.TB) *Users {
	u, err := memUsers()
	if err != nil {
		tb.Fatal(err)
	}
	return u
}
