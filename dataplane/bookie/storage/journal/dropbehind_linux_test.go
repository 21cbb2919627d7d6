package journal

import (
	"bytes"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"unsafe"

	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"
)

// residentBytes returns how many bytes of the file at path are in the page
// cache (mincore over a read-only mapping).
func residentBytes(t *testing.T, path string) int64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() == 0 {
		return 0
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	vec := make([]byte, (len(m)+pageSize-1)/pageSize)
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatal(errno)
	}
	var n int64
	for _, v := range vec {
		if v&1 != 0 {
			n += pageSize
		}
	}
	return n
}

// writeJournal appends total bytes of 64 KiB records to a journal in dir
// and closes it; it returns the journal's files and the open file
// descriptors of the process before Open and after Close.
func writeJournal(t *testing.T, dir string, window int64, total int) (files []string, fdsBefore, fdsAfter int) {
	t.Helper()
	fdsBefore = openFDs(t)
	j, err := Open(Options{FS: vfs.Default, Dir: dir, MaxFileBytes: 20 << 20, CacheWindow: window}, 0)
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte{0x5a}, 64<<10)
	var wg sync.WaitGroup
	for i := 0; i*len(data) < total; i++ {
		wg.Add(1)
		j.AppendEntry(1, int64(i), int64(i)-1, data, func(err error) {
			if err != nil {
				t.Errorf("append %d: %v", i, err)
			}
			wg.Done()
		})
		if i%64 == 63 { // groups of a few MiB, as under load
			wg.Wait()
		}
	}
	wg.Wait()
	files = j.Files()
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	return files, fdsBefore, openFDs(t)
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestDropBehind: with a CacheWindow the journal leaves only about that
// much of its newest data in the page cache, across file rotations, and
// closes every file it kept open for dropping; without one (the control)
// everything written stays cached, so the measurement can tell them apart.
func TestDropBehind(t *testing.T) {
	var sfs unix.Statfs_t
	base := t.TempDir()
	if err := unix.Statfs(base, &sfs); err != nil {
		t.Fatal(err)
	}
	if sfs.Type == unix.TMPFS_MAGIC {
		t.Skip("the temp dir is on tmpfs, whose pages cannot be dropped")
	}
	const total, window = 70 << 20, 8 << 20
	resident := func(dir string, files []string) int64 {
		var n int64
		for _, name := range files {
			n += residentBytes(t, filepath.Join(dir, name))
		}
		return n
	}

	keep := filepath.Join(base, "keep")
	drop := filepath.Join(base, "drop")
	for _, d := range []string{keep, drop} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files, _, _ := writeJournal(t, keep, -1, total)
	if n := resident(keep, files); n < total*9/10 {
		t.Skipf("without drop-behind only %d of %d bytes stayed cached (memory pressure?): cannot measure", n, total)
	}

	files, before, after := writeJournal(t, drop, window, total)
	if len(files) < 3 {
		t.Fatalf("%d journal files: the test needs rotations", len(files))
	}
	// The window, plus up to one drop chunk not yet due, plus pages
	// partly written at the edges.
	n := resident(drop, files)
	t.Logf("cached after writing %d bytes: %d with a window of %d", total, n, window)
	if n > window+dropChunk+2*pageSize {
		t.Fatalf("%d bytes of the journal cached with a window of %d (%d written)", n, window, total)
	}
	if after != before {
		t.Fatalf("%d open files before the journal, %d after it closed", before, after)
	}
}
