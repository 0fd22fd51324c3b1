// Package workload generates seeded, reproducible streams of byzlog
// transactions for determinism tests and benchmarks: mostly valid bundles
// from several producers, admin changes and offset commits, mixed with
// duplicates, sequence gaps, forgeries and garbage that must be rejected. It
// draws randomness only from its seed, so two runs with one seed produce the
// same bytes.
package workload

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// Key derives a reproducible ed25519 key from a name.
func Key(name string) ed25519.PrivateKey {
	seed := sha256.Sum256([]byte(name))
	return ed25519.NewKeyFromSeed(seed[:])
}

// Gen generates transactions for one chain.
type Gen struct {
	rng       *rand.Rand
	chainID   string
	admin     *wire.Signer
	producers []*wire.Signer
	consumer  *wire.Signer
	topics    []string
	parts     map[string]uint32
	seqs      map[string]uint64 // producer/topic/partition -> next sequence
	sent      [][]byte          // committed-looking bundles, for replays
	nonces    map[string]uint64
}

// New returns a generator for chainID seeded with seed.
func New(seed int64, chainID string) *Gen {
	g := &Gen{
		rng: rand.New(rand.NewSource(seed)), chainID: chainID,
		admin:    wire.NewSigner(Key("admin"), chainID),
		consumer: wire.NewSigner(Key("consumer"), chainID),
		topics:   []string{"orders", "payments"},
		parts:    map[string]uint32{"orders": 3, "payments": 2},
		seqs:     map[string]uint64{}, nonces: map[string]uint64{},
	}
	for i := 0; i < 4; i++ {
		g.producers = append(g.producers, wire.NewSigner(Key(fmt.Sprintf("producer-%d", i)), chainID))
	}
	return g
}

// Genesis is the app_state for the generator's chain: its admin and topics.
func (g *Gen) Genesis() []byte {
	return []byte(fmt.Sprintf(`{"admins": [%q], "topics": [{"name": "orders", "partitions": 3}, {"name": "payments", "partitions": 2}]}`,
		hex.EncodeToString(g.admin.PublicKey())))
}

// Block returns n transactions. Valid ones assume every earlier valid one was
// committed in order; invalid ones change nothing.
func (g *Gen) Block(n int) [][]byte {
	txs := make([][]byte, 0, n)
	for len(txs) < n {
		switch x := g.rng.Intn(100); {
		case x < 70:
			txs = append(txs, g.bundle(1+g.rng.Intn(3)))
		case x < 75 && len(g.sent) > 0:
			txs = append(txs, g.sent[g.rng.Intn(len(g.sent))]) // a duplicate
		case x < 80:
			txs = append(txs, g.gap())
		case x < 84:
			txs = append(txs, g.forged())
		case x < 87:
			junk := make([]byte, g.rng.Intn(64))
			g.rng.Read(junk)
			txs = append(txs, junk)
		case x < 92:
			txs = append(txs, g.grow())
		default:
			txs = append(txs, g.commitOffsets())
		}
	}
	return txs
}

// Records returns n records of size bytes each, for benchmarks.
func (g *Gen) Records(n, size int) []*byzlogv1.Record {
	out := make([]*byzlogv1.Record, n)
	for i := range out {
		v := make([]byte, size)
		g.rng.Read(v)
		out[i] = &byzlogv1.Record{Key: []byte(fmt.Sprintf("key-%d", g.rng.Intn(1000))), Value: v, CreateTimeUnixNano: int64(i)}
	}
	return out
}

func (g *Gen) pick() (string, uint32) {
	t := g.topics[g.rng.Intn(len(g.topics))]
	return t, uint32(g.rng.Intn(int(g.parts[t])))
}

func (g *Gen) batch(p *wire.Signer, topic string, part uint32, seq uint64) *byzlogv1.SignedBatch {
	n := 1 + g.rng.Intn(5)
	codec := byzlogv1.Codec_CODEC_NONE
	if g.rng.Intn(4) == 0 {
		codec = byzlogv1.Codec_CODEC_ZSTD
	}
	b, err := p.Batch(topic, part, seq, codec, g.Records(n, 1+g.rng.Intn(200)))
	if err != nil {
		panic(err) // only on a broken encoder
	}
	return b
}

func must(tx []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return tx
}

func (g *Gen) bundle(batches int) []byte {
	var bs []*byzlogv1.SignedBatch
	for i := 0; i < batches; i++ {
		p := g.producers[g.rng.Intn(len(g.producers))]
		topic, part := g.pick()
		k := fmt.Sprintf("%x/%s/%d", p.PublicKey(), topic, part)
		b := g.batch(p, topic, part, g.seqs[k])
		g.seqs[k]++
		bs = append(bs, b)
	}
	tx := must(wire.BundleTx(bs...))
	g.sent = append(g.sent, tx)
	return tx
}

func (g *Gen) gap() []byte {
	p := g.producers[g.rng.Intn(len(g.producers))]
	topic, part := g.pick()
	k := fmt.Sprintf("%x/%s/%d", p.PublicKey(), topic, part)
	return must(wire.BundleTx(g.batch(p, topic, part, g.seqs[k]+2)))
}

func (g *Gen) forged() []byte {
	p := g.producers[g.rng.Intn(len(g.producers))]
	topic, part := g.pick()
	b := g.batch(p, topic, part, 0)
	b.Signature[g.rng.Intn(len(b.Signature))] ^= 1
	return must(wire.BundleTx(b))
}

func (g *Gen) grow() []byte {
	topic := g.topics[g.rng.Intn(len(g.topics))]
	g.parts[topic]++
	nonce := g.nonces["admin"]
	g.nonces["admin"]++
	req, err := g.admin.Admin(nonce, &byzlogv1.UpdateTopic{Name: topic, Config: &byzlogv1.TopicConfig{Partitions: g.parts[topic]}})
	if err != nil {
		panic(err)
	}
	return must(wire.AdminTx(req))
}

func (g *Gen) commitOffsets() []byte {
	topic, part := g.pick()
	nonce := g.nonces["consumer"]
	g.nonces["consumer"]++
	// Offset 0 is always within the log; rewind keeps every commit valid.
	co, err := g.consumer.CommitOffsets(nonce, "group", true, &byzlogv1.PartitionOffset{Topic: topic, Partition: part, Metadata: "m"})
	if err != nil {
		panic(err)
	}
	return must(wire.OffsetsTx(co))
}
