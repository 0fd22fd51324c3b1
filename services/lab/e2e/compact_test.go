//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/gateway/client"
	"github.com/byzlog/byzlog/indexer/consumer"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
	"github.com/byzlog/byzlog/services/internal/localnet"
	"github.com/byzlog/byzlog/services/lab/tamper"
)

// TestCompactedTopic: on a 4-validator network of stock CometBFT, a topic
// created compacted by the CLI takes 1,000 keys × 100 versions and
// tombstones for 100 keys from franz-go at its defaults through the Kafka
// face; once the chain has compacted it, a franz-go consumer from the
// beginning reads exactly the latest record of each of the 900 live keys
// in increasing offsets, every validator holds the same compacted log
// (record for record), and the partitions hold fewer bytes; the NATS
// stream is a table a plain nats.go client and the consumer SDK read as the
// 900 latest records; latest values read with proofs match, and a gateway
// that answers an older proof or leaves a key out is caught.
func TestCompactedTopic(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	n, _ := startNet(ctx, t, 10000)
	base := basePort(t) + 10000
	gw, broker := fmt.Sprintf("127.0.0.1:%d", base+900), fmt.Sprintf("127.0.0.1:%d", base+920)
	faceKey := filepath.Join(t.TempDir(), "face.key")
	if out, err := exec.CommandContext(ctx, filepath.Join(binDir(t), "byzlog"), "keygen", faceKey).CombinedOutput(); err != nil {
		t.Fatalf("keygen: %v\n%s", err, out)
	}
	startGateway(t, n, gw, "--insecure", "--kafka-listen", broker, "--kafka-insecure", "--kafka-anonymous-key", faceKey)
	waitPort(t, broker)
	natsURL := startNATS(t, base+850, t.TempDir())
	startIndexer(t, n, natsURL, "a", base+860)
	const partitions = 4
	out, err := exec.CommandContext(ctx, filepath.Join(binDir(t), "byzlog"), "topic", "create", "table", "--partitions", fmt.Sprint(partitions),
		"--cleanup-policy", "compact", "--delete-retention", "1s",
		"--admin-key", n.AdminKeyPath(), "--gateway="+gw, "--genesis="+n.GenesisPath(), "--insecure").CombinedOutput()
	if err != nil {
		t.Fatalf("topic create: %v\n%s", err, out)
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.DefaultProduceTopic("table"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const keys, versions, deleted = 1000, 100, 100
	start := time.Now()
	for v := range versions {
		recs := make([]*kgo.Record, 0, keys)
		for k := range keys {
			recs = append(recs, &kgo.Record{Key: fmt.Appendf(nil, "key-%04d", k), Value: fmt.Appendf(nil, "key-%04d-v%03d", k, v)})
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("produce version %d: %v", v, err)
		}
	}
	var tombstones []*kgo.Record
	for k := range deleted {
		tombstones = append(tombstones, &kgo.Record{Key: fmt.Appendf(nil, "key-%04d", k)})
	}
	if err := cl.ProduceSync(ctx, tombstones...).FirstErr(); err != nil {
		t.Fatalf("produce tombstones: %v", err)
	}
	t.Logf("franz-go wrote %d records and %d tombstones in %.1f s", keys*versions, deleted, time.Since(start).Seconds())
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("no key")}).FirstErr(); !errors.Is(err, kerr.InvalidRecord) {
		t.Errorf("a record without a key = %v, want INVALID_RECORD", err)
	}

	// Compaction passes 10,000 records a partition a block, then the
	// tombstones go a second after they were passed.
	var got map[string]string
	var reads int
	deadline := time.Now().Add(2 * time.Minute)
	for {
		got, reads = consumeTable(ctx, t, broker)
		if reads == keys-deleted || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	if reads != keys-deleted || len(got) != keys-deleted {
		t.Fatalf("a consumer from the beginning read %d records of %d keys, want one record of each of the %d live keys", reads, len(got), keys-deleted)
	}
	for k := deleted; k < keys; k++ {
		key := fmt.Sprintf("key-%04d", k)
		if want := fmt.Sprintf("%s-v%03d", key, versions-1); got[key] != want {
			t.Fatalf("%s = %q, want its latest, %s", key, got[key], want)
		}
	}
	// The stored bytes are the live records' (compaction ran while the
	// records were written, so there is no before to read).
	after := partitionBytes(ctx, t, n)
	each := after / uint64(keys-deleted)
	t.Logf("%d live keys read back as their latest records; the partitions hold %d bytes (%d a record), the %d records written would be about %d",
		len(got), after, each, keys*versions+deleted, each*(keys*versions+deleted))
	if each > 200 {
		t.Errorf("the partitions hold %d bytes for %d live records: compaction left more than the live records", after, keys-deleted)
	}
	for p := uint32(0); p < partitions; p++ {
		sameLogs(ctx, t, n, "table", p)
	}
	natsTable(ctx, t, natsURL, keys-deleted, func(key, value string) bool {
		var k int
		_, err := fmt.Sscanf(key, "key-%04d", &k)
		return err == nil && k >= deleted && value == fmt.Sprintf("%s-v%03d", key, versions-1)
	})
	provenReads(ctx, t, n, gw, cl)
}

// natsTable reads table's NATS stream, once it holds live messages (the
// tombstones' TTL passed), with the consumer SDK from the beginning and
// with a plain nats.go client (no byzlog package): each must get exactly
// one message a live key, its latest value, in increasing offsets.
func natsTable(ctx context.Context, t *testing.T, natsURL string, live int, latest func(key, value string) bool) {
	t.Helper()
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var msgs uint64
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(500 * time.Millisecond) {
		st, err := js.Stream(ctx, "byzlog-table")
		if err == nil {
			info, ierr := st.Info(ctx)
			if ierr == nil {
				msgs = info.State.Msgs
			}
		}
		if msgs == uint64(live) || time.Now().After(deadline) {
			break
		}
	}
	if msgs != uint64(live) {
		t.Fatalf("NATS stream byzlog-table holds %d messages, want one a live key, %d", msgs, live)
	}
	// A plain client: an ordered consumer over the stream.
	oc, err := js.OrderedConsumer(ctx, "byzlog-table", jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	plain := map[string]string{}
	for range live {
		m, err := oc.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("plain NATS client after %d messages: %v", len(plain), err)
		}
		key, err := base64.StdEncoding.DecodeString(m.Headers().Get("Byzlog-Key"))
		if err != nil || !latest(string(key), string(m.Data())) {
			t.Fatalf("plain NATS client: message on %s holds key %q = %q (%v), not a live key's latest", m.Subject(), key, m.Data(), err)
		}
		plain[string(key)] = string(m.Data())
	}
	if len(plain) != live {
		t.Fatalf("plain NATS client read %d keys, want %d", len(plain), live)
	}
	// The consumer SDK.
	c, err := consumer.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sub, err := c.Subscribe(ctx, "table", consumer.FromBeginning())
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	got, last := map[string]string{}, map[uint32]uint64{}
	for len(got) < live {
		nctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		r, err := sub.Next(nctx)
		cancel()
		if err != nil {
			t.Fatalf("consumer SDK after %d records: %v", len(got), err)
		}
		if prev, ok := last[r.Partition]; ok && r.Offset <= prev {
			t.Fatalf("consumer SDK: partition %d offset %d after %d", r.Partition, r.Offset, prev)
		}
		last[r.Partition] = r.Offset
		if _, dup := got[string(r.Key)]; dup || !latest(string(r.Key), string(r.Value)) {
			t.Fatalf("consumer SDK: key %q = %q at %d@%d: not a live key's latest, or a second record of it", r.Key, r.Value, r.Partition, r.Offset)
		}
		got[string(r.Key)] = string(r.Value)
	}
	t.Logf("NATS: %d messages in byzlog-table; a plain client and the consumer SDK each read the %d live keys' latest values", msgs, live)
}

// provenReads: the table's latest values read with proofs (client.Table,
// `byzlog get`) match what was written, and a gateway that answers with an
// older proof or leaves a key's entry out is caught.
func provenReads(ctx context.Context, t *testing.T, n *localnet.Net, gw string, cl *kgo.Client) {
	t.Helper()
	px, err := tamper.StartGateway("127.0.0.1:0", gw, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = px.Close() })
	tbl, err := client.NewTable(px.Addr(), trustOf(t, n), client.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Close()
	l, err := tbl.Get(ctx, "table", []byte("key-0500"))
	if err != nil || l.Record == nil || string(l.Record.Value) != "key-0500-v099" {
		t.Fatalf("proven latest of key-0500 = %+v, %v; want key-0500-v099", l, err)
	}
	if l, err := tbl.Get(ctx, "table", []byte("key-0050")); err != nil || l.Record != nil {
		t.Fatalf("proven latest of tombstoned key-0050 = %+v, %v; want no record", l, err)
	}
	// A newer version, once compaction passed it: the proxy's first answer
	// is now an older height's.
	if err := cl.ProduceSync(ctx, &kgo.Record{Key: []byte("key-0500"), Value: []byte("key-0500-v100")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	var now *client.Latest
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(500 * time.Millisecond) {
		if now, err = tbl.Get(ctx, "table", []byte("key-0500")); err == nil && now.Record != nil && string(now.Record.Value) == "key-0500-v100" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("key-0500's new version not proven latest within a minute: %+v, %v", now, err)
		}
	}
	out, err := exec.CommandContext(ctx, filepath.Join(binDir(t), "byzlog"), "get", "table", "key-0500", "--gateway="+gw, "--genesis="+n.GenesisPath(), "--insecure").Output()
	if err != nil || string(out) != "key-0500-v100\n" {
		t.Fatalf("byzlog get table key-0500 = %q, %v; want key-0500-v100", out, err)
	}
	part := client.KafkaPartition([]byte("key-0500"), now.Partitions)
	px.SetMode(tamper.OlderLatest)
	if l, err := tbl.GetPartition(ctx, "table", part, []byte("key-0500"), now.Offset+1); !errors.Is(err, client.ErrStale) {
		t.Errorf("an older proof through a lying gateway = %+v, %v; want ErrStale", l, err)
	}
	px.SetMode(tamper.OmitLatest)
	if l, err := tbl.Get(ctx, "table", []byte("key-0500")); !errors.Is(err, client.ErrUnverified) {
		t.Errorf("key-0500 left out by a lying gateway = %+v, %v; want ErrUnverified", l, err)
	}
	if px.Count(tamper.OlderLatest) == 0 || px.Count(tamper.OmitLatest) == 0 {
		t.Errorf("the proxy lied %d and %d times: the lies were not told", px.Count(tamper.OlderLatest), px.Count(tamper.OmitLatest))
	}
}

// consumeTable reads table from the beginning with franz-go until a poll
// brings nothing for 2 s, and returns each key's last value and how many
// records it read, failing on an offset that does not increase.
func consumeTable(ctx context.Context, t *testing.T, broker string) (map[string]string, int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.ConsumeTopics("table"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got, last, reads := map[string]string{}, map[int32]int64{}, 0
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		fs := cl.PollFetches(pctx)
		cancel()
		if fs.NumRecords() == 0 {
			return got, reads
		}
		fs.EachRecord(func(r *kgo.Record) {
			if prev, ok := last[r.Partition]; ok && r.Offset <= prev {
				t.Fatalf("partition %d: offset %d after %d", r.Partition, r.Offset, prev)
			}
			last[r.Partition] = r.Offset
			reads++
			if r.Value == nil {
				delete(got, string(r.Key))
			} else {
				got[string(r.Key)] = string(r.Value)
			}
		})
	}
}

// partitionBytes is table's stored bytes over its partitions, by node0.
func partitionBytes(ctx context.Context, t *testing.T, n *localnet.Net) uint64 {
	t.Helper()
	var info byzlogv1.TopicInfo
	abciQuery(ctx, t, n, 0, wire.PathTopic, &byzlogv1.TopicRequest{Name: "table"}, &info)
	var sum uint64
	for _, p := range info.Partitions {
		sum += p.SizeBytes
	}
	return sum
}

// sameLogs reads topic/p from every validator, record by record past the
// holes compaction left, and fails unless all four hold the same records.
func sameLogs(ctx context.Context, t *testing.T, n *localnet.Net, topic string, p uint32) {
	t.Helper()
	var first [][]byte
	for i := range 4 {
		var recs [][]byte
		for offset := uint64(0); ; {
			var resp byzlogv1.RecordsResponse
			abciQuery(ctx, t, n, i, wire.PathRecords, &byzlogv1.RecordsRequest{Topic: topic, Partition: p, Offset: offset}, &resp)
			recs = append(recs, resp.Records...)
			if resp.ReadTo <= offset || resp.ReadTo >= resp.NextOffset {
				break
			}
			offset = resp.ReadTo
		}
		if i == 0 {
			first = recs
			continue
		}
		if len(recs) != len(first) {
			t.Fatalf("%s/%d: node%d holds %d records, node0 %d", topic, p, i, len(recs), len(first))
		}
		for j := range recs {
			if !bytes.Equal(recs[j], first[j]) {
				t.Fatalf("%s/%d: node%d's record %d differs from node0's", topic, p, i, j)
			}
		}
	}
}

// abciQuery runs a query on node i that must succeed, into resp.
func abciQuery(ctx context.Context, t *testing.T, n *localnet.Net, i int, path string, req, resp proto.Message) {
	t.Helper()
	c, err := n.Client(i)
	if err != nil {
		t.Fatal(err)
	}
	b, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	q, err := c.ABCIQuery(ctx, path, b)
	if err != nil {
		t.Fatalf("node%d %s: %v", i, path, err)
	}
	if q.Response.Code != 0 {
		t.Fatalf("node%d %s: code %d %s", i, path, q.Response.Code, q.Response.Log)
	}
	if err := proto.Unmarshal(q.Response.Value, resp); err != nil {
		t.Fatalf("node%d %s: %v", i, path, err)
	}
}
