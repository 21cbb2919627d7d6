// Package sharedfile shares one open read handle of a file among
// concurrent readers: the file is closed when its owner has dropped it and
// the last reader is done, so dropping it never cuts a read short.
package sharedfile

import (
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// File is an open file with a count of its holders.
type File struct {
	vfs.File
	refs atomic.Int32
}

// New returns f held twice: by its owner (typically a map of open files)
// and by the caller, who reads and then calls Release.
func New(f vfs.File) *File {
	sf := &File{File: f}
	sf.refs.Store(2)
	return sf
}

// Acquire adds a holder; the caller must call Release.
func (f *File) Acquire() { f.refs.Add(1) }

// Release drops a holder and closes the file when none is left.
func (f *File) Release() {
	if f.refs.Add(-1) == 0 {
		f.File.Close()
	}
}
