package core_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/abciapp/core"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

const chainID = "test-chain"

// memStore is an in-memory core.Scanner: the committed state of a test chain.
type memStore struct{ kv map[string][]byte }

func newMemStore() *memStore { return &memStore{kv: map[string][]byte{}} }

func mkey(cf core.CF, key []byte) string { return string(append([]byte{byte(cf)}, key...)) }

func (m *memStore) Get(cf core.CF, key []byte) ([]byte, error) {
	v, ok := m.kv[mkey(cf, key)]
	if !ok {
		return nil, nil
	}
	return v, nil
}

func (m *memStore) Scan(cf core.CF, start, end []byte, fn func(k, v []byte) bool) error {
	var keys []string
	lo, hi := mkey(cf, start), mkey(cf, end)
	for k := range m.kv {
		if k >= lo && (end == nil && k[0] == byte(cf) || end != nil && k < hi) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !fn([]byte(k[1:]), m.kv[k]) {
			return nil
		}
	}
	return nil
}

func (m *memStore) apply(cs core.ChangeSet) {
	for _, r := range cs.RangeDeletes {
		lo, hi := mkey(r.CF, r.Start), mkey(r.CF, r.End)
		for k := range m.kv {
			if k >= lo && k < hi {
				delete(m.kv, k)
			}
		}
	}
	for _, c := range cs.Changes {
		if c.Delete {
			delete(m.kv, mkey(c.CF, c.Key))
		} else {
			m.kv[mkey(c.CF, c.Key)] = c.Value
		}
	}
}

// key derives a fixed ed25519 key from a name, so tests are reproducible.
func key(name string) ed25519.PrivateKey {
	seed := sha256.Sum256([]byte(name))
	return ed25519.NewKeyFromSeed(seed[:])
}

// testChain is a chain of blocks executed by core on a memStore.
type testChain struct {
	t      testing.TB
	store  *memStore
	state  core.State
	time   int64
	admin  *wire.Signer
	nonces map[string]uint64 // next nonce per signer public key
}

func newChain(t testing.TB, genesis string) *testChain {
	t.Helper()
	admin := wire.NewSigner(key("admin"), chainID)
	if genesis == "" {
		genesis = fmt.Sprintf(`{"admins": [%q], "rules_version": %d}`, hex.EncodeToString(admin.PublicKey()), core.MaxRulesVersion)
	}
	params, topics, err := core.ParseGenesis(chainID, []byte(genesis))
	if err != nil {
		t.Fatal(err)
	}
	c := &testChain{t: t, store: newMemStore(), time: 1_700_000_000_000_000_000, admin: admin, nonces: map[string]uint64{}}
	c.store.apply(core.InitChain(params, topics))
	return c
}

// block executes and commits a block of txs, returning their results.
func (c *testChain) block(txs ...[]byte) []core.Result {
	c.t.Helper()
	return c.step(txs...).Results
}

// step executes a block of txs on c and commits it, returning the outcome.
func (c *testChain) step(txs ...[]byte) core.Outcome {
	c.t.Helper()
	c.time += 1_000_000_000
	out, err := core.Execute(c.store, c.state, core.Block{Height: c.state.Height + 1, TimeUnixNano: c.time, Txs: txs})
	if err != nil {
		c.t.Fatalf("Execute(block %d) = %v", c.state.Height+1, err)
	}
	c.store.apply(out.Changes)
	c.state = out.State
	c.checkKeyTree()
	return out
}

// checkKeyTree fails unless the key tree the chain keeps is the one built
// afresh from its state (under rules version 10 on, once it has one).
func (c *testChain) checkKeyTree() {
	c.t.Helper()
	fresh, stored, err := core.KeyTreeFromScratch(c.store)
	if err != nil {
		c.t.Fatal(err)
	}
	if stored != nil && !bytes.Equal(fresh, stored) {
		c.t.Fatalf("block %d: the key tree's root is %X, one built afresh from the state %X", c.state.Height, stored, fresh)
	}
}

// must executes a block of one tx that must succeed.
func (c *testChain) must(tx []byte) core.Result {
	c.t.Helper()
	r := c.block(tx)[0]
	if !r.OK() {
		c.t.Fatalf("tx rejected: %s: %s", r.Code, r.Log)
	}
	return r
}

func (c *testChain) check(tx []byte) core.Result {
	c.t.Helper()
	r, err := core.Check(c.store, tx)
	if err != nil {
		c.t.Fatal(err)
	}
	return r
}

// nextNonce hands out s's nonces in order.
func (c *testChain) nextNonce(s *wire.Signer) uint64 {
	k := string(s.PublicKey())
	n := c.nonces[k]
	c.nonces[k] = n + 1
	return n
}

func (c *testChain) adminTx(s *wire.Signer, nonce uint64, op proto.Message) []byte {
	c.t.Helper()
	req, err := s.Admin(nonce, op)
	if err != nil {
		c.t.Fatal(err)
	}
	tx, err := wire.AdminTx(req)
	if err != nil {
		c.t.Fatal(err)
	}
	return tx
}

func (c *testChain) createTopic(name string, cfg *byzlogv1.TopicConfig) {
	c.t.Helper()
	c.must(c.adminTx(c.admin, c.nextNonce(c.admin), &byzlogv1.CreateTopic{Name: name, Config: cfg}))
}

func records(values ...string) []*byzlogv1.Record {
	out := make([]*byzlogv1.Record, len(values))
	for i, v := range values {
		out[i] = &byzlogv1.Record{Key: []byte("k" + v), Value: []byte(v), CreateTimeUnixNano: int64(i)}
	}
	return out
}

func batch(t testing.TB, s *wire.Signer, topic string, partition uint32, seq uint64, recs []*byzlogv1.Record) *byzlogv1.SignedBatch {
	t.Helper()
	b, err := s.Batch(topic, partition, seq, byzlogv1.Codec_CODEC_NONE, recs)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func bundle(t testing.TB, batches ...*byzlogv1.SignedBatch) []byte {
	t.Helper()
	tx, err := wire.BundleTx(batches...)
	if err != nil {
		t.Fatal(err)
	}
	return tx
}

// outcome decodes a result's per-batch outcome.
func outcome(t testing.TB, r core.Result) *byzlogv1.TxOutcome {
	t.Helper()
	var o byzlogv1.TxOutcome
	if err := proto.Unmarshal(r.Data, &o); err != nil {
		t.Fatalf("result data is not a TxOutcome: %v", err)
	}
	return &o
}

// query runs a query that must succeed and decodes its value into m.
func (c *testChain) query(path string, req, m proto.Message) {
	c.t.Helper()
	var data []byte
	if req != nil {
		var err error
		if data, err = proto.Marshal(req); err != nil {
			c.t.Fatal(err)
		}
	}
	v, r, err := core.Query(c.store, c.state, path, data)
	if err != nil {
		c.t.Fatal(err)
	}
	if !r.OK() {
		c.t.Fatalf("Query(%s) = %s: %s", path, r.Code, r.Log)
	}
	if err := proto.Unmarshal(v, m); err != nil {
		c.t.Fatalf("Query(%s) value: %v", path, err)
	}
}

// partition returns a partition's state through the topic query.
func (c *testChain) partition(topic string, p uint32) *byzlogv1.PartitionInfo {
	c.t.Helper()
	var info byzlogv1.TopicInfo
	c.query(wire.PathTopic, &byzlogv1.TopicRequest{Name: topic}, &info)
	return info.Partitions[p]
}

// readAll returns every stored record of a partition.
func (c *testChain) readAll(topic string, p uint32) []*byzlogv1.StoredRecord {
	c.t.Helper()
	var out []*byzlogv1.StoredRecord
	part := c.partition(topic, p)
	// A query answers up to its byte budget: page until the end.
	for next := part.LogStartOffset; next < part.NextOffset; {
		var resp byzlogv1.RecordsResponse
		c.query(wire.PathRecords, &byzlogv1.RecordsRequest{Topic: topic, Partition: p, Offset: next}, &resp)
		if resp.ReadTo <= next {
			c.t.Fatalf("records of %s/%d from %d: read to %d, the partition ends at %d", topic, p, next, resp.ReadTo, part.NextOffset)
		}
		next = resp.ReadTo
		for _, b := range resp.Records {
			r := &byzlogv1.StoredRecord{}
			if err := proto.Unmarshal(b, r); err != nil {
				c.t.Fatal(err)
			}
			out = append(out, r)
		}
	}
	return out
}

func values(recs []*byzlogv1.StoredRecord) string {
	var b bytes.Buffer
	for i, r := range recs {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d:%s", r.Offset, r.Value)
	}
	return b.String()
}

func mustMarshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
