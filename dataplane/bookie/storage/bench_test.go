package storage_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/magnetar-dev/magnetar/dataplane/bookie/storage"
)

// BenchmarkAddEntry measures fsync'd add throughput on a real directory with
// a window of concurrent in-flight adds (as a bookie serving many writers
// sees), so group commit batches.
func BenchmarkAddEntry(b *testing.B) {
	for _, size := range []int{1 << 10, 64 << 10} {
		for _, inflight := range []int{1, 256} {
			b.Run(fmt.Sprintf("size=%dKiB/inflight=%d", size>>10, inflight), func(b *testing.B) {
				s, err := storage.Open(storage.Config{
					Dir:                 b.TempDir(),
					FS:                  vfs.Default,
					JournalMaxGroupWait: -1,
					GCInterval:          -1,
					DiskCheckInterval:   -1,
				})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
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
				for i := range b.N {
					sem <- struct{}{}
					wg.Add(1)
					s.AddEntry(int64(i%16), int64(i/16), int64(i/16)-1, data, false, done)
				}
				wg.Wait()
				b.StopTimer()
				if failed != nil {
					b.Fatal(failed)
				}
			})
		}
	}
}
