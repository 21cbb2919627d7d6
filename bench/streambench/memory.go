package main

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// The load generator's memory. With its collector paused in every run
// (pauseGC), a run's allocations all come from free heap pages, and a run
// that allocates more than any before it grows the heap into pages the
// process has never written. Between runs the collector ran at GOGC 400:
// its first cycle after a run set a small heap goal, and the scavenger
// then returned the freed heap to the kernel (about 450 MiB within a
// second in a scratch program), so the next run wrote fresh pages again.
// On this machine (a virtual machine) the first write to a page costs
// 7-15 µs, the guest's page fault and the host backing the page (a
// scratch program: 1 GiB written page by page in 4.0 s;
// populated by one madvise in 0.18 s but then cleared in 1.8 s; cleared
// again in 0.045 s). The Pulsar Go client allocates ~6 bytes per byte it
// sends: at W2's ~60-100k msg/s that was 80-150k page faults a run and
// 60% of the generator's CPU profile (first writes in the client's no-op
// compression copy, in newPayload's stamp and in the runtime zeroing new
// spans); the generator used ~1.4 of the two cores, and W2 measured the
// generator rather than the system.
//
// So the generator keeps its pages: prefaultHeap writes the heap the runs
// need once, before the first round, and from the first run on the
// collector stays off between runs as well as in them, each run starting
// and ending with a collection (collectKeepingPages) after which the
// scavenger returns nothing. The memory limit (memoryLimitFor) bounds the
// heap a little above the written pages: a run that allocates more takes
// a collection instead of a page fault per page.

// collectKeepingPages runs a full collection and leaves the collector
// off. The scavenger retains free pages in proportion to the heap goal
// over the last cycle's goal (runtime.gcPaceScavenger); a cycle run at
// GOGC 1 followed by GOGC off (whose goal is the memory limit) makes that
// ratio large, and the free pages stay mapped for the next run.
func collectKeepingPages() {
	debug.SetGCPercent(1)
	runtime.GC()
	debug.SetGCPercent(-1)
}

// memoryLimitFor is the generator's memory limit with prefault bytes of
// heap written: just above them (room for the runtime's own memory inside
// the scavenger's 5% margin), so that a run that has used the written
// pages up is collected and reuses them rather than growing the heap a
// fault at a time. With the limit 1 GiB above 1 or 2 GiB prefaulted,
// 12-second W1 runs collapsed to latencies of seconds once their heap
// passed the written pages; 512 MiB above 2 GiB, one rose to 1.4 s and
// recovered; with 5 GiB written it held.
func memoryLimitFor(prefault int64) int64 {
	if prefault <= 0 {
		return generatorMemoryLimit
	}
	return prefault + 256<<20
}

// limitHeap sets the generator's memory limit unless one is set (main
// sets it; tests that run the harness do not).
func limitHeap() {
	if debug.SetMemoryLimit(-1) == math.MaxInt64 {
		debug.SetMemoryLimit(generatorMemoryLimit)
	}
}

// prefaultChunk is the size of the allocations prefaultHeap writes.
const prefaultChunk = 64 << 20

// madvPopulateWrite is Linux's MADV_POPULATE_WRITE (5.14 and later): it
// maps a range writable in one call instead of a fault per page.
const madvPopulateWrite = 23

// prefaultHeap grows the heap by n bytes, writes every page of it (from
// GOMAXPROCS goroutines) and frees it again, so that the runs after it
// allocate from pages already written. It leaves the collector off
// (collectKeepingPages) and returns the minor page faults it took.
func prefaultHeap(n int64) (faults int64, err error) {
	if n <= 0 {
		return 0, nil
	}
	limitHeap()
	before, err := minorFaults()
	if err != nil {
		return 0, err
	}
	chunks := make([][]byte, 0, n/prefaultChunk+1)
	for left := n; left > 0; left -= prefaultChunk {
		chunks = append(chunks, make([]byte, min(left, prefaultChunk)))
	}
	page := os.Getpagesize()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(len(chunks)); i = next.Add(1) - 1 {
				b := chunks[i]
				// Populating the range first takes the guest's faults
				// in one call (half the cost); the writes then have
				// the host back every page. A kernel without
				// MADV_POPULATE_WRITE refuses the advice: the writes
				// fault instead.
				syscall.Syscall(syscall.SYS_MADVISE, uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)), madvPopulateWrite)
				for j := 0; j < len(b); j += page {
					b[j] = 1
				}
			}
		})
	}
	wg.Wait()
	chunks = nil
	collectKeepingPages()
	after, err := minorFaults()
	if err != nil {
		return 0, err
	}
	return after - before, nil
}

// minorFaults is the process's minor page faults so far.
func minorFaults() (int64, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("streambench: getrusage: %w", err)
	}
	return ru.Minflt, nil
}
