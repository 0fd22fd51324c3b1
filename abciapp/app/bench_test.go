package app_test

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	abci "github.com/cometbft/cometbft/abci/types"

	"github.com/byzlog/byzlog/abciapp/core"
	"github.com/byzlog/byzlog/abciapp/internal/workload"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

const benchBatch = 1000 // records per batch, as the target asks

// benchBlocks pre-signs blocks of one bundle each: batches of 1000 records
// of size bytes, as many batches as fit a 1.5 MiB transaction.
type benchBlocks struct {
	g       *workload.Gen
	signers []*wire.Signer
	seq     []uint64
	size    int
	perTx   int
}

func newBenchBlocks(size int) *benchBlocks {
	bb := &benchBlocks{g: workload.New(1, chainID), size: size}
	bb.perTx = max(1, (3<<19)/(benchBatch*(size+20)))
	for i := 0; i < bb.perTx; i++ {
		bb.signers = append(bb.signers, wire.NewSigner(workload.Key(fmt.Sprint("bench-", i)), chainID))
		bb.seq = append(bb.seq, 0)
	}
	return bb
}

func (bb *benchBlocks) next(b *testing.B) []byte {
	var batches []*byzlogv1.SignedBatch
	for i, s := range bb.signers {
		sb, err := s.Batch("bench", uint32(i%4), bb.seq[i], byzlogv1.Codec_CODEC_NONE, bb.g.Records(benchBatch, bb.size))
		if err != nil {
			b.Fatal(err)
		}
		bb.seq[i]++
		batches = append(batches, sb)
	}
	tx, err := wire.BundleTx(batches...)
	if err != nil {
		b.Fatal(err)
	}
	return tx
}

func (bb *benchBlocks) records() int { return bb.perTx * benchBatch }

// BenchmarkFinalizeCommit measures FinalizeBlock + Commit on RocksDB (synced
// writes) per block of one bundle; signing happens outside the timer,
// signature verification inside (see BenchmarkValidateTx for its share).
func BenchmarkFinalizeCommit(b *testing.B) {
	for _, size := range []int{100, 1024} {
		b.Run(fmt.Sprintf("record=%dB", size), func(b *testing.B) {
			a := newChainApp(b, []byte(`{"topics": [{"name": "bench", "partitions": 4}]}`))
			defer a.Close()
			bb := newBenchBlocks(size)
			var ms0, ms1 runtime.MemStats
			var elapsed time.Duration
			var mallocs uint64
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				tx := bb.next(b)
				runtime.ReadMemStats(&ms0)
				start := time.Now()
				b.StartTimer()
				res, err := a.FinalizeBlock(ctx, &abci.RequestFinalizeBlock{Height: int64(i + 1), Time: time.Unix(0, int64(i)), Txs: [][]byte{tx}})
				if err != nil || res.TxResults[0].Code != 0 {
					b.Fatalf("block %d: %v %v", i+1, err, res.TxResults[0].Log)
				}
				if _, err := a.Commit(ctx, &abci.RequestCommit{}); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				elapsed += time.Since(start)
				runtime.ReadMemStats(&ms1)
				mallocs += ms1.Mallocs - ms0.Mallocs
				b.StartTimer()
			}
			recs := float64(b.N * bb.records())
			b.ReportMetric(recs/elapsed.Seconds(), "records/s")
			b.ReportMetric(float64(elapsed.Nanoseconds())/recs, "ns/record")
			b.ReportMetric(float64(mallocs)/recs, "allocs/record")
			b.ReportMetric(recs*float64(size)/elapsed.Seconds()/(1<<20), "MiB/s")
		})
	}
}

// BenchmarkValidateTx is the signature verification (and envelope decode)
// share of FinalizeBlock, per record of the same blocks.
func BenchmarkValidateTx(b *testing.B) {
	for _, size := range []int{100, 1024} {
		b.Run(fmt.Sprintf("record=%dB", size), func(b *testing.B) {
			bb := newBenchBlocks(size)
			tx := bb.next(b)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if r := core.ValidateTx(tx); !r.OK() {
					b.Fatal(r.Log)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*bb.records()), "ns/record")
		})
	}
}

// BenchmarkProcessProposal is what a validator spends checking a proposed
// block of one bundle before voting for it, per record.
func BenchmarkProcessProposal(b *testing.B) {
	for _, size := range []int{100, 1024} {
		b.Run(fmt.Sprintf("record=%dB", size), func(b *testing.B) {
			a := newChainApp(b, []byte(`{"topics": [{"name": "bench", "partitions": 4}]}`))
			defer a.Close()
			bb := newBenchBlocks(size)
			tx := bb.next(b)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				res, err := a.ProcessProposal(ctx, &abci.RequestProcessProposal{Height: 1, Time: time.Unix(0, 1), Txs: [][]byte{tx}})
				if err != nil || res.Status != abci.ResponseProcessProposal_ACCEPT {
					b.Fatalf("%v %v", err, res.Status)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*bb.records()), "ns/record")
		})
	}
}

// BenchmarkValidatorBlock is what a validator spends on each decided block
// it saw proposed: ProcessProposal, FinalizeBlock and Commit (synced), per
// record. Signing happens outside the timer.
func BenchmarkValidatorBlock(b *testing.B) { benchValidator(b, false) }

// BenchmarkValidatorBundle is everything a validator spends on a bundle
// that reached it before its block did, as every bundle of a loaded chain
// does: admission (InsertTx, the gossiped copy), ProcessProposal,
// FinalizeBlock and Commit (synced), per record.
func BenchmarkValidatorBundle(b *testing.B) { benchValidator(b, true) }

func benchValidator(b *testing.B, admit bool) {
	for _, size := range []int{100, 1024} {
		b.Run(fmt.Sprintf("record=%dB", size), func(b *testing.B) {
			a := newChainApp(b, []byte(`{"topics": [{"name": "bench", "partitions": 4}]}`))
			defer a.Close()
			bb := newBenchBlocks(size)
			var elapsed time.Duration
			for i := 0; i < b.N; i++ {
				tx := bb.next(b)
				start := time.Now()
				if admit {
					ins, err := a.InsertTx(ctx, &abci.RequestInsertTx{Tx: tx})
					if err != nil || ins.Code != 0 {
						b.Fatalf("insert %d: %v %v", i, err, ins.GetCode())
					}
				}
				h, at := int64(i+1), time.Unix(0, int64(i))
				pp, err := a.ProcessProposal(ctx, &abci.RequestProcessProposal{Height: h, Time: at, Txs: [][]byte{tx}})
				if err != nil || pp.Status != abci.ResponseProcessProposal_ACCEPT {
					b.Fatalf("block %d: %v %v", h, err, pp.GetStatus())
				}
				res, err := a.FinalizeBlock(ctx, &abci.RequestFinalizeBlock{Height: h, Time: at, Txs: [][]byte{tx}})
				if err != nil || res.TxResults[0].Code != 0 {
					b.Fatalf("block %d: %v %v", h, err, res.TxResults[0].Log)
				}
				if _, err := a.Commit(ctx, &abci.RequestCommit{}); err != nil {
					b.Fatal(err)
				}
				elapsed += time.Since(start)
			}
			b.ReportMetric(float64(elapsed.Nanoseconds())/float64(b.N*bb.records()), "ns/record")
		})
	}
}

// BenchmarkValidatorRefs is BenchmarkValidatorBundle on a chain that
// carries bundles by reference (rules version 10, as localnet starts): the
// bundle is admitted (InsertTx), the block of its reference prepared
// (PrepareProposal), then ProcessProposal (which syncs the bundle into the
// bundle store before the vote), FinalizeBlock and Commit (synced), per
// record. It also reports the bytes the store and the bundle store hold on
// disk at the end, per record: what a record costs at rest.
func BenchmarkValidatorRefs(b *testing.B) {
	for _, size := range []int{100, 1024} {
		b.Run(fmt.Sprintf("record=%dB", size), func(b *testing.B) {
			dir := b.TempDir()
			a := openApp(b, dir)
			defer a.Close()
			genesis := []byte(`{"topics": [{"name": "bench", "partitions": 4}], "rules_version": 10}`)
			if _, err := a.InitChain(ctx, &abci.RequestInitChain{ChainId: chainID, AppStateBytes: genesis}); err != nil {
				b.Fatal(err)
			}
			bb := newBenchBlocks(size)
			var elapsed time.Duration
			for i := 0; i < b.N; i++ {
				tx := bb.next(b)
				h, at := int64(i+1), time.Unix(0, int64(i))
				start := time.Now()
				if ins, err := a.InsertTx(ctx, &abci.RequestInsertTx{Tx: tx}); err != nil || ins.Code != 0 {
					b.Fatalf("insert %d: %v %v", i, err, ins.GetCode())
				}
				prep, err := a.PrepareProposal(ctx, &abci.RequestPrepareProposal{Height: h, Time: at, MaxTxBytes: 3 << 20})
				if err != nil || len(prep.Txs) != 1 || len(prep.Txs[0]) >= len(tx) {
					b.Fatalf("block %d: prepared %d txs (%v), want the bundle's reference", h, len(prep.GetTxs()), err)
				}
				pp, err := a.ProcessProposal(ctx, &abci.RequestProcessProposal{Height: h, Time: at, Txs: prep.Txs})
				if err != nil || pp.Status != abci.ResponseProcessProposal_ACCEPT {
					b.Fatalf("block %d: %v %v", h, err, pp.GetStatus())
				}
				res, err := a.FinalizeBlock(ctx, &abci.RequestFinalizeBlock{Height: h, Time: at, Txs: prep.Txs})
				if err != nil || res.TxResults[0].Code != 0 {
					b.Fatalf("block %d: %v %v", h, err, res.TxResults[0].Log)
				}
				if _, err := a.Commit(ctx, &abci.RequestCommit{}); err != nil {
					b.Fatal(err)
				}
				elapsed += time.Since(start)
			}
			records := float64(b.N * bb.records())
			b.ReportMetric(float64(elapsed.Nanoseconds())/records, "ns/record")
			b.ReportMetric(float64(dirBytes(b, dir)+dirBytes(b, filepath.Clean(dir)+".bundles"))/records, "disk-B/record")
		})
	}
}

// dirBytes is the size of the files under dir.
func dirBytes(b *testing.B, dir string) int64 {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err == nil {
			n += info.Size()
		}
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	return n
}
