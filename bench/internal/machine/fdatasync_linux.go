package machine

import (
	"os"
	"syscall"
)

// Fdatasync flushes f's data (and the size, for an append) to stable
// storage, as the journal's SyncData does.
func Fdatasync(f *os.File) error {
	sc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := sc.Control(func(fd uintptr) { serr = syscall.Fdatasync(int(fd)) }); err != nil {
		return err
	}
	return serr
}

// Quiesce writes every dirty page of the machine back to disk and waits
// for it (sync(2)), so that a measurement does not start on a disk still
// busy with what the previous one left in the page cache.
func Quiesce() { syscall.Sync() }
