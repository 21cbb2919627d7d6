package storage

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Config configures a DiskStorage. Zero-valued fields take the default
// documented beside them (applied by Open); negative durations disable the
// corresponding background goroutine.
type Config struct {
	// Dir is the storage root; required. Open creates journal/, entrylogs/
	// and index/ below it.
	Dir string
	// JournalDir is the journal's directory. Default <Dir>/journal. Both
	// directories hold the same instance id (file STORAGE_ID), so a wiped or
	// foreign journal device is refused at Open instead of silently losing
	// the acknowledged entries that only it held.
	JournalDir string
	// CopyToEntryLogs makes every flush copy the entries from the journal to
	// the entry logs, sorted by ledger, as BookKeeper does; it pays only
	// with JournalDir on a device of its own (BookKeeper's journal/ledger
	// directory split), where the journal's fsyncs never wait behind the
	// entry logs' writes and a ledger's old entries read sequentially. On
	// one disk it writes every byte twice, and sustained throughput tops
	// out near half of what the disk takes in fsync'd appends. Default
	// false: a flush indexes each entry where the journal wrote it, journal
	// files are kept while the index points into them (GC releases them, and
	// compacts those with few live entries into the entry logs), and every
	// byte is written once. Switching it off and on between restarts is
	// safe.
	CopyToEntryLogs bool
	// FS is the filesystem all I/O goes through. Default vfs.Default (the
	// OS); tests pass vfs.NewCrashableMem() or an errorfs wrapper.
	FS vfs.FS

	// JournalMaxGroupWait is how long the first record of a commit group
	// may wait for more records. Default (zero) or negative: never wait; the
	// group is whatever queued while the previous write+fsync ran, so groups
	// grow with the load and an idle journal adds no delay.
	JournalMaxGroupWait time.Duration
	// JournalMaxGroupBytes ends the group wait once this much is pending.
	// Default 512 KiB.
	JournalMaxGroupBytes int
	// JournalMaxFileBytes rotates journal files at this size. Default 256 MiB.
	JournalMaxFileBytes int64
	// JournalRecycleFiles is how many checkpointed journal files are kept
	// to be reused (renamed and overwritten) by the next rotations instead
	// of being deleted; see journal.Options.RecycleFiles (deleting a large
	// file stalls every fdatasync on the disk; the others are deleted
	// slowly after the flush). Default 2; negative: keep none.
	JournalRecycleFiles int
	// JournalBufferedWrites writes the journal through the page cache.
	// Default false: with the OS file system the journal writes with
	// O_DIRECT (journal.Options.DirectIO), where the file system allows
	// it.
	JournalBufferedWrites bool
	// JournalNoSync acknowledges adds once the journal group is written to
	// the OS, without fsync. Default false: SyncJournal on, fsync before any
	// acknowledgement. (Spelled negatively so the zero Config is durable.)
	JournalNoSync bool

	// WriteCacheMaxBytes triggers a flush when the write cache holds this
	// much; adds block while a full cache waits behind a running flush.
	// Default 64 MiB.
	WriteCacheMaxBytes int64
	// FlushTriggerBytes starts a background flush as soon as the write cache
	// holds this much (without blocking adds), so the entry logs are written
	// in small steps spread over time rather than in one burst per
	// FlushInterval: a burst of tens of MB makes the journal's fdatasyncs,
	// which share the disk, wait behind it. Default 4 MiB; capped at
	// WriteCacheMaxBytes.
	FlushTriggerBytes int64
	// FlushInterval is the period of the background flush (checkpoint).
	// Default 1 s; negative: flush only when the write cache is full.
	FlushInterval time.Duration
	// EntryLogMaxBytes rotates entry logs at this size. Default 1 GiB.
	EntryLogMaxBytes int64

	// ReadCacheMaxBytes bounds the read(-ahead) cache. Default 64 MiB.
	ReadCacheMaxBytes int64
	// ReadAheadEntries and ReadAheadBytes bound one read-ahead batch, done
	// when a ledger is read sequentially. Defaults 64 entries and 1 MiB;
	// ReadAheadEntries < 0 disables read-ahead.
	ReadAheadEntries int
	ReadAheadBytes   int64

	// GCInterval is the period of garbage collection. Default 1 min;
	// negative disables the goroutine (RunGC still works).
	GCInterval time.Duration
	// TombstoneTTL is how long a deleted ledger's tombstone (which makes a
	// late add to the ledger fail instead of re-creating it) is kept; GC
	// drops older ones, so tombstones do not accumulate forever. A late add
	// can only come from a writer that still had the ledger open when it
	// was deleted, which does not outlive days. Default 7 days; negative:
	// keep them forever.
	TombstoneTTL time.Duration
	// CompactionThreshold compacts an entry log whose live bytes are below
	// this fraction of its size. Default 0.5; must be in [0, 1).
	CompactionThreshold float64

	// DiskCheckInterval is the period of the free-space check. Default 10 s;
	// negative disables the goroutine (CheckDisk still works).
	DiskCheckInterval time.Duration
	// MinFreeDiskBytes turns the storage read-only when less is available.
	// Default 1 GiB; negative disables this check.
	MinFreeDiskBytes int64
	// MaxDiskUsage turns the storage read-only when used/total exceeds it.
	// Default 0.95; must be in (0, 1]. The storage becomes writable again
	// once both checks pass (only for disk-space read-only; an I/O error is
	// permanent until restart).
	MaxDiskUsage float64

	// IndexCacheBytes is the Pebble block cache size. Default 8 MiB.
	IndexCacheBytes int64
	// IndexMemTableBytes is the Pebble memtable size. Default 32 MiB. Every
	// flush commits one index key per entry in a batch that also holds the
	// checkpoint and ledger metadata keys, so each flushed table spans the
	// whole key space and every L0 compaction rewrites the overlapping
	// tables below it; a larger memtable makes those compactions rarer
	// (Pebble's 4 MiB default made them a quarter of a busy bookie's CPU).
	IndexMemTableBytes int64
	// Logger receives warnings. Default slog.Default().
	Logger *slog.Logger
}

// withDefaults returns c with zero fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.FS == nil {
		c.FS = vfs.Default
	}
	if c.JournalDir == "" && c.Dir != "" {
		c.JournalDir = c.FS.PathJoin(c.Dir, journalDir)
	}
	if c.JournalMaxGroupBytes == 0 {
		c.JournalMaxGroupBytes = 512 << 10
	}
	if c.JournalMaxFileBytes == 0 {
		c.JournalMaxFileBytes = 256 << 20
	}
	if c.WriteCacheMaxBytes == 0 {
		c.WriteCacheMaxBytes = 64 << 20
	}
	if c.FlushTriggerBytes == 0 {
		c.FlushTriggerBytes = 4 << 20
	}
	c.FlushTriggerBytes = min(c.FlushTriggerBytes, c.WriteCacheMaxBytes)
	if c.FlushInterval == 0 {
		c.FlushInterval = time.Second
	}
	if c.EntryLogMaxBytes == 0 {
		c.EntryLogMaxBytes = 1 << 30
	}
	if c.ReadCacheMaxBytes == 0 {
		c.ReadCacheMaxBytes = 64 << 20
	}
	if c.ReadAheadEntries == 0 {
		c.ReadAheadEntries = 64
	}
	if c.ReadAheadBytes == 0 {
		c.ReadAheadBytes = 1 << 20
	}
	if c.GCInterval == 0 {
		c.GCInterval = time.Minute
	}
	if c.TombstoneTTL == 0 {
		c.TombstoneTTL = 7 * 24 * time.Hour
	}
	if c.CompactionThreshold == 0 {
		c.CompactionThreshold = 0.5
	}
	if c.DiskCheckInterval == 0 {
		c.DiskCheckInterval = 10 * time.Second
	}
	if c.MinFreeDiskBytes == 0 {
		c.MinFreeDiskBytes = 1 << 30
	}
	if c.MaxDiskUsage == 0 {
		c.MaxDiskUsage = 0.95
	}
	if c.IndexCacheBytes == 0 {
		c.IndexCacheBytes = 8 << 20
	}
	if c.IndexMemTableBytes == 0 {
		c.IndexMemTableBytes = 32 << 20
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate reports whether c (zero fields meaning their defaults) is usable.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if c.Dir == "" {
		errs = append(errs, errors.New("Dir is required"))
	}
	if c.JournalMaxGroupBytes < 0 {
		errs = append(errs, errors.New("JournalMaxGroupBytes must not be negative"))
	}
	if c.JournalMaxFileBytes < 4096 {
		errs = append(errs, errors.New("JournalMaxFileBytes must be at least 4096"))
	}
	if c.WriteCacheMaxBytes < 0 {
		errs = append(errs, errors.New("WriteCacheMaxBytes must not be negative"))
	}
	if c.FlushTriggerBytes < 0 {
		errs = append(errs, errors.New("FlushTriggerBytes must not be negative"))
	}
	if c.EntryLogMaxBytes < 4096 {
		errs = append(errs, errors.New("EntryLogMaxBytes must be at least 4096"))
	}
	if c.IndexMemTableBytes < 0 || c.IndexMemTableBytes >= 4<<30 {
		errs = append(errs, errors.New("IndexMemTableBytes must be in [0, 4 GiB)"))
	}
	if c.ReadCacheMaxBytes < 0 || c.ReadAheadBytes < 0 || c.IndexCacheBytes < 0 {
		errs = append(errs, errors.New("cache sizes must not be negative"))
	}
	if c.CompactionThreshold < 0 || c.CompactionThreshold >= 1 {
		errs = append(errs, fmt.Errorf("CompactionThreshold %v not in [0, 1)", c.CompactionThreshold))
	}
	if c.MaxDiskUsage <= 0 || c.MaxDiskUsage > 1 {
		errs = append(errs, fmt.Errorf("MaxDiskUsage %v not in (0, 1]", c.MaxDiskUsage))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("storage: invalid config: %w", err)
	}
	return nil
}
