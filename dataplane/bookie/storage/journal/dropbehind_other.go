//go:build !linux

package journal

const pageSize = 4096

// dropPages does nothing where posix_fadvise is not used.
func dropPages(fd uintptr, off, n int64) {}
