package storage_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/magnetar-dev/magnetar/dataplane/bookie/storage"
	"github.com/magnetar-dev/magnetar/internal/procstatus"
)

// BenchmarkAddEntry measures fsync'd add throughput on a real directory with
// a window of concurrent in-flight adds (as a bookie serving many writers
// sees), so group commit batches, with the journal written with O_DIRECT
// (the default) and through the page cache. cpu-ns/B is the process's CPU
// time (user and system, all threads) per byte added.
func BenchmarkAddEntry(b *testing.B) {
	for _, size := range []int{1 << 10, 64 << 10} {
		for _, inflight := range []int{1, 256} {
			for _, buffered := range []bool{false, true} {
				journal := "direct"
				if buffered {
					journal = "buffered"
				}
				b.Run(fmt.Sprintf("size=%dKiB/inflight=%d/journal=%s", size>>10, inflight, journal), func(b *testing.B) {
					benchAddEntry(b, size, inflight, buffered)
				})
			}
		}
	}
}

// benchStorage opens a storage on a temporary directory of the real file
// system, GC and disk checks off, closed when b ends.
func benchStorage(b *testing.B, cfg storage.Config) *storage.DiskStorage {
	cfg.Dir, cfg.FS = b.TempDir(), vfs.Default
	cfg.GCInterval, cfg.DiskCheckInterval = -1, -1
	s := mustOpen(b, cfg)
	b.Cleanup(func() { s.Close() })
	return s
}

func processCPU(b *testing.B) time.Duration {
	d, err := procstatus.CPUTime()
	if err != nil {
		b.Fatal(err)
	}
	return d
}

func benchAddEntry(b *testing.B, size, inflight int, buffered bool) {
	s := benchStorage(b, storage.Config{JournalMaxGroupWait: -1, JournalBufferedWrites: buffered})
	data := make([]byte, size)
	sem := make(chan struct{}, inflight)
	var wg sync.WaitGroup
	var failed error
	var mu sync.Mutex
	done := func(err error) {
		if err != nil {
			mu.Lock()
			failed = err
			mu.Unlock()
		}
		<-sem
		wg.Done()
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU(b)
	for i := range b.N {
		sem <- struct{}{}
		wg.Add(1)
		s.AddEntry(int64(i%16), int64(i/16), int64(i/16)-1, data, false, done)
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N*size), "cpu-ns/B")
	if failed != nil {
		b.Fatal(failed)
	}
}
