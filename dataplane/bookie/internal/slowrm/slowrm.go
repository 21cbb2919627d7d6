// Package slowrm deletes large files slowly. Deleting a file frees all its
// extents in one commit of the file system's journal, and on a disk mounted
// with online discard also trims them there; every fdatasync on the disk
// waits for that commit. A 256 MiB file stalled a bookie's journal syncs for
// tens of milliseconds, a 1 GiB entry log for longer.
// Remove shrinks the file a step at a time, at a bounded rate, so each
// commit frees a little, and unlinks what is left.
//
// It needs a file that can be truncated (the OS file system's); on others
// (the in-memory ones of tests) it removes at once.
package slowrm

import (
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Defaults: 8 MiB steps at 128 MiB/s (a 1 GiB log takes 8 s).
const (
	DefaultStep = 8 << 20
	DefaultRate = 128 << 20
)

// Options tune Remove; zero values take the defaults.
type Options struct {
	Step int64 // bytes freed per truncation
	Rate int64 // bytes per second
	// OnStep, if set, is called after each truncation with the new size
	// (for tests).
	OnStep func(size int64)
	// Stop, once closed, ends the pauses: the rest is removed at once
	// (a closing store does not wait out a slow delete).
	Stop <-chan struct{}
}

type truncater interface{ Truncate(size int64) error }

// Remove deletes name from fs, first shrinking it step by step if the file
// system supports truncation. A truncation error falls back to the plain
// removal.
func Remove(fs vfs.FS, name string, o Options) error {
	if o.Step <= 0 {
		o.Step = DefaultStep
	}
	if o.Rate <= 0 {
		o.Rate = DefaultRate
	}
	shrink(fs, name, o)
	return fs.Remove(name)
}

func shrink(fs vfs.FS, name string, o Options) {
	f, err := fs.OpenReadWrite(name, vfs.WriteCategoryUnspecified)
	if err != nil {
		return
	}
	defer f.Close()
	t, ok := f.(truncater)
	if !ok {
		return
	}
	st, err := f.Stat()
	if err != nil {
		return
	}
	pause := time.Duration(float64(o.Step) / float64(o.Rate) * float64(time.Second))
	for size := st.Size(); size > o.Step; {
		size -= o.Step
		if t.Truncate(size) != nil {
			return
		}
		if o.OnStep != nil {
			o.OnStep(size)
		}
		select {
		case <-time.After(pause):
		case <-o.Stop:
			return
		}
	}
}
