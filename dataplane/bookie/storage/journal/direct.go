package journal

import (
	"errors"
	"unsafe"
)

var errTailMismatch = errors.New("journal: O_DIRECT tail out of step with the file size")

// directBlock is the alignment of O_DIRECT writes: offset, length and
// memory address (4 KiB covers every logical block size in use).
const directBlock = 4096

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

// stageBuf returns j.stage with room for n bytes, allocating a larger one
// aligned to directBlock when it is too small.
func (j *Journal) stageBuf(n int) []byte {
	if cap(j.stage) < n {
		b := make([]byte, n+directBlock)
		off := 0
		if r := int(uintptr(unsafe.Pointer(&b[0])) & (directBlock - 1)); r != 0 {
			off = directBlock - r
		}
		j.stage = b[off : off+n : off+n]
	}
	return j.stage[:n]
}

// DirectIO reports whether the current file is written with O_DIRECT
// (Options.DirectIO, where the file system allows it).
func (j *Journal) DirectIO() bool { return j.directIO.Load() }
