package journal

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"

	"github.com/magnetar-dev/magnetar/dataplane/bookie/internal/sharedfile"
)

// ErrNoSuchFile is returned when a read names a journal file that was
// released (or never existed): the caller's location is stale.
var ErrNoSuchFile = errors.New("journal: no such file")

// Entries can stay where the journal wrote them: the storage indexes an
// entry record by its file and offset (Locate) instead of copying it, reads
// it back in place (ReadRun, ParseEntry), and releases a file once no index
// entry points into it (ReleaseFile), or after copying the few that do
// (ScanFile). The files involved are never recycled while they are live,
// because only released files are.

// FileInfo describes a journal file that is no longer written to.
type FileInfo struct {
	ID    uint64
	Start uint64 // logical position of its first record
	// Len is the bytes of records the file holds: up to the next file's
	// start (a torn tail ends the file's records earlier).
	Len uint64
}

// End returns the logical position just past the file's records.
func (fi FileInfo) End() uint64 { return fi.Start + fi.Len }

// Sealed returns the journal files before the current one, oldest first.
// A file whose header was lost in a crash (it held nothing durable) has
// Len 0 and cannot be read; ReleaseFile releases it.
func (j *Journal) Sealed() []FileInfo {
	j.filesMu.Lock()
	defer j.filesMu.Unlock()
	return j.sealedLocked()
}

func (j *Journal) sealedLocked() []FileInfo {
	var out []FileInfo
	for i := 0; i+1 < len(j.files); i++ {
		fm := j.files[i]
		if !fm.valid {
			out = append(out, FileInfo{ID: fm.id})
			continue
		}
		var n uint64
		for k := i + 1; k < len(j.files); k++ {
			if j.files[k].valid {
				n = j.files[k].start - fm.start
				break
			}
		}
		out = append(out, FileInfo{ID: fm.id, Start: fm.start, Len: n})
	}
	return out
}

// Locate returns the file and the offset in it of the record at logical
// position pos, which must lie in a file the journal tracks (a record that
// was appended, or replayed).
func (j *Journal) Locate(pos uint64) (id uint64, off int64, ok bool) {
	j.filesMu.Lock()
	defer j.filesMu.Unlock()
	for i := len(j.files) - 1; i >= 0; i-- {
		if fm := j.files[i]; fm.valid && fm.start <= pos {
			return fm.id, fileHeaderLen + int64(pos-fm.start), true
		}
	}
	return 0, 0, false
}

// fileLocked returns the meta of tracked file id.
func (j *Journal) fileLocked(id uint64) (fileMeta, bool) {
	i := sort.Search(len(j.files), func(i int) bool { return j.files[i].id >= id })
	if i < len(j.files) && j.files[i].id == id && j.files[i].valid {
		return j.files[i], true
	}
	return fileMeta{}, false
}

// acquire returns an open reader of tracked file id and its records' salt.
func (j *Journal) acquire(id uint64) (*sharedfile.File, uint32, error) {
	j.filesMu.Lock()
	defer j.filesMu.Unlock()
	fm, ok := j.fileLocked(id)
	if !ok {
		return nil, 0, fmt.Errorf("%w: %d", ErrNoSuchFile, id)
	}
	if r := j.readers[id]; r != nil {
		r.Acquire()
		return r, fm.salt, nil
	}
	f, err := j.opts.FS.Open(j.opts.FS.PathJoin(j.opts.Dir, FileName(id)))
	if err != nil {
		return nil, 0, fmt.Errorf("journal: open: %w", err)
	}
	r := sharedfile.New(f) // held by the map and the caller
	if j.readers == nil {
		j.readers = make(map[uint64]*sharedfile.File)
	}
	j.readers[id] = r
	return r, fm.salt, nil
}

// dropReaderLocked forgets the reader of file id (readers in the middle of
// a read finish it). filesMu must be held.
func (j *Journal) dropReaderLocked(id uint64) {
	if r := j.readers[id]; r != nil {
		delete(j.readers, id)
		r.Release()
	}
}

// Run is raw bytes of one journal file: whole records, as written, for
// ParseEntry.
type Run struct {
	Buf  []byte
	salt uint32
}

// ReadRun reads n bytes of file id at offset off: a run of whole records
// (one, or several for read-ahead).
func (j *Journal) ReadRun(id uint64, off int64, n int) (Run, error) {
	r, salt, err := j.acquire(id)
	if err != nil {
		return Run{}, err
	}
	defer r.Release()
	buf := make([]byte, n)
	if _, err := r.ReadAt(buf, off); err != nil {
		return Run{}, fmt.Errorf("journal: read file %d at %d: %w", id, off, err)
	}
	return Run{Buf: buf, salt: salt}, nil
}

// ParseEntry decodes the entry record at offset off of run: its ledger,
// entry and data (aliasing the run).
func (r Run) ParseEntry(off int) (ledger, entry int64, data []byte, err error) {
	if off < 0 || off > len(r.Buf) {
		return 0, 0, nil, ErrTruncated
	}
	rec, _, err := decodeRecord(r.Buf[off:], r.salt)
	if err != nil {
		return 0, 0, nil, err
	}
	if rec.Type != RecordEntry {
		return 0, 0, nil, fmt.Errorf("%w: not an entry record", ErrCorrupt)
	}
	return rec.Ledger, rec.Entry, rec.Data, nil
}

// EntryRecordOffset is the offset of an entry record's data within the
// record; EncodedLen(n) is the record's whole length.
const EntryRecordOffset = recordHeaderLen + entryPayloadFixed

// ScanFile calls fn for every intact record of sealed file id, in order,
// with its offset in the file; it stops at the next file's start or at the
// first partial or corrupt record. Data passed to fn is only valid during
// the call.
func (j *Journal) ScanFile(id uint64, fn func(off int64, r Record) error) error {
	var limit uint64 = math.MaxUint64
	j.filesMu.Lock()
	fm, ok := j.fileLocked(id)
	for _, fi := range j.sealedLocked() {
		if fi.ID == id {
			limit = fi.Len
		}
	}
	j.filesMu.Unlock()
	if !ok {
		return fmt.Errorf("%w: %d", ErrNoSuchFile, id)
	}
	r, _, err := j.acquire(id)
	if err != nil {
		return err
	}
	defer r.Release()
	br := bufio.NewReaderSize(io.NewSectionReader(r, fileHeaderLen, int64(min(limit, math.MaxInt64-fileHeaderLen))), 1<<20)
	var buf []byte
	for off := uint64(0); off < limit; {
		h, err := br.Peek(recordHeaderLen)
		if err != nil {
			return nil
		}
		n := peekRecordLen(h)
		if n < 0 {
			return nil
		}
		if cap(buf) < n {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		if _, err := io.ReadFull(br, buf); err != nil {
			return nil
		}
		rec, _, err := decodeRecord(buf, fm.salt)
		if err != nil {
			return nil
		}
		if err := fn(fileHeaderLen+int64(off), rec); err != nil {
			return err
		}
		off += uint64(n)
	}
	return nil
}

// ReleaseFile retires sealed file id if all its records lie before mark,
// as Release does for every such file: it is kept for recycling or its
// path is returned for the caller to delete. released is false if the file
// is not (or no longer) releasable.
func (j *Journal) ReleaseFile(id, mark uint64) (doomed string, released bool) {
	j.filesMu.Lock()
	defer j.filesMu.Unlock()
	for i, fm := range j.files {
		if fm.id != id {
			continue
		}
		if !j.releasableLocked(i, mark) {
			return "", false
		}
		j.files = append(j.files[:i:i], j.files[i+1:]...)
		j.dropReaderLocked(id)
		if len(j.recycle) < j.opts.RecycleFiles {
			j.recycle = append(j.recycle, id)
			return "", true
		}
		return j.opts.FS.PathJoin(j.opts.Dir, FileName(id)), true
	}
	return "", false
}
