// Package storage is a bookie's durable ledger storage: the journal (write-ahead
// log with group commit), sorted append-only entry logs with an index for random
// reads, a write cache, read-ahead, crash recovery and garbage collection.
//
// Storage (storage.go) is the contract the bookie server programs against;
// DiskStorage (Open) is the on-disk implementation; package storagetest is
// the conformance suite every implementation runs.
//
// # Write path
//
// AddEntry queues a journal record and copies the entry into the
// in-memory write cache (readable at once), both under mu; done fires from
// the journal writer goroutine after the record's group is written (with
// O_DIRECT by default, see journal.Options.DirectIO; JournalBufferedWrites
// writes through the page cache) and fsynced (or
// written, with JournalNoSync: then the journal starts writeback every few
// MiB and fsyncs only at file rotation, see package journal). Fence sets the in-memory fenced flag (non-recovery adds
// fail with ErrFenced from then on) and journals a fence record. DeleteLedger
// journals a delete record, waits for it, then removes the ledger from the
// caches and, in one synced Pebble batch, from the index and metadata; GC
// reclaims the bytes later.
//
// A flush (every FlushInterval, as soon as the write cache holds
// FlushTriggerBytes, at Open and at Close) swaps the write cache and reads
// the journal position M under mu, so that every record before M is in the
// snapshot or an earlier one. By default (entries in place) it then waits
// until the journal is durable up to M (Journal.Sync, an fsync even with
// JournalNoSync; normally a group commit has already done it) and commits,
// in one Pebble batch, the index locations of the snapshot's entries in the
// journal files (file and offset of each record), the dirty ledger metadata
// and M (the checkpoint). Every byte of an entry is written once. The index
// holds the locations in blocks, one key per run of up to 128 entries of a
// ledger (blockindex.go), so a flush of a busy ledger puts a few hundred
// keys into Pebble rather than one per entry.
//
// With CopyToEntryLogs (BookKeeper's layout, for a journal on a device of
// its own) the flush instead appends the snapshot sorted by (ledger, entry)
// to the current entry log, fsyncs it, and commits the entry-log locations
// with the metadata and M. Flushing every few MiB instead of once per FlushInterval keeps each
// burst of entry-log writing short, so the journal's fdatasyncs, which
// share the disk, are not queued behind tens of MB; and a flush paces its
// entry-log writes at twice the recent add rate (a pause every 128 KiB,
// none while the write cache is more than half full), so even those few
// MiB reach the device as a trickle rather than all at once.
//
// # Checkpoints
//
// The flush batch is committed without syncing Pebble's WAL, except at Open
// and Close and (with CopyToEntryLogs) when the new M lets journal files be
// released: then the batch is synced first and the journal files wholly
// before M are released after it (up to JournalRecycleFiles of them are kept to be overwritten as
// the next journal files; the rest are deleted after the flush, without the
// flush lock, a few MiB at a time, as GC deletes entry logs: deleting a
// 256 MiB file at once stalls every fdatasync on the disk while the file
// system frees its extents). This is safe because the batch is atomic and holds M together
// with the index entries and metadata it covers, and the entry log was
// fsynced before it: whenever a checkpoint M is durable, so is everything
// it covers. A crash that loses unsynced batches leaves an older durable
// checkpoint M0 < M; the journal from M0 on still exists (files are only
// deleted behind a synced M), so Open replays it into the write cache and
// flushes it again, to new entry-log locations; the copies written before
// the crash are unreferenced and GC reclaims them. Syncing the WAL also
// makes every earlier batch durable, so DeleteLedger's synced batch and a
// GC pass (which syncs the index before removing logs, so no durable index
// entry can point into a removed log) never see an older durable state.
//
// While the index points into journal files (by default; the key "J"
// records it, so a restart with CopyToEntryLogs keeps honouring it), no
// flush releases them: GC does, once nothing points into a file and it lies
// wholly before a synced checkpoint (see below).
//
// # Recovery
//
// Open replays the journal from the checkpoint M into the write cache
// (entries, with their journal positions, fences and deletes), each file up
// to its first partial or corrupt record (a torn tail), starts a new journal
// file at max(replay end, M), and flushes at once, indexing the replayed
// entries where they lie (or copying them); with CopyToEntryLogs the
// recovery checkpoint lets every older journal file, torn ones included, be
// deleted at once, else GC releases them when their entries are dead. Entry logs are
// never appended to after a restart, so their unreferenced tails are
// harmless. Everything acknowledged with done(nil) survives a crash.
//
// # Read path
//
// write cache -> flushing snapshot -> read cache -> index + journal file or
// entry log. A read of entry e of a ledger whose previous read was e-1 is
// sequential: the next ReadAheadEntries / ReadAheadBytes of the ledger are
// read in as few reads as possible into the read cache (one read spans
// entries of the same file up to 64 KiB apart: in the journal, other
// ledgers' entries lie between them). A read whose file was removed or
// overwritten meanwhile (compaction moved the entry) looks the entry up
// again.
//
// # Garbage collection and read-only mode
//
// RunGC (every GCInterval) syncs the index, sums the live bytes of each
// entry log and journal file from the index, then releases the journal
// files wholly before the (now durable) checkpoint that hold no live entry
// (recycled or deleted, see JournalRecycleFiles) and those whose live
// fraction is below CompactionThreshold after copying their live entries
// to the current entry log and repointing the index (synced). Then it sums
// again if entries moved, removes entry logs with no live bytes and compacts
// those below CompactionThreshold the same way. A removed log is renamed
// (<id>.log.del) under the flush lock and deleted after the pass, shrunk a
// few MiB at a time (package slowrm): deleting a 1 GiB file at once stalls
// every fdatasync on the disk while the file system frees it; Open deletes
// renamed logs a crash left behind. An I/O error on any write or
// sync makes the storage read-only until restart; CheckDisk (every
// DiskCheckInterval) makes it read-only while free space is below
// MinFreeDiskBytes or usage above MaxDiskUsage. Read-only adds, fences and
// deletes fail with an error wrapping both ErrReadOnly and the cause; reads
// keep working.
//
// # Concurrency
//
// Every method is safe for concurrent use. Locks, in acquisition order:
// closeMu (shared by every call, exclusive in Close) -> flushMu (flush, GC,
// delete; owns the entry-log writer) -> mu (write cache, ledger metadata).
// The read cache, entry-log manager and journal have their own leaf locks
// (an add holds mu while it appends to the journal, after waiting for
// journal space without it; the journal writer takes mu only in OnError,
// holding none of the journal's locks). No
// lock is held while calling done, except that the journal writer calls
// every done of a group in order from its goroutine, so done must not block.
// Goroutines: the journal writer, the flush loop, the GC loop and the disk
// check loop; Close stops and waits for all of them.
//
// # Files
//
//	<Dir>/LOCK                      advisory lock
//	<Dir>/STORAGE_ID                instance id (random hex), same as the journal's
//	<JournalDir>/%016x.jnl          journal files, hex id, increasing (JournalDir
//	                                defaults to <Dir>/journal)
//	<JournalDir>/STORAGE_ID         instance id; a JournalDir outside Dir has its own LOCK
//	<Dir>/entrylogs/%016x.log       entry logs, hex id, increasing
//	<Dir>/index/                    Pebble database
//
// The instance ids are written at first Open (the journal's first) and
// compared at every Open: a journal directory that is empty or belongs to
// another storage is refused (ErrInstanceMismatch), since replaying it as
// empty would silently drop acknowledged entries not yet checkpointed.
//
// Journal file: a 24-byte header, magic "MGJ2", id uint64 LE, start uint64
// LE (logical position of its first record), CRC32C of the previous 20
// bytes; then records:
//
//	crc uint32 LE | len uint32 LE | type uint8 | payload[len]
//
// crc is CRC32C (Castagnoli) of len, type and payload, XORed with the
// file's salt, uint32(id) * 0x9e3779b1 (mod 2^32): a recycled file keeps
// its previous life's records past its new ones, and the salt makes them
// fail as a torn tail does (replay tells the two apart: an intact record
// salted for a smaller id is a stale one). Files with magic "MGJ1" (before
// recycling) have unsalted checksums and are still replayed. A file is
// read up to the next file's start position at most. Type 1 (entry):
// ledger, entry, lac int64 LE then the data; type 2 (fence) and 3 (delete):
// ledger int64 LE. Type 0 is invalid, so zero-filled space never decodes.
// The logical position counts record bytes across files (headers excluded);
// the checkpoint is such a position.
//
// Entry log: a 16-byte header, magic "MGEL", id uint64 LE, CRC32C of the
// previous 12 bytes; then records:
//
//	crc uint32 LE | dataLen uint32 LE | ledger int64 LE | entry int64 LE | data
//
// crc is CRC32C of everything after itself.
//
// Pebble keys (integers big-endian with the sign bit flipped, so keys sort
// numerically):
//
//	'b' ledger entry  -> index block: the locations of up to 128 entries of the ledger from
//	                     entry on, varint-coded (see blockindex.go); the blocks of a ledger
//	                     cover disjoint entry ranges. A location names a file (id uint64; bit 63
//	                     set: journal file id &^ 1<<63, else entry log) and the record's offset
//	                     in it (of a journal record, whose data follows its 33-byte header)
//	'e' ledger entry  -> location of one entry: log id uint64 | record offset uint64 | data
//	                     length uint32 (BE); written before blocks, rewritten as blocks at Open
//	'm' ledger        -> metadata: flags uint8 (bit 0 fenced) | last entry int64 | max LAC int64 (BE)
//	'd' ledger        -> tombstone of a deleted ledger: deletion time, unix seconds uint64
//	                     (empty in older indexes); later adds to it fail with ErrFenced, so a
//	                     writer fenced and then deleted cannot re-create it. Tombstones are
//	                     loaded at Open and dropped by GC after TombstoneTTL (default 7 days).
//	"c"               -> checkpoint: journal logical position uint64 BE
//	"J"               -> empty; present once any location named a journal file
package storage
