package chaos

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/gateway/client"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// The compaction workload: one SDK producer writes versions of a few keys
// (and now and then a tombstone) to a compacted topic while the nemesis
// acts; at the end every validator's compacted log is read back with how
// far compaction passed each partition, and the checker (checkCompaction)
// looks for what compaction must never do: remove a key's latest
// acknowledged record, or leave an older record of a key it has passed a
// newer one of.

// Compaction anomalies.
const (
	// CompactionLost: a key's latest acknowledged record is not in a
	// validator's log, and nothing of the key came after it.
	CompactionLost = "compaction-lost"
	// CompactionStale: below the clean offset, a validator's log holds
	// two records of one key: compaction passed the newer and kept the
	// older.
	CompactionStale = "compaction-stale"
)

// tableTopic is the compacted topic of a phase's workload.
func tableTopic(w Workload) string { return w.Topic + "-table" }

// tableRate is the compaction workload's records per second.
const tableRate = 40

// KeyedSend is a send of the compaction workload: a record of Key, a
// tombstone (no value) when Tombstone is set.
type KeyedSend struct {
	Send
	Key       string
	Tombstone bool
}

// TableRead is one record a validator holds of the compacted topic.
type TableRead struct {
	Node      string
	Partition uint32
	Offset    uint64
	Key       string
	Value     string
	Tombstone bool
}

// produceTable writes versions of w.CompactKeys keys to the workload's
// compacted topic at tableRate until ctx ends, every seventh a tombstone.
func produceTable(ctx context.Context, c *Cluster, w Workload, phase string, rec *recorder, settle time.Duration) error {
	trust, err := c.Trust()
	if err != nil {
		return err
	}
	transport, err := c.Transport()
	if err != nil {
		return err
	}
	p, err := client.NewProducer(ctx, client.WithTrust(trust), client.WithGateways(c.producerGateway(0)), client.WithRequestTimeout(5*time.Second), transport)
	if err != nil {
		return fmt.Errorf("table producer: %w", err)
	}
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / tableRate)
	defer tick.Stop()
	for i := 0; ctx.Err() == nil; i++ {
		select {
		case <-tick.C:
		case <-ctx.Done():
			continue
		}
		s := KeyedSend{Key: fmt.Sprintf("k%d", i%w.CompactKeys), Tombstone: i%7 == 6}
		s.Value = fmt.Sprintf("%s-t%d", phase, i)
		r := &client.Record{Topic: tableTopic(w), Key: []byte(s.Key), Value: []byte(s.Value)}
		if s.Tombstone {
			r.Value = nil
		}
		f := p.Produce(context.Background(), r)
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			res, err := f.Wait(context.Background())
			s.Send = outcome(-1, i, s.Value, res.Partition, res.Offset, err)
			rec.mu.Lock()
			rec.h.TableSends = append(rec.h.TableSends, s)
			rec.mu.Unlock()
		}(i)
	}
	fctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	_ = p.Flush(fctx)
	cctx, ccancel := context.WithTimeout(context.Background(), time.Second)
	defer ccancel()
	_ = p.Close(cctx)
	wg.Wait()
	return nil
}

// readBackTable records every validator's compacted log and clean offsets.
func readBackTable(ctx context.Context, c *Cluster, w Workload, rec *recorder, row *Row) {
	tbl := tableTopic(w)
	rec.mu.Lock()
	rec.h.TableClean = map[string]map[uint32]uint64{}
	rec.mu.Unlock()
	for _, i := range c.allNodes() {
		node := fmt.Sprintf("node%d", i)
		clean, err := cleanOffsets(ctx, c, i, tbl)
		if err != nil {
			row.Errors = append(row.Errors, err.Error())
			continue
		}
		var reads []TableRead
		for p := range uint32(len(clean)) {
			recs, err := readBack(ctx, c.Net, i, tbl, p)
			if err != nil {
				row.Errors = append(row.Errors, err.Error())
				continue
			}
			for _, r := range recs {
				reads = append(reads, TableRead{Node: node, Partition: p, Offset: r.Offset, Key: string(r.Key), Value: string(r.Value), Tombstone: r.Value == nil})
			}
		}
		rec.mu.Lock()
		rec.h.TableReads = append(rec.h.TableReads, reads...)
		rec.h.TableClean[node] = clean
		rec.mu.Unlock()
	}
}

// cleanOffsets is each partition's clean offset of topic on node i.
func cleanOffsets(ctx context.Context, c *Cluster, i int, topic string) (map[uint32]uint64, error) {
	rpc, err := c.Net.Client(i)
	if err != nil {
		return nil, err
	}
	req, err := proto.Marshal(&byzlogv1.TopicRequest{Name: topic})
	if err != nil {
		return nil, err
	}
	q, err := rpc.ABCIQuery(ctx, wire.PathTopic, req)
	if err != nil {
		return nil, fmt.Errorf("node%d topic %s: %w", i, topic, err)
	}
	var info byzlogv1.TopicInfo
	if q.Response.Code != 0 {
		return nil, fmt.Errorf("node%d topic %s: %s", i, topic, q.Response.Log)
	}
	if err := proto.Unmarshal(q.Response.Value, &info); err != nil {
		return nil, fmt.Errorf("node%d topic %s: %w", i, topic, err)
	}
	out := map[uint32]uint64{}
	for _, p := range info.Partitions {
		out[p.Partition] = p.CleanOffset
	}
	return out, nil
}

// checkCompaction finds the compaction anomalies in h, and a validator
// whose compacted log differs from the first one's (replica divergence).
func checkCompaction(r *Report, h History) {
	if len(h.TableSends) == 0 {
		return
	}
	latest := map[string]KeyedSend{} // key -> its acknowledged send at the highest offset
	for _, s := range h.TableSends {
		if s.Outcome != Acked {
			continue
		}
		if l, ok := latest[s.Key]; !ok || s.Offset > l.Offset {
			latest[s.Key] = s
		}
	}
	byNode := map[string][]TableRead{}
	for _, rd := range h.TableReads {
		byNode[rd.Node] = append(byNode[rd.Node], rd)
	}
	nodes := slices.Sorted(maps.Keys(byNode))
	keys := slices.Sorted(maps.Keys(latest))
	r.Of[CompactionLost] = len(keys) * len(nodes)
	for _, node := range nodes {
		last := map[string]TableRead{} // key -> its record at the highest offset
		seen := map[string]TableRead{} // key -> a record below the clean offset
		for _, rd := range byNode[node] {
			if l, ok := last[rd.Key]; !ok || rd.Offset > l.Offset {
				last[rd.Key] = rd
			}
			if rd.Offset < h.TableClean[node][rd.Partition] {
				r.Of[CompactionStale]++
				if prev, ok := seen[rd.Key]; ok {
					r.add(CompactionStale, "%s keeps %q at %d@%d and %q at %d@%d, both below clean offset %d", node, prev.Value, prev.Partition, prev.Offset, rd.Value, rd.Partition, rd.Offset, h.TableClean[node][rd.Partition])
				}
				seen[rd.Key] = rd
			}
		}
		for _, k := range keys {
			a, got := latest[k], last[k]
			switch {
			case got.Node == "" || got.Offset < a.Offset:
				r.add(CompactionLost, "%s holds nothing of key %s at or after its latest acknowledged record %q at %d@%d", node, k, a.Value, a.Partition, a.Offset)
			case got.Offset == a.Offset && (got.Value != a.Value && !(a.Tombstone && got.Tombstone)):
				r.add(CompactionLost, "%s holds %q at %d@%d, acknowledged as key %s's %q", node, got.Value, got.Partition, got.Offset, k, a.Value)
			}
		}
	}
	// Every validator holds the same compacted log.
	for _, node := range nodes[min(1, len(nodes)):] {
		r.Of[ReplicaDivergence]++
		if !slices.Equal(stripNode(byNode[node]), stripNode(byNode[nodes[0]])) {
			r.add(ReplicaDivergence, "%s's compacted log (%d records) differs from %s's (%d)", node, len(byNode[node]), nodes[0], len(byNode[nodes[0]]))
		}
	}
}

func stripNode(rs []TableRead) []TableRead {
	out := make([]TableRead, len(rs))
	for i, rd := range rs {
		rd.Node = ""
		out[i] = rd
	}
	return out
}
