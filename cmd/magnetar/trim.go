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
// holds that headroom for as long as it stays idle. A low GOGC keeps the
// headroom small but makes every busy second pay for more cycles (W5's
// creation rate at GOGC 50 against 200: 8,098 against 9,556 created/s,
// medians of three alternating runs, docs/benchmarks.md, fifteenth
// session). So the servers collect at serverGCPercent under load, and an
// idle trimmer returns the headroom once the load stops, as the JVM's G1
// does with G1PeriodicGCInterval (JEP 346): every trimEvery it reads how
// much the process allocated since its last look; when that was at most
// trimQuiet (the process is quiet) and at least trimAfter was allocated
// since its last trim (enough garbage to be worth a collection), it
// collects and hands every free page back to the kernel
// (debug.FreeOSMemory). Trims cost a collection of the live heap each; the
// trimAfter floor bounds them to one per 32 MiB allocated, so a process
// that allocates slowly but steadily trims now and then instead of every
// second.
//
// The trim comes 0.5-1 s after the load stops (the first look that covers
// none of it), plus the collection: at 100,000 topics ~0.3 s, from 3.1 to
// 1.7-1.8 KiB resident per topic.
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
