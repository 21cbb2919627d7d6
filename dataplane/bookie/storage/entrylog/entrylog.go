package entrylog

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/magnetar-dev/magnetar/dataplane/bookie/internal/sharedfile"

	"github.com/magnetar-dev/magnetar/dataplane/bookie/internal/crc32c"
)

// Errors returned by the entry log manager.
var (
	// ErrCorrupt means a record failed its checksum or does not hold the
	// expected entry.
	ErrCorrupt = errors.New("entrylog: corrupt record")
	// ErrNoSuchLog means the log file does not exist (it was garbage
	// collected).
	ErrNoSuchLog = errors.New("entrylog: no such log")
)

const (
	fileSuffix    = ".log"
	fileMagic     = "MGEL"
	fileHeaderLen = 16 // magic(4) id(8) crc(4)
	// RecordHeaderLen is crc(4) + data length(4) + ledger(8) + entry(8).
	RecordHeaderLen = 24
	// MaxDataLen bounds one entry's data.
	MaxDataLen = 64 << 20
	// LocationLen is the encoded size of a Location.
	LocationLen = 20
	writeBufLen = 1 << 20
	// writebackChunk is how much of a log is written before its writeback
	// is started (see startWriteback).
	writebackChunk = 1 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// FileName returns the file name of entry log id.
func FileName(id uint64) string { return fmt.Sprintf("%016x%s", id, fileSuffix) }

func parseFileName(name string) (uint64, bool) {
	s, ok := strings.CutSuffix(name, fileSuffix)
	if !ok || len(s) != 16 {
		return 0, false
	}
	id, err := strconv.ParseUint(s, 16, 64)
	return id, err == nil
}

// Location is where an entry's record lives: the log id, the offset of the
// record header and the data length.
type Location struct {
	Log    uint64
	Offset uint64
	Length uint32
}

// End returns the offset just past the record.
func (l Location) End() uint64 { return l.Offset + RecordHeaderLen + uint64(l.Length) }

// Size returns the record's size on disk.
func (l Location) Size() int64 { return RecordHeaderLen + int64(l.Length) }

// AppendEncode appends the 20-byte big-endian encoding of l to dst.
func (l Location) AppendEncode(dst []byte) []byte {
	dst = binary.BigEndian.AppendUint64(dst, l.Log)
	dst = binary.BigEndian.AppendUint64(dst, l.Offset)
	return binary.BigEndian.AppendUint32(dst, l.Length)
}

// DecodeLocation decodes a Location encoded by AppendEncode.
func DecodeLocation(b []byte) (Location, error) {
	if len(b) != LocationLen {
		return Location{}, fmt.Errorf("entrylog: bad location length %d", len(b))
	}
	return Location{
		Log:    binary.BigEndian.Uint64(b[0:8]),
		Offset: binary.BigEndian.Uint64(b[8:16]),
		Length: binary.BigEndian.Uint32(b[16:20]),
	}, nil
}

// Info describes one entry log file.
type Info struct {
	ID   uint64
	Size int64
}

// Manager owns the entry log files of one directory. Append, Sync, Rotate
// and Remove must be serialized by the caller (the storage's flush lock);
// Read, ReadRun, Scan and Logs may run concurrently with them and with each
// other.
type Manager struct {
	fs           vfs.FS
	dir          string
	maxFileBytes int64

	mu      sync.RWMutex
	readers map[uint64]*sharedfile.File
	sizes   map[uint64]int64 // every live log, the current one included

	// Writer state, serialized by the caller.
	cur      vfs.File
	curID    uint64
	curSize  int64 // including wbuf
	wbuf     []byte
	unsynced []vfs.File // rotated files not yet synced
	// writebackAt is the offset of the current log up to which writeback
	// was last started (startWriteback).
	writebackAt int64
	dirDirty    bool
	hdrScratch  [RecordHeaderLen]byte
}

// trashSuffix marks a removed log waiting to be deleted (see Remove).
const trashSuffix = ".del"

// Open opens the entry logs in dir (which must exist) and creates a fresh
// current log after the highest existing id. Existing logs are only read,
// never appended to, so their possibly torn tails stay unreferenced.
func Open(fs vfs.FS, dir string, maxFileBytes int64) (*Manager, error) {
	names, err := fs.List(dir)
	if err != nil {
		return nil, fmt.Errorf("entrylog: list: %w", err)
	}
	m := &Manager{
		fs:           fs,
		dir:          dir,
		maxFileBytes: maxFileBytes,
		readers:      make(map[uint64]*sharedfile.File),
		sizes:        make(map[uint64]int64),
		wbuf:         make([]byte, 0, writeBufLen),
	}
	var maxID uint64
	for _, n := range names {
		if strings.HasSuffix(n, trashSuffix) {
			// Removed before a crash, not yet deleted.
			if err := fs.Remove(fs.PathJoin(dir, n)); err != nil {
				return nil, fmt.Errorf("entrylog: remove: %w", err)
			}
			continue
		}
		id, ok := parseFileName(n)
		if !ok {
			continue
		}
		st, err := fs.Stat(fs.PathJoin(dir, n))
		if err != nil {
			return nil, fmt.Errorf("entrylog: stat: %w", err)
		}
		m.sizes[id] = st.Size()
		maxID = max(maxID, id)
	}
	if err := m.create(maxID + 1); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *Manager) path(id uint64) string { return m.fs.PathJoin(m.dir, FileName(id)) }

func (m *Manager) create(id uint64) error {
	f, err := m.fs.Create(m.path(id), vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("entrylog: create: %w", err)
	}
	var h [fileHeaderLen]byte
	copy(h[:], fileMagic)
	binary.LittleEndian.PutUint64(h[4:12], id)
	binary.LittleEndian.PutUint32(h[12:16], crc32.Checksum(h[:12], castagnoli))
	m.cur, m.curID, m.curSize, m.writebackAt = f, id, fileHeaderLen, 0
	m.wbuf = append(m.wbuf[:0], h[:]...)
	m.dirDirty = true
	m.mu.Lock()
	m.sizes[id] = fileHeaderLen
	m.mu.Unlock()
	return nil
}

// Current returns the id of the log being appended to.
func (m *Manager) Current() uint64 { return m.curID }

// Append appends an entry record to the current log (buffered) and returns
// its location. The record is durable only after Sync.
func (m *Manager) Append(ledger, entry int64, data []byte) (Location, error) {
	if len(data) > MaxDataLen {
		return Location{}, fmt.Errorf("entrylog: entry of %d bytes too large", len(data))
	}
	if m.curSize >= m.maxFileBytes {
		if err := m.Rotate(); err != nil {
			return Location{}, err
		}
	}
	h := &m.hdrScratch
	binary.LittleEndian.PutUint32(h[4:8], uint32(len(data)))
	binary.LittleEndian.PutUint64(h[8:16], uint64(ledger))
	binary.LittleEndian.PutUint64(h[16:24], uint64(entry))
	crc := crc32c.Update(crc32c.Small(0, h[4:]), data)
	binary.LittleEndian.PutUint32(h[0:4], crc)
	loc := Location{Log: m.curID, Offset: uint64(m.curSize), Length: uint32(len(data))}
	if len(m.wbuf)+RecordHeaderLen+len(data) > cap(m.wbuf) {
		if err := m.writeBuf(); err != nil {
			return Location{}, err
		}
	}
	if RecordHeaderLen+len(data) > cap(m.wbuf) {
		// vfs.File.Write may scribble on its argument, so even oversized
		// records go through a private buffer, never the caller's data.
		rec := make([]byte, 0, RecordHeaderLen+len(data))
		rec = append(append(rec, h[:]...), data...)
		if _, err := m.cur.Write(rec); err != nil {
			return Location{}, fmt.Errorf("entrylog: write: %w", err)
		}
		if err := m.startWriteback(m.curSize + int64(len(rec))); err != nil {
			return Location{}, err
		}
	} else {
		m.wbuf = append(m.wbuf, h[:]...)
		m.wbuf = append(m.wbuf, data...)
	}
	m.curSize += RecordHeaderLen + int64(len(data))
	m.mu.Lock()
	m.sizes[m.curID] = m.curSize
	m.mu.Unlock()
	return loc, nil
}

func (m *Manager) writeBuf() error {
	if len(m.wbuf) == 0 {
		return nil
	}
	_, err := m.cur.Write(m.wbuf)
	m.wbuf = m.wbuf[:0]
	if err != nil {
		return fmt.Errorf("entrylog: write: %w", err)
	}
	return m.startWriteback(m.curSize) // curSize counted the buffer just written
}

// startWriteback starts writing back the first written bytes of the
// current log (everything handed to Write so far) once writebackChunk
// bytes have accumulated since the last time, after
// waiting for the previous chunk to reach the disk (vfs.File.SyncTo:
// sync_file_range on Linux). A flush then never has more than about two
// chunks queued at the device, so the journal's fsyncs, which share the
// disk, wait behind a chunk instead of behind a whole flush. It makes
// nothing durable by itself: that is Sync's job.
func (m *Manager) startWriteback(written int64) error {
	if written-m.writebackAt < writebackChunk {
		return nil
	}
	m.writebackAt = written
	if _, err := m.cur.SyncTo(written); err != nil {
		return fmt.Errorf("entrylog: sync: %w", err)
	}
	return nil
}

// Rotate finishes the current log and starts a new one.
func (m *Manager) Rotate() error {
	if err := m.writeBuf(); err != nil {
		return err
	}
	m.unsynced = append(m.unsynced, m.cur)
	return m.create(m.curID + 1)
}

// Sync makes every appended record durable, including those of logs rotated
// since the last Sync, and the directory entries of new logs.
func (m *Manager) Sync() error {
	if err := m.writeBuf(); err != nil {
		return err
	}
	for len(m.unsynced) > 0 {
		f := m.unsynced[0]
		if err := f.Sync(); err != nil {
			return fmt.Errorf("entrylog: sync: %w", err)
		}
		f.Close()
		m.unsynced = m.unsynced[1:]
	}
	if err := m.cur.Sync(); err != nil {
		return fmt.Errorf("entrylog: sync: %w", err)
	}
	if m.dirDirty {
		d, err := m.fs.OpenDir(m.dir)
		if err != nil {
			return fmt.Errorf("entrylog: open dir: %w", err)
		}
		err = d.Sync()
		d.Close()
		if err != nil {
			return fmt.Errorf("entrylog: sync dir: %w", err)
		}
		m.dirDirty = false
	}
	return nil
}

func (m *Manager) acquire(id uint64) (*sharedfile.File, error) {
	m.mu.RLock()
	r := m.readers[id]
	if r != nil {
		r.Acquire()
	}
	_, live := m.sizes[id]
	m.mu.RUnlock()
	if r != nil {
		return r, nil
	}
	if !live {
		return nil, fmt.Errorf("%w: %d", ErrNoSuchLog, id)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if r = m.readers[id]; r != nil {
		r.Acquire()
		return r, nil
	}
	if _, live := m.sizes[id]; !live {
		return nil, fmt.Errorf("%w: %d", ErrNoSuchLog, id)
	}
	f, err := m.fs.Open(m.path(id))
	if err != nil {
		return nil, fmt.Errorf("entrylog: open: %w", err)
	}
	r = sharedfile.New(f) // held by the map and the caller
	m.readers[id] = r
	return r, nil
}

// Read reads the entry at loc and checks that it is (ledger, entry).
func (m *Manager) Read(loc Location, ledger, entry int64) ([]byte, error) {
	buf, err := m.ReadRun(loc.Log, loc.Offset, loc.Size())
	if err != nil {
		return nil, err
	}
	l, e, data, n, err := ParseRecord(buf)
	if err != nil {
		return nil, err
	}
	if l != ledger || e != entry || n != len(buf) {
		return nil, fmt.Errorf("%w: log %d offset %d holds (%d,%d), want (%d,%d)",
			ErrCorrupt, loc.Log, loc.Offset, l, e, ledger, entry)
	}
	return data, nil
}

// ReadRun reads n raw bytes of log id at off (a run of whole records, for
// read-ahead); parse it with ParseRecord.
func (m *Manager) ReadRun(id, off uint64, n int64) ([]byte, error) {
	r, err := m.acquire(id)
	if err != nil {
		return nil, err
	}
	defer r.Release()
	buf := make([]byte, n)
	if _, err := r.ReadAt(buf, int64(off)); err != nil {
		return nil, fmt.Errorf("entrylog: read log %d at %d: %w", id, off, err)
	}
	return buf, nil
}

// ParseRecord decodes the record at the start of b, returning its ledger,
// entry, data (aliasing b) and encoded length.
func ParseRecord(b []byte) (ledger, entry int64, data []byte, n int, err error) {
	if len(b) < RecordHeaderLen {
		return 0, 0, nil, 0, ErrCorrupt
	}
	dl := binary.LittleEndian.Uint32(b[4:8])
	if dl > MaxDataLen || int(dl) > len(b)-RecordHeaderLen {
		return 0, 0, nil, 0, ErrCorrupt
	}
	n = RecordHeaderLen + int(dl)
	if crc32.Checksum(b[4:n], castagnoli) != binary.LittleEndian.Uint32(b[0:4]) {
		return 0, 0, nil, 0, ErrCorrupt
	}
	ledger = int64(binary.LittleEndian.Uint64(b[8:16]))
	entry = int64(binary.LittleEndian.Uint64(b[16:24]))
	return ledger, entry, b[RecordHeaderLen:n], n, nil
}

// Scan calls fn for every intact record of log id in file order, stopping
// at the first partial or corrupt record (an unreferenced crash tail). data
// is only valid during the call.
func (m *Manager) Scan(id uint64, fn func(ledger, entry int64, loc Location, data []byte) error) error {
	r, err := m.acquire(id)
	if err != nil {
		return err
	}
	defer r.Release()
	m.mu.RLock()
	size := m.sizes[id]
	m.mu.RUnlock()
	br := bufio.NewReaderSize(io.NewSectionReader(r, 0, size), 1<<20)
	if _, err := br.Discard(fileHeaderLen); err != nil {
		return nil
	}
	off := uint64(fileHeaderLen)
	var buf []byte
	for {
		h, err := br.Peek(RecordHeaderLen)
		if err != nil {
			return nil
		}
		dl := binary.LittleEndian.Uint32(h[4:8])
		if dl > MaxDataLen {
			return nil
		}
		n := RecordHeaderLen + int(dl)
		buf = slices.Grow(buf[:0], n)[:n]
		if _, err := io.ReadFull(br, buf); err != nil {
			return nil
		}
		l, e, data, _, err := ParseRecord(buf)
		if err != nil {
			return nil
		}
		if err := fn(l, e, Location{Log: id, Offset: off, Length: dl}, data); err != nil {
			return err
		}
		off += uint64(n)
	}
}

// Logs returns every log file with its size, sorted by id.
func (m *Manager) Logs() []Info {
	m.mu.RLock()
	out := make([]Info, 0, len(m.sizes))
	for id, sz := range m.sizes {
		out = append(out, Info{ID: id, Size: sz})
	}
	m.mu.RUnlock()
	slices.SortFunc(out, func(a, b Info) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return out
}

// Remove removes log id (never the current one) from the manager and
// renames its file, whose new path it returns for the caller to delete.
// Readers holding it finish their read; later reads fail with ErrNoSuchLog.
func (m *Manager) Remove(id uint64) (string, error) {
	if id == m.curID {
		return "", fmt.Errorf("entrylog: cannot remove current log %d", id)
	}
	m.mu.Lock()
	r := m.readers[id]
	delete(m.readers, id)
	delete(m.sizes, id)
	m.mu.Unlock()
	if r != nil {
		r.Release()
	}
	// Renamed, not deleted: deleting a log of up to a GiB stalls every
	// fdatasync on the disk (see package slowrm); the caller deletes it
	// slowly, outside its locks. A crash in between leaves the renamed file
	// for Open to delete.
	trash := m.path(id) + trashSuffix
	if err := m.fs.Rename(m.path(id), trash); err != nil {
		return "", fmt.Errorf("entrylog: remove: %w", err)
	}
	m.dirDirty = true
	return trash, nil
}

// Close closes every file. Unsynced appends are dropped.
func (m *Manager) Close() error {
	m.mu.Lock()
	for id, r := range m.readers {
		delete(m.readers, id)
		r.Release()
	}
	m.mu.Unlock()
	for _, f := range m.unsynced {
		f.Close()
	}
	m.unsynced = nil
	var err error
	if m.cur != nil {
		err = m.cur.Close()
		m.cur = nil
	}
	return err
}
