package sasl

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/xdg-go/scram"
)

// The SCRAM mechanisms, and PLAIN.
const (
	Plain       = "PLAIN"
	ScramSHA256 = "SCRAM-SHA-256"
	ScramSHA512 = "SCRAM-SHA-512"
)

// Iteration bounds: fewer than RFC 7677's 4096 is weak, and a credential
// of too many would make each login a CPU bomb.
const (
	MinIterations     = 4096
	MaxIterations     = 1_000_000
	DefaultIterations = 8192
)

// File is the users file's shape.
type File struct {
	Users []Entry `json:"users"`
}

// Entry is one user in the users file.
type Entry struct {
	Name string `json:"name"`
	// KeyFile holds the user's ed25519 key (byzlog's key file: the 32-byte
	// seed in hex); relative to the users file.
	KeyFile string `json:"key_file"`
	// Admin lets the user's requests act as an admin's (CreateTopics,
	// DeleteTopics); the key must be a genesis admin key for them to pass.
	Admin       bool        `json:"admin,omitempty"`
	ScramSHA256 *Credential `json:"scram_sha_256,omitempty"`
	ScramSHA512 *Credential `json:"scram_sha_512,omitempty"`
}

// Credential is one SCRAM credential, the bytes in standard base64.
type Credential struct {
	Salt       string `json:"salt"`
	Iterations int    `json:"iterations"`
	StoredKey  string `json:"stored_key"`
	ServerKey  string `json:"server_key"`
}

// User is a loaded user.
type User struct {
	Name  string
	Key   ed25519.PrivateKey
	Admin bool
	creds map[string]scram.StoredCredentials // by mechanism
}

// Users are the loaded users file.
type Users struct {
	byName map[string]*User
	// secret derives unknown users' made-up SCRAM salts: a hash of the
	// file's stored keys, which no client sees.
	secret []byte
}

// hashes are the SCRAM hash of each mechanism.
var hashes = map[string]scram.HashGeneratorFcn{ScramSHA256: scram.SHA256, ScramSHA512: scram.SHA512}

// Load reads and checks the users file at path.
func Load(path string) (*Users, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read users file: %w", err)
	}
	var f File
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("users file %s: %w", path, err)
	}
	u := &Users{byName: map[string]*User{}}
	for i, e := range f.Users {
		user, err := load(e, filepath.Dir(path))
		if err != nil {
			return nil, fmt.Errorf("users file %s: user %d (%q): %w", path, i, e.Name, err)
		}
		if u.byName[e.Name] != nil {
			return nil, fmt.Errorf("users file %s: user %q is listed twice", path, e.Name)
		}
		u.byName[e.Name] = user
	}
	if len(u.byName) == 0 {
		return nil, fmt.Errorf("users file %s lists no user", path)
	}
	u.secret = secretOf(b)
	return u, nil
}

func load(e Entry, dir string) (*User, error) {
	if e.Name == "" {
		return nil, errors.New("name is empty")
	}
	if e.KeyFile == "" {
		return nil, errors.New("key_file is empty")
	}
	path := e.KeyFile
	if !filepath.IsAbs(path) {
		path = filepath.Join(dir, path)
	}
	key, err := readKey(path)
	if err != nil {
		return nil, err
	}
	u := &User{Name: e.Name, Key: key, Admin: e.Admin, creds: map[string]scram.StoredCredentials{}}
	for mech, c := range map[string]*Credential{ScramSHA256: e.ScramSHA256, ScramSHA512: e.ScramSHA512} {
		if c == nil {
			continue
		}
		sc, err := c.stored(hashes[mech]().Size())
		if err != nil {
			return nil, fmt.Errorf("%s: %w", strings.ToLower(strings.ReplaceAll(mech, "-", "_")), err)
		}
		u.creds[mech] = sc
	}
	if len(u.creds) == 0 {
		return nil, errors.New("no credential: give scram_sha_256 or scram_sha_512 (byzlog-gateway kafka-user writes both)")
	}
	return u, nil
}

func (c *Credential) stored(size int) (scram.StoredCredentials, error) {
	if c.Iterations < MinIterations || c.Iterations > MaxIterations {
		return scram.StoredCredentials{}, fmt.Errorf("iterations %d: want %d..%d", c.Iterations, MinIterations, MaxIterations)
	}
	var fields [3][]byte
	for i, f := range []struct{ name, v string }{{"salt", c.Salt}, {"stored_key", c.StoredKey}, {"server_key", c.ServerKey}} {
		b, err := base64.StdEncoding.DecodeString(f.v)
		if err != nil || len(b) == 0 {
			return scram.StoredCredentials{}, fmt.Errorf("%s is not base64 bytes", f.name)
		}
		if i > 0 && len(b) != size {
			return scram.StoredCredentials{}, fmt.Errorf("%s is %d bytes, want %d", f.name, len(b), size)
		}
		fields[i] = b
	}
	return scram.StoredCredentials{KeyFactors: scram.KeyFactors{Salt: string(fields[0]), Iters: c.Iterations}, StoredKey: fields[1], ServerKey: fields[2]}, nil
}

// readKey reads byzlog's key file format, refusing one others may read.
func readKey(path string) (ed25519.PrivateKey, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("key_file: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("key_file %s is readable by others (mode %v): chmod 600 %s", path, st.Mode().Perm(), path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("key_file: %w", err)
	}
	seed, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("key_file %s: want %d bytes in hex on one line (as `byzlog keygen` writes)", path, ed25519.SeedSize)
	}
	return ed25519.NewKeyFromSeed(seed), nil
}

// NewCredential derives a SCRAM credential for password, with a fresh salt
// from rand.
func NewCredential(mechanism, password string, iterations int, rand io.Reader) (*Credential, error) {
	h, ok := hashes[mechanism]
	if !ok {
		return nil, fmt.Errorf("mechanism %q: want %s or %s", mechanism, ScramSHA256, ScramSHA512)
	}
	if iterations < MinIterations || iterations > MaxIterations {
		return nil, fmt.Errorf("iterations %d: want %d..%d", iterations, MinIterations, MaxIterations)
	}
	salt := make([]byte, 24)
	if _, err := io.ReadFull(rand, salt); err != nil {
		return nil, fmt.Errorf("salt: %w", err)
	}
	cl, err := h.NewClient("user", password, "")
	if err != nil {
		return nil, fmt.Errorf("password: %w", err)
	}
	sc, err := cl.GetStoredCredentialsWithError(scram.KeyFactors{Salt: string(salt), Iters: iterations})
	if err != nil {
		return nil, fmt.Errorf("derive credential: %w", err)
	}
	enc := base64.StdEncoding.EncodeToString
	return &Credential{Salt: enc(salt), Iterations: iterations, StoredKey: enc(sc.StoredKey), ServerKey: enc(sc.ServerKey)}, nil
}

// NewEntry builds a users file entry with both SCRAM credentials.
func NewEntry(name, keyFile string, admin bool, password string, iterations int, rand io.Reader) (Entry, error) {
	if name == "" || password == "" {
		return Entry{}, errors.New("a user needs a name and a non-empty password")
	}
	e := Entry{Name: name, KeyFile: keyFile, Admin: admin}
	var err error
	if e.ScramSHA256, err = NewCredential(ScramSHA256, password, iterations, rand); err != nil {
		return Entry{}, err
	}
	if e.ScramSHA512, err = NewCredential(ScramSHA512, password, iterations, rand); err != nil {
		return Entry{}, err
	}
	return e, nil
}

// secretOf is a secret no client knows: a hash of the users file, which
// holds the stored keys.
func secretOf(file []byte) []byte {
	h := sha256.Sum256(append([]byte("byzlog kafka users\x00"), file...))
	return h[:]
}

// Described is one user's SCRAM credentials as Kafka's
// DescribeUserScramCredentials shows them: the iterations of each
// mechanism, never a salt or key.
type Described struct {
	Name       string
	Iterations map[string]int // by mechanism (ScramSHA256, ScramSHA512)
}

// Describe lists the users, by name.
func (u *Users) Describe() []Described {
	out := make([]Described, 0, len(u.byName))
	for name, user := range u.byName {
		d := Described{Name: name, Iterations: map[string]int{}}
		for mech, c := range user.creds {
			d.Iterations[mech] = c.Iters
		}
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b Described) int { return strings.Compare(a.Name, b.Name) })
	return out
}
