package logsink

import "sync/atomic"

var sink atomic.Pointer[func(line []byte)]

// Set installs f as the sink; nil removes it.
func Set(f func(line []byte)) {
	if f == nil {
		sink.Store(nil)
		return
	}
	sink.Store(&f)
}

// Write hands line (without its trailing newline) to the sink, if any. The
// sink must copy line if it keeps it.
func Write(line []byte) {
	if f := sink.Load(); f != nil {
		(*f)(line)
	}
}
