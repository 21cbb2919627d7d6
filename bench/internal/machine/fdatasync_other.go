//go:build !linux

package machine

import "os"

// fdatasync falls back to fsync where fdatasync is not available.
func Fdatasync(f *os.File) error { return f.Sync() }

// Quiesce does nothing where sync(2) is not called.
func Quiesce() {}
