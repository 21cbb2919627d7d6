package storage

import (
	"fmt"

	"github.com/magnetar-dev/magnetar/dataplane/bookie/storage/entrylog"
	"github.com/magnetar-dev/magnetar/dataplane/bookie/storage/journal"
)

// An index value is an entrylog.Location. Its Log field names either an
// entry log (bit 63 clear) or, with bit 63 set, the journal file the entry
// was written to (the default: see Config.CopyToEntryLogs); Offset is then
// the offset of the journal record in that file. Entry-log and journal ids
// are separate sequences, so the bit keeps them apart in the index and in
// GC's per-file sums.
const journalBit = 1 << 63

// journalEntriesKey, once set, records that the index may hold journal
// locations: journal files are then released by GC (when nothing points
// into them) and never by a flush, even after a restart with
// CopyToEntryLogs.
var journalEntriesKey = []byte("J")

func inJournal(loc entrylog.Location) bool { return loc.Log&journalBit != 0 }

// recordSize returns the on-disk size of the record at loc.
func recordSize(loc entrylog.Location) int64 {
	if inJournal(loc) {
		return int64(journal.EncodedLen(int(loc.Length)))
	}
	return loc.Size()
}

// recordEnd returns the file offset just past the record at loc.
func recordEnd(loc entrylog.Location) uint64 { return loc.Offset + uint64(recordSize(loc)) }

// readRun reads the records at locs, which lie in one file in increasing
// offsets (gaps between them allowed), with one read, and calls fn for each
// with its ledger, entry and data (aliasing the read buffer).
func (s *DiskStorage) readRun(locs []entrylog.Location, fn func(i int, ledger, entry int64, data []byte) error) error {
	first, last := locs[0], locs[len(locs)-1]
	n := int64(recordEnd(last) - first.Offset)
	if inJournal(first) {
		run, err := s.jnl.ReadRun(first.Log&^journalBit, int64(first.Offset), int(n))
		if err != nil {
			return err
		}
		for i, loc := range locs {
			l, e, data, err := run.ParseEntry(int(loc.Offset - first.Offset))
			if err != nil {
				return fmt.Errorf("%w: journal file %d offset %d: %w", entrylog.ErrCorrupt, first.Log&^journalBit, loc.Offset, err)
			}
			if err := fn(i, l, e, data); err != nil {
				return err
			}
		}
		return nil
	}
	buf, err := s.logs.ReadRun(first.Log, first.Offset, n)
	if err != nil {
		return err
	}
	for i, loc := range locs {
		l, e, data, _, err := entrylog.ParseRecord(buf[loc.Offset-first.Offset:])
		if err != nil {
			return fmt.Errorf("%w: log %d offset %d", err, first.Log, loc.Offset)
		}
		if err := fn(i, l, e, data); err != nil {
			return err
		}
	}
	return nil
}

// readAt reads the record at loc and checks that it is (ledger, entry).
func (s *DiskStorage) readAt(loc entrylog.Location, ledger, entry int64) ([]byte, error) {
	var out []byte
	err := s.readRun([]entrylog.Location{loc}, func(_ int, l, e int64, data []byte) error {
		if l != ledger || e != entry || len(data) != int(loc.Length) {
			return fmt.Errorf("%w: file %x offset %d holds (%d,%d), want (%d,%d)",
				entrylog.ErrCorrupt, loc.Log, loc.Offset, l, e, ledger, entry)
		}
		out = data
		return nil
	})
	return out, err
}
