package journal

import (
	"errors"
	"unsafe"
)

var errTailMismatch = errors.New("journal: O_DIRECT tail out of step with the file size")

// directBlock is the alignment of O_DIRECT writes: offset, length and
// memory address (4 KiB covers every logical block size in use).
const directBlock = 4096

// directMinBytes is the smallest group written with O_DIRECT; smaller
// ones go through the page cache (writeBuffered). An O_DIRECT write costs
// more per call than a buffered one and saves the copy only: on the
// machine measured (write+fdatasync loops), O_DIRECT cost 0.19 ns of CPU
// per byte against 1.5-2 buffered at 3 MiB per write, the same (0.55) at
// 512 KiB, and 3.97 against 2.6-3.1 at 64 KiB.
const directMinBytes = 512 << 10

// writeDirect writes the group buf at the journal's end through j.dio:
// from the start of the block holding the end, that block's bytes already
// written (j.tail) then buf, zero-filled to a whole block (see
// Options.DirectIO), and keeps the new last partial block in j.tail.
func (j *Journal) writeDirect(buf []byte) error {
	start := j.fileSize &^ (directBlock - 1)
	t := int(j.fileSize - start)
	if t != len(j.tail) {
		return errTailMismatch
	}
	n := t + len(buf)
	total := (n + directBlock - 1) &^ (directBlock - 1)
	st := j.stageBuf(total)
	copy(st, j.tail)
	copy(st[t:], buf)
	clear(st[n:total])
	if _, err := j.dio.WriteAt(st[:total], start); err != nil {
		return err
	}
	keep := n % directBlock
	j.tail = append(j.tail[:0], st[n-keep:n]...)
	return nil
}

// writeBuffered writes the group buf at the journal's end through the page
// cache (f, at its offset: f's own file position is not used once O_DIRECT
// writes were made) and keeps j.tail the bytes of the last partial block.
func (j *Journal) writeBuffered(buf []byte) error {
	if _, err := j.f.WriteAt(buf, j.fileSize); err != nil {
		return err
	}
	keep := int((j.fileSize + int64(len(buf))) % directBlock)
	if keep <= len(buf) {
		j.tail = append(j.tail[:0], buf[len(buf)-keep:]...)
	} else { // the group ends in the block the tail began
		j.tail = append(j.tail, buf...)
	}
	return nil
}

// stageBuf returns j.stage with room for n bytes, allocating a larger one
// aligned to directBlock when it is too small: at least twice the old, so
// that groups growing under load do not each allocate, and touch, a new
// stage (see reserveLocked).
func (j *Journal) stageBuf(n int) []byte {
	if cap(j.stage) < n {
		c := max(n, 2*cap(j.stage))
		b := make([]byte, c+directBlock)
		off := 0
		if r := int(uintptr(unsafe.Pointer(&b[0])) & (directBlock - 1)); r != 0 {
			off = directBlock - r
		}
		j.stage = b[off : off+c : off+c]
	}
	return j.stage[:n]
}

// DirectIOError returns why the current file is written through the page
// cache although Options.DirectIO asked for O_DIRECT (the file system
// refused it, or it is not the OS's); nil when it is written with O_DIRECT
// or DirectIO was not asked for (or NoSync is set).
func (j *Journal) DirectIOError() error {
	if p := j.dioRefused.Load(); p != nil {
		return *p
	}
	return nil
}
