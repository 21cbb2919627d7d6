package main

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

func TestTrimmerTrimsOnlyWhenQuietAfterAllocating(t *testing.T) {
	var allocated uint64
	trims := 0
	tr := &trimmer{quiet: 1 << 20, after: 32 << 20, idleLooks: 1,
		allocated: func() uint64 { return allocated }, trim: func() { trims++ }}
	step := func(alloc uint64, want bool) {
		t.Helper()
		allocated += alloc
		if got := tr.look(); got != want {
			t.Fatalf("after allocating %d more (%d in all): trimmed %v, want %v", alloc, allocated, got, want)
		}
	}
	step(40<<20, false) // busy: 40 MiB in one look
	step(10<<20, false) // still busy
	step(0, true)       // quiet, with 50 MiB allocated since the start
	step(0, false)      // quiet, but nothing allocated since that trim
	step(512<<10, false)
	step(30<<20, false) // busy again, 30.5 MiB since the trim
	step(1<<20, false)  // quiet enough, but 31.5 MiB since the trim: not worth it
	step(1<<20, true)   // quiet, 32.5 MiB since the trim
	if trims != 2 {
		t.Fatalf("trimmed %d times, want 2", trims)
	}
}

func TestTrimmerDoesNotCountItsOwnCollection(t *testing.T) {
	var allocated uint64
	tr := &trimmer{quiet: 1 << 20, after: 32 << 20, idleLooks: 1, allocated: func() uint64 { return allocated },
		trim: func() { allocated += 2 << 20 }} // the collection allocates (more than quiet)
	allocated = 64 << 20
	tr.look() // busy
	if !tr.look() {
		t.Fatal("quiet after 64 MiB: not trimmed")
	}
	// The 2 MiB the trim allocated must not make this look busy, nor count
	// toward the next trim.
	allocated += 31 << 20
	tr.look() // busy
	if tr.look() {
		t.Fatal("trimmed again after 31 MiB of the program's own allocation")
	}
}

// TestTrimmerWaitsForIdleLooks: a trim needs idleLooks quiet looks in a
// row; a busy look starts the count again (a load that pauses for less
// than trimIdle keeps its memory: its pages would be faulted back in).
func TestTrimmerWaitsForIdleLooks(t *testing.T) {
	var allocated uint64
	trims := 0
	tr := &trimmer{quiet: 1 << 20, after: 32 << 20, idleLooks: 3,
		allocated: func() uint64 { return allocated }, trim: func() { trims++ }}
	for i, s := range []struct {
		alloc uint64
		want  bool
	}{
		{64 << 20, false}, // busy
		{0, false},        // quiet 1
		{0, false},        // quiet 2
		{8 << 20, false},  // busy again: the pause was too short
		{0, false},        // quiet 1
		{512 << 10, false},
		{0, true}, // quiet 3
		{0, false},
	} {
		allocated += s.alloc
		if got := tr.look(); got != s.want {
			t.Fatalf("look %d: trimmed %v, want %v", i, got, s.want)
		}
	}
	if trims != 1 {
		t.Fatalf("trimmed %d times, want 1", trims)
	}
	for idle, want := range map[time.Duration]int{trimIdle: 60, time.Second: 2, 1200 * time.Millisecond: 3, time.Millisecond: 1} {
		if got := newTrimmer(idle).idleLooks; got != want {
			t.Fatalf("newTrimmer(%v) waits %d looks of %v, want %d", idle, got, trimEvery, want)
		}
	}
}

// TestIdleReleaseFlag: the server commands trim after trimIdle unless
// --idle-release-after says otherwise.
func TestIdleReleaseFlag(t *testing.T) {
	for _, cmd := range []*cobra.Command{newBrokerCommand(), newStandaloneCommand()} {
		f := cmd.Flags().Lookup("idle-release-after")
		if f == nil || f.DefValue != trimIdle.String() {
			t.Fatalf("%s --idle-release-after: %+v, want the default %v", cmd.Name(), f, trimIdle)
		}
	}
}

// TestIdleTrimReturnsGarbage runs the trimmer against the runtime: garbage
// the collector has not collected yet (here it is off; in a server, the
// headroom GOGC allows) stays resident until the trimmer, seeing the
// program go quiet, collects it and returns its pages.
func TestIdleTrimReturnsGarbage(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1)) // the garbage stays until the trim
	runtime.GC()
	tr := newTrimmer(trimIdle)
	var keep [][]byte
	for range 64 << 10 { // 64 MiB in 1 KiB objects, a few kept
		b := make([]byte, 1024)
		if len(keep) < 1024 {
			keep = append(keep, b)
		}
	}
	before := heapResident()
	if before < 64<<20 {
		t.Fatalf("%d bytes of heap before the trim: the garbage was collected already", before)
	}
	if tr.look() {
		t.Fatal("trimmed while the program was allocating")
	}
	for i := 1; i < tr.idleLooks; i++ {
		if tr.look() {
			t.Fatalf("trimmed after %d quiet looks of %d", i, tr.idleLooks)
		}
	}
	if !tr.look() {
		t.Fatal("not trimmed once the program was quiet")
	}
	after := heapResident()
	t.Logf("heap held resident: %d MiB before the trim, %d MiB after", before>>20, after>>20)
	if after > before/4 {
		t.Fatalf("the trim left %d of %d bytes of heap resident", after, before)
	}
	runtime.KeepAlive(keep)
}

// heapResident returns the heap bytes the runtime holds and has not
// released to the kernel: objects (garbage not yet collected too), the
// unused part of spans in use, and free spans.
func heapResident() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/unused:bytes"}, {Name: "/memory/classes/heap/free:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64() + s[1].Value.Uint64() + s[2].Value.Uint64()
}
