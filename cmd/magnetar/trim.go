package main

import (
	"runtime/debug"
	"runtime/metrics"
	"time"

	"github.com/spf13/pflag"
)

// Returning memory when a server goes quiet.
//
// Between two cycles the collector lets the heap grow by GOGC percent of
// what the last cycle found live, and the runtime keeps the pages that
// garbage occupied resident: a server that has just created 100,000 topics
// holds the headroom of its last busy second for as long as it stays
// idle, and the scavenger returns it only slowly. The idle trimmer returns
// it once the load has stopped for a while, as the JVM's G1 does with
// G1PeriodicGCInterval (JEP 346): every trimEvery it reads how much the
// process allocated since its last look; when every look for trimIdle was
// at most trimQuiet (the process is idle) and at least trimAfter was
// allocated since its last trim (enough garbage to be worth a collection),
// it collects and hands every free page back to the kernel
// (debug.FreeOSMemory). Trims cost a collection of the live heap each; the
// trimAfter floor bounds them to one per 32 MiB allocated.
//
// The pages handed back are faulted in again when the load returns, and
// touching memory for the first time is dear on a virtual machine (15 µs
// per 4 KiB page where it was measured): with a trim 0.5 s after the load
// stopped, bursts of 50,000 msg/s for 1 s every 4 s each
// faulted ~10,700 pages back in and read publish p99 16-51 ms, against
// 8-15 ms and next to no faults without trims. trimIdle, the default of --idle-release-after,
// keeps the memory of a server whose load pauses for seconds and still
// returns it from one left idle.
const (
	trimEvery = 500 * time.Millisecond
	trimIdle  = 30 * time.Second
	trimQuiet = 512 << 10 // bytes allocated in trimEvery, at most, for a quiet process (1 MiB/s)
	trimAfter = 32 << 20  // bytes allocated since the last trim, at least, before the next
)

// trimmer decides when to trim; allocated and trim are the runtime's
// (heapAllocated, debug.FreeOSMemory) outside tests.
type trimmer struct {
	quiet, after uint64
	idleLooks    int           // consecutive quiet looks before a trim
	allocated    func() uint64 // bytes allocated by the process so far
	trim         func()

	last     uint64 // allocated at the previous look
	lastTrim uint64 // allocated when the last trim ended
	quietFor int    // consecutive quiet looks so far
}

// newTrimmer returns the trimmer of a process that trims once idle for
// idle (rounded up to whole looks).
func newTrimmer(idle time.Duration) *trimmer {
	t := &trimmer{quiet: trimQuiet, after: trimAfter, idleLooks: max(1, int((idle+trimEvery-1)/trimEvery)),
		allocated: heapAllocated, trim: debug.FreeOSMemory}
	t.last = t.allocated()
	return t
}

// look is one look: it trims if the process was quiet for the last
// idleLooks looks and has allocated enough since the last trim, and
// reports whether it did.
func (t *trimmer) look() bool {
	now := t.allocated()
	quiet := now-t.last <= t.quiet
	t.last = now
	if !quiet {
		t.quietFor = 0
		return false
	}
	t.quietFor++
	if t.quietFor < t.idleLooks || now-t.lastTrim < t.after {
		return false
	}
	t.trim()
	// What the collection itself allocated is not the program's.
	t.last = t.allocated()
	t.lastTrim = t.last
	return true
}

// idleReleaseFlag adds --idle-release-after to a server command's flags.
func idleReleaseFlag(f *pflag.FlagSet, idle *time.Duration) {
	f.DurationVar(idle, "idle-release-after", trimIdle, "once the process has allocated next to nothing for this long, collect and hand its free heap pages back to the kernel (0: never; the pages are faulted in again when load returns)")
}

// trimWhenIdle runs the idle trimmer of a server process, trimming once
// idle for idle (never when idle is 0 or less), for as long as the process
// lives.
func trimWhenIdle(idle time.Duration) {
	if idle <= 0 {
		return
	}
	t := newTrimmer(idle)
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
