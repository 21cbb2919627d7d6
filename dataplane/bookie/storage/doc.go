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
// AddEntry copies the entry into the in-memory write cache (readable at
// once), then queues a journal record; done fires from the journal writer
// goroutine after the record's group is fsynced (or written, with
// JournalNoSync). Fence sets the in-memory fenced flag (non-recovery adds
// fail with ErrFenced from then on) and journals a fence record. DeleteLedger
// journals a delete record, waits for it, then removes the ledger from the
// caches and, in one synced Pebble batch, from the index and metadata; GC
// reclaims the bytes later.
//
// A flush (every FlushInterval, when the write cache exceeds
// WriteCacheMaxBytes, at Open and at Close) reads the journal position M,
// swaps the write cache, appends the snapshot sorted by (ledger, entry) to
// the current entry log, fsyncs it, then commits the index locations, the
// dirty ledger metadata and M (the checkpoint) in one synced Pebble batch,
// and finally deletes the journal files wholly before M. Because an add
// enters the write cache before it is journaled and M is read before the
// swap, every record before M is in the flushed snapshot or an earlier one.
//
// # Recovery
//
// Open replays the journal from the checkpoint M into the write cache
// (entries, fences and deletes), each file up to its first partial or
// corrupt record (a torn tail), starts a new journal file at
// max(replay end, M), and flushes at once: the recovery checkpoint then lets
// every older journal file, torn ones included, be deleted. Entry logs are
// never appended to after a restart, so their unreferenced tails are
// harmless. Everything acknowledged with done(nil) survives a crash.
//
// # Read path
//
// write cache -> flushing snapshot -> read cache -> index + entry log. A
// read of entry e of a ledger whose previous read was e-1 is sequential: the
// next ReadAheadEntries / ReadAheadBytes of the ledger are read in as few
// contiguous log reads as possible into the read cache.
//
// # Garbage collection and read-only mode
//
// RunGC (every GCInterval) sums the live bytes of each entry log from the
// index, removes logs with none, and compacts logs whose live fraction is
// below CompactionThreshold (copies their live entries to the current log,
// repoints the index, removes the old file). An I/O error on any write or
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
// The read cache, entry-log manager and journal have their own leaf locks. No
// lock is held while calling done, except that the journal writer calls
// every done of a group in order from its goroutine, so done must not block.
// Goroutines: the journal writer, the flush loop, the GC loop and the disk
// check loop; Close stops and waits for all of them.
//
// # Files
//
//	<Dir>/LOCK                      advisory lock
//	<Dir>/journal/%016x.jnl         journal files, hex id, increasing
//	<Dir>/entrylogs/%016x.log       entry logs, hex id, increasing
//	<Dir>/index/                    Pebble database
//
// Journal file: a 24-byte header, magic "MGJ1", id uint64 LE, start uint64
// LE (logical position of its first record), CRC32C of the previous 20
// bytes; then records:
//
//	crc uint32 LE | len uint32 LE | type uint8 | payload[len]
//
// crc is CRC32C (Castagnoli) of len, type and payload. Type 1 (entry):
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
//	'e' ledger entry  -> location: log id uint64 | record offset uint64 | data length uint32 (BE)
//	'm' ledger        -> metadata: flags uint8 (bit 0 fenced) | last entry int64 | max LAC int64 (BE)
//	"c"               -> checkpoint: journal logical position uint64 BE
package storage
