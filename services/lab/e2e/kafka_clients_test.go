//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"
)

// clientRecord is one record a client read.
type clientRecord struct {
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Key       string `json:"key"`
	Value     string `json:"value"`
	// Timestamp is the record's create time in ms; negative: another
	// timestamp type.
	Timestamp int64 `json:"timestamp"`
}

// clientRun is what one client sent and read back.
type clientRun struct {
	Sent   int            `json:"sent"`
	Read   []clientRecord `json:"read"`
	Errors []string       `json:"errors"`
}

// TestKafkaClients: four Kafka clients of three languages, each at its
// defaults (no codec or timestamp option changed; a consumer reads from
// the beginning), produce to a topic the face creates for them on Metadata
// and read it back with a consumer group, on a 4-validator network of stock
// CometBFT: franz-go and IBM/sarama (Go), confluent-kafka (librdkafka's
// Python binding, from Debian) and kafkajs (JavaScript, from npm, which
// reads gzip and uncompressed batches only). Each must read every record
// it wrote, once, in per-partition order, with its producer's timestamp
// as CreateTime.
func TestKafkaClients(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	n, _ := startNet(ctx, t, 8000)
	base := basePort(t) + 8000
	gw, broker := fmt.Sprintf("127.0.0.1:%d", base+900), fmt.Sprintf("127.0.0.1:%d", base+920)
	faceKey := filepath.Join(t.TempDir(), "face.key")
	if out, err := exec.CommandContext(ctx, filepath.Join(binDir(t), "byzlog"), "keygen", faceKey).CombinedOutput(); err != nil {
		t.Fatalf("keygen: %v\n%s", err, out)
	}
	startGateway(t, n, gw, "--insecure", "--kafka-listen", broker, "--kafka-insecure", "--kafka-anonymous-key", faceKey,
		"--kafka-auto-create-key", n.AdminKeyPath(), "--kafka-auto-create-partitions", "3")
	waitPort(t, broker)

	const records = 200
	clients := []struct {
		name string
		run  func(ctx context.Context, topic, group string) (clientRun, error)
	}{
		{"franz-go", func(ctx context.Context, topic, group string) (clientRun, error) {
			return franzGoRun(ctx, broker, topic, group, records)
		}},
		{"sarama", func(ctx context.Context, topic, group string) (clientRun, error) {
			return saramaRun(ctx, broker, topic, group, records)
		}},
		{"confluent-kafka", func(ctx context.Context, topic, group string) (clientRun, error) {
			return scriptRun(ctx, "/usr/bin/python3", "confluent.py", broker, topic, group, records)
		}},
		{"kafkajs", func(ctx context.Context, topic, group string) (clientRun, error) {
			return scriptRun(ctx, "node", "kafkajs.mjs", broker, topic, group, records)
		}},
	}
	for _, c := range clients {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			got, err := c.run(ctx, "clients-"+c.name, c.name+"-group")
			if err != nil {
				t.Fatal(err)
			}
			checkClientRun(t, got, records, start, time.Now())
			t.Logf("%s wrote %d records and read %d back in %.1f s", c.name, got.Sent, len(got.Read), time.Since(start).Seconds())
		})
	}
}

// checkClientRun checks that a client read each of its n records once, in
// offset order per partition, stamped between start and end as CreateTime.
func checkClientRun(t *testing.T, got clientRun, n int, start, end time.Time) {
	t.Helper()
	if len(got.Errors) > 0 || got.Sent != n {
		t.Fatalf("sent %d of %d, errors %v", got.Sent, n, got.Errors)
	}
	seen := map[string]bool{}
	last := map[int32]int64{}
	for _, r := range got.Read {
		if seen[r.Value] {
			t.Errorf("%q read twice", r.Value)
		}
		seen[r.Value] = true
		if prev, ok := last[r.Partition]; ok && r.Offset <= prev {
			t.Errorf("partition %d: offset %d after %d", r.Partition, r.Offset, prev)
		}
		last[r.Partition] = r.Offset
		if r.Timestamp < start.Add(-time.Second).UnixMilli() || r.Timestamp > end.UnixMilli() {
			t.Errorf("%q has timestamp %d, want its producer's create time in %d..%d (CreateTime)", r.Value, r.Timestamp, start.UnixMilli(), end.UnixMilli())
		}
	}
	if len(seen) != n {
		var values []string
		for v := range seen {
			values = append(values, v)
		}
		sort.Strings(values)
		t.Fatalf("read %d distinct records of %d: %.200v", len(seen), n, values)
	}
}

// scriptRun runs a client script of scripts/kafka-clients and reads the
// JSON it prints.
func scriptRun(ctx context.Context, interpreter, script, broker, topic, group string, n int) (clientRun, error) {
	dir := filepath.Join("..", "..", "..", "scripts", "kafka-clients")
	cmd := exec.CommandContext(ctx, interpreter, script, broker, topic, group, fmt.Sprint(n))
	cmd.Dir = dir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return clientRun{}, fmt.Errorf("%s %s: %v\n%s%s", interpreter, script, err, out, stderr.String())
	}
	var run clientRun
	if err := json.Unmarshal(out, &run); err != nil {
		return clientRun{}, fmt.Errorf("%s printed %q: %v", script, out, err)
	}
	return run, nil
}

// franzGoRun produces and consumes with franz-go at its defaults, but for
// letting Metadata create the topic (franz-go does not by default).
func franzGoRun(ctx context.Context, broker, topic, group string, n int) (clientRun, error) {
	var run clientRun
	p, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.AllowAutoTopicCreation(), kgo.DefaultProduceTopic(topic))
	if err != nil {
		return run, err
	}
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte(fmt.Sprintf("franz-go-%d", i))})
	}
	err = p.ProduceSync(ctx, recs...).FirstErr()
	p.Close()
	if err != nil {
		return run, fmt.Errorf("produce: %w", err)
	}
	run.Sent = n
	c, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return run, err
	}
	defer c.Close()
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for len(run.Read) < n && cctx.Err() == nil {
		fs := c.PollFetches(cctx)
		for _, e := range fs.Errors() {
			if cctx.Err() == nil {
				run.Errors = append(run.Errors, e.Err.Error())
			}
		}
		fs.EachRecord(func(r *kgo.Record) {
			ts := r.Timestamp.UnixMilli()
			if r.Attrs.TimestampType() != 0 {
				ts = -ts
			}
			run.Read = append(run.Read, clientRecord{Partition: r.Partition, Offset: r.Offset, Key: string(r.Key), Value: string(r.Value), Timestamp: ts})
		})
	}
	return run, nil
}

// saramaRun produces with sarama's SyncProducer and consumes with its
// consumer group, at sarama's defaults but for reading from the oldest
// offset.
func saramaRun(ctx context.Context, broker, topic, group string, n int) (clientRun, error) {
	var run clientRun
	cfg := sarama.NewConfig()
	cfg.Producer.Return.Successes = true // a SyncProducer needs it
	p, err := sarama.NewSyncProducer([]string{broker}, cfg)
	if err != nil {
		return run, fmt.Errorf("sarama producer: %w", err)
	}
	var msgs []*sarama.ProducerMessage
	for i := range n {
		msgs = append(msgs, &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(fmt.Sprintf("k%d", i)), Value: sarama.StringEncoder(fmt.Sprintf("sarama-%d", i))})
	}
	err = p.SendMessages(msgs)
	p.Close()
	if err != nil {
		return run, fmt.Errorf("sarama produce: %w", err)
	}
	run.Sent = n
	ccfg := sarama.NewConfig()
	ccfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cg, err := sarama.NewConsumerGroup([]string{broker}, group, ccfg)
	if err != nil {
		return run, fmt.Errorf("sarama consumer group: %w", err)
	}
	defer cg.Close()
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	h := &saramaHandler{out: make(chan clientRecord, n)}
	go func() {
		for cctx.Err() == nil {
			if err := cg.Consume(cctx, []string{topic}, h); err != nil && !errors.Is(err, sarama.ErrClosedConsumerGroup) && cctx.Err() == nil {
				select {
				case h.out <- clientRecord{Value: "error: " + err.Error()}:
				case <-cctx.Done():
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
	}()
	for len(run.Read) < n {
		select {
		case r := <-h.out:
			if strings.HasPrefix(r.Value, "error: ") {
				run.Errors = append(run.Errors, r.Value)
				continue
			}
			run.Read = append(run.Read, r)
		case <-cctx.Done():
			return run, nil
		}
	}
	return run, nil
}

// saramaHandler hands every record it consumes to out.
type saramaHandler struct{ out chan clientRecord }

func (h *saramaHandler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *saramaHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (h *saramaHandler) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for m := range claim.Messages() {
		select {
		case h.out <- clientRecord{Partition: m.Partition, Offset: m.Offset, Key: string(m.Key), Value: string(m.Value), Timestamp: m.Timestamp.UnixMilli()}:
		case <-s.Context().Done():
			return nil
		}
		s.MarkMessage(m, "")
	}
	return nil
}
