package localnet

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/byzlog/byzlog/gateway/kafka/sasl"
	"github.com/byzlog/byzlog/services/internal/keyfile"
)

// The Kafka face's users on a local network: KafkaUser writes with its own
// key, KafkaAdminUser with the genesis admin key (CreateTopics,
// DeleteTopics). Their passwords are in KafkaPasswordFile.
const (
	KafkaUser      = "byzlog"
	KafkaAdminUser = "admin"
)

func (n *Net) kafkaDir() string { return filepath.Join(n.cfg.Dir, "kafka") }

// KafkaPasswordFile is where a Kafka user's password is kept (mode 0600).
func (n *Net) KafkaPasswordFile(user string) string {
	return filepath.Join(n.kafkaDir(), user+".password")
}

// KafkaPassword reads user's password, making one the first time.
func (n *Net) KafkaPassword(user string) (string, error) {
	return readOrMakePassword(n.KafkaPasswordFile(user))
}

// KafkaKeyFile is the key file the gateways sign user's batches with.
func (n *Net) KafkaKeyFile(user string) string {
	if user == KafkaAdminUser {
		return filepath.Join(n.cfg.Dir, adminKeyFile)
	}
	return filepath.Join(n.kafkaDir(), user+".key")
}

// KafkaAddr is gateway g's Kafka address; KafkaPort 0 serves none.
func (s Services) KafkaAddr(g int) string { return fmt.Sprintf("127.0.0.1:%d", s.KafkaPort+g) }

// kafkaUsersPath is the gateways' users file.
func (n *Net) kafkaUsersPath() string { return filepath.Join(n.kafkaDir(), "users.json") }

// writeKafkaUsers writes the users file: each user's key file (made once)
// and salted credentials of its password.
func (n *Net) writeKafkaUsers() error {
	dir := n.kafkaDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	userKey := n.KafkaKeyFile(KafkaUser)
	if _, err := os.Stat(userKey); errors.Is(err, os.ErrNotExist) {
		if _, err := keyfile.Generate(userKey); err != nil {
			return err
		}
	}
	var f sasl.File
	for _, u := range []struct {
		name, key string
		admin     bool
	}{{KafkaUser, userKey, false}, {KafkaAdminUser, n.KafkaKeyFile(KafkaAdminUser), true}} {
		pw, err := n.KafkaPassword(u.name)
		if err != nil {
			return err
		}
		e, err := sasl.NewEntry(u.name, u.key, u.admin, pw, sasl.MinIterations, rand.Reader)
		if err != nil {
			return err
		}
		f.Users = append(f.Users, e)
	}
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(n.kafkaUsersPath(), b, 0o600)
}

// kafkaArgs are gateway g's Kafka face flags: every gateway is a broker,
// listed in order.
func (n *Net) kafkaArgs(s Services, g int) []string {
	if s.KafkaPort == 0 {
		return nil
	}
	var brokers []string
	for i := 0; i < s.Gateways; i++ {
		brokers = append(brokers, fmt.Sprintf("%d=%s", i, s.KafkaAddr(i)))
	}
	args := []string{"--kafka-listen", s.KafkaAddr(g), "--kafka-node-id", fmt.Sprint(g),
		"--kafka-brokers", strings.Join(brokers, ","), "--kafka-users", n.kafkaUsersPath()}
	if s.Insecure {
		args = append(args, "--kafka-insecure")
	}
	if s.KafkaAutoCreate {
		args = append(args, "--kafka-auto-create-key", filepath.Join(n.cfg.Dir, adminKeyFile))
		if s.KafkaAutoCreatePartitions > 0 {
			args = append(args, "--kafka-auto-create-partitions", fmt.Sprint(s.KafkaAutoCreatePartitions))
		}
	}
	return args
}

// KafkaClientArgs are kcat's (librdkafka's) settings for user on s's
// Kafka face: PLAIN over TLS checked against the network's CA, unless s is
// insecure. Not SCRAM: librdkafka before 2.6.1 (Debian bookworm has 2.0.2)
// sends a wrong SCRAM nonce, which the face refuses as Kafka 4 does.
func (n *Net) KafkaClientArgs(s Services, user string) ([]string, error) {
	pw, err := n.KafkaPassword(user)
	if err != nil {
		return nil, err
	}
	proto := "SASL_SSL"
	if s.Insecure {
		proto = "SASL_PLAINTEXT"
	}
	args := []string{"-X", "security.protocol=" + proto, "-X", "sasl.mechanisms=PLAIN",
		"-X", "sasl.username=" + user, "-X", "sasl.password=" + pw}
	if !s.Insecure {
		args = append(args, "-X", "ssl.ca.location="+n.TLS().CA())
	}
	return args, nil
}

// KafkaClientOpts are a franz-go client's options for user on the Kafka
// faces of the gateways given (seed brokers): SASL PLAIN over TLS checked
// against the network's CA (with a client certificate when s is mutual),
// unless s is insecure.
func (n *Net) KafkaClientOpts(s Services, user string, gateways ...int) ([]kgo.Opt, error) {
	var seeds []string
	for _, g := range gateways {
		seeds = append(seeds, s.KafkaAddr(g))
	}
	pw, err := n.KafkaPassword(user)
	if err != nil {
		return nil, err
	}
	opts := []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.SASL(plain.Auth{User: user, Pass: pw}.AsMechanism())}
	tlsCfg, err := n.ClientTLS(s)
	if err != nil {
		return nil, err
	}
	if tlsCfg != nil {
		opts = append(opts, kgo.DialTLSConfig(tlsCfg))
	}
	return opts, nil
}
