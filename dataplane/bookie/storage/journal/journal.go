package journal

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/magnetar-dev/magnetar/dataplane/bookie/internal/sharedfile"
)

// Errors returned by the journal.
var (
	// ErrClosed is returned (via done) for appends after Close.
	ErrClosed = errors.New("journal: closed")
	// ErrTruncated means a record ends past the end of its buffer or file.
	ErrTruncated = errors.New("journal: truncated record")
	// ErrCorrupt means a record is malformed or fails its checksum.
	ErrCorrupt = errors.New("journal: corrupt record")
)

const (
	fileSuffix    = ".jnl"
	fileHeaderLen = 24 // magic(4) id(8) start(8) crc(4)
	// fileMagicV1 marks files whose record checksums are unsalted (written
	// before files were recycled); they are still replayed.
	fileMagicV1 = "MGJ1"
	// fileMagic marks files whose record checksums are salted with the
	// file's id (recordSalt), so that records left over from a recycled
	// file's previous life never pass as records of its new one.
	fileMagic = "MGJ2"
)

// recordSalt is XORed into the checksum of every record of file id (format
// MGJ2). Multiplying by an odd constant is a bijection on 32 bits, so files
// whose ids differ below 2^32 never share a salt, and no file id below 2^32
// but zero has the unsalted salt 0.
func recordSalt(id uint64) uint32 { return uint32(id) * saltMul }

const saltMul = 0x9e3779b1

// saltMulInverse is saltMul's inverse modulo 2^32 (Newton's iteration; each
// step doubles the correct low bits).
var saltMulInverse = func() uint32 {
	inv := uint32(saltMul)
	for range 5 {
		inv *= 2 - saltMul*inv
	}
	return inv
}()

// staleRecord reports whether rec, a whole record that failed its checksum
// in file id, is intact but salted for an earlier file: what a recycled
// file holds past its new records. (Random bytes pass for one with odds of
// about id in 2^32.)
func staleRecord(rec []byte, id uint64) bool {
	if len(rec) < recordHeaderLen {
		return false
	}
	salt := binary.LittleEndian.Uint32(rec[0:4]) ^ crc32.Checksum(rec[4:], castagnoli)
	old := uint64(salt * saltMulInverse)
	return old != 0 && old < id
}

// Options configure a Journal. Zero values take the documented defaults.
type Options struct {
	// FS is the filesystem; required.
	FS vfs.FS
	// Dir is the journal directory; it must exist.
	Dir string
	// MaxGroupWait is how long the first record of a group may wait for more
	// records before the group is written. Zero or negative (the default):
	// never wait; the group is whatever queued while the previous group was
	// written and synced, which batches as much as the load offers without
	// adding a fixed delay to every add.
	MaxGroupWait time.Duration
	// MaxGroupBytes ends the wait early once this many bytes are pending
	// (only meaningful with a positive MaxGroupWait). Default 512 KiB.
	MaxGroupBytes int
	// MaxPendingBytes bounds the bytes queued behind the writer; Append
	// blocks while more are pending. Default 32 MiB.
	MaxPendingBytes int
	// MaxFileBytes rotates to a new file once the current one is this big.
	// Default 256 MiB.
	MaxFileBytes int64
	// NoSync acknowledges records once written to the OS, without fsync.
	NoSync bool
	// WritebackBytes (NoSync only) starts the OS writeback of the current
	// file every time this many bytes were written since the last start
	// (vfs.File.SyncTo: on Linux, sync_file_range, which queues the dirty
	// pages for writing and waits only for writeback already in flight, so
	// the file's dirty tail stays near this size; it promises no
	// durability). Without it
	// the file's whole dirty tail, up to MaxFileBytes, waits for the fsync
	// at rotation, which stalls the writer (and every add queued behind
	// it) for as long as the disk takes to write it. Default 4 MiB;
	// negative disables it.
	WritebackBytes int64
	// RecycleFiles is how many released files are kept to be reused as
	// the next files (renamed and overwritten in place) instead of being
	// deleted; each costs up to MaxFileBytes of disk. Reuse matters twice
	// on Linux filesystems: deleting a large file frees (and, on a disk
	// mounted with online discard, trims) all its extents in the next
	// filesystem-journal commit, which every fdatasync on the disk then
	// waits for (deleting a 256 MiB journal file stalled adds for tens of
	// milliseconds), and an overwrite within the file's
	// size is flushed by fdatasync without any metadata commit. Default 2;
	// negative: keep none (Release returns every released file).
	RecycleFiles int
	// DirectIO writes the records with O_DIRECT (Linux, when FS is
	// vfs.Default and the file system supports it; else it is ignored),
	// so they never pass through the page cache: a buffered write copies
	// every byte into a page-cache page, and on the machine measured that
	// copy into memory the guest had not used lately cost 1.5-2 ns per
	// byte, a fifth of the E=1 bookie's CPU under ledgerbench's appends. A
	// group of directMinBytes (512 KiB) or more is written
	// from the start of the 4 KiB block holding the journal's end,
	// rewriting that block's bytes already written (the same bytes, so a
	// torn block write cannot damage a record acknowledged before) and
	// zero-filling the rest of its last block (zeros never decode as a
	// record); the next group rewrites that block again. Smaller groups
	// are written through the page cache at the journal's end: an
	// O_DIRECT write costs more per call and saves only the copy. Entries
	// read in place then come from the disk (or from the page cache of
	// reads and of the small groups). Not used with NoSync.
	DirectIO bool
	// OnGroup, if set, is called from the writer goroutine after each
	// group is written (and synced): its size in bytes and how long the
	// fdatasync took (zero with NoSync). For metrics; it must be quick.
	OnGroup func(bytes int, sync time.Duration)
	// OnError, if set, is called once (from the writer goroutine) when a
	// write or sync fails; the journal rejects every later append.
	OnError func(error)
}

func (o *Options) fill() {
	if o.MaxGroupBytes <= 0 {
		o.MaxGroupBytes = 512 << 10
	}
	if o.MaxPendingBytes <= 0 {
		o.MaxPendingBytes = 32 << 20
	}
	if o.MaxPendingBytes < o.MaxGroupBytes {
		o.MaxPendingBytes = o.MaxGroupBytes
	}
	if o.MaxFileBytes <= 0 {
		o.MaxFileBytes = 256 << 20
	}
	if o.WritebackBytes == 0 {
		o.WritebackBytes = 4 << 20
	}
	if o.RecycleFiles == 0 {
		o.RecycleFiles = 2
	}
}

// FileName returns the name of journal file id.
func FileName(id uint64) string { return fmt.Sprintf("%016x%s", id, fileSuffix) }

func parseFileName(name string) (uint64, bool) {
	s, ok := strings.CutSuffix(name, fileSuffix)
	if !ok || len(s) != 16 {
		return 0, false
	}
	id, err := strconv.ParseUint(s, 16, 64)
	return id, err == nil
}

type fileMeta struct {
	id    uint64
	start uint64 // logical position of the first record
	salt  uint32 // XORed into every record checksum (0: format MGJ1)
	valid bool   // header readable; an unreadable header held nothing durable
}

// Journal is the write-ahead log. See the package documentation.
type Journal struct {
	opts Options

	mu         sync.Mutex
	space      *sync.Cond // signalled when pending bytes drain
	buf        []byte     // pending group
	cbs        []func(error)
	pos        uint64        // logical position after the last appended record
	durable    atomic.Uint64 // logical position up to which every record is fsynced
	groupStart time.Time
	err        error // sticky write failure
	closed     bool

	kick chan struct{} // pending went from empty to non-empty
	full chan struct{} // pending reached MaxGroupBytes
	stop chan struct{}
	done chan struct{}

	// Owned by the writer goroutine (and Open/Close around it), except
	// that Sync (NoSync) fdatasyncs f from its caller's goroutine: fileMu
	// keeps f from being swapped or closed under it (the writer's own
	// writes to f need no lock).
	fileMu   sync.Mutex
	f        vfs.File
	fileID   uint64
	fileSize int64
	written  int64 // fileSize when writeback was last started (NoSync)
	// O_DIRECT (Options.DirectIO), writer only: dio is f opened again
	// with O_DIRECT (nil: buffered writes through f); tail holds the
	// bytes of f's last partial 4 KiB block, fileSize%directBlock of
	// them; stage is the aligned buffer a group is written from.
	dio   *os.File
	tail  []byte
	stage []byte
	// dioRefused holds why the current file could not be opened for
	// O_DIRECT, when Options.DirectIO asked for it (nil otherwise).
	dioRefused atomic.Pointer[error]
	// directMin is the smallest group written with O_DIRECT
	// (directMinBytes; tests lower it).
	directMin int
	spare     []byte
	spareCbs  []func(error)

	filesMu sync.Mutex
	files   []fileMeta                  // sorted by id, the last is the current file
	recycle []uint64                    // released files kept for reuse, oldest first
	readers map[uint64]*sharedfile.File // open files read in place (read.go)
}

// Open creates a new journal file in opts.Dir whose first record will have
// logical position start, and starts the writer goroutine. Existing journal
// files are kept (for Release) but never appended to. Replay them first.
func Open(opts Options, start uint64) (*Journal, error) {
	opts.fill()
	if opts.FS == nil || opts.Dir == "" {
		return nil, errors.New("journal: FS and Dir are required")
	}
	existing, err := listFiles(opts.FS, opts.Dir)
	if err != nil {
		return nil, err
	}
	j := &Journal{
		opts:  opts,
		pos:   start,
		kick:  make(chan struct{}, 1),
		full:  make(chan struct{}, 1),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
		files: existing,
	}
	j.space = sync.NewCond(&j.mu)
	j.directMin = directMinBytes
	j.durable.Store(start) // whatever precedes start was replayed from disk
	var next uint64 = 1
	if len(existing) > 0 {
		next = existing[len(existing)-1].id + 1
	}
	if err := j.createFile(next, start); err != nil {
		return nil, err
	}
	go j.run()
	return j, nil
}

// listFiles returns the journal files in dir sorted by id, with the start
// position read from each header (0 if the header is unreadable).
func listFiles(fs vfs.FS, dir string) ([]fileMeta, error) {
	names, err := fs.List(dir)
	if err != nil {
		return nil, fmt.Errorf("journal: list %s: %w", dir, err)
	}
	var out []fileMeta
	for _, n := range names {
		id, ok := parseFileName(n)
		if !ok {
			continue
		}
		fm := fileMeta{id: id}
		if f, err := fs.Open(fs.PathJoin(dir, n)); err == nil {
			var h [fileHeaderLen]byte
			if _, err := io.ReadFull(f, h[:]); err == nil {
				fm.start, fm.salt, fm.valid = parseFileHeader(h[:], id)
			}
			f.Close()
		}
		out = append(out, fm)
	}
	slices.SortFunc(out, func(a, b fileMeta) int { return cmpU64(a.id, b.id) })
	return out, nil
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func fileHeader(id, start uint64) []byte {
	h := make([]byte, fileHeaderLen)
	copy(h, fileMagic)
	binary.LittleEndian.PutUint64(h[4:12], id)
	binary.LittleEndian.PutUint64(h[12:20], start)
	binary.LittleEndian.PutUint32(h[20:24], crc32.Checksum(h[:20], castagnoli))
	return h
}

// parseFileHeader checks the header of file id (a recycled file whose new
// header was lost in a crash still holds its old id, and is not valid) and
// returns the position of its first record and its records' salt.
func parseFileHeader(h []byte, id uint64) (start uint64, salt uint32, ok bool) {
	if len(h) < fileHeaderLen {
		return 0, 0, false
	}
	switch string(h[:4]) {
	case fileMagic:
		salt = recordSalt(id)
	case fileMagicV1:
	default:
		return 0, 0, false
	}
	if crc32.Checksum(h[:20], castagnoli) != binary.LittleEndian.Uint32(h[20:24]) {
		return 0, 0, false
	}
	if binary.LittleEndian.Uint64(h[4:12]) != id {
		return 0, 0, false
	}
	return binary.LittleEndian.Uint64(h[12:20]), salt, true
}

// createFile creates journal file id starting at logical position start,
// makes its header and directory entry durable, and makes it current. It
// reuses the oldest released file if one is kept (see RecycleFiles): the
// file is renamed and then overwritten from the start, its old records
// made unreadable by the new id's salt.
func (j *Journal) createFile(id, start uint64) error {
	fs := j.opts.FS
	name := fs.PathJoin(j.opts.Dir, FileName(id))
	j.filesMu.Lock()
	var reuse uint64
	if len(j.recycle) > 0 {
		reuse = j.recycle[0]
		j.recycle = j.recycle[1:]
	}
	j.filesMu.Unlock()
	var f vfs.File
	var err error
	if reuse != 0 {
		// A kept file that cannot be reused (someone removed it, or the
		// rename failed) is no reason to stop: a new file does as well.
		f, err = fs.ReuseForWrite(fs.PathJoin(j.opts.Dir, FileName(reuse)), name, vfs.WriteCategoryUnspecified)
	}
	if reuse == 0 || err != nil {
		f, err = fs.Create(name, vfs.WriteCategoryUnspecified)
	}
	if err != nil {
		return fmt.Errorf("journal: create %s: %w", name, err)
	}
	if _, err := f.Write(fileHeader(id, start)); err != nil {
		f.Close()
		return fmt.Errorf("journal: write header: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("journal: sync %s: %w", name, err)
	}
	if err := syncDir(fs, j.opts.Dir); err != nil {
		f.Close()
		return err
	}
	j.fileMu.Lock()
	if j.f != nil {
		j.f.Close()
	}
	j.f = f
	j.fileMu.Unlock()
	j.fileID, j.fileSize, j.written = id, fileHeaderLen, fileHeaderLen
	j.tail = append(j.tail[:0], fileHeader(id, start)...) // used with dio only
	if j.dio != nil {
		j.dio.Close()
		j.dio = nil
	}
	j.dioRefused.Store(nil)
	if j.opts.DirectIO && !j.opts.NoSync {
		// Fall back to buffered writes where O_DIRECT is refused (a
		// file system without it, such as an older tmpfs).
		d, err := openDirect(fs, name)
		if err != nil {
			j.dioRefused.Store(&err)
		}
		j.dio = d
	}
	j.filesMu.Lock()
	j.files = append(j.files, fileMeta{id: id, start: start, salt: recordSalt(id), valid: true})
	j.filesMu.Unlock()
	return nil
}

func syncDir(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return fmt.Errorf("journal: open dir: %w", err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("journal: sync dir: %w", err)
	}
	return nil
}

// AppendEntry queues an entry record. done is called exactly once, from the
// writer goroutine, after the record's group is durable (or written, with
// NoSync), or with the error that prevented it. It returns the logical
// position just past the record (0 if rejected).
func (j *Journal) AppendEntry(ledger, entry, lac int64, data []byte, done func(error)) uint64 {
	end, err := j.AppendChecksummed(ledger, entry, lac, data, EntryChecksum(ledger, entry, lac, data), done)
	if err != nil {
		done(err)
	}
	return end
}

// EntryChecksum computes the checksum AppendChecksummed needs, so that a
// caller holding a lock of its own around the append can compute it before.
func EntryChecksum(ledger, entry, lac int64, data []byte) uint32 {
	return entryCRC(ledger, entry, lac, data)
}

// AppendChecksummed is AppendEntry with the record's checksum computed by
// EntryChecksum, except that a rejected append returns the error instead of
// passing it to done (which is then never called): the caller may hold
// locks done must not run under. It may block while MaxPendingBytes are
// queued.
func (j *Journal) AppendChecksummed(ledger, entry, lac int64, data []byte, crc uint32, done func(error)) (end uint64, err error) {
	j.mu.Lock()
	if err := j.waitSpaceLocked(); err != nil {
		j.mu.Unlock()
		return 0, err
	}
	j.buf = appendEntryRecord(j.reserveLocked(EncodedLen(len(data))), ledger, entry, lac, data, crc)
	return j.queuedLocked(EncodedLen(len(data)), done), nil
}

// AppendFence queues a fence record for ledger; see AppendEntry.
func (j *Journal) AppendFence(ledger int64, done func(error)) uint64 {
	return j.appendLedger(RecordFence, ledger, done)
}

// AppendDelete queues a delete record for ledger; see AppendEntry.
func (j *Journal) AppendDelete(ledger int64, done func(error)) uint64 {
	return j.appendLedger(RecordDelete, ledger, done)
}

func (j *Journal) appendLedger(t RecordType, ledger int64, done func(error)) uint64 {
	j.mu.Lock()
	if err := j.waitSpaceLocked(); err != nil {
		j.mu.Unlock()
		done(err)
		return 0
	}
	j.buf = appendLedgerRecord(j.reserveLocked(recordHeaderLen+ledgerPayloadLen), t, ledger)
	return j.queuedLocked(recordHeaderLen+ledgerPayloadLen, done)
}

// Sync returns once every record appended before the call is durable:
// fsynced, even with NoSync. With NoSync it waits for the writer to have
// written them and then fdatasyncs the current file itself, on the
// caller's goroutine: the writer goes on writing groups meanwhile, so adds
// (acknowledged after the write) never wait behind this sync (when the
// writer did it, every in-place flush held them up for the length of one
// fdatasync). Records written to an earlier file are durable already: the
// writer syncs a file before it rotates to the next.
func (j *Journal) Sync() error {
	j.mu.Lock()
	if j.err != nil || j.closed {
		err := j.err
		if err == nil {
			err = ErrClosed
		}
		j.mu.Unlock()
		return err
	}
	target := j.pos
	written := make(chan error, 1)
	j.queuedLocked(0, func(err error) { written <- err })
	if err := <-written; err != nil || !j.opts.NoSync {
		return err // without NoSync the writer synced the group
	}
	j.fileMu.Lock()
	defer j.fileMu.Unlock()
	if j.durable.Load() >= target { // another Sync, or Close, got there first
		return nil
	}
	if j.f == nil { // Close failed to sync the last file
		if err := j.Err(); err != nil {
			return err
		}
		return ErrClosed
	}
	if err := j.f.SyncData(); err != nil {
		return j.fail(fmt.Errorf("journal: sync: %w", err))
	}
	j.advanceDurable(target)
	return nil
}

// advanceDurable raises durable to p unless it is there already (the
// writer and Sync both raise it).
func (j *Journal) advanceDurable(p uint64) {
	for {
		cur := j.durable.Load()
		if cur >= p || j.durable.CompareAndSwap(cur, p) {
			return
		}
	}
}

// WaitSpace blocks while MaxPendingBytes are queued, as an append would,
// so that a caller can wait before taking a lock of its own around the
// append; it returns the error an append would get.
func (j *Journal) WaitSpace() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.waitSpaceLocked()
}

func (j *Journal) waitSpaceLocked() error {
	for j.err == nil && !j.closed && len(j.buf) >= j.opts.MaxPendingBytes {
		j.space.Wait()
	}
	if j.err != nil {
		return j.err
	}
	if j.closed {
		return ErrClosed
	}
	return nil
}

// firstPendingCap is the capacity of a pending buffer (j.buf, j.spare) when
// it is first needed.
const firstPendingCap = 256 << 10

// reserveLocked returns j.buf with room for n more bytes. A buffer too
// small doubles, up to what pending can reach (MaxPendingBytes and the
// record that crosses it), rather than growing in append's steps of a
// quarter: each step copies the pending group, under j.mu, into memory the
// process has not touched before, and touching memory for the first time
// is what a burst on a fresh bookie pays most for (a page fault per 4 KiB,
// 15 µs each on the machine measured). With append's steps a journal whose
// pending grew to a few MiB in the first second of W1 (a) spent 14% of the
// process's CPU in those copies, holding every appender meanwhile.
// Doubling copies at most as
// much as the buffer finally holds, in a handful of steps, and the
// capacity follows the pending bytes the load reached.
func (j *Journal) reserveLocked(n int) []byte {
	b := j.buf
	if cap(b)-len(b) >= n {
		return b
	}
	c := max(firstPendingCap, 2*cap(b))
	c = min(c, j.opts.MaxPendingBytes+n)
	nb := make([]byte, len(b), max(c, len(b)+n))
	copy(nb, b)
	return nb
}

// queuedLocked finishes an append of n bytes; it releases j.mu.
func (j *Journal) queuedLocked(n int, done func(error)) uint64 {
	j.cbs = append(j.cbs, done)
	j.pos += uint64(n)
	pos := j.pos
	first := len(j.cbs) == 1
	if first {
		j.groupStart = time.Now()
	}
	full := len(j.buf) >= j.opts.MaxGroupBytes
	j.mu.Unlock()
	if first {
		select {
		case j.kick <- struct{}{}:
		default:
		}
	}
	if full {
		select {
		case j.full <- struct{}{}:
		default:
		}
	}
	return pos
}

// Position returns the logical position just past the last appended record.
// Every record appended before the call lies before it.
func (j *Journal) Position() uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.pos
}

// Durable returns the logical position up to which every record is known
// to be fsynced (with NoSync, only as far as Sync and Close made it).
func (j *Journal) Durable() uint64 { return j.durable.Load() }

// Err returns the sticky write error, if any.
func (j *Journal) Err() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.err
}

func (j *Journal) run() {
	defer close(j.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	stopping := false
	for {
		if !stopping {
			select {
			case <-j.kick:
			case <-j.stop:
				stopping = true
			}
		}
		for j.writeOne(timer, &stopping) {
		}
		if stopping {
			return
		}
	}
}

// writeOne writes and syncs one group; it reports whether there was one.
func (j *Journal) writeOne(timer *time.Timer, stopping *bool) bool {
	j.mu.Lock()
	if len(j.cbs) == 0 {
		j.mu.Unlock()
		return false
	}
	if !*stopping && j.err == nil && len(j.buf) < j.opts.MaxGroupBytes {
		if wait := j.opts.MaxGroupWait - time.Since(j.groupStart); wait > 0 {
			j.mu.Unlock()
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-j.full:
			case <-j.stop:
				*stopping = true
			}
			timer.Stop()
			j.mu.Lock()
		}
	}
	buf, cbs, end := j.buf, j.cbs, j.pos
	j.buf, j.cbs = j.spare[:0], j.spareCbs[:0]
	err := j.err
	j.space.Broadcast()
	j.mu.Unlock()

	if err == nil {
		err = j.writeGroup(buf)
		if err == nil && !j.opts.NoSync {
			j.advanceDurable(end)
		}
	}
	for i, cb := range cbs {
		cb(err)
		cbs[i] = nil
	}
	j.spare, j.spareCbs = buf[:0], cbs[:0]
	return true
}

func (j *Journal) writeGroup(buf []byte) error {
	n := len(buf)
	saltRecords(buf, recordSalt(j.fileID))
	if n > 0 {
		// Without O_DIRECT, f's own position is the end: Write (the
		// in-memory vfs's WriteAt panics on some of its files, so the
		// tests' file systems need this path).
		var err error
		switch {
		case j.dio == nil:
			_, err = j.f.Write(buf)
		case len(buf) >= j.directMin:
			err = j.writeDirect(buf)
		default:
			err = j.writeBuffered(buf)
		}
		if err != nil {
			return j.fail(fmt.Errorf("journal: write: %w", err))
		}
	}
	var synced time.Duration
	if !j.opts.NoSync {
		t := time.Now()
		if err := j.f.SyncData(); err != nil {
			return j.fail(fmt.Errorf("journal: sync: %w", err))
		}
		synced = time.Since(t)
	}
	if j.opts.OnGroup != nil {
		j.opts.OnGroup(n, synced)
	}
	j.fileSize += int64(n)
	if j.opts.NoSync && j.opts.WritebackBytes > 0 && j.fileSize-j.written >= j.opts.WritebackBytes &&
		j.fileSize < j.opts.MaxFileBytes {
		// Start writing the dirty pages back now, a few MiB at a time, so
		// the fsync at rotation finds little left to do. No durability is
		// promised here (NoSync promises none).
		if _, err := j.f.SyncTo(j.fileSize); err != nil {
			return j.fail(fmt.Errorf("journal: start writeback: %w", err))
		}
		j.written = j.fileSize
	}
	if j.fileSize >= j.opts.MaxFileBytes {
		if j.opts.NoSync {
			// A new file's records must never outlive an older file's, so
			// replay stays a prefix of what was appended: make the old file
			// durable before the new one exists (cheap with writeback).
			if err := j.f.Sync(); err != nil {
				return j.fail(fmt.Errorf("journal: sync: %w", err))
			}
		}
		j.mu.Lock()
		start := j.pos - uint64(j.pendingLocked())
		j.mu.Unlock()
		if err := j.createFile(j.fileID+1, start); err != nil {
			return j.fail(err)
		}
	}
	return nil
}

// pendingLocked is the number of bytes appended but not yet handed to the
// writer.
func (j *Journal) pendingLocked() int { return len(j.buf) }

func (j *Journal) fail(err error) error {
	j.mu.Lock()
	first := j.err == nil
	if first {
		j.err = err
		j.space.Broadcast()
	}
	j.mu.Unlock()
	if first && j.opts.OnError != nil {
		j.opts.OnError(err)
	}
	return err
}

// Release retires journal files all of whose records lie before mark (the
// logical position up to which everything is checkpointed): up to
// RecycleFiles of them are kept for reuse by the next rotations; it returns
// the paths of the rest, which the caller deletes (slowly, and outside its
// locks: see package slowrm). The current file is never released. A kept
// or returned file stays on disk under its old name until reused or
// deleted; after a restart it is an old, checkpointed file again, skipped
// by Replay and released again.
func (j *Journal) Release(mark uint64) (doomed []string) {
	j.filesMu.Lock()
	var victims []fileMeta
	keep := j.files[:0:0]
	for i, fm := range j.files {
		if j.releasableLocked(i, mark) {
			j.dropReaderLocked(fm.id)
			if len(j.recycle) < j.opts.RecycleFiles {
				j.recycle = append(j.recycle, fm.id)
				continue
			}
			victims = append(victims, fm)
			continue
		}
		keep = append(keep, fm)
	}
	j.files = keep
	j.filesMu.Unlock()
	for _, fm := range victims {
		doomed = append(doomed, j.opts.FS.PathJoin(j.opts.Dir, FileName(fm.id)))
	}
	return doomed
}

// Releasable reports whether Release(mark) would retire a file.
func (j *Journal) Releasable(mark uint64) bool {
	j.filesMu.Lock()
	defer j.filesMu.Unlock()
	for i := range j.files {
		if j.releasableLocked(i, mark) {
			return true
		}
	}
	return false
}

// releasableLocked reports whether file i holds no record at or after mark
// (or nothing durable at all) and is not the current file.
func (j *Journal) releasableLocked(i int, mark uint64) bool {
	fm := j.files[i]
	return i+1 < len(j.files) && (!fm.valid || j.files[i+1].valid && j.files[i+1].start <= mark)
}

// Files returns the names of the journal files currently tracked.
func (j *Journal) Files() []string {
	j.filesMu.Lock()
	defer j.filesMu.Unlock()
	out := make([]string, len(j.files))
	for i, fm := range j.files {
		out[i] = FileName(fm.id)
	}
	return out
}

// Close writes every queued record, stops the writer and closes the file.
// Appends after Close fail with ErrClosed.
func (j *Journal) Close() error {
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return nil
	}
	j.closed = true
	j.space.Broadcast()
	j.mu.Unlock()
	close(j.stop)
	<-j.done
	j.filesMu.Lock()
	for id := range j.readers {
		j.dropReaderLocked(id)
	}
	j.filesMu.Unlock()
	err := j.Err()
	if j.dio != nil {
		j.dio.Close()
		j.dio = nil
	}
	j.fileMu.Lock()
	defer j.fileMu.Unlock()
	if j.f != nil {
		serr := j.f.Sync()
		if err == nil && serr != nil {
			err = serr
		}
		if err == nil {
			j.mu.Lock()
			j.advanceDurable(j.pos)
			j.mu.Unlock()
		}
		if cerr := j.f.Close(); err == nil {
			err = cerr
		}
		j.f = nil
	}
	return err
}

// ReplayStats describes a replay.
type ReplayStats struct {
	Files   int // journal files read
	Records int // records passed to fn
	Torn    int // files whose tail held a partial or corrupt record
	// Recycled counts files whose records end where intact records of the
	// file's previous life begin (a reused file; nothing was lost).
	Recycled int
}

// Replay reads every journal file in dir in order and calls fn for each
// intact record at or after logical position from. A file is read up to the
// next file's first position, or up to its first partial or corrupt record
// (a torn tail from a crash, or what a recycled file held before); the rest
// of that file is ignored. It returns the logical position just past the last
// intact record seen. Data passed to fn is only valid during the call.
func Replay(fs vfs.FS, dir string, from uint64, fn func(pos uint64, r Record) error) (end uint64, st ReplayStats, err error) {
	files, err := listFiles(fs, dir)
	if err != nil {
		return 0, st, err
	}
	end = from
	var buf []byte
	for i, fm := range files {
		if !fm.valid {
			// Header lost in a crash: the file held nothing durable.
			continue
		}
		if i+1 < len(files) && files[i+1].valid && files[i+1].start <= from {
			continue // entirely checkpointed
		}
		st.Files++
		f, err := fs.Open(fs.PathJoin(dir, FileName(fm.id)))
		if err != nil {
			return 0, st, fmt.Errorf("journal: open: %w", err)
		}
		r := bufio.NewReaderSize(f, 1<<20)
		if _, err := r.Discard(fileHeaderLen); err != nil {
			f.Close()
			return 0, st, fmt.Errorf("journal: read: %w", err)
		}
		pos := fm.start
		limit := uint64(math.MaxUint64)
		if i+1 < len(files) && files[i+1].valid {
			limit = files[i+1].start
		}
		for pos < limit {
			hdr, perr := r.Peek(recordHeaderLen)
			if perr != nil {
				if len(hdr) > 0 && !allZero(hdr) {
					st.Torn++
				}
				break
			}
			n := peekRecordLen(hdr)
			if n < 0 {
				if !allZero(hdr) { // zeros: the end (O_DIRECT fills its last block with them)
					st.Torn++
				}
				break
			}
			if cap(buf) < n {
				buf = make([]byte, n)
			}
			buf = buf[:n]
			if _, rerr := io.ReadFull(r, buf); rerr != nil {
				st.Torn++
				break
			}
			rec, _, derr := decodeRecord(buf, fm.salt)
			if derr != nil {
				if fm.salt != 0 && staleRecord(buf, fm.id) {
					st.Recycled++
				} else {
					st.Torn++
				}
				break
			}
			if pos >= from {
				if err := fn(pos, rec); err != nil {
					f.Close()
					return 0, st, err
				}
				st.Records++
			}
			pos += uint64(n)
		}
		f.Close()
		end = max(end, pos)
	}
	return end, st, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
