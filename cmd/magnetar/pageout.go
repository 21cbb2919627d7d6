package main

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// releaseStartupPages runs pageOutExecutable in the background: the
// server is ready and serving meanwhile.
func releaseStartupPages() { go pageOutExecutable() }

// pageOutExecutable asks the kernel to reclaim the pages of this
// executable's code and read-only data that are mapped into the process
// (madvise MADV_PAGEOUT), and returns how many bytes of mappings it
// advised.
//
// Why: one binary carries the data plane, the control plane and the CLI,
// and the Go runtime runs every linked package's init at start. Each init
// faults in its piece of code and read-only data, and the kernel maps up to
// 64 KiB around every fault (fault-around), so a server that has just
// started holds most of the executable resident (56 of 88 MB) though it
// runs a fraction of it afterwards. Released once the server is ready, the
// pages it keeps using fault back in (from the page cache, or from disk if
// it was reclaimed) and the rest stay out: an idle standalone goes from
// 65 to about 30 MB resident (docs/benchmarks.md, "Idle standalone").
// Clean file pages were
// reclaimable anyway; this only stops them counting against the process.
// Written and anonymous pages are not touched, nor pages other processes
// map too. The kernel skips dirty pages, and a binary written a moment ago
// (`go run`, a fresh build) is dirty in the page cache until written back,
// so the file is synced first (a no-op for an installed binary). Errors
// (an old kernel without MADV_PAGEOUT, no /proc) leave everything as it
// was.
func pageOutExecutable() int64 {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0
	}
	if f, err := os.Open("/proc/self/exe"); err == nil {
		f.Sync()
		f.Close()
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return 0
	}
	var advised int64
	for _, m := range exeMappings(maps, exe) {
		_, _, errno := unix.Syscall(unix.SYS_MADVISE, m.start, m.end-m.start, unix.MADV_PAGEOUT)
		if errno == 0 {
			advised += int64(m.end - m.start)
		}
	}
	return advised
}

type mapping struct{ start, end uintptr }

// exeMappings returns the read-only mappings of file exe in the text of
// /proc/self/maps: lines of "start-end perms offset dev inode path".
func exeMappings(maps []byte, exe string) []mapping {
	var out []mapping
	sc := bufio.NewScanner(bytes.NewReader(maps))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 || strings.Join(f[5:], " ") != exe || strings.Contains(f[1], "w") {
			continue
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			continue
		}
		out = append(out, mapping{uintptr(start), uintptr(end)})
	}
	return out
}
