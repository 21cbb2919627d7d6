package storage

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/magnetar-dev/magnetar/dataplane/bookie/storage/entrylog"
	"github.com/magnetar-dev/magnetar/dataplane/bookie/storage/journal"
)

// GCStats describes one garbage-collection pass.
type GCStats struct {
	LogsDeleted       int   // entry logs with no live entry, removed
	LogsCompacted     int   // entry logs whose live entries were copied, then removed
	EntriesMoved      int   // live entries copied by compaction
	BytesReclaimed    int64 // size of the removed logs and journal files minus the bytes copied
	TombstonesDropped int   // tombstones of ledgers deleted more than TombstoneTTL ago
	// JournalFilesReleased counts journal files no index entry pointed
	// into any more, released (recycled or deleted);
	// JournalFilesCompacted those whose few live entries were first copied
	// to the entry logs.
	JournalFilesReleased  int
	JournalFilesCompacted int
}

// RunGC runs one garbage-collection pass synchronously (the background loop
// calls it every GCInterval). It computes the live bytes of every entry log
// from the index, deletes logs with none, and compacts logs whose live
// fraction is below CompactionThreshold: their live entries are appended to
// the current log, the index is repointed (synced), then the old log is
// removed. It holds the flush lock for the whole pass; the files of removed
// logs are deleted after it, slowly and without the lock (package slowrm).
func (s *DiskStorage) RunGC() (GCStats, error) {
	st, err := s.runGC()
	s.metrics.onGC(st)
	s.deleteDoomed()
	return st, err
}

// removeLog removes entry log id and leaves its file to deleteDoomed.
// flushMu must be held.
func (s *DiskStorage) removeLog(id uint64) error {
	name, err := s.logs.Remove(id)
	if err == nil {
		s.doomed = append(s.doomed, name)
	}
	return err
}

// runGC is one pass under flushMu; the files of the logs it removed are
// left to deleteDoomed.
func (s *DiskStorage) runGC() (GCStats, error) {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed {
		return GCStats{}, ErrClosed
	}
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	var st GCStats
	if p := s.ioErr.Load(); p != nil {
		return st, *p
	}
	// Removing a log is only safe once no durable index entry can point
	// into it: make unsynced flush batches durable first.
	if err := s.syncIndexLocked(); err != nil {
		err = fmt.Errorf("storage: gc: %w", err)
		s.setIOError(err)
		return st, err
	}
	dropped, err := s.expireTombstones(time.Now())
	if err != nil {
		return st, err
	}
	st.TombstonesDropped = dropped
	live, err := s.liveBytes()
	if err != nil {
		return st, err
	}
	if s.journalLive {
		if err := s.gcJournal(live, &st); err != nil {
			return st, err
		}
		if st.EntriesMoved > 0 {
			// The moved entries live in entry logs now, which the sums
			// above do not know of (the log they went to may even have
			// been rotated away from, no longer current).
			if live, err = s.liveBytes(); err != nil {
				return st, err
			}
		}
	}
	cur := s.logs.Current()
	for _, info := range s.logs.Logs() {
		if info.ID == cur {
			continue
		}
		lb := live[info.ID]
		switch {
		case lb == 0:
			if err := s.removeLog(info.ID); err != nil {
				return st, err
			}
			st.LogsDeleted++
			st.BytesReclaimed += info.Size
		case float64(lb) < s.cfg.CompactionThreshold*float64(info.Size):
			moved, copied, err := s.compactLog(info.ID, lb)
			if err != nil {
				return st, err
			}
			if copied < 0 {
				continue // not every live entry was found; log kept
			}
			st.LogsCompacted++
			st.EntriesMoved += moved
			st.BytesReclaimed += info.Size - copied
		}
	}
	if st.LogsDeleted+st.LogsCompacted > 0 {
		if err := s.logs.Sync(); err != nil { // directory entries of removals
			err = fmt.Errorf("storage: gc: %w", err)
			s.setIOError(err)
			return st, err
		}
	}
	return st, nil
}

// expireTombstones drops the tombstones of ledgers deleted before now minus
// TombstoneTTL, from memory and the index. The batch is not synced: a
// tombstone that comes back after a crash is dropped again by the next
// pass. flushMu must be held.
func (s *DiskStorage) expireTombstones(now time.Time) (int, error) {
	if s.cfg.TombstoneTTL < 0 {
		return 0, nil
	}
	cutoff := now.Add(-s.cfg.TombstoneTTL).Unix()
	var old []int64
	s.mu.Lock()
	for l, at := range s.dead {
		if at < cutoff {
			old = append(old, l)
		}
	}
	s.mu.Unlock()
	if len(old) == 0 {
		return 0, nil
	}
	b := s.db.NewBatch()
	defer b.Close()
	for _, l := range old {
		if err := b.Delete(deadKey(l), nil); err != nil {
			return 0, err
		}
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		err = fmt.Errorf("storage: gc: %w", err)
		s.setIOError(err)
		return 0, err
	}
	s.mu.Lock()
	for _, l := range old {
		delete(s.dead, l)
	}
	s.mu.Unlock()
	s.indexUnsynced = true
	return len(old), nil
}

// liveBytes sums, per entry log, the on-disk size of the records the index
// references.
func (s *DiskStorage) liveBytes() (map[uint64]int64, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixBlock}, UpperBound: []byte{prefixBlock + 1}})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	live := make(map[uint64]int64)
	for it.First(); it.Valid(); it.Next() {
		if _, err := decodeCurrent(it, func(x indexed) bool {
			live[x.loc.Log] += recordSize(x.loc)
			return true
		}); err != nil {
			return nil, err
		}
	}
	return live, it.Error()
}

// gcJournal releases the checkpointed journal files no index entry points
// into, after copying the live entries of those with few to the entry logs
// (as compactLog does for a log). live is liveBytes' sums; flushMu is held
// and the index synced, so lastMark is a durable checkpoint: a file wholly
// before it holds nothing that a replay would need.
func (s *DiskStorage) gcJournal(live map[uint64]int64, st *GCStats) error {
	for _, fi := range s.jnl.Sealed() {
		if fi.End() > s.lastMark {
			break
		}
		lb := live[journalBit|fi.ID]
		compacted := false
		if lb > 0 {
			if float64(lb) >= s.cfg.CompactionThreshold*float64(fi.Len) {
				continue
			}
			moved, copied, err := s.compactJournalFile(fi.ID, lb)
			if err != nil {
				return err
			}
			if copied < 0 {
				continue
			}
			compacted = true
			st.EntriesMoved += moved
			st.BytesReclaimed -= copied
		}
		doomed, ok := s.jnl.ReleaseFile(fi.ID, s.lastMark)
		if !ok {
			continue
		}
		if doomed != "" {
			s.doomed = append(s.doomed, doomed)
		}
		st.JournalFilesReleased++
		if compacted {
			st.JournalFilesCompacted++
		}
		st.BytesReclaimed += int64(fi.Len)
	}
	return nil
}

// compactJournalFile copies the live entries of journal file id to the
// current entry log and commits their new locations (synced). copied is -1
// if fewer than want live bytes were found (the file is then kept).
func (s *DiskStorage) compactJournalFile(id uint64, want int64) (moved int, copied int64, err error) {
	return s.compact(fmt.Sprintf("journal file %d", id), want, func(fn func(ledger, entry int64, loc entrylog.Location, data []byte) error) error {
		return s.jnl.ScanFile(id, func(off int64, r journal.Record) error {
			if r.Type != journal.RecordEntry {
				return nil
			}
			return fn(r.Ledger, r.Entry, entrylog.Location{Log: journalBit | id, Offset: uint64(off), Length: uint32(len(r.Data))}, r.Data)
		})
	})
}

// compactLog copies the live entries of log id to the current log, commits
// their new locations and removes id. copied is -1 if fewer than want live
// bytes were found (the log is then kept).
func (s *DiskStorage) compactLog(id uint64, want int64) (moved int, copied int64, err error) {
	moved, copied, err = s.compact(fmt.Sprintf("log %d", id), want, func(fn func(ledger, entry int64, loc entrylog.Location, data []byte) error) error {
		return s.logs.Scan(id, fn)
	})
	if err != nil || copied < 0 {
		return moved, copied, err
	}
	return moved, copied, s.removeLog(id)
}

// compact copies every entry scan yields whose index location is still the
// one scan gives (a live entry) to the current entry log, then commits the
// new locations (synced). copied is -1 if fewer than want live bytes were
// found: the caller then keeps the file.
func (s *DiskStorage) compact(file string, want int64, scan func(fn func(ledger, entry int64, loc entrylog.Location, data []byte) error) error) (moved int, copied int64, err error) {
	b := s.db.NewBatch()
	defer b.Close()
	blocks := newBlockCursor(s)
	defer blocks.close()
	err = scan(func(ledger, entry int64, loc entrylog.Location, data []byte) error {
		x, blk, err := blocks.find(ledger, entry)
		if err != nil || x == nil || x.loc != loc {
			return err // not live: deleted, or indexed elsewhere
		}
		nl, err := s.logs.Append(ledger, entry, data)
		if err != nil {
			return err
		}
		x.loc = nl
		blk.dirty = true
		moved++
		copied += recordSize(loc)
		return nil
	})
	if err == nil {
		err = blocks.write(b)
	}
	if err == nil {
		err = s.logs.Sync()
	}
	if err == nil {
		err = b.Commit(pebble.Sync)
	}
	if err != nil {
		err = fmt.Errorf("storage: compact %s: %w", file, err)
		s.setIOError(err)
		return 0, 0, err
	}
	if copied < want {
		s.cfg.Logger.Warn("bookie storage: compaction found fewer live bytes than indexed; file kept",
			"file", file, "found", copied, "indexed", want)
		return moved, -1, nil
	}
	return moved, copied, nil
}

// blockCursor finds entries in the index's blocks for compaction, which
// visits a file's records in file order: mostly consecutive entries of a
// ledger, in one block. Blocks it handed out entries of are kept, so that
// write puts back the locations compaction changed. flushMu must be held
// while it is in use (the index must not change under it).
type blockCursor struct {
	s    *DiskStorage
	it   *pebble.Iterator
	cur  *cursorBlock
	seen map[entryID]*cursorBlock // by (ledger, first entry)
}

type cursorBlock struct {
	ledger int64
	items  []indexed
	dirty  bool
}

func newBlockCursor(s *DiskStorage) *blockCursor {
	return &blockCursor{s: s, seen: make(map[entryID]*cursorBlock)}
}

func (c *blockCursor) close() {
	if c.it != nil {
		c.it.Close()
	}
}

// find returns the index's record of (ledger, entry) and its block, or nil
// if the entry is not indexed. A caller that changes the record marks the
// block dirty, and write stores it.
func (c *blockCursor) find(ledger, entry int64) (*indexed, *cursorBlock, error) {
	if b := c.cur; b == nil || b.ledger != ledger || entry < b.items[0].entry || entry > b.items[len(b.items)-1].entry {
		if err := c.load(ledger, entry); err != nil {
			return nil, nil, err
		}
	}
	b := c.cur
	if b == nil {
		return nil, nil, nil
	}
	i, ok := slices.BinarySearchFunc(b.items, entry, func(x indexed, e int64) int { return cmpI64(x.entry, e) })
	if !ok {
		return nil, nil, nil
	}
	return &b.items[i], b, nil
}

// load makes the block of ledger whose range may hold entry current (nil
// if there is none).
func (c *blockCursor) load(ledger, entry int64) error {
	if c.it == nil {
		it, err := c.s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixBlock}, UpperBound: []byte{prefixBlock + 1}})
		if err != nil {
			return err
		}
		c.it = it
	}
	c.cur = nil
	var kbuf [17]byte
	if entry == math.MaxInt64 || !c.it.SeekLT(blockKey(kbuf[:0], ledger, entry+1)) {
		return c.it.Error()
	}
	l, first, ok := decodeBlockKey(c.it.Key())
	if !ok {
		return errCorruptBlock
	}
	if l != ledger {
		return nil
	}
	if b := c.seen[entryID{l, first}]; b != nil {
		c.cur = b
		return nil
	}
	items, err := decodeBlockItems(nil, first, c.it.Value())
	if err != nil {
		return fmt.Errorf("%w: ledger %d block %d", err, l, first)
	}
	b := &cursorBlock{ledger: l, items: items}
	c.seen[entryID{l, first}] = b
	c.cur = b
	return nil
}

// write adds the blocks marked dirty to batch.
func (c *blockCursor) write(batch *pebble.Batch) error {
	var kbuf, vbuf []byte
	for k, b := range c.seen {
		if !b.dirty {
			continue
		}
		kbuf = blockKey(kbuf, k.ledger, k.entry)
		vbuf = appendBlock(vbuf[:0], b.items)
		if err := batch.Set(kbuf, vbuf, nil); err != nil {
			return err
		}
	}
	return nil
}
