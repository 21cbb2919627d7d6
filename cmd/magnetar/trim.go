package main

import (
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Returning memory when a server goes quiet.
//
// Between two cycles the collector lets the heap grow by GOGC percent of
// what the last cycle found live, and the runtime keeps the pages that
// garbage occupied resident: a server that has just created 100,000 topics
// holds the headroom of its last busy second for as long as it stays
// idle, and the scavenger returns it only slowly. The idle trimmer returns
// it once the load stops, as the JVM's G1 does with G1PeriodicGCInterval
// (JEP 346): every trimEvery it reads how much the process allocated since
// its last look; when that was at most trimQuiet (the process is quiet) and
// at least trimAfter was allocated since its last trim (enough garbage to
// be worth a collection), it collects and hands every free page back to
// the kernel (debug.FreeOSMemory). At 100,000 idle topics W5 read 1.4 KiB
// resident per topic with it, 1.7 before it (with a shorter settle;
// docs/benchmarks.md, fifteenth session). Trims cost a collection of the
// live heap each; the trimAfter floor bounds them to one per 32 MiB
// allocated, so a process that allocates slowly but steadily trims now and
// then instead of every half second.
//
// The trim comes 0.5-1 s after the load stops (the first look that covers
// none of it), plus the collection: at 100,000 topics ~0.3 s.
const (
	trimEvery = 500 * time.Millisecond
	trimQuiet = 512 << 10 // bytes allocated in trimEvery, at most, for a quiet process (1 MiB/s)
	trimAfter = 32 << 20  // bytes allocated since the last trim, at least, before the next
)

// trimmer decides when to trim; allocated and trim are the runtime's
// (heapAllocated, debug.FreeOSMemory) outside tests.
type trimmer struct {
	quiet, after uint64
	allocated    func() uint64 // bytes allocated by the process so far
	trim         func()

	last     uint64 // allocated at the previous look
	lastTrim uint64 // allocated when the last trim ended
}

func newTrimmer() *trimmer {
	t := &trimmer{quiet: trimQuiet, after: trimAfter, allocated: heapAllocated, trim: debug.FreeOSMemory}
	t.last = t.allocated()
	return t
}

// look is one look: it trims if the process was quiet since the previous
// look and has allocated enough since the last trim, and reports whether
// it did.
func (t *trimmer) look() bool {
	now := t.allocated()
	quiet := now-t.last <= t.quiet
	t.last = now
	if !quiet || now-t.lastTrim < t.after {
		return false
	}
	t.trim()
	// What the collection itself allocated is not the program's.
	t.last = t.allocated()
	t.lastTrim = t.last
	return true
}

// trimWhenIdle runs the idle trimmer of a server process for as long as
// the process lives.
func trimWhenIdle() {
	t := newTrimmer()
	go func() {
		for range time.Tick(trimEvery) {
			t.look()
		}
	}()
}

// heapAllocated returns the bytes the process has allocated on the heap
// since it started (runtime/metrics; reading it stops nothing).
func heapAllocated() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
