//go:build !race

// The race detector's shadow memory takes page faults of its own when
// freed heap is written again, so these tests count faults only without
// it (Makefile: the no-race line).

package main

import (
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"testing"
	"time"
)

// faults is minorFaults, failing t on an error.
func faults(t *testing.T) int64 {
	t.Helper()
	n, err := minorFaults()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// heapReleased is the heap memory the runtime has returned to the kernel.
func heapReleased() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// freshProcessEnv marks a test binary started by inFreshProcess.
const freshProcessEnv = "STREAMBENCH_FRESH_PROCESS_TEST"

// inFreshProcess runs the calling test alone in a new test process and
// reports whether this is that process: the heap a test inherits from the
// tests before it (released pages at lower addresses, which the allocator
// prefers) would decide where its allocations land, and the generator
// prefaults a fresh heap.
func inFreshProcess(t *testing.T) bool {
	t.Helper()
	if os.Getenv(freshProcessEnv) == t.Name() {
		return true
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), freshProcessEnv+"="+t.Name())
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("%s in a fresh process: %v\n%s", t.Name(), err, out)
	}
	return false
}

// freshHeap runs the calling test in a fresh process (inFreshProcess) and,
// there, with the collector restored when it ends and no free pages left
// mapped.
func freshHeap(t *testing.T) bool {
	t.Helper()
	if !inFreshProcess(t) {
		return false
	}
	restoreCollector(t)
	debug.FreeOSMemory()
	return true
}

// faultsWriting allocates n bytes, writes every page and returns the page
// faults that took.
func faultsWriting(t *testing.T, n int) int64 {
	t.Helper()
	f0 := faults(t)
	b := make([]byte, n)
	write(b)
	runtime.KeepAlive(b)
	return faults(t) - f0
}

// restoreCollector puts the collector and the memory limit back as they
// were when the test ends: the functions under test leave them off.
func restoreCollector(t *testing.T) {
	gc, limit := debug.SetGCPercent(-1), debug.SetMemoryLimit(-1)
	debug.SetGCPercent(gc)
	t.Cleanup(func() {
		debug.SetGCPercent(gc)
		debug.SetMemoryLimit(limit)
	})
}

// write writes one byte in every page of b.
func write(b []byte) {
	for i := 0; i < len(b); i += os.Getpagesize() {
		b[i] = 1
	}
}

var sink []byte

// TestCollectKeepingPages: after collectKeepingPages the freed heap stays
// mapped while the generator goes on allocating between runs, so the
// next run's allocations of that size take no page faults. Collected at
// the generator's old GOGC (400), the churn below runs a collection whose
// heap goal is small, the scavenger returns the freed heap to the kernel,
// and this test fails.
func TestCollectKeepingPages(t *testing.T) {
	if !freshHeap(t) {
		return
	}
	const size = 128 << 20
	garbage := make([]byte, size)
	write(garbage)
	garbage = nil
	collectKeepingPages()
	released0 := heapReleased()
	// Between runs the harness starts servers and clients: allocation
	// that, with the collector on, runs collections.
	for range 64 {
		sink = make([]byte, 1<<20)
		write(sink)
	}
	sink = nil
	// Kept, nothing is released (0 in every run here); collected at
	// GOGC 400, 38-50 MiB within two seconds.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) && heapReleased()-released0 < size/16 {
		time.Sleep(50 * time.Millisecond)
	}
	if r := heapReleased() - released0; r >= size/16 {
		t.Fatalf("the scavenger released %d MiB of the %d MiB freed", r>>20, size>>20)
	}
	if f, pages := faultsWriting(t, size/2), int64(size/2/os.Getpagesize()); f > pages/10 {
		t.Errorf("%d page faults writing %d pages of reused heap, want under a tenth", f, pages)
	}
}

// TestPrefaultHeap: the heap prefaultHeap wrote is allocated again without
// page faults; without it the same allocation faults on nearly every page.
func TestPrefaultHeap(t *testing.T) {
	if !freshHeap(t) {
		return
	}
	const size = 64 << 20
	took, err := prefaultHeap(size)
	if err != nil {
		t.Fatal(err)
	}
	pages := int64(size / os.Getpagesize())
	if took < pages/2 {
		t.Errorf("prefault took %d faults for %d pages: it did not map fresh pages", took, pages)
	}
	if f := faultsWriting(t, size/2); f > pages/2/10 {
		t.Errorf("%d page faults writing %d pages after the prefault, want under a tenth", f, pages/2)
	}
	if n, err := prefaultHeap(0); n != 0 || err != nil {
		t.Errorf("prefaultHeap(0) = %d, %v", n, err)
	}
}
