package journal

import "golang.org/x/sys/unix"

const pageSize = 4096

// dropPages asks the kernel to drop the clean cached pages of [off,
// off+n) of the file open as fd.
func dropPages(fd uintptr, off, n int64) {
	if n > 0 {
		_ = unix.Fadvise(int(fd), off, n, unix.FADV_DONTNEED)
	}
}
