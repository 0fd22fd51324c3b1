package pipeline_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/gateway/kafka"
	"github.com/byzlog/byzlog/gateway/kafka/sasl"
	"github.com/byzlog/byzlog/gateway/pipeline"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

// startKafkaFace serves the Kafka face of a gateway over a test chain with
// topic "k" (3 partitions), as edit changes the config, until the test
// ends; it returns the address and the gateway.
func startKafkaFace(t *testing.T, edit func(*kafka.Config)) (string, *pipeline.Gateway) {
	t.Helper()
	g := pipeline.StartTestGateway(t, &byzlogv1.TopicState{Name: "k", Config: &byzlogv1.TopicConfig{Partitions: 3}})
	return serveKafkaFace(t, g, edit), g
}

// serveKafkaFace serves g's Kafka face as edit changes the config (an
// anonymous key by default), until the test ends, and returns its address.
func serveKafkaFace(t *testing.T, g *pipeline.Gateway, edit func(*kafka.Config)) string {
	t.Helper()
	return serveKafkaFaceLogging(t, g, edit, zerolog.Nop())
}

// serveKafkaFaceLogging is serveKafkaFace logging to log.
func serveKafkaFaceLogging(t *testing.T, g *pipeline.Gateway, edit func(*kafka.Config), log zerolog.Logger) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := kafka.Default()
	cfg.Listen = ln.Addr().String()
	cfg.Insecure = true
	seed := sha256.Sum256([]byte("anonymous"))
	cfg.AnonymousKey = ed25519.NewKeyFromSeed(seed[:])
	if edit != nil {
		edit(&cfg)
	}
	srv, err := kafka.New(cfg, kafka.Over(g), log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return cfg.Listen
}

// TestKafkaFaceProduceConsume produces with franz-go through the face with
// every codec and acks, and reads every record back by Fetch, in order.
func TestKafkaFaceProduceConsume(t *testing.T) {
	addr, _ := startKafkaFace(t, nil)
	codecs := map[string]kgo.CompressionCodec{"none": kgo.NoCompression(), "gzip": kgo.GzipCompression(),
		"snappy": kgo.SnappyCompression(), "lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression()}
	want := map[string]bool{}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, name := range []string{"none", "gzip", "snappy", "lz4", "zstd"} {
		for _, acks := range []kgo.Acks{kgo.AllISRAcks(), kgo.LeaderAck()} {
			cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DisableIdempotentWrite(), kgo.RequiredAcks(acks),
				kgo.ProducerBatchCompression(codecs[name]), kgo.DefaultProduceTopic("k"))
			if err != nil {
				t.Fatal(err)
			}
			var recs []*kgo.Record
			for i := range 20 {
				v := fmt.Sprintf("%s-%v-%d", name, acks, i)
				want[v] = true
				recs = append(recs, &kgo.Record{Key: []byte(fmt.Sprint(i)), Value: []byte(v), Headers: []kgo.RecordHeader{{Key: "h", Value: []byte(v)}}})
			}
			if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				t.Fatalf("produce %s acks %v: %v", name, acks, err)
			}
			cl.Close()
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics("k"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got := map[string]bool{}
	last := map[int32]int64{}
	for len(got) < len(want) && ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		for _, e := range fs.Errors() {
			if ctx.Err() == nil {
				t.Fatalf("fetch %s/%d: %v", e.Topic, e.Partition, e.Err)
			}
		}
		fs.EachRecord(func(r *kgo.Record) {
			if prev, ok := last[r.Partition]; ok && r.Offset != prev+1 {
				t.Errorf("partition %d: offset %d after %d", r.Partition, r.Offset, prev)
			}
			last[r.Partition] = r.Offset
			if got[string(r.Value)] {
				t.Errorf("record %q read twice", r.Value)
			}
			if len(r.Headers) != 1 || string(r.Headers[0].Value) != string(r.Value) {
				t.Errorf("record %q has headers %v", r.Value, r.Headers)
			}
			got[string(r.Value)] = true
		})
	}
	if len(got) != len(want) {
		t.Fatalf("read %d of %d records", len(got), len(want))
	}
}

// testTLS is a self-signed certificate for 127.0.0.1, and a client
// configuration that trusts it.
func testTLS(t *testing.T) (*tls.Config, *tls.Config) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "byzlog test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, MinVersion: tls.VersionTLS13},
		&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13}
}

// TestKafkaFaceAuth: over TLS, SASL PLAIN and SCRAM-SHA-256/512 with the
// right password produce as the user's key; a wrong password and a client
// that skips authentication are refused.
func TestKafkaFaceAuth(t *testing.T) {
	serverTLS, clientTLS := testTLS(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "alice.key"), []byte(strings.Repeat("cd", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e, err := sasl.NewEntry("alice", "alice.key", false, "pw", sasl.MinIterations, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	root, err := sasl.NewEntry("root", "alice.key", true, "rootpw", sasl.MinIterations, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(sasl.File{Users: []sasl.Entry{e, root}})
	os.WriteFile(filepath.Join(dir, "users.json"), b, 0o600)
	users, err := sasl.Load(filepath.Join(dir, "users.json"))
	if err != nil {
		t.Fatal(err)
	}
	addr, g := startKafkaFace(t, func(c *kafka.Config) {
		c.TLS, c.Insecure, c.AnonymousKey, c.Auth = serverTLS, false, nil, kafka.SASL(users)
	})
	produce := func(within time.Duration, opts ...kgo.Opt) error {
		ctx, cancel := context.WithTimeout(context.Background(), within)
		defer cancel()
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.DisableIdempotentWrite(), kgo.DefaultProduceTopic("k"),
			kgo.RequestRetries(0), kgo.RetryTimeout(2 * time.Second)}, opts...)...)
		if err != nil {
			return err
		}
		defer cl.Close()
		return cl.ProduceSync(ctx, &kgo.Record{Value: []byte("v")}).FirstErr()
	}
	tlsOpt := kgo.DialTLSConfig(clientTLS)
	for name, m := range map[string]kgo.Opt{
		"plain":         kgo.SASL(plain.Auth{User: "alice", Pass: "pw"}.AsMechanism()),
		"scram-sha-256": kgo.SASL(scram.Auth{User: "alice", Pass: "pw"}.AsSha256Mechanism()),
		"scram-sha-512": kgo.SASL(scram.Auth{User: "alice", Pass: "pw"}.AsSha512Mechanism()),
	} {
		if err := produce(10*time.Second, tlsOpt, m); err != nil {
			t.Errorf("produce with %s: %v", name, err)
		}
	}
	for name, opts := range map[string][]kgo.Opt{
		"wrong password": {tlsOpt, kgo.SASL(scram.Auth{User: "alice", Pass: "nope"}.AsSha512Mechanism())},
		"no sasl":        {tlsOpt},
		"no tls":         {kgo.SASL(plain.Auth{User: "alice", Pass: "pw"}.AsMechanism())},
	} {
		if err := produce(2*time.Second, opts...); err == nil {
			t.Errorf("produce with %s: accepted, want refused", name)
		}
	}
	// SCRAM credentials: an admin sees the users file's users and their
	// iterations, a user does not; nobody changes them through Kafka.
	scramAs := func(user, pw string) *kadm.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr), tlsOpt, kgo.SASL(plain.Auth{User: user, Pass: pw}.AsMechanism()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return kadm.NewClient(cl)
	}
	ctx := context.Background()
	described, err := scramAs("root", "rootpw").DescribeUserSCRAMs(ctx)
	if err != nil || len(described) != 2 || len(described["alice"].CredInfos) != 2 || described["alice"].CredInfos[0].Iterations != sasl.MinIterations {
		t.Errorf("DescribeUserScramCredentials as an admin = %+v, %v; want alice and root with 2 credentials of %d iterations", described, err, sasl.MinIterations)
	}
	if _, err := scramAs("alice", "pw").DescribeUserSCRAMs(ctx); !errors.Is(err, kerr.ClusterAuthorizationFailed) {
		t.Errorf("DescribeUserScramCredentials as a user = %v, want CLUSTER_AUTHORIZATION_FAILED", err)
	}
	altered, err := scramAs("root", "rootpw").AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: "bob", Mechanism: kadm.ScramSha256, Iterations: 4096, Password: "x"}})
	if err != nil || !errors.Is(altered["bob"].Err, kerr.PolicyViolation) {
		t.Errorf("AlterUserScramCredentials = %+v, %v; want POLICY_VIOLATION", altered, err)
	}
	alice := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{0xcd}, 32)).Public().(ed25519.PublicKey)
	var stored [][]byte
	for p := range uint32(3) {
		rr, err := g.Records(context.Background(), &byzlogv1.RecordsRequest{Topic: "k", Partition: p})
		if err != nil {
			t.Fatal(err)
		}
		stored = append(stored, rr.Records...)
	}
	if len(stored) != 3 {
		t.Errorf("the log holds %d records, want the 3 the authenticated clients wrote", len(stored))
	}
	for _, b := range stored {
		var sr byzlogv1.StoredRecord
		if err := proto.Unmarshal(b, &sr); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(sr.ProducerKey, alice) {
			t.Errorf("record at offset %d has producer %x, want alice's key %x", sr.Offset, sr.ProducerKey, alice)
		}
	}
}

// TestKafkaFaceGroup: two franz-go group consumers share a topic's
// partitions, read every record once between them, commit their offsets
// on the chain, and a third consumer of the group resumes after them.
func TestKafkaFaceGroup(t *testing.T) {
	addr, _ := startKafkaFace(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prod, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DisableIdempotentWrite(), kgo.DefaultProduceTopic("k"))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	produce := func(from, n int) {
		var recs []*kgo.Record
		for i := from; i < from+n; i++ {
			recs = append(recs, &kgo.Record{Key: []byte(fmt.Sprint(i)), Value: []byte(fmt.Sprint(i))})
		}
		if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	owned := map[int]int{} // consumer -> partitions it holds
	consumer := func(n int) *kgo.Client {
		track := func(delta int) func(context.Context, *kgo.Client, map[string][]int32) {
			return func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
				mu.Lock()
				owned[n] += delta * len(m["k"])
				mu.Unlock()
			}
		}
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumerGroup("g1"), kgo.ConsumeTopics("k"),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(),
			// A session of 30 s: a CI machine running every package under
			// the race detector stalled heartbeats past 6 s once, and the
			// member evicted then failed its next commit
			// (UNKNOWN_MEMBER_ID). The members leave by LeaveGroup here,
			// so nothing waits for a session to run out.
			kgo.SessionTimeout(30*time.Second), kgo.HeartbeatInterval(200*time.Millisecond), kgo.RebalanceTimeout(30*time.Second),
			kgo.OnPartitionsAssigned(track(1)), kgo.OnPartitionsRevoked(track(-1)), kgo.OnPartitionsLost(track(-1)))
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	a, b := consumer(0), consumer(1)
	// Both members hold partitions before anything is produced.
	for ctx.Err() == nil {
		for _, cl := range []*kgo.Client{a, b} {
			pctx, pcancel := context.WithTimeout(ctx, 100*time.Millisecond)
			cl.PollFetches(pctx)
			pcancel()
		}
		mu.Lock()
		split := owned[0] > 0 && owned[1] > 0 && owned[0]+owned[1] == 3
		mu.Unlock()
		if split {
			break
		}
	}
	produce(0, 60)
	seen := map[string]int{}
	byClient := map[*kgo.Client]int{}
	for len(seen) < 60 && ctx.Err() == nil {
		for _, cl := range []*kgo.Client{a, b} {
			pctx, pcancel := context.WithTimeout(ctx, 300*time.Millisecond)
			fs := cl.PollFetches(pctx)
			pcancel()
			fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)]++; byClient[cl]++ })
			if err := cl.CommitUncommittedOffsets(ctx); err != nil {
				t.Fatalf("commit: %v", err)
			}
		}
	}
	if len(seen) != 60 {
		t.Fatalf("the group read %d of 60 records", len(seen))
	}
	for v, n := range seen {
		if n != 1 {
			t.Errorf("record %s read %d times", v, n)
		}
	}
	if byClient[a] == 0 || byClient[b] == 0 {
		t.Errorf("records per consumer: %d and %d, want both to have partitions", byClient[a], byClient[b])
	}
	a.Close()
	b.Close()
	produce(60, 10)
	c := consumer(2)
	defer c.Close()
	var after []string
	for len(after) < 10 && ctx.Err() == nil {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		fs := c.PollFetches(pctx)
		pcancel()
		fs.EachRecord(func(r *kgo.Record) { after = append(after, string(r.Value)) })
	}
	for _, v := range after {
		if n, _ := strconv.Atoi(v); n < 60 {
			t.Errorf("the resumed consumer read %s, committed before it joined", v)
		}
	}
	if len(after) != 10 {
		t.Fatalf("the resumed consumer read %d of the 10 new records", len(after))
	}
}

// TestKafkaFaceCommitUnknownTopic: an offset commit for a topic the chain
// does not have is answered UNKNOWN_TOPIC_OR_PARTITION at once, and the
// key's next commit still commits.
func TestKafkaFaceCommitUnknownTopic(t *testing.T) {
	addr, g := startKafkaFace(t, nil)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	commit := func(topic string) int16 {
		req := kmsg.NewPtrOffsetCommitRequest()
		req.Group, req.Generation = "g-unknown", -1
		rt := kmsg.NewOffsetCommitRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Offset = 0
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Topics[0].Partitions[0].ErrorCode
	}
	start := time.Now()
	if code := commit("gone"); code != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("commit to an unknown topic: code %d, want UNKNOWN_TOPIC_OR_PARTITION", code)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the refusal took %s", d)
	}
	if code := commit("k"); code != 0 {
		t.Fatalf("the next commit: code %d, want 0", code)
	}
	off, err := g.Group(ctx, "g-unknown")
	if err != nil || len(off.Offsets) != 1 || off.Offsets[0].Topic != "k" {
		t.Fatalf("the group's committed offsets = %v, %v; want k/0", off, err)
	}
}

// TestKafkaFaceTopicID: Metadata v10+ carries a topic id, the same from
// every gateway, and not Kafka's null id (librdkafka 2.x keeps a topic's
// old partitions while the id stays the same).
func TestKafkaFaceTopicID(t *testing.T) {
	gs := pipeline.StartTestGateways(t, 2, &byzlogv1.TopicState{Name: "k", Config: &byzlogv1.TopicConfig{Partitions: 3}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var ids [][16]byte
	for _, g := range gs {
		cl, err := kgo.NewClient(kgo.SeedBrokers(serveKafkaFace(t, g, nil)))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		req := kmsg.NewPtrMetadataRequest()
		req.Topics = []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr("k")}}
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Topics) != 1 || resp.Topics[0].ErrorCode != 0 {
			t.Fatalf("metadata of k: %+v", resp.Topics)
		}
		ids = append(ids, resp.Topics[0].TopicID)
	}
	if ids[0] == ([16]byte{}) || ids[0] != ids[1] {
		t.Errorf("topic ids of k from two gateways: %x, %x; want one id, not zero", ids[0], ids[1])
	}
}

// gzipOnly is a consumer's decompressor that reads gzip and nothing else,
// as some clients ship without plugins for the other codecs.
type gzipOnly struct{ d kgo.Decompressor }

func (g gzipOnly) Decompress(src []byte, codec kgo.CompressionCodecType) ([]byte, error) {
	if codec != kgo.CodecNone && codec != kgo.CodecGzip {
		return nil, fmt.Errorf("codec %d is not implemented, only gzip", codec)
	}
	return g.d.Decompress(src, codec)
}

// TestKafkaFaceServesBatchesAsProduced: Fetch hands each batch back with
// the codec its producer used (compression.type=producer) and each record
// with its producer's timestamp as CreateTime, so a consumer that reads
// gzip only reads a topic written with gzip and without compression; a
// topic set to LogAppendTime serves the block time instead.
func TestKafkaFaceServesBatchesAsProduced(t *testing.T) {
	g := pipeline.StartTestGateway(t, &byzlogv1.TopicState{Name: "k", Config: &byzlogv1.TopicConfig{Partitions: 1}},
		&byzlogv1.TopicState{Name: "a", Config: &byzlogv1.TopicConfig{Partitions: 1, TimestampType: byzlogv1.TimestampType_TIMESTAMP_LOG_APPEND_TIME}})
	addr := serveKafkaFace(t, g, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stamp := time.UnixMilli(1_600_000_000_123) // 2020: the producer's, not the block's
	codecs := []struct {
		name  string
		codec kgo.CompressionCodec
		attr  int16
	}{{"none", kgo.NoCompression(), 0}, {"gzip", kgo.GzipCompression(), 1}, {"zstd", kgo.ZstdCompression(), 4}}
	for _, topic := range []string{"k", "a"} {
		for _, c := range codecs {
			cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ProducerBatchCompression(c.codec), kgo.DefaultProduceTopic(topic))
			if err != nil {
				t.Fatal(err)
			}
			var recs []*kgo.Record
			for i := range 5 {
				recs = append(recs, &kgo.Record{Value: []byte(fmt.Sprintf("%s-%d-%s", c.name, i, strings.Repeat("x", 300))), Timestamp: stamp})
			}
			if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				t.Fatalf("produce %s: %v", c.name, err)
			}
			cl.Close()
		}
	}
	// The batches as fetched: one per produced batch, each with its codec.
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrFetchRequest()
	req.MaxWaitMillis, req.MaxBytes = 100, 10<<20
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = "k"
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.PartitionMaxBytes = 10 << 20
	ft.Partitions = append(ft.Partitions, fp)
	req.Topics = append(req.Topics, ft)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	var attrs []int16
	for b := resp.Topics[0].Partitions[0].RecordBatches; len(b) > 0; {
		var rb kmsg.RecordBatch
		if err := rb.ReadFrom(b); err != nil {
			t.Fatal(err)
		}
		attrs = append(attrs, rb.Attributes)
		b = b[12+rb.Length:]
	}
	if want := []int16{0, 1, 4}; !slices.Equal(attrs, want) {
		t.Fatalf("fetched batches' attributes %v, want %v (none, gzip, zstd as produced; CreateTime)", attrs, want)
	}
	// A consumer that reads gzip only, of a topic written with gzip and
	// without compression; then every record's time and type.
	for _, topic := range []string{"k", "a"} {
		opts := []kgo.Opt{kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}
		if topic == "k" {
			opts = append(opts, kgo.WithDecompressor(gzipOnly{kgo.DefaultDecompressor()}))
		}
		c, err := kgo.NewClient(opts...)
		if err != nil {
			t.Fatal(err)
		}
		limit := 10 // the gzip-only consumer stops at the zstd batch
		if topic == "a" {
			limit = 15
		}
		var got []*kgo.Record
		for len(got) < limit && ctx.Err() == nil {
			fs := c.PollFetches(ctx)
			for _, e := range fs.Errors() {
				t.Fatalf("%s: fetch: %v", topic, e.Err)
			}
			got = append(got, fs.Records()...)
		}
		c.Close()
		for i, r := range got[:limit] {
			switch {
			case topic == "k" && (!r.Timestamp.Equal(stamp) || r.Attrs.TimestampType() != 0):
				t.Errorf("%s record %d (%.8s): timestamp %v type %d, want the producer's %v as CreateTime (0)", topic, i, r.Value, r.Timestamp, r.Attrs.TimestampType(), stamp)
			case topic == "a" && (r.Timestamp.Equal(stamp) || r.Attrs.TimestampType() != 1 || time.Since(r.Timestamp) > time.Minute):
				t.Errorf("%s record %d (%.8s): timestamp %v type %d, want the block's time as LogAppendTime (1)", topic, i, r.Value, r.Timestamp, r.Attrs.TimestampType())
			}
		}
	}
}

// TestKafkaFaceFetchSessions: a full fetch that opens a session (KIP-227)
// answers every partition and a session id; an incremental fetch names only
// what changed and is answered only with partitions that have records or
// new offsets; a wrong epoch or an unknown session is refused with Kafka's
// codes; epoch -1 closes the session.
func TestKafkaFaceFetchSessions(t *testing.T) {
	addr, _ := startKafkaFace(t, nil) // topic k, 3 partitions
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("k"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// One connection: a session is the connection's.
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	corr := int32(0)
	fetch := func(id, epoch int32, offsets map[int32]int64) *kmsg.FetchResponse {
		t.Helper()
		req := kmsg.NewPtrFetchRequest()
		req.Version, req.MaxWaitMillis, req.MaxBytes, req.SessionID, req.SessionEpoch = 12, 50, 1<<20, id, epoch
		if len(offsets) > 0 {
			ft := kmsg.NewFetchRequestTopic()
			ft.Topic = "k"
			for p := range int32(3) {
				if o, ok := offsets[p]; ok {
					fp := kmsg.NewFetchRequestTopicPartition()
					fp.Partition, fp.FetchOffset, fp.PartitionMaxBytes = p, o, 1<<20
					ft.Partitions = append(ft.Partitions, fp)
				}
			}
			req.Topics = append(req.Topics, ft)
		}
		corr++
		resp := req.ResponseKind().(*kmsg.FetchResponse)
		roundTrip(t, nc, req, corr, resp)
		return resp
	}
	partitions := func(r *kmsg.FetchResponse) []int32 {
		var out []int32
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				out = append(out, p.Partition)
			}
		}
		return out
	}
	full := fetch(0, 0, map[int32]int64{0: 0, 1: 0, 2: 0})
	if full.ErrorCode != 0 || full.SessionID == 0 || len(partitions(full)) != 3 {
		t.Fatalf("opening fetch: code %d session %d partitions %v; want a session and all 3", full.ErrorCode, full.SessionID, partitions(full))
	}
	id := full.SessionID
	if r := fetch(id, 1, nil); r.ErrorCode != 0 || r.SessionID != id || len(partitions(r)) != 0 {
		t.Fatalf("incremental fetch with nothing new: code %d partitions %v, want none", r.ErrorCode, partitions(r))
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Partition: 1, Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	r := fetch(id, 2, nil)
	if got := partitions(r); r.ErrorCode != 0 || len(got) != 1 || got[0] != 1 || len(r.Topics[0].Partitions[0].RecordBatches) == 0 {
		t.Fatalf("incremental fetch after a record in k/1: code %d partitions %v, want k/1 with its record", r.ErrorCode, got)
	}
	if r := fetch(id, 3, map[int32]int64{1: 1}); r.ErrorCode != 0 || len(partitions(r)) != 0 {
		t.Fatalf("incremental fetch past the record: code %d partitions %v, want none", r.ErrorCode, partitions(r))
	}
	// The session is the gateway's: a client whose connection dropped goes
	// on with it on the next (kgo drops one at every canceled fetch).
	nc.Close()
	if nc, err = net.Dial("tcp", addr); err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if r := fetch(id, 4, nil); r.ErrorCode != 0 || r.SessionID != id || len(partitions(r)) != 0 {
		t.Fatalf("the session on a new connection: code %d session %d (want %d) partitions %v", r.ErrorCode, r.SessionID, id, partitions(r))
	}
	if r := fetch(id, 9, nil); r.ErrorCode != kerr.InvalidFetchSessionEpoch.Code {
		t.Fatalf("a wrong epoch: code %d, want INVALID_FETCH_SESSION_EPOCH", r.ErrorCode)
	}
	if r := fetch(id+1, 5, nil); r.ErrorCode != kerr.FetchSessionIDNotFound.Code {
		t.Fatalf("an unknown session: code %d, want FETCH_SESSION_ID_NOT_FOUND", r.ErrorCode)
	}
	if r := fetch(id, -1, map[int32]int64{0: 0}); r.ErrorCode != 0 || r.SessionID != 0 || len(partitions(r)) != 1 {
		t.Fatalf("closing fetch: code %d session %d partitions %v, want a full answer without a session", r.ErrorCode, r.SessionID, partitions(r))
	}
	if r := fetch(id, 5, nil); r.ErrorCode != kerr.FetchSessionIDNotFound.Code {
		t.Fatalf("the closed session: code %d, want FETCH_SESSION_ID_NOT_FOUND", r.ErrorCode)
	}
	// A full fetch naming a session the face no longer has is a full fetch
	// all the same (kgo sends one after FETCH_SESSION_ID_NOT_FOUND): epoch
	// -1 without a session, epoch 0 opening a new one.
	if r := fetch(id, -1, map[int32]int64{0: 0}); r.ErrorCode != 0 || r.SessionID != 0 || len(partitions(r)) != 1 {
		t.Fatalf("epoch -1 of a closed session: code %d session %d partitions %v, want a full answer without a session", r.ErrorCode, r.SessionID, partitions(r))
	}
	r = fetch(id, 0, map[int32]int64{0: 0, 2: 0})
	if r.ErrorCode != 0 || r.SessionID == 0 || r.SessionID == id || len(partitions(r)) != 2 {
		t.Fatalf("epoch 0 of a closed session: code %d session %d (closed: %d) partitions %v, want a new session with both", r.ErrorCode, r.SessionID, id, partitions(r))
	}
}

// roundTrip sends req on c with correlation id corr and reads its answer
// into resp.
func roundTrip(t *testing.T, c net.Conn, req kmsg.Request, corr int32, resp kmsg.Response) {
	t.Helper()
	b := binary.BigEndian.AppendUint16(nil, uint16(req.Key()))
	b = binary.BigEndian.AppendUint16(b, uint16(req.GetVersion()))
	b = binary.BigEndian.AppendUint32(b, uint32(corr))
	b = append(b, 0, 4, 't', 'e', 's', 't') // client id
	if req.IsFlexible() {
		b = append(b, 0)
	}
	b = req.AppendTo(b)
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...)); err != nil {
		t.Fatal(err)
	}
	var size [4]byte
	if _, err := io.ReadFull(c, size[:]); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(c, body); err != nil {
		t.Fatal(err)
	}
	if got := int32(binary.BigEndian.Uint32(body)); got != corr {
		t.Fatalf("answer to correlation id %d, want %d", got, corr)
	}
	body = body[4:]
	if req.IsFlexible() {
		body = body[1:] // the header's empty tagged fields
	}
	resp.SetVersion(req.GetVersion())
	if err := resp.ReadFrom(body); err != nil {
		t.Fatal(err)
	}
}
