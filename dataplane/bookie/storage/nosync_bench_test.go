package storage_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/bookie/storage"
)

// BenchmarkAddEntryOpenLoop offers 1 KiB adds at a fixed rate (50,000/s, an
// open-loop generator issuing what is due every millisecond) on a real
// directory, with the journal fsync on and off, and reports the add
// latency percentiles measured from each add's scheduled time (so a stalled
// journal is charged to every add queued behind it). Run it long enough to
// rotate journal files (the default MaxFileBytes is 256 MiB, about 5 s at
// this rate), e.g. -benchtime=750000x (15 s per case). Each case runs with
// entries indexed in place in the journal (the default) and copied to the
// entry logs (CopyToEntryLogs).
func BenchmarkAddEntryOpenLoop(b *testing.B) {
	const (
		size = 1 << 10
		rate = 50_000
	)
	for _, c := range []struct{ noSync, copy bool }{{false, false}, {false, true}, {true, false}, {true, true}} {
		noSync := c.noSync
		b.Run(fmt.Sprintf("nosync=%v/copy=%v", c.noSync, c.copy), func(b *testing.B) {
			s := benchStorage(b, storage.Config{JournalNoSync: noSync, CopyToEntryLogs: c.copy})
			data := make([]byte, size)
			lat := make([]time.Duration, b.N)
			var wg sync.WaitGroup
			var mu sync.Mutex
			var failed error
			b.SetBytes(size)
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; {
				due := min(b.N, int(time.Since(start).Seconds()*rate)+1)
				for ; i < due; i++ {
					idx := i
					sched := start.Add(time.Duration(i) * time.Second / rate)
					wg.Add(1)
					s.AddEntry(int64(idx%16), int64(idx/16), int64(idx/16)-1, data, false, func(err error) {
						if err != nil {
							mu.Lock()
							failed = err
							mu.Unlock()
						}
						lat[idx] = time.Since(sched)
						wg.Done()
					})
				}
				time.Sleep(time.Millisecond)
			}
			wg.Wait()
			b.StopTimer()
			if failed != nil {
				b.Fatal(failed)
			}
			slices.Sort(lat)
			pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
			b.ReportMetric(pct(0.50), "p50-ms")
			b.ReportMetric(pct(0.99), "p99-ms")
			b.ReportMetric(pct(0.999), "p99.9-ms")
			b.ReportMetric(pct(1), "max-ms")
		})
	}
}
