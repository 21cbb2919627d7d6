// Package entrylog owns the bookie's entry log files: append-only files of
// checksummed entry records, named %016x.log by increasing id, rotated by
// size, read at locations kept in the storage index, scanned by compaction
// and removed by garbage collection. They receive every entry at each flush
// only with storage.Config.CopyToEntryLogs; by default only the live entries
// that compaction copies out of mostly dead journal files.
//
// The storage package is its only caller. Append, Rotate, Sync and Remove
// are serialized by the caller's flush lock; Read, ReadRun, Scan and Logs
// run concurrently with them (Manager.mu guards the open read handles and
// sizes; handles are reference counted so Remove never closes a file under
// a reader). Records are buffered and become durable at Sync; writeback is
// started every MiB on the way (sync_file_range through vfs.File.SyncTo),
// so a large flush never queues more than a chunk or two at the disk ahead
// of the journal's fsyncs. Byte format:
// see the storage package documentation.
package entrylog
