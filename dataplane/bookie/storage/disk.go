package storage

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/magnetar-dev/magnetar/dataplane/bookie/internal/slowrm"
	"github.com/magnetar-dev/magnetar/dataplane/bookie/storage/entrylog"
	"github.com/magnetar-dev/magnetar/dataplane/bookie/storage/journal"
)

// ErrInvalidID is returned for a negative ledger or entry id.
var ErrInvalidID = errors.New("storage: invalid ledger or entry id")

// Directory names below Config.Dir.
const (
	journalDir  = "journal"
	entryLogDir = "entrylogs"
	indexDir    = "index"
	lockFile    = "LOCK"
)

var _ Storage = (*DiskStorage)(nil)

// DiskStorage is the on-disk Storage: journal + write cache + entry logs +
// Pebble index. See doc.go for the format and the concurrency contract.
type DiskStorage struct {
	cfg   Config
	fs    vfs.FS
	db    *pebble.DB
	jnl   *journal.Journal
	logs  *entrylog.Manager
	lock  io.Closer
	jlock io.Closer // lock of a JournalDir outside Dir, else nil
	rc    *readCache

	metrics *storageMetrics

	// closeMu is held shared by every public call and exclusively by Close.
	closeMu sync.RWMutex
	closed  bool

	// flushMu serializes flush, GC and ledger deletion, and owns the entry
	// log writer. Lock order: closeMu -> flushMu -> mu.
	flushMu  sync.Mutex
	lastMark uint64
	// lastFlushStart is when the previous flush began; the bytes a flush
	// finds over the time since then are the recent add rate its writes are
	// paced to (see flushPace). Guarded by flushMu.
	lastFlushStart time.Time
	// indexUnsynced is set when an index batch was committed without
	// syncing Pebble's WAL (see flush); guarded by flushMu.
	indexUnsynced bool
	// journalLive: the index may point into journal files (journalEntriesKey
	// is set, or will be by the next flush), so only GC releases them, once
	// nothing points into them. Guarded by flushMu.
	journalLive bool
	// journalLiveStored: journalEntriesKey is in the index.
	journalLiveStored bool
	// doomed are files released by flush (journal) and GC (entry logs),
	// to be deleted by deleteDoomed without flushMu; guarded by flushMu.
	doomed []string

	mu       sync.Mutex
	space    *sync.Cond // broadcast when a flush finishes or fails
	active   *writeCache
	flushing *writeCache // being flushed, nil otherwise
	ledgers  map[int64]*ledgerMeta
	dead     map[int64]int64 // deleted ledger id -> deletion time, unix s (tombstones 'd'); guarded by mu

	ioErr    atomic.Pointer[error] // sticky
	diskFull atomic.Pointer[error] // cleared when space returns

	flushReq chan struct{}
	stop     chan struct{}
	wg       sync.WaitGroup
}

// Open opens (creating if needed) the storage in cfg.Dir, replays the
// journal from the last checkpoint into the write cache, checkpoints the
// result and starts the background flush, GC and disk-check goroutines.
func Open(cfg Config) (*DiskStorage, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	fs := cfg.FS
	for _, d := range []string{cfg.Dir, cfg.JournalDir, fs.PathJoin(cfg.Dir, entryLogDir), fs.PathJoin(cfg.Dir, indexDir)} {
		if err := fs.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("storage: mkdir %s: %w", d, err)
		}
	}
	// Make the directory entries durable, up to the root.
	for _, root := range []string{cfg.Dir, cfg.JournalDir} {
		for d := root; ; d = fs.PathDir(d) {
			if err := syncDir(fs, d); err != nil {
				return nil, err
			}
			if p := fs.PathDir(d); p == d || p == "." || p == "" {
				break
			}
		}
	}
	lock, err := fs.Lock(fs.PathJoin(cfg.Dir, lockFile))
	if err != nil {
		return nil, fmt.Errorf("storage: lock %s: %w", cfg.Dir, err)
	}
	var jlock io.Closer
	if cfg.JournalDir != fs.PathJoin(cfg.Dir, journalDir) {
		if jlock, err = fs.Lock(fs.PathJoin(cfg.JournalDir, lockFile)); err != nil {
			lock.Close()
			return nil, fmt.Errorf("storage: lock %s: %w", cfg.JournalDir, err)
		}
	}
	s := &DiskStorage{
		cfg:      cfg,
		fs:       fs,
		lock:     lock,
		jlock:    jlock,
		rc:       newReadCache(cfg.ReadCacheMaxBytes),
		metrics:  newStorageMetrics(),
		active:   newWriteCache(0),
		ledgers:  make(map[int64]*ledgerMeta),
		dead:     make(map[int64]int64),
		flushReq: make(chan struct{}, 1),
		stop:     make(chan struct{}),
	}
	s.space = sync.NewCond(&s.mu)
	if err := s.open(); err != nil {
		s.release()
		return nil, err
	}
	s.startLoops()
	return s, nil
}

func (s *DiskStorage) open() error {
	cache := pebble.NewCache(s.cfg.IndexCacheBytes)
	defer cache.Unref()
	db, err := pebble.Open(s.fs.PathJoin(s.cfg.Dir, indexDir), &pebble.Options{
		FS:           s.fs,
		Cache:        cache,
		MemTableSize: uint64(s.cfg.IndexMemTableBytes),
		Logger:       pebbleLogger{s.cfg.Logger},
	})
	if err != nil {
		return fmt.Errorf("storage: open index: %w", err)
	}
	s.db = db
	if err := s.migrateEntryKeys(); err != nil {
		return err
	}
	if err := s.loadMeta(); err != nil {
		return err
	}
	mark, err := s.loadMark()
	if err != nil {
		return err
	}
	s.lastMark = mark
	if _, closer, err := s.db.Get(journalEntriesKey); err == nil {
		closer.Close()
		s.journalLiveStored = true
	} else if !errors.Is(err, pebble.ErrNotFound) {
		return fmt.Errorf("storage: index: %w", err)
	}
	s.journalLive = !s.cfg.CopyToEntryLogs || s.journalLiveStored
	if err := s.checkInstance(mark == 0 && len(s.ledgers) == 0 && len(s.dead) == 0); err != nil {
		return err
	}
	if s.logs, err = entrylog.Open(s.fs, s.fs.PathJoin(s.cfg.Dir, entryLogDir), s.cfg.EntryLogMaxBytes); err != nil {
		return err
	}
	jdir := s.cfg.JournalDir
	end, st, err := journal.Replay(s.fs, jdir, mark, s.replayRecord)
	if err != nil {
		return fmt.Errorf("storage: replay: %w", err)
	}
	if st.Torn > 0 {
		s.cfg.Logger.Warn("bookie storage: discarded torn journal tail", "files", st.Torn)
	}
	s.jnl, err = journal.Open(journal.Options{
		FS:            s.fs,
		Dir:           jdir,
		MaxGroupWait:  s.cfg.JournalMaxGroupWait,
		MaxGroupBytes: s.cfg.JournalMaxGroupBytes,
		MaxFileBytes:  s.cfg.JournalMaxFileBytes,
		RecycleFiles:  s.cfg.JournalRecycleFiles,
		DirectIO:      !s.cfg.JournalBufferedWrites,
		NoSync:        s.cfg.JournalNoSync,
		OnGroup:       s.metrics.onJournalGroup,
		OnError:       s.setIOError,
	}, max(end, mark))
	if err != nil {
		return err
	}
	if err := s.jnl.DirectIOError(); err != nil && s.fs == vfs.Default {
		s.cfg.Logger.Info("bookie storage: journal written through the page cache, not with O_DIRECT", "dir", jdir, "err", err)
	}
	// Recovery checkpoint: makes the replayed records durable in the entry
	// logs and index, which lets every older journal file (torn tails
	// included) be deleted: at once, since nothing waits on the disk yet.
	if err := s.flush(true); err != nil {
		return err
	}
	for _, name := range s.doomed {
		if err := s.fs.Remove(name); err != nil {
			s.cfg.Logger.Warn("bookie storage: delete of a released file failed", "file", name, "err", err)
		}
	}
	s.doomed = nil
	return nil
}

func (s *DiskStorage) loadMeta() error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixMeta}, UpperBound: []byte{prefixMeta + 1}})
	if err != nil {
		return fmt.Errorf("storage: index: %w", err)
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		l, ok := decodeMetaKey(it.Key())
		if !ok {
			continue
		}
		m, err := decodeLedgerMeta(it.Value())
		if err != nil {
			return err
		}
		s.ledgers[l] = m
	}
	if err := it.Error(); err != nil {
		return err
	}
	dit, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixDead}, UpperBound: []byte{prefixDead + 1}})
	if err != nil {
		return fmt.Errorf("storage: index: %w", err)
	}
	defer dit.Close()
	now := time.Now().Unix()
	var undated []int64
	for dit.First(); dit.Valid(); dit.Next() {
		if l, ok := decodeDeadKey(dit.Key()); ok {
			at, dated := decodeDeadValue(dit.Value())
			if !dated {
				at = now
				undated = append(undated, l)
			}
			s.dead[l] = at
		}
	}
	if err := dit.Error(); err != nil {
		return err
	}
	// Tombstones written before they carried a time get one now, so they
	// expire TombstoneTTL from here rather than never.
	if len(undated) > 0 {
		b := s.db.NewBatch()
		defer b.Close()
		for _, l := range undated {
			if err := b.Set(deadKey(l), deadValue(now), nil); err != nil {
				return err
			}
		}
		return b.Commit(pebble.NoSync)
	}
	return nil
}

func (s *DiskStorage) loadMark() (uint64, error) {
	v, closer, err := s.db.Get(checkpointKey)
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("storage: index: %w", err)
	}
	defer closer.Close()
	if len(v) != 8 {
		return 0, errors.New("storage: corrupt checkpoint")
	}
	return uint64(v[0])<<56 | uint64(v[1])<<48 | uint64(v[2])<<40 | uint64(v[3])<<32 |
		uint64(v[4])<<24 | uint64(v[5])<<16 | uint64(v[6])<<8 | uint64(v[7]), nil
}

// replayRecord applies one journal record during Open.
func (s *DiskStorage) replayRecord(pos uint64, r journal.Record) error {
	switch r.Type {
	case journal.RecordEntry:
		s.mu.Lock()
		if _, gone := s.dead[r.Ledger]; !gone {
			s.applyAddLocked(r.Ledger, r.Entry, r.LAC, r.Data, pos+uint64(journal.EncodedLen(len(r.Data))))
		}
		s.mu.Unlock()
	case journal.RecordFence:
		s.mu.Lock()
		s.applyFenceLocked(r.Ledger)
		s.mu.Unlock()
	case journal.RecordDelete:
		return s.applyDelete(r.Ledger)
	}
	return nil
}

func (s *DiskStorage) metaLocked(ledger int64) *ledgerMeta {
	m := s.ledgers[ledger]
	if m == nil {
		m = newLedgerMeta()
		s.ledgers[ledger] = m
	}
	return m
}

// applyAddLocked records an added entry whose journal record ends at
// logical position end.
func (s *DiskStorage) applyAddLocked(ledger, entry, lac int64, data []byte, end uint64) {
	m := s.metaLocked(ledger)
	m.last = max(m.last, entry)
	m.lac = max(m.lac, lac)
	m.dirty = true
	s.active.put(ledger, entry, lac, data, end)
}

func (s *DiskStorage) applyFenceLocked(ledger int64) {
	m := s.metaLocked(ledger)
	m.fenced = true
	m.dirty = true
}

// applyDelete removes ledger from memory and durably from the index.
func (s *DiskStorage) applyDelete(ledger int64) error {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	s.mu.Lock()
	delete(s.ledgers, ledger)
	now := time.Now().Unix()
	s.dead[ledger] = now
	s.active.deleteLedger(ledger)
	if s.flushing != nil {
		s.flushing.deleteLedger(ledger)
	}
	s.mu.Unlock()
	s.rc.deleteLedger(ledger)
	b := s.db.NewBatch()
	defer b.Close()
	lo, hi := ledgerBlockBounds(ledger)
	if err := b.DeleteRange(lo, hi, nil); err != nil {
		return err
	}
	if err := b.Delete(metaKey(ledger), nil); err != nil {
		return err
	}
	if err := b.Set(deadKey(ledger), deadValue(now), nil); err != nil {
		return err
	}
	if err := b.Commit(pebble.Sync); err != nil {
		err = fmt.Errorf("storage: delete ledger %d: %w", ledger, err)
		s.setIOError(err)
		return err
	}
	s.indexUnsynced = false // the WAL sync covered every earlier batch
	return nil
}

func (s *DiskStorage) startLoops() {
	s.wg.Add(1)
	go s.flushLoop()
	if s.cfg.GCInterval > 0 {
		s.wg.Add(1)
		go s.periodic(s.cfg.GCInterval, func() {
			if _, err := s.RunGC(); err != nil {
				s.cfg.Logger.Warn("bookie storage: gc failed", "err", err)
			}
		})
	}
	if s.cfg.DiskCheckInterval > 0 {
		s.wg.Add(1)
		go s.periodic(s.cfg.DiskCheckInterval, func() { s.CheckDisk() })
	}
}

func (s *DiskStorage) periodic(every time.Duration, fn func()) {
	defer s.wg.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			fn()
		}
	}
}

func (s *DiskStorage) flushLoop() {
	defer s.wg.Done()
	var tick <-chan time.Time
	if s.cfg.FlushInterval > 0 {
		t := time.NewTicker(s.cfg.FlushInterval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-s.stop:
			return
		case <-tick:
		case <-s.flushReq:
			// Adds that crossed FlushTriggerBytes while the previous flush
			// ran left a request behind; skip it unless the cache has
			// filled again, so a full-size flush is not chased by a tiny one.
			s.mu.Lock()
			small := s.active.bytes < s.cfg.FlushTriggerBytes
			s.mu.Unlock()
			if small {
				continue
			}
		}
		if err := s.flush(false); err != nil {
			s.cfg.Logger.Error("bookie storage: flush failed", "err", err)
		}
		s.deleteDoomed()
	}
}

func (s *DiskStorage) requestFlush() {
	select {
	case s.flushReq <- struct{}{}:
	default:
	}
}

// Flush writes the write cache to the entry logs and index and checkpoints
// the journal (synchronously). The background loop calls it periodically.
func (s *DiskStorage) Flush() error {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	err := s.flush(false)
	s.deleteDoomed()
	return err
}

// dirtyMeta is a ledger's metadata changed since the previous flush: its
// encoding at the snapshot, and the live record.
type dirtyMeta struct {
	ledger int64
	val    []byte
	m      *ledgerMeta
}

// flush: snapshot the write cache, append its entries sorted by (ledger,
// entry) to the entry log, fsync, then commit index + metadata + log mark
// in one Pebble batch, then release covered journal files.
//
// The batch is committed without syncing Pebble's WAL unless force is set
// or journal files are about to be released: a checkpoint that is lost in
// a crash only makes recovery replay more of the journal, which is still
// there, because journal files are released only after a synced commit of
// a mark past them (see doc.go, "Checkpoints").
func (s *DiskStorage) flush(force bool) error {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	if p := s.ioErr.Load(); p != nil {
		return *p
	}
	// An add journals its entry and puts it in the write cache under mu,
	// so the mark read under mu at the swap covers exactly the records of
	// the entries in the snapshot and the earlier ones.
	s.mu.Lock()
	mark := s.jnl.Position()
	snap := s.active
	var metas []dirtyMeta
	for l, m := range s.ledgers {
		if m.dirty {
			metas = append(metas, dirtyMeta{l, m.encode(), m})
			m.dirty = false
		}
	}
	if !force && len(snap.entries) == 0 && len(metas) == 0 && mark == s.lastMark {
		s.mu.Unlock()
		return nil
	}
	s.active = newWriteCache(len(snap.entries))
	s.flushing = snap
	s.mu.Unlock()

	// Journal files are released here only while nothing in the index
	// points into them; otherwise GC releases them (gc.go).
	sync := force || !s.journalLive && s.jnl.Releasable(mark)
	started := time.Now()
	var pace time.Duration
	if !force && !s.lastFlushStart.IsZero() && s.cfg.CopyToEntryLogs {
		pace = flushPace(snap.bytes, started.Sub(s.lastFlushStart))
	}
	s.lastFlushStart = started
	var err error
	if !s.cfg.CopyToEntryLogs && s.jnl.Durable() < mark {
		// Only durable records may be indexed in place.
		err = s.jnl.Sync()
	}
	if err == nil {
		err = s.writeSnapshot(snap, metas, mark, sync, pace)
	}
	if err != nil {
		err = fmt.Errorf("storage: flush: %w", err)
		s.setIOError(err)
		return err // snap stays readable in s.flushing
	}
	s.metrics.flushSeconds.Observe(time.Since(started).Seconds())
	s.metrics.flushBytes.Add(float64(snap.bytes))
	s.mu.Lock()
	s.flushing = nil
	s.space.Broadcast()
	s.mu.Unlock()
	// Readers reach the snapshot only under mu, and copy what they read.
	snap.release()
	s.lastMark = mark
	s.indexUnsynced = !sync
	if sync && !s.journalLive {
		s.doomed = append(s.doomed, s.jnl.Release(mark)...)
	}
	return nil
}

// deleteDoomed deletes the files flush and GC released, without flushMu:
// shrunk a few MiB at a time (package slowrm), which takes seconds for a
// large file, during which flushes, and so adds, must go on. Closing the
// storage ends the pauses. It must not be called with flushMu held.
func (s *DiskStorage) deleteDoomed() {
	s.flushMu.Lock()
	doomed := s.doomed
	s.doomed = nil
	s.flushMu.Unlock()
	for _, name := range doomed {
		if err := slowrm.Remove(s.fs, name, slowrm.Options{Stop: s.stop}); err != nil {
			s.cfg.Logger.Warn("bookie storage: delete of a released file failed", "file", name, "err", err)
		}
	}
}

// addsWaiting reports whether the write cache has filled past half its
// bound, when a paced flush must hurry (adds block once it is full).
func (s *DiskStorage) addsWaiting() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.active.bytes >= s.cfg.WriteCacheMaxBytes/2
}

// syncIndexLocked makes every index batch committed so far durable (a sync
// of Pebble's WAL), if one was committed without. flushMu must be held.
func (s *DiskStorage) syncIndexLocked() error {
	if !s.indexUnsynced {
		return nil
	}
	if err := s.db.LogData(nil, pebble.Sync); err != nil {
		return err
	}
	s.indexUnsynced = false
	return nil
}

// flushPaceChunk is the amount of entry data a paced flush writes between
// pauses.
const flushPaceChunk = 128 << 10

// flushPace returns how long writing flushPaceChunk bytes should take so
// that a flush of n bytes, accumulated over the elapsed time since the
// previous flush began, is written at twice that rate: fast enough to stay
// ahead of the adds, slow enough that the entry log's data reaches the
// disk as a steady trickle instead of a burst of megabytes queued ahead of
// the journal's next fdatasync (the burst was the main cause of the add
// latency tail on a quiet disk, in ledgerbench's E=1 latency runs). Zero:
// no pacing.
func flushPace(n int64, elapsed time.Duration) time.Duration {
	if n <= flushPaceChunk || elapsed <= 0 {
		return 0
	}
	return min(time.Duration(float64(elapsed)*flushPaceChunk/float64(2*n)), 5*time.Millisecond)
}

// writeSnapshot writes snap to the entry log, syncs it and commits the
// index batch (see flush). With pace > 0 it pauses so that each
// flushPaceChunk of entry data takes at least pace, unless adds are
// waiting for the write cache (then it writes at full speed).
func (s *DiskStorage) writeSnapshot(snap *writeCache, metas []dirtyMeta, mark uint64, sync bool, pace time.Duration) error {
	keys := make([]entryID, 0, len(snap.entries))
	for k := range snap.entries {
		keys = append(keys, k)
	}
	// In key order: the batch then goes into Pebble's memtable as a run of
	// ascending keys, each inserted next to the one before (its skiplist
	// reuses the previous insert's position) instead of searched for from
	// the top; and the entry log is appended to sorted.
	slices.SortFunc(keys, func(a, b entryID) int {
		if a.ledger != b.ledger {
			return cmpI64(a.ledger, b.ledger)
		}
		return cmpI64(a.entry, b.entry)
	})
	b := s.db.NewBatch()
	defer b.Close()
	// The index takes each ledger's locations as one run (blockindex.go);
	// metas, sorted too, are walked alongside for each ledger's metadata
	// (every ledger in the snapshot has dirty metadata).
	slices.SortFunc(metas, func(a, b dirtyMeta) int { return cmpI64(a.ledger, b.ledger) })
	var (
		kbuf, vbuf []byte
		items      []indexed
		runLedger  int64
		mi         int
	)
	endRun := func() error {
		if len(items) == 0 {
			return nil
		}
		for mi < len(metas) && metas[mi].ledger < runLedger {
			mi++
		}
		var m *ledgerMeta
		if mi < len(metas) && metas[mi].ledger == runLedger {
			m = metas[mi].m
		}
		var err error
		kbuf, vbuf, err = s.indexLedger(b, runLedger, items, m, kbuf, vbuf)
		items = items[:0]
		return err
	}
	add := func(k entryID, loc entrylog.Location) error {
		if len(items) > 0 && k.ledger != runLedger {
			if err := endRun(); err != nil {
				return err
			}
		}
		runLedger = k.ledger
		items = append(items, indexed{k.entry, loc})
		return nil
	}
	if !s.cfg.CopyToEntryLogs { // entries in place
		for _, k := range keys {
			e := snap.entries[k]
			id, off, ok := s.jnl.Locate(e.end - uint64(journal.EncodedLen(len(e.data))))
			if !ok {
				return fmt.Errorf("journal record of entry (%d,%d) at %d not found", k.ledger, k.entry, e.end)
			}
			if err := add(k, entrylog.Location{Log: journalBit | id, Offset: uint64(off), Length: uint32(len(e.data))}); err != nil {
				return err
			}
		}
		if err := endRun(); err != nil {
			return err
		}
		return s.commitSnapshot(b, keys, metas, mark, sync)
	}
	chunkStart, chunk := time.Now(), 0
	for _, k := range keys {
		e := snap.entries[k]
		if pace > 0 {
			if chunk += len(e.data); chunk >= flushPaceChunk {
				chunk = 0
				if d := pace - time.Since(chunkStart); d > 0 && !s.addsWaiting() {
					time.Sleep(d)
				}
				chunkStart = time.Now()
			}
		}
		loc, err := s.logs.Append(k.ledger, k.entry, e.data)
		if err != nil {
			return err
		}
		if err := add(k, loc); err != nil {
			return err
		}
	}
	if err := endRun(); err != nil {
		return err
	}
	if err := s.logs.Sync(); err != nil {
		return err
	}
	return s.commitSnapshot(b, keys, metas, mark, sync)
}

// commitSnapshot adds the metadata and the checkpoint to the flush batch b,
// which holds the locations of keys, and commits it.
func (s *DiskStorage) commitSnapshot(b *pebble.Batch, keys []entryID, metas []dirtyMeta, mark uint64, sync bool) error {
	if s.journalLive && !s.journalLiveStored {
		if err := b.Set(journalEntriesKey, nil, nil); err != nil {
			return err
		}
	}
	for _, m := range metas {
		if err := b.Set(metaKey(m.ledger), m.val, nil); err != nil {
			return err
		}
	}
	var mb [8]byte
	for i := range 8 {
		mb[i] = byte(mark >> (56 - 8*i))
	}
	if err := b.Set(checkpointKey, mb[:], nil); err != nil {
		return err
	}
	opts := pebble.NoSync
	if sync {
		opts = pebble.Sync
	}
	if err := b.Commit(opts); err != nil {
		return err
	}
	s.journalLiveStored = s.journalLive
	if len(keys) > 0 {
		s.rc.invalidate(keys)
	}
	return nil
}

func cmpI64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// setIOError turns the storage read-only for good.
func (s *DiskStorage) setIOError(err error) {
	if s.ioErr.CompareAndSwap(nil, &err) {
		s.cfg.Logger.Error("bookie storage: read-only after I/O error", "err", err)
	}
	s.mu.Lock()
	s.space.Broadcast()
	s.mu.Unlock()
}

// ReadOnly implements Storage.
func (s *DiskStorage) ReadOnly() error {
	if p := s.ioErr.Load(); p != nil {
		return *p
	}
	if p := s.diskFull.Load(); p != nil {
		return *p
	}
	return nil
}

func (s *DiskStorage) writable() error {
	if err := s.ReadOnly(); err != nil {
		return fmt.Errorf("%w: %w", ErrReadOnly, err)
	}
	return nil
}

// CheckDisk runs one free-space check now (the background loop calls it
// every DiskCheckInterval) and returns the resulting ReadOnly() state.
func (s *DiskStorage) CheckDisk() error {
	u, err := s.fs.GetDiskUsage(s.cfg.Dir)
	if err != nil || u.TotalBytes == 0 {
		return s.ReadOnly()
	}
	var cause error
	switch {
	case s.cfg.MinFreeDiskBytes > 0 && u.AvailBytes < uint64(s.cfg.MinFreeDiskBytes):
		cause = fmt.Errorf("storage: disk full: %d bytes free, want at least %d", u.AvailBytes, s.cfg.MinFreeDiskBytes)
	case float64(u.UsedBytes)/float64(u.TotalBytes) > s.cfg.MaxDiskUsage:
		cause = fmt.Errorf("storage: disk full: %.1f%% used, limit %.1f%%",
			100*float64(u.UsedBytes)/float64(u.TotalBytes), 100*s.cfg.MaxDiskUsage)
	}
	if cause != nil {
		if s.diskFull.Load() == nil {
			s.cfg.Logger.Warn("bookie storage: read-only", "err", cause)
		}
		s.diskFull.Store(&cause)
	} else {
		s.diskFull.Store(nil)
	}
	return s.ReadOnly()
}

// AddEntry implements Storage.
func (s *DiskStorage) AddEntry(ledgerID, entryID, lac int64, data []byte, recovery bool, done func(error)) {
	if ledgerID < 0 || entryID < 0 {
		done(ErrInvalidID)
		return
	}
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed {
		done(ErrClosed)
		return
	}
	if err := s.writable(); err != nil {
		done(err)
		return
	}
	crc := journal.EntryChecksum(ledgerID, entryID, lac, data)
	// Wait for journal space before taking mu, which reads need too (the
	// append below then seldom waits, under mu).
	if err := s.jnl.WaitSpace(); err != nil {
		done(err)
		return
	}
	s.mu.Lock()
	for s.active.bytes >= s.cfg.WriteCacheMaxBytes && s.flushing != nil && s.ioErr.Load() == nil {
		s.space.Wait()
	}
	if m := s.ledgers[ledgerID]; m != nil && m.fenced && !recovery {
		s.mu.Unlock()
		done(ErrFenced)
		return
	}
	if _, gone := s.dead[ledgerID]; gone {
		s.mu.Unlock()
		done(ErrFenced) // deleted: never re-created by a late writer
		return
	}
	// Journaled under mu, so a flush's mark and snapshot agree (see flush).
	end, err := s.jnl.AppendChecksummed(ledgerID, entryID, lac, data, crc, done)
	if err != nil {
		s.mu.Unlock()
		done(err)
		return
	}
	s.applyAddLocked(ledgerID, entryID, lac, data, end)
	full := s.active.bytes >= s.cfg.FlushTriggerBytes
	s.mu.Unlock()
	if full {
		s.requestFlush()
	}
}

// Fence implements Storage. The ledger rejects non-recovery adds as soon as
// Fence returns; done reports when the mark is durable.
func (s *DiskStorage) Fence(ledgerID int64, done func(error)) {
	if ledgerID < 0 {
		done(ErrInvalidID)
		return
	}
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed {
		done(ErrClosed)
		return
	}
	if err := s.writable(); err != nil {
		done(err)
		return
	}
	s.mu.Lock()
	if _, gone := s.dead[ledgerID]; gone {
		s.mu.Unlock()
		done(nil) // a deleted ledger is already closed to writers
		return
	}
	s.applyFenceLocked(ledgerID)
	s.mu.Unlock()
	s.jnl.AppendFence(ledgerID, done)
}

// IsFenced implements Storage; an unknown ledger is not fenced.
func (s *DiskStorage) IsFenced(ledgerID int64) (bool, error) {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed {
		return false, ErrClosed
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.ledgers[ledgerID]
	return m != nil && m.fenced, nil
}

// LastEntry implements Storage.
func (s *DiskStorage) LastEntry(ledgerID int64) (last, lac int64, err error) {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed {
		return NoEntry, NoEntry, ErrClosed
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.ledgers[ledgerID]
	if m == nil {
		return NoEntry, NoEntry, ErrNoSuchLedger
	}
	return m.last, m.lac, nil
}

// DeleteLedger implements Storage. It returns once the deletion is durable
// (journaled and removed from the index).
func (s *DiskStorage) DeleteLedger(ledgerID int64) error {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	if err := s.writable(); err != nil {
		return err
	}
	errc := make(chan error, 1)
	s.jnl.AppendDelete(ledgerID, func(err error) { errc <- err })
	if err := <-errc; err != nil {
		return err
	}
	return s.applyDelete(ledgerID)
}

// ReadEntry implements Storage.
func (s *DiskStorage) ReadEntry(ledgerID, entryID int64) ([]byte, error) {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed {
		return nil, ErrClosed
	}
	s.mu.Lock()
	if s.ledgers[ledgerID] == nil {
		s.mu.Unlock()
		return nil, ErrNoSuchLedger
	}
	// Copied under mu: the caches' arenas are recycled after their flush.
	if d, ok := s.active.get(ledgerID, entryID); ok {
		d = cachedCopy(d)
		s.mu.Unlock()
		return d, nil
	}
	if s.flushing != nil {
		if d, ok := s.flushing.get(ledgerID, entryID); ok {
			d = cachedCopy(d)
			s.mu.Unlock()
			return d, nil
		}
	}
	s.mu.Unlock()
	if entryID < 0 {
		return nil, ErrNoSuchEntry
	}
	sequential := s.rc.noteRead(ledgerID, entryID)
	if d, ok := s.rc.get(ledgerID, entryID); ok {
		return d, nil
	}
	if sequential && s.cfg.ReadAheadEntries > 0 {
		if d, err := s.readAhead(ledgerID, entryID); err == nil || errors.Is(err, ErrNoSuchEntry) {
			return d, err
		}
	}
	return s.readIndexed(ledgerID, entryID)
}

// readIndexed looks the entry up in the index and reads it from its file,
// looking again if compaction moved it meanwhile (its old file removed, or
// a released journal file already overwritten by its next life).
func (s *DiskStorage) readIndexed(ledgerID, entryID int64) ([]byte, error) {
	var prev entrylog.Location
	var readErr error
	for attempt := 0; ; attempt++ {
		loc, err := s.lookup(ledgerID, entryID)
		if err != nil {
			return nil, err
		}
		if attempt > 0 && loc == prev {
			return nil, readErr
		}
		d, err := s.readAt(loc, ledgerID, entryID)
		if err == nil || attempt == 3 {
			return d, err
		}
		prev, readErr = loc, err
	}
}

// lookup returns the index location of an entry.
func (s *DiskStorage) lookup(ledgerID, entryID int64) (entrylog.Location, error) {
	var loc entrylog.Location
	found := false
	err := s.scanIndex(ledgerID, entryID, func(x indexed) bool {
		found = x.entry == entryID
		loc = x.loc
		return false
	})
	if err != nil {
		return entrylog.Location{}, err
	}
	if !found {
		return entrylog.Location{}, ErrNoSuchEntry
	}
	return loc, nil
}

// readAheadMaxGap is the most bytes of other ledgers' records a read-ahead
// reads past to fetch the next entry of its own with the same read: entries
// indexed in place in the journal sit between other ledgers' entries.
const readAheadMaxGap = 64 << 10

// readAhead reads entryID and the entries following it in the same ledger
// (bounded by ReadAheadEntries / ReadAheadBytes) in as few contiguous log
// reads as possible, caching the followers.
func (s *DiskStorage) readAhead(ledgerID, entryID int64) ([]byte, error) {
	var items []indexed
	var total int64
	err := s.scanIndex(ledgerID, entryID, func(x indexed) bool {
		if len(items) >= s.cfg.ReadAheadEntries || len(items) > 0 && total+recordSize(x.loc) > s.cfg.ReadAheadBytes {
			return false
		}
		items = append(items, x)
		total += recordSize(x.loc)
		return true
	})
	if err != nil {
		return nil, err
	}
	if len(items) == 0 || items[0].entry != entryID {
		return nil, ErrNoSuchEntry
	}
	var want []byte
	locs := make([]entrylog.Location, len(items))
	for i := 0; i < len(items); {
		j := i + 1
		for j < len(items) && items[j].loc.Log == items[i].loc.Log && items[j].loc.Offset >= recordEnd(items[j-1].loc) &&
			items[j].loc.Offset-recordEnd(items[j-1].loc) <= readAheadMaxGap &&
			int64(recordEnd(items[j].loc)-items[i].loc.Offset) <= 2*s.cfg.ReadAheadBytes {
			j++
		}
		var own int64
		for k := i; k < j; k++ {
			locs[k] = items[k].loc
			own += recordSize(items[k].loc)
		}
		// Cached entries alias the run's buffer; one that also holds other
		// ledgers' records would keep them alive uncounted, so its entries
		// are copied out.
		gappy := int64(recordEnd(locs[j-1])-locs[i].Offset) > own
		err := s.readRun(locs[i:j], func(k int, l, e int64, data []byte) error {
			if l != ledgerID || e != items[i+k].entry {
				return fmt.Errorf("%w: read-ahead of ledger %d", entrylog.ErrCorrupt, ledgerID)
			}
			if gappy {
				data = bytes.Clone(data)
			}
			if e == entryID {
				want = data
			} else {
				s.rc.put(l, e, data)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		i = j
	}
	return want, nil
}

// Close implements Storage: it waits for in-flight calls, writes every
// queued journal record, flushes the write cache (a final checkpoint) and
// closes all files.
func (s *DiskStorage) Close() error {
	s.closeMu.Lock()
	if s.closed {
		s.closeMu.Unlock()
		return nil
	}
	s.closed = true
	s.closeMu.Unlock()
	close(s.stop)
	s.wg.Wait()
	err := s.jnl.Close()
	if ferr := s.flush(true); err == nil && ferr != nil && s.ioErr.Load() == nil {
		err = ferr
	}
	if rerr := s.release(); err == nil {
		err = rerr
	}
	return err
}

func (s *DiskStorage) release() error {
	var errs []error
	if s.jnl != nil {
		errs = append(errs, s.jnl.Close())
	}
	if s.logs != nil {
		errs = append(errs, s.logs.Close())
	}
	if s.db != nil {
		errs = append(errs, s.db.Close())
	}
	errs = append(errs, s.lock.Close())
	if s.jlock != nil {
		errs = append(errs, s.jlock.Close())
	}
	return errors.Join(errs...)
}

func syncDir(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return fmt.Errorf("storage: open dir: %w", err)
	}
	err = d.Sync()
	d.Close()
	if err != nil {
		return fmt.Errorf("storage: sync dir: %w", err)
	}
	return nil
}

// pebbleLogger routes Pebble's messages to slog, dropping Info.
type pebbleLogger struct {
	l interface{ Error(string, ...any) }
}

func (pebbleLogger) Infof(string, ...any) {}
func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error("bookie storage: index", "msg", fmt.Sprintf(format, args...))
}
func (p pebbleLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("bookie storage: index: "+format, args...))
}
