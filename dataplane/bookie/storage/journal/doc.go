// Package journal is the bookie's write-ahead log: framed, checksummed
// records (entry adds, fence marks, ledger deletes) appended with group
// commit, rotated by size, replayed after a crash.
//
// The storage package is its only caller. Append* may be called from any
// goroutine: the record is checksummed outside the lock and copied into the
// pending group under Journal.mu. One writer goroutine owns the file: it
// takes the whole pending group (by default at once: the group is what
// queued while the previous one was written and synced; with a positive
// MaxGroupWait it first waits up to that long for more unless MaxGroupBytes
// are pending), writes it with one Write, fsyncs once
// (fdatasync), and then calls the group's done callbacks in order. With
// DirectIO (the storage's default) the write is an O_DIRECT pwrite from the
// start of the 4 KiB block holding the file's end: that block's bytes
// already written, then the group, zero-filled to a whole block; so no byte
// is copied into the page cache, and the zeros end the file for Replay. With
// NoSync it does not sync a group; instead it starts the OS writeback of the
// file every WritebackBytes (4 MiB) and fsyncs the file at rotation, before
// creating the next one, so the records replayed after a crash are always a
// prefix of those appended and the rotation fsync has little left to write
// (a whole 256 MiB dirty file used to stall the writer for a second). A write
// or sync error is sticky: it fails that group and every later append, and
// OnError is called once. Close drains the pending group.
//
// The storage indexes entry records where they lie (read.go): Locate maps a
// position to a file and offset, ReadRun and ScanFile read records back in
// place, ReleaseFile retires a file once nothing points into it, and Sync
// makes everything appended durable even with NoSync.
//
// Positions are logical: a byte count over all records of all files. Each
// file's header records the position of its first record, so a checkpoint
// (a position) selects where Replay starts and which files Release deletes.
//
// File names are %016x.jnl (hex id, increasing). Byte format: see the
// storage package documentation and record.go.
package journal
