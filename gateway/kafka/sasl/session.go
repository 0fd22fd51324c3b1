package sasl

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"sync"

	"github.com/xdg-go/scram"
)

// Errors, for errors.Is. A wrong user and a wrong password are both
// ErrAuthFailed with one message, so a client cannot tell which.
var (
	ErrAuthFailed           = errors.New("authentication failed")
	ErrUnsupportedMechanism = errors.New("unsupported SASL mechanism")
)

// Message bounds, checked before parsing.
const (
	maxPlainBytes = 1 << 10
	maxScramBytes = 4 << 10
)

// Session is one SASL exchange.
type Session interface {
	// Step takes the client's next message and returns the reply; done
	// says the exchange is over, authenticated.
	Step(msg []byte) (reply []byte, done bool, err error)
	// User is the authenticated user once done.
	User() *User
}

// Mechanisms lists what Start takes, strongest first.
func (u *Users) Mechanisms() []string { return []string{ScramSHA512, ScramSHA256, Plain} }

// Start begins an exchange.
func (u *Users) Start(mechanism string) (Session, error) {
	switch mechanism {
	case Plain:
		return &plainSession{u: u}, nil
	case ScramSHA256, ScramSHA512:
		srv, err := hashes[mechanism].NewServer(u.lookup(mechanism))
		if err != nil {
			return nil, fmt.Errorf("start %s: %w", mechanism, err)
		}
		return &scramSession{conv: srv.NewConversation(), u: u}, nil
	}
	return nil, fmt.Errorf("%w %q: offered are %v", ErrUnsupportedMechanism, mechanism, u.Mechanisms())
}

var errWrong = fmt.Errorf("%w: wrong user name or password", ErrAuthFailed)

// lookup finds a user's credential. An unknown user gets a made-up one,
// with a salt derived from the name under the users file's secret, the
// same on every attempt: the exchange then fails at the proof, as a wrong
// password does, so SCRAM does not tell which names exist.
func (u *Users) lookup(mechanism string) scram.CredentialLookup {
	return func(name string) (scram.StoredCredentials, error) {
		if user := u.byName[name]; user != nil {
			if c, ok := user.creds[mechanism]; ok {
				return c, nil
			}
		}
		size := hashes[mechanism]().Size()
		mac := hmac.New(sha256.New, u.secret)
		mac.Write([]byte(mechanism + "\x00" + name))
		salt := mac.Sum(nil)[:24]
		return scram.StoredCredentials{KeyFactors: scram.KeyFactors{Salt: string(salt), Iters: DefaultIterations},
			StoredKey: make([]byte, size), ServerKey: make([]byte, size)}, nil
	}
}

type plainSession struct {
	u    *Users
	user *User
	used bool
}

func (s *plainSession) User() *User { return s.user }

// dummy is checked against for an unknown user, so PLAIN costs the same.
var dummy = sync.OnceValue(func() scram.StoredCredentials {
	cl, _ := scram.SHA512.NewClient("x", "x", "")
	return cl.GetStoredCredentials(scram.KeyFactors{Salt: "byzlog-dummy-salt", Iters: DefaultIterations})
})

func (s *plainSession) Step(msg []byte) ([]byte, bool, error) {
	if s.used {
		return nil, false, fmt.Errorf("%w: PLAIN takes one message", ErrAuthFailed)
	}
	s.used = true
	if len(msg) > maxPlainBytes {
		return nil, false, fmt.Errorf("%w: PLAIN message of %d bytes, at most %d", ErrAuthFailed, len(msg), maxPlainBytes)
	}
	parts := bytes.Split(msg, []byte{0})
	if len(parts) != 3 {
		return nil, false, fmt.Errorf("%w: PLAIN message is malformed (want authzid NUL user NUL password)", ErrAuthFailed)
	}
	authz, name, pass := string(parts[0]), string(parts[1]), string(parts[2])
	if authz != "" && authz != name {
		return nil, false, fmt.Errorf("%w: PLAIN authorization id must be empty or the user name", ErrAuthFailed)
	}
	user := s.u.byName[name]
	mech, cred := ScramSHA512, dummy()
	if user != nil {
		var ok bool
		if cred, ok = user.creds[ScramSHA512]; !ok {
			mech, cred = ScramSHA256, user.creds[ScramSHA256]
		}
	}
	cl, err := hashes[mech].NewClient(name, pass, "")
	if err != nil {
		return nil, false, errWrong
	}
	got, err := cl.GetStoredCredentialsWithError(cred.KeyFactors)
	if err != nil || user == nil || subtle.ConstantTimeCompare(got.StoredKey, cred.StoredKey) != 1 {
		return nil, false, errWrong
	}
	s.user = user
	return nil, true, nil
}

type scramSession struct {
	conv  *scram.ServerConversation
	u     *Users
	steps int
}

func (s *scramSession) User() *User {
	if !s.conv.Valid() {
		return nil
	}
	return s.u.byName[s.conv.Username()]
}

// Step runs one of SCRAM's two client messages. The client-final nonce
// must be exactly the server's (RFC 5802, as Kafka 4 checks it):
// librdkafka before 2.6.1 (Debian bookworm has 2.0.2) prepends its own
// nonce once more and is refused; such clients log in with PLAIN over TLS.
func (s *scramSession) Step(msg []byte) ([]byte, bool, error) {
	s.steps++
	if s.steps > 2 {
		return nil, false, fmt.Errorf("%w: SCRAM takes two client messages", ErrAuthFailed)
	}
	if len(msg) > maxScramBytes {
		return nil, false, fmt.Errorf("%w: SCRAM message of %d bytes, at most %d", ErrAuthFailed, len(msg), maxScramBytes)
	}
	reply, err := s.conv.Step(string(msg))
	if err != nil {
		return nil, false, errWrong
	}
	if s.conv.Done() {
		if a := s.conv.AuthzID(); !s.conv.Valid() || s.User() == nil || (a != "" && a != s.conv.Username()) {
			return nil, false, errWrong
		}
		return []byte(reply), true, nil
	}
	return []byte(reply), false, nil
}
