package storage_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"go.uber.org/goleak"

	"github.com/magnetar-dev/magnetar/dataplane/bookie/storage"
	"github.com/magnetar-dev/magnetar/dataplane/bookie/storage/storagetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func testConfig(fs vfs.FS, dir string) storage.Config {
	return storage.Config{
		Dir:                 dir,
		FS:                  fs,
		JournalMaxFileBytes: 256 << 10,
		WriteCacheMaxBytes:  1 << 20,
		FlushInterval:       20 * time.Millisecond,
		EntryLogMaxBytes:    256 << 10,
		GCInterval:          -1,
		DiskCheckInterval:   -1,
		MinFreeDiskBytes:    -1,
	}
}

func mustOpen(t testing.TB, cfg storage.Config) *storage.DiskStorage {
	t.Helper()
	s, err := storage.Open(cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

// crashAndReopen crashes s (a copy of fs keeping only synced data),
// closes s and opens the copy with cfg (its FS replaced) and returns it.
func crashAndReopen(t testing.TB, fs *vfs.MemFS, s *storage.DiskStorage, cfg storage.Config) *storage.DiskStorage {
	t.Helper()
	clone := fs.CrashClone(vfs.CrashCloneCfg{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	cfg.FS = clone
	return mustOpen(t, cfg)
}

func TestConformanceMem(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) storage.Storage {
		return mustOpen(t, testConfig(vfs.NewMem(), "/bookie"))
	})
}

func TestConformanceDir(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) storage.Storage {
		return mustOpen(t, testConfig(vfs.Default, t.TempDir()))
	})
}

func TestConformanceCopyToEntryLogs(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) storage.Storage {
		cfg := testConfig(vfs.Default, t.TempDir())
		cfg.CopyToEntryLogs = true
		return mustOpen(t, cfg)
	})
}

// forModes runs fn with entries kept in place in the journal (the default)
// and with them copied to the entry logs (Config.CopyToEntryLogs).
func forModes(t *testing.T, fn func(t *testing.T, copyToEntryLogs bool)) {
	t.Run("in-place", func(t *testing.T) { fn(t, false) })
	t.Run("copy", func(t *testing.T) { fn(t, true) })
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []storage.Config{
		{},
		{Dir: "/x", CompactionThreshold: 1.5},
		{Dir: "/x", MaxDiskUsage: 2},
		{Dir: "/x", EntryLogMaxBytes: 10},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want error", c)
		}
	}
	if err := (storage.Config{Dir: "/x"}).Validate(); err != nil {
		t.Errorf("defaults invalid: %v", err)
	}
}

func add(t testing.TB, s storage.Storage, l, e int64, data []byte) {
	t.Helper()
	if err := storagetest.Add(t, s, l, e, e-1, data, false); err != nil {
		t.Fatalf("add (%d,%d): %v", l, e, err)
	}
}

func checkEntry(t testing.TB, s storage.Storage, l, e int64, n int) {
	t.Helper()
	got, err := s.ReadEntry(l, e)
	if err != nil {
		t.Fatalf("ReadEntry(%d,%d): %v", l, e, err)
	}
	if string(got) != string(storagetest.Payload(l, e, n)) {
		t.Fatalf("ReadEntry(%d,%d): wrong data (%d bytes, want %d)", l, e, len(got), n)
	}
}

func TestRestartAfterCleanClose(t *testing.T) { forModes(t, restartAfterCleanClose) }

func restartAfterCleanClose(t *testing.T, copyToEntryLogs bool) {
	fs := vfs.NewMem()
	cfg := testConfig(fs, "/b")
	cfg.FlushInterval = -1
	cfg.CopyToEntryLogs = copyToEntryLogs
	s := mustOpen(t, cfg)
	for l := int64(1); l <= 5; l++ {
		for e := int64(0); e < 50; e++ {
			add(t, s, l, e, storagetest.Payload(l, e, 500))
		}
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	add(t, s, 6, 0, storagetest.Payload(6, 0, 10)) // only in journal + write cache
	if err := storagetest.Fence(t, s, 2); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteLedger(3); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, cfg)
	defer s.Close()
	for l := int64(1); l <= 5; l++ {
		if l == 3 {
			if _, err := s.ReadEntry(3, 0); !errors.Is(err, storage.ErrNoSuchLedger) {
				t.Fatalf("deleted ledger after restart: %v", err)
			}
			continue
		}
		for e := int64(0); e < 50; e++ {
			checkEntry(t, s, l, e, 500)
		}
		last, lac, err := s.LastEntry(l)
		if err != nil || last != 49 || lac != 48 {
			t.Fatalf("LastEntry(%d) = %d,%d,%v", l, last, lac, err)
		}
	}
	checkEntry(t, s, 6, 0, 10)
	if f, _ := s.IsFenced(2); !f {
		t.Fatal("fence lost across restart")
	}
	if err := storagetest.Add(t, s, 3, 50, 49, []byte("zombie"), false); !errors.Is(err, storage.ErrFenced) {
		t.Fatalf("add to a ledger deleted before the restart: %v, want ErrFenced", err)
	}
	if f, _ := s.IsFenced(1); f {
		t.Fatal("ledger 1 fenced after restart")
	}
}

type ackLog struct {
	mu      sync.Mutex
	entries map[[2]int64]int // (ledger, entry) -> data size
	fences  map[int64]bool
}

func (a *ackLog) snapshot() (map[[2]int64]int, map[int64]bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	e := make(map[[2]int64]int, len(a.entries))
	for k, v := range a.entries {
		e[k] = v
	}
	f := make(map[int64]bool, len(a.fences))
	for k, v := range a.fences {
		f[k] = v
	}
	return e, f
}

// TestCrashRecovery runs concurrent adds and fences, crashes at a random
// moment (keeping a random part of the unsynced data), reopens the crash
// image and checks that every acknowledged entry and fence survived.
func TestCrashRecovery(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { crashOnce(t, seed, "", false) })
	}
	// The journal in a directory of its own (its own device in production).
	for seed := uint64(5); seed <= 6; seed++ {
		t.Run(fmt.Sprint("journaldir/seed", seed), func(t *testing.T) { crashOnce(t, seed, "/j", false) })
	}
	// Entries copied to the entry logs at each flush.
	for seed := uint64(7); seed <= 9; seed++ {
		t.Run(fmt.Sprint("copy/seed", seed), func(t *testing.T) { crashOnce(t, seed, "", true) })
	}
}

func crashOnce(t *testing.T, seed uint64, journalDir string, copyToEntryLogs bool) {
	rng := rand.New(rand.NewPCG(seed, 7))
	fs := vfs.NewCrashableMem()
	testConfig := func(fs vfs.FS, dir string) storage.Config {
		c := testConfig(fs, dir)
		c.JournalDir = journalDir
		c.CopyToEntryLogs = copyToEntryLogs
		return c
	}
	cfg := testConfig(fs, "/b")
	cfg.JournalMaxFileBytes = 64 << 10
	cfg.WriteCacheMaxBytes = 128 << 10
	cfg.FlushInterval = 5 * time.Millisecond
	cfg.EntryLogMaxBytes = 64 << 10
	// GC runs all along, releasing and compacting files (a churn writer
	// below fills them with ledgers it deletes).
	cfg.GCInterval = 10 * time.Millisecond
	cfg.CompactionThreshold = 0.9
	s := mustOpen(t, cfg)

	acks := &ackLog{entries: make(map[[2]int64]int), fences: make(map[int64]bool)}
	var stop atomic.Bool
	var wg sync.WaitGroup
	var acked atomic.Int64
	const writers = 8
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ledger := int64(w + 1)
			var inflight sync.WaitGroup
			for e := int64(0); !stop.Load(); e++ {
				n := 1 + int((uint64(e)*2654435761+uint64(w))%2000)
				inflight.Add(1)
				s.AddEntry(ledger, e, e-1, storagetest.Payload(ledger, e, n), true, func(err error) {
					if err == nil {
						acks.mu.Lock()
						acks.entries[[2]int64{ledger, e}] = n
						acks.mu.Unlock()
						acked.Add(1)
					}
					inflight.Done()
				})
				if e%50 == 49 {
					inflight.Wait() // bound the in-flight window
					s.Fence(ledger+100, func(err error) {
						if err == nil {
							acks.mu.Lock()
							acks.fences[ledger+100] = true
							acks.mu.Unlock()
						}
					})
				}
			}
			inflight.Wait()
		}()
	}
	wg.Add(1)
	go func() { // churn: ledgers written and deleted, never checked
		defer wg.Done()
		for l := int64(10000); !stop.Load(); l++ {
			for e := range int64(20) {
				if err := storagetest.Add(t, s, l, e, e-1, storagetest.Payload(l, e, 1500), false); err != nil {
					return
				}
			}
			if err := s.DeleteLedger(l); err != nil {
				return
			}
		}
	}()
	target := int64(200 + rng.IntN(1500))
	deadline := time.Now().Add(30 * time.Second)
	for acked.Load() < target && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	wantEntries, wantFences := acks.snapshot()
	clone := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(80), RNG: rand.New(rand.NewPCG(seed, 9))})
	stop.Store(true)
	wg.Wait()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if len(wantEntries) < 100 {
		t.Fatalf("only %d acknowledged adds before the crash", len(wantEntries))
	}

	s2 := mustOpen(t, testConfig(clone, "/b"))
	for k, n := range wantEntries {
		checkEntry(t, s2, k[0], k[1], n)
	}
	for l := range wantFences {
		if f, err := s2.IsFenced(l); err != nil || !f {
			t.Fatalf("acknowledged fence of ledger %d lost (%v)", l, err)
		}
	}
	// The recovered storage keeps working and survives a clean restart.
	add(t, s2, 999, 0, storagetest.Payload(999, 0, 100))
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	s3 := mustOpen(t, testConfig(clone, "/b"))
	defer s3.Close()
	checkEntry(t, s3, 999, 0, 100)
	for k, n := range wantEntries {
		checkEntry(t, s3, k[0], k[1], n)
	}
	gc, err := s3.RunGC()
	if err != nil {
		t.Fatal(err)
	}
	for k, n := range wantEntries {
		checkEntry(t, s3, k[0], k[1], n)
	}
	t.Logf("seed %d: %d acked entries, %d fences verified; a GC pass after: %+v", seed, len(wantEntries), len(wantFences), gc)
}

func listDir(t testing.TB, fs vfs.FS, dir string) []string {
	t.Helper()
	names, err := fs.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func TestTornJournalTail(t *testing.T) { forModes(t, tornJournalTail) }

func tornJournalTail(t *testing.T, copyToEntryLogs bool) {
	fs := vfs.NewCrashableMem()
	cfg := testConfig(fs, "/b")
	cfg.FlushInterval = -1
	cfg.CopyToEntryLogs = copyToEntryLogs
	s := mustOpen(t, cfg)
	for e := int64(0); e < 30; e++ {
		add(t, s, 1, e, storagetest.Payload(1, e, 300))
	}
	clone := fs.CrashClone(vfs.CrashCloneCfg{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Append a partial record and some garbage to the newest journal file.
	var names []string // journal files only (the directory also holds STORAGE_ID), in order
	for _, n := range listDir(t, clone, "/b/journal") {
		if strings.HasSuffix(n, ".jnl") {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	if len(names) == 0 {
		t.Fatal("no journal file")
	}
	last := "/b/journal/" + names[len(names)-1]
	f, err := clone.OpenReadWrite(last, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := f.Stat()
	garbage := []byte{0xde, 0xad, 0xbe, 0xef, 0xff, 0x00, 0x00, 0x00, 0x01, 1, 2, 3}
	if _, err := f.WriteAt(garbage, st.Size()); err != nil {
		t.Fatal(err)
	}
	f.Sync()
	f.Close()

	// Recycling off, so the torn file must be gone once nothing needs it
	// (recycled files: journal.TestRecycledFiles): after the recovery
	// checkpoint when the entries were copied to the entry logs, else once
	// the entries in it are deleted.
	cfg2 := testConfig(clone, "/b")
	cfg2.JournalRecycleFiles = -1
	cfg2.CopyToEntryLogs = copyToEntryLogs
	s2 := mustOpen(t, cfg2)
	for e := int64(0); e < 30; e++ {
		checkEntry(t, s2, 1, e, 300)
	}
	tornGone := func(after []string) bool {
		for _, n := range after {
			if "/b/journal/"+n == last {
				return false
			}
		}
		return true
	}
	if after := listDir(t, clone, "/b/journal"); copyToEntryLogs && !tornGone(after) {
		t.Fatalf("torn journal file kept after recovery checkpoint: %v", after)
	}
	add(t, s2, 1, 30, storagetest.Payload(1, 30, 300))
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	s3 := mustOpen(t, cfg2)
	defer s3.Close()
	for e := int64(0); e <= 30; e++ {
		checkEntry(t, s3, 1, e, 300)
	}
	if err := s3.DeleteLedger(1); err != nil {
		t.Fatal(err)
	}
	if _, err := s3.RunGC(); err != nil {
		t.Fatal(err)
	}
	if after := listDir(t, clone, "/b/journal"); !tornGone(after) {
		t.Fatalf("torn journal file kept after its ledger was deleted and GC ran: %v", after)
	}
}

// injectWhen returns an injector failing writes and syncs of files whose
// path contains substr while on is set.
func injectWhen(on *atomic.Bool, substr string) errorfs.Injector {
	return errorfs.InjectorFunc(func(op errorfs.Op) error {
		if !on.Load() || !strings.Contains(op.Path, substr) {
			return nil
		}
		switch op.Kind {
		case errorfs.OpFileWrite, errorfs.OpFileWriteAt, errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpCreate:
			return errorfs.ErrInjected
		}
		return nil
	})
}

func TestIOErrorTurnsReadOnly(t *testing.T) {
	for _, target := range []string{"/journal/", "/entrylogs/"} {
		t.Run(strings.Trim(target, "/"), func(t *testing.T) {
			mem := vfs.NewCrashableMem()
			var on atomic.Bool
			cfg := testConfig(errorfs.Wrap(mem, injectWhen(&on, target)), "/b")
			cfg.FlushInterval = -1
			// Only a flush that copies entries writes the entry logs.
			cfg.CopyToEntryLogs = target == "/entrylogs/"
			s := mustOpen(t, cfg)
			for e := int64(0); e < 20; e++ {
				add(t, s, 1, e, storagetest.Payload(1, e, 100))
			}
			if err := storagetest.Fence(t, s, 2); err != nil {
				t.Fatal(err)
			}
			on.Store(true)
			if target == "/journal/" {
				if err := storagetest.Add(t, s, 1, 20, 19, []byte("x"), false); err == nil {
					t.Fatal("add succeeded despite journal write error")
				}
			} else if err := s.Flush(); err == nil {
				t.Fatal("flush succeeded despite entry log write error")
			}
			if s.ReadOnly() == nil {
				t.Fatal("ReadOnly() = nil after I/O error")
			}
			err := storagetest.Add(t, s, 1, 21, 20, []byte("y"), false)
			if !errors.Is(err, storage.ErrReadOnly) || !errors.Is(err, errorfs.ErrInjected) {
				t.Fatalf("add on read-only storage: %v, want ErrReadOnly wrapping the cause", err)
			}
			if err := storagetest.Fence(t, s, 3); !errors.Is(err, storage.ErrReadOnly) {
				t.Fatalf("fence on read-only storage: %v", err)
			}
			for e := int64(0); e < 20; e++ {
				checkEntry(t, s, 1, e, 100)
			}
			clone := mem.CrashClone(vfs.CrashCloneCfg{})
			s.Close()
			cfg2 := testConfig(clone, "/b")
			cfg2.CopyToEntryLogs = cfg.CopyToEntryLogs
			s2 := mustOpen(t, cfg2)
			defer s2.Close()
			for e := int64(0); e < 20; e++ {
				checkEntry(t, s2, 1, e, 100)
			}
			if f, _ := s2.IsFenced(2); !f {
				t.Fatal("fence lost")
			}
			if s2.ReadOnly() != nil {
				t.Fatalf("reopened storage read-only: %v", s2.ReadOnly())
			}
		})
	}
}

func TestDiskFullReadOnly(t *testing.T) {
	mem := vfs.NewMem()
	cfg := testConfig(mem, "/b")
	cfg.MinFreeDiskBytes = 1 << 20
	s := mustOpen(t, cfg)
	defer s.Close()
	add(t, s, 1, 0, []byte("a"))
	mem.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 1000, TotalBytes: 1 << 30, UsedBytes: 1<<30 - 1000})
	if s.CheckDisk() == nil {
		t.Fatal("CheckDisk: not read-only with 1000 bytes free")
	}
	if err := storagetest.Add(t, s, 1, 1, 0, []byte("b"), false); !errors.Is(err, storage.ErrReadOnly) {
		t.Fatalf("add on full disk: %v", err)
	}
	checkEntry2 := func() {
		if got, err := s.ReadEntry(1, 0); err != nil || string(got) != "a" {
			t.Fatalf("read on full disk: %q %v", got, err)
		}
	}
	checkEntry2()
	mem.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 1 << 29, TotalBytes: 1 << 30, UsedBytes: 1 << 29})
	if err := s.CheckDisk(); err != nil {
		t.Fatalf("still read-only after space returned: %v", err)
	}
	add(t, s, 1, 1, []byte("b"))
}

func dirBytes(t testing.TB, fs vfs.FS, dir string) int64 {
	t.Helper()
	var n int64
	for _, name := range listDir(t, fs, dir) {
		st, err := fs.Stat(fs.PathJoin(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		n += st.Size()
	}
	return n
}

// deleteAndGC deletes ledgers and runs one GC pass.
func deleteAndGC(t testing.TB, s *storage.DiskStorage, ledgers ...int64) storage.GCStats {
	t.Helper()
	for _, l := range ledgers {
		if err := s.DeleteLedger(l); err != nil {
			t.Fatal(err)
		}
	}
	st, err := s.RunGC()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestGCReclaimsSpace(t *testing.T) {
	fs := vfs.NewMem()
	cfg := testConfig(fs, "/b")
	cfg.FlushInterval = -1
	cfg.CopyToEntryLogs = true
	cfg.EntryLogMaxBytes = 64 << 10
	s := mustOpen(t, cfg)
	defer s.Close()
	// Rounds of ledgers 1 (deleted later, big), 2 (kept, small) and 3
	// (deleted, alone in its logs).
	for round := int64(0); round < 8; round++ {
		for e := round * 20; e < round*20+20; e++ {
			add(t, s, 1, e, storagetest.Payload(1, e, 1000))
			add(t, s, 2, e, storagetest.Payload(2, e, 100))
		}
		if err := s.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	for e := int64(0); e < 200; e++ {
		add(t, s, 3, e, storagetest.Payload(3, e, 1000))
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	before := dirBytes(t, fs, "/b/entrylogs")
	st := deleteAndGC(t, s, 1, 3)
	after := dirBytes(t, fs, "/b/entrylogs")
	t.Logf("gc: %+v, entry logs %d -> %d bytes", st, before, after)
	if st.LogsDeleted == 0 || st.LogsCompacted == 0 {
		t.Fatalf("gc stats %+v: want deleted and compacted logs", st)
	}
	if after >= before/3 {
		t.Fatalf("entry logs %d -> %d bytes: not reclaimed", before, after)
	}
	for e := int64(0); e < 160; e++ {
		checkEntry(t, s, 2, e, 100)
	}
	// A second pass has nothing left to do but keeps ledger 2 intact.
	if _, err := s.RunGC(); err != nil {
		t.Fatal(err)
	}
	for e := int64(0); e < 160; e++ {
		checkEntry(t, s, 2, e, 100)
	}
	// Removed logs are renamed, then deleted after the pass; one left
	// renamed by a crash is deleted at the next Open.
	for _, n := range listDir(t, fs, "/b/entrylogs") {
		if strings.HasSuffix(n, ".del") {
			t.Fatalf("removed log %s not deleted after GC", n)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := fs.Create("/b/entrylogs/0000000000000001.log.del", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	s2 := mustOpen(t, cfg)
	defer s2.Close()
	for _, n := range listDir(t, fs, "/b/entrylogs") {
		if strings.HasSuffix(n, ".del") {
			t.Fatalf("leftover %s not deleted at Open", n)
		}
	}
	for e := int64(0); e < 160; e++ {
		checkEntry(t, s2, 2, e, 100)
	}
}

func TestReadAheadSequential(t *testing.T) { forModes(t, readAheadSequential) }

func readAheadSequential(t *testing.T, copyToEntryLogs bool) {
	fs := vfs.NewMem()
	cfg := testConfig(fs, "/b")
	cfg.FlushInterval = -1
	cfg.ReadAheadEntries = 16
	cfg.CopyToEntryLogs = copyToEntryLogs
	s := mustOpen(t, cfg)
	defer s.Close()
	for e := int64(0); e < 100; e++ {
		add(t, s, 1, e, storagetest.Payload(1, e, 200))
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	for e := int64(0); e < 100; e++ {
		checkEntry(t, s, 1, e, 200)
	}
	// Reading backwards (not sequential) must work too.
	for e := int64(99); e >= 0; e -= 7 {
		checkEntry(t, s, 1, e, 200)
	}
	if _, err := s.ReadEntry(1, 100); !errors.Is(err, storage.ErrNoSuchEntry) {
		t.Fatalf("read past end: %v", err)
	}
	// Ledgers 2 and 3 interleaved (in the journal, each one's entries lie
	// between the other's, now and then more than a read-ahead skips).
	size3 := func(e int64) int { return 100 + int(e%5)*20000 }
	for e := int64(0); e < 60; e++ {
		add(t, s, 2, e, storagetest.Payload(2, e, 300))
		add(t, s, 3, e, storagetest.Payload(3, e, size3(e)))
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	for e := int64(0); e < 60; e++ {
		checkEntry(t, s, 2, e, 300)
	}
	for e := int64(0); e < 60; e++ {
		checkEntry(t, s, 3, e, size3(e))
	}
}

// TestUnsyncedCheckpointReplays: a flush commits its index batch without
// syncing Pebble's WAL; a crash that loses it must fall back to the last
// durable checkpoint and replay the journal, which is still there.
func TestUnsyncedCheckpointReplays(t *testing.T) { forModes(t, unsyncedCheckpointReplays) }

func unsyncedCheckpointReplays(t *testing.T, copyToEntryLogs bool) {
	fs := vfs.NewCrashableMem()
	cfg := testConfig(fs, "/b")
	cfg.FlushInterval = -1
	cfg.CopyToEntryLogs = copyToEntryLogs
	cfg.JournalMaxFileBytes = 16 << 10 // several journal files, some released
	s := mustOpen(t, cfg)
	for e := int64(0); e < 200; e++ {
		add(t, s, 1, e, storagetest.Payload(1, e, 300))
		if e%40 == 39 {
			if err := s.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	s2 := crashAndReopen(t, fs, s, cfg) // unsynced data lost
	defer s2.Close()
	for e := int64(0); e < 200; e++ {
		checkEntry(t, s2, 1, e, 300)
	}
	if last, _, err := s2.LastEntry(1); err != nil || last != 199 {
		t.Fatalf("LastEntry = %d, %v; want 199", last, err)
	}
}

// TestSeparateJournalDir: a journal directory outside Dir is used for the
// journal (and only for it), and a wiped or foreign journal directory is
// refused at Open rather than replayed as empty.
func TestSeparateJournalDir(t *testing.T) {
	fs := vfs.NewMem()
	cfg := testConfig(fs, "/b")
	cfg.JournalDir = "/j"
	cfg.FlushInterval = -1 // keep the entries in the journal only
	s := mustOpen(t, cfg)
	add(t, s, 1, 0, storagetest.Payload(1, 0, 100))
	if names := listDir(t, fs, "/j"); !slices.ContainsFunc(names, func(n string) bool { return strings.HasSuffix(n, ".jnl") }) {
		t.Fatalf("no journal file in /j: %v", names)
	}
	if names, err := fs.List("/b/journal"); err == nil && len(names) > 0 {
		t.Fatalf("journal written below Dir as well: %v", names)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, cfg)
	checkEntry(t, s, 1, 0, 100)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// A journal directory of another storage.
	other := testConfig(fs, "/b2")
	other.JournalDir = "/j2"
	s2 := mustOpen(t, other)
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	swapped := cfg
	swapped.JournalDir = "/j2"
	if _, err := storage.Open(swapped); !errors.Is(err, storage.ErrInstanceMismatch) {
		t.Fatalf("Open with another storage's journal dir: %v, want ErrInstanceMismatch", err)
	}

	// The journal device wiped (or replaced by an empty one).
	for _, n := range listDir(t, fs, "/j") {
		if err := fs.Remove(fs.PathJoin("/j", n)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := storage.Open(cfg); !errors.Is(err, storage.ErrInstanceMismatch) {
		t.Fatalf("Open with a wiped journal dir: %v, want ErrInstanceMismatch", err)
	}
	// Dir itself is untouched by the refusal.
	if _, err := fs.Stat("/b/STORAGE_ID"); err != nil {
		t.Fatalf("instance id of Dir: %v", err)
	}
}

// TestTombstoneTTL: a deleted ledger's tombstone refuses late adds, survives
// a restart, and is dropped by GC once older than TombstoneTTL.
func TestTombstoneTTL(t *testing.T) {
	fs := vfs.NewMem()
	cfg := testConfig(fs, "/b")
	s := mustOpen(t, cfg)
	add(t, s, 5, 0, storagetest.Payload(5, 0, 10))
	if err := s.DeleteLedger(5); err != nil {
		t.Fatal(err)
	}
	if st, err := s.RunGC(); err != nil || st.TombstonesDropped != 0 {
		t.Fatalf("RunGC with a fresh tombstone: %+v, %v", st, err)
	}
	if err := storagetest.Add(t, s, 5, 1, 0, []byte("late"), false); !errors.Is(err, storage.ErrFenced) {
		t.Fatalf("late add to a deleted ledger: %v, want ErrFenced", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	cfg.TombstoneTTL = time.Nanosecond // deletion times have 1 s resolution
	s = mustOpen(t, cfg)
	defer func() { s.Close() }()
	if err := storagetest.Add(t, s, 5, 1, 0, []byte("late"), false); !errors.Is(err, storage.ErrFenced) {
		t.Fatalf("late add after restart: %v, want ErrFenced", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := s.RunGC()
		if err != nil {
			t.Fatal(err)
		}
		if st.TombstonesDropped == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("tombstone not dropped: %+v", st)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, cfg)
	if err := storagetest.Add(t, s, 5, 1, 0, []byte("late"), false); err != nil {
		t.Fatalf("add after the tombstone expired (and a restart): %v", err)
	}
}

// TestReleasedJournalFilesDeleted: journal files a flush releases beyond
// those kept for recycling are deleted once the flush is over (entries
// copied to the entry logs; else GC releases them: TestGCReleasesJournalFiles).
func TestReleasedJournalFilesDeleted(t *testing.T) {
	fs := vfs.NewMem()
	cfg := testConfig(fs, "/b")
	cfg.FlushInterval = -1
	cfg.CopyToEntryLogs = true
	cfg.JournalMaxFileBytes = 16 << 10
	cfg.JournalRecycleFiles = -1
	s := mustOpen(t, cfg)
	defer s.Close()
	for e := int64(0); e < 100; e++ { // about six journal files
		add(t, s, 1, e, storagetest.Payload(1, e, 1000))
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	var jnl []string
	for _, n := range listDir(t, fs, "/b/journal") {
		if strings.HasSuffix(n, ".jnl") {
			jnl = append(jnl, n)
		}
	}
	if len(jnl) > 1 {
		t.Fatalf("journal files left after a flush released them: %v", jnl)
	}
}

func journalFiles(t testing.TB, fs vfs.FS, dir string) []string {
	t.Helper()
	var out []string
	for _, n := range listDir(t, fs, dir) {
		if strings.HasSuffix(n, ".jnl") {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// TestGCReleasesJournalFiles: with entries kept in the journal, GC releases
// the journal files nothing points into any more and compacts those with few
// live entries into the entry logs; no entry is lost, across a crash too.
func TestGCReleasesJournalFiles(t *testing.T) {
	fs := vfs.NewCrashableMem()
	cfg := testConfig(fs, "/b")
	cfg.FlushInterval = -1
	cfg.JournalMaxFileBytes = 32 << 10
	cfg.JournalRecycleFiles = 1
	s := mustOpen(t, cfg)
	defer s.Close()
	// Rounds of ledgers 1 (deleted later, big) and 2 (kept, small), then
	// ledger 3 (deleted, alone in its files).
	for e := int64(0); e < 160; e++ {
		add(t, s, 1, e, storagetest.Payload(1, e, 1000))
		add(t, s, 2, e, storagetest.Payload(2, e, 100))
	}
	for e := int64(0); e < 200; e++ {
		add(t, s, 3, e, storagetest.Payload(3, e, 1000))
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := dirBytes(t, fs, "/b/entrylogs"); n > 4096 {
		t.Fatalf("entry logs hold %d bytes: entries were copied", n)
	}
	before := journalFiles(t, fs, "/b/journal")
	if st, err := s.RunGC(); err != nil || st.JournalFilesReleased != 0 {
		t.Fatalf("GC with every entry live: %+v, %v", st, err)
	}
	st := deleteAndGC(t, s, 1, 3)
	after := journalFiles(t, fs, "/b/journal")
	t.Logf("gc: %+v; journal files %d -> %d", st, len(before), len(after))
	if st.JournalFilesCompacted == 0 || st.JournalFilesReleased <= st.JournalFilesCompacted || st.EntriesMoved == 0 {
		t.Fatalf("gc stats %+v: want journal files released, some after compaction", st)
	}
	// The current file and the one kept for recycling remain, plus files
	// not wholly before the checkpoint.
	if len(after) > 3 {
		t.Fatalf("journal files after GC: %v (before: %v)", after, before)
	}
	for e := int64(0); e < 160; e++ {
		checkEntry(t, s, 2, e, 100)
	}
	s2 := crashAndReopen(t, fs, s, cfg)
	defer s2.Close()
	for e := int64(0); e < 160; e++ {
		checkEntry(t, s2, 2, e, 100)
	}
	if _, err := s2.ReadEntry(1, 0); !errors.Is(err, storage.ErrNoSuchLedger) {
		t.Fatalf("deleted ledger after crash: %v", err)
	}
}

// TestSwitchCopyToEntryLogs: a storage whose index points into journal
// files keeps those files when reopened with CopyToEntryLogs (which would
// otherwise release them at the next flush), and the other way round.
func TestSwitchCopyToEntryLogs(t *testing.T) {
	fs := vfs.NewMem()
	cfg := testConfig(fs, "/b")
	cfg.FlushInterval = -1
	cfg.JournalMaxFileBytes = 16 << 10
	cfg.JournalRecycleFiles = -1
	n := int64(0)
	write := func(s *storage.DiskStorage) {
		for range 60 {
			add(t, s, 1, n, storagetest.Payload(1, n, 700))
			n++
		}
		if err := s.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	verify := func(s *storage.DiskStorage) {
		t.Helper()
		if _, err := s.RunGC(); err != nil {
			t.Fatal(err)
		}
		for e := range n {
			checkEntry(t, s, 1, e, 700)
		}
	}
	for i, copyToEntryLogs := range []bool{false, true, false, true} {
		cfg.CopyToEntryLogs = copyToEntryLogs
		s := mustOpen(t, cfg)
		verify(s)
		write(s)
		verify(s)
		if err := s.Close(); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
	}
	s := mustOpen(t, cfg)
	defer s.Close()
	verify(s)
	if err := s.DeleteLedger(1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RunGC(); err != nil {
		t.Fatal(err)
	}
	if left := journalFiles(t, fs, "/b/journal"); len(left) > 2 {
		t.Fatalf("journal files left after the only ledger was deleted: %v", left)
	}
}

// TestGCReleasesHeaderlessJournalFile: a journal file whose header a crash
// lost (it held nothing durable) is released by GC with entries kept in
// place, as a flush releases it when entries are copied.
func TestGCReleasesHeaderlessJournalFile(t *testing.T) {
	fs := vfs.NewMem()
	cfg := testConfig(fs, "/b")
	cfg.JournalRecycleFiles = -1
	s := mustOpen(t, cfg)
	add(t, s, 1, 0, storagetest.Payload(1, 0, 100))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	files := journalFiles(t, fs, "/b/journal")
	var last uint64
	if _, err := fmt.Sscanf(files[len(files)-1], "%x.jnl", &last); err != nil {
		t.Fatal(err)
	}
	headerless := fmt.Sprintf("%016x.jnl", last+1)
	f, err := fs.Create("/b/journal/"+headerless, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("MG")) // a header torn by a crash
	f.Close()
	s = mustOpen(t, cfg)
	defer s.Close()
	if _, err := s.RunGC(); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(journalFiles(t, fs, "/b/journal"), headerless) {
		t.Fatalf("journal file with a torn header kept after GC: %v", journalFiles(t, fs, "/b/journal"))
	}
	checkEntry(t, s, 1, 0, 100)
}

// TestInPlaceFlushSyncsJournal: with JournalNoSync, adds are acknowledged
// before any fsync; a flush that indexes them in place must first make
// their journal records durable, or an index made durable later (here by a
// GC pass) would point at records a crash lost.
func TestInPlaceFlushSyncsJournal(t *testing.T) {
	fs := vfs.NewCrashableMem()
	cfg := testConfig(fs, "/b")
	cfg.FlushInterval = -1
	cfg.JournalNoSync = true
	s := mustOpen(t, cfg)
	for e := int64(0); e < 50; e++ {
		add(t, s, 1, e, storagetest.Payload(1, e, 500))
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RunGC(); err != nil { // syncs the index
		t.Fatal(err)
	}
	s2 := crashAndReopen(t, fs, s, cfg) // unsynced data lost
	defer s2.Close()
	for e := int64(0); e < 50; e++ {
		checkEntry(t, s2, 1, e, 500)
	}
}
