package journal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"go.uber.org/goleak"
)

// beforeTests, if set, runs first: a test binary started as a helper
// process does its work there and exits (direct_kill_linux_test.go).
var beforeTests func()

func TestMain(m *testing.M) {
	if beforeTests != nil {
		beforeTests()
	}
	goleak.VerifyTestMain(m)
}

func TestAppendReplayRotateRelease(t *testing.T) {
	fs := vfs.NewMem()
	if err := fs.MkdirAll("/j", 0o755); err != nil {
		t.Fatal(err)
	}
	j, err := Open(Options{FS: fs, Dir: "/j", MaxFileBytes: 8 << 10}, 100)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mid uint64
	for i := range 400 {
		wg.Add(1)
		data := bytes.Repeat([]byte{byte(i)}, i%97)
		j.AppendEntry(1, int64(i), int64(i)-1, data, func(err error) {
			if err != nil {
				t.Errorf("append %d: %v", i, err)
			}
			wg.Done()
		})
		if i == 200 {
			wg.Add(1)
			mid = j.AppendFence(7, func(error) { wg.Done() })
		}
	}
	wg.Wait()
	if len(j.Files()) < 2 {
		t.Fatalf("no rotation: %v", j.Files())
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	var got []Record
	end, st, err := Replay(fs, "/j", 0, func(_ uint64, r Record) error {
		r.Data = bytes.Clone(r.Data)
		got = append(got, r)
		return nil
	})
	if err != nil || st.Torn != 0 {
		t.Fatalf("replay: %v %+v", err, st)
	}
	if len(got) != 401 || end != j.Position() {
		t.Fatalf("replayed %d records to %d, want 401 to %d", len(got), end, j.Position())
	}
	for i, e := 0, 0; i < len(got); i++ {
		r := got[i]
		if r.Type == RecordFence {
			if r.Ledger != 7 || e != 201 {
				t.Fatalf("fence at %d: %+v", e, r)
			}
			continue
		}
		if r.Entry != int64(e) || r.LAC != int64(e)-1 || !bytes.Equal(r.Data, bytes.Repeat([]byte{byte(e)}, e%97)) {
			t.Fatalf("record %d: %+v", i, r)
		}
		e++
	}
	// Replay from a mark skips everything before it.
	var n int
	if _, _, err := Replay(fs, "/j", mid, func(uint64, Record) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n != 199 {
		t.Fatalf("replay from mark: %d records, want 199", n)
	}
	// Release deletes files wholly before the mark.
	j2, err := Open(Options{FS: fs, Dir: "/j"}, end)
	if err != nil {
		t.Fatal(err)
	}
	defer j2.Close()
	before := len(j2.Files())
	removeAll(t, fs, j2.Release(end))
	if after := j2.Files(); len(after) != 1 || before < 3 { // >= 2 old files plus the new one
		t.Fatalf("release kept %v (had %d)", after, before)
	}
}

func TestWriteErrorFailsEverything(t *testing.T) {
	fs := vfs.NewMem()
	fs.MkdirAll("/j", 0o755)
	var hook error
	j, err := Open(Options{FS: fs, Dir: "/j", OnError: func(err error) { hook = err }}, 0)
	if err != nil {
		t.Fatal(err)
	}
	j.f.Close() // every later write fails
	j.f = badFile{j.f}
	errc := make(chan error, 1)
	j.AppendEntry(1, 0, -1, []byte("x"), func(err error) { errc <- err })
	if err := <-errc; err == nil {
		t.Fatal("append succeeded on a failing file")
	}
	j.AppendFence(1, func(err error) { errc <- err })
	if err := <-errc; err == nil || hook == nil {
		t.Fatalf("append after failure: %v (hook %v)", err, hook)
	}
	j.f = nil
	j.Close()
}

type badFile struct{ vfs.File }

var errBad = errors.New("bad file")

func (badFile) Write([]byte) (int, error) { return 0, errBad }
func (badFile) Sync() error               { return errBad }
func (badFile) SyncData() error           { return errBad }
func (badFile) Close() error              { return nil }

func FuzzJournalRecord(f *testing.F) {
	f.Add(appendEntryRecord(nil, 1, 2, 1, []byte("hello"), entryCRC(1, 2, 1, []byte("hello"))))
	f.Add(appendLedgerRecord(nil, RecordFence, 9))
	f.Add(appendLedgerRecord(nil, RecordDelete, 9))
	f.Add(make([]byte, 64))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, n, err := DecodeRecord(b)
		if err != nil {
			return
		}
		if n > len(b) || n < recordHeaderLen {
			t.Fatalf("bad length %d of %d", n, len(b))
		}
		var re []byte
		switch r.Type {
		case RecordEntry:
			re = appendEntryRecord(nil, r.Ledger, r.Entry, r.LAC, r.Data, entryCRC(r.Ledger, r.Entry, r.LAC, r.Data))
		default:
			re = appendLedgerRecord(nil, r.Type, r.Ledger)
		}
		if !bytes.Equal(re, b[:n]) {
			t.Fatalf("re-encoding differs: %x vs %x", re, b[:n])
		}
	})
}

func TestDecodeRejectsZeros(t *testing.T) {
	for n := 0; n < 64; n++ {
		if _, _, err := DecodeRecord(make([]byte, n)); err == nil {
			t.Fatalf("zero block of %d bytes decoded", n)
		}
	}
	rec := appendEntryRecord(nil, 3, 4, 2, []byte("abc"), entryCRC(3, 4, 2, []byte("abc")))
	for cut := range len(rec) {
		if _, _, err := DecodeRecord(rec[:cut]); err == nil {
			t.Fatalf("truncated record (%d of %d) decoded", cut, len(rec))
		}
	}
	for i := range rec {
		bad := bytes.Clone(rec)
		bad[i] ^= 0x10
		if _, _, err := DecodeRecord(bad); err == nil {
			t.Fatal(fmt.Sprintf("bit flip at %d not detected", i))
		}
	}
}

// TestNoSyncWritebackCrashReplaysPrefix appends records without fsync
// across many rotations, with writeback started every few KiB, then
// simulates crashes that keep a random part of the unsynced data: replay
// must return exactly a prefix of what was appended (never a later record
// without an earlier one), and at least every record of the rotated files.
func TestNoSyncWritebackCrashReplaysPrefix(t *testing.T) {
	mem := vfs.NewCrashableMem()
	var syncTos atomic.Int64
	fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpFileSyncTo {
			syncTos.Add(1)
		}
		return nil
	}))
	if err := fs.MkdirAll("/j", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syncDir(fs, "/"); err != nil {
		t.Fatal(err)
	}
	j, err := Open(Options{FS: fs, Dir: "/j", NoSync: true, MaxFileBytes: 16 << 10, WritebackBytes: 2 << 10}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	const n = 2000
	ends := make([]uint64, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		ends[i] = j.AppendEntry(1, int64(i), int64(i)-1, bytes.Repeat([]byte{byte(i)}, i%200), func(err error) {
			if err != nil {
				t.Errorf("append %d: %v", i, err)
			}
			wg.Done()
		})
		if i%10 == 9 {
			wg.Wait() // many small groups, so many rotations and writebacks
		}
	}
	wg.Wait()
	if syncTos.Load() == 0 {
		t.Fatal("writeback never started")
	}
	j.filesMu.Lock()
	rotated := len(j.files) - 1
	lastStart := j.files[len(j.files)-1].start
	j.filesMu.Unlock()
	if rotated < 10 {
		t.Fatalf("only %d rotations", rotated)
	}
	durable := 0 // records wholly in rotated (synced) files
	for durable < n && ends[durable] <= lastStart {
		durable++
	}
	for seed := range uint64(20) {
		clone := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: int(seed * 5), RNG: rand.New(rand.NewPCG(seed, 1))})
		got := 0
		_, _, err := Replay(clone, "/j", 0, func(_ uint64, r Record) error {
			if r.Entry != int64(got) || !bytes.Equal(r.Data, bytes.Repeat([]byte{byte(got)}, got%200)) {
				return fmt.Errorf("record %d: entry %d, %d bytes", got, r.Entry, len(r.Data))
			}
			got++
			return nil
		})
		if err != nil {
			t.Fatalf("seed %d: replay: %v", seed, err)
		}
		if got < durable {
			t.Fatalf("seed %d: replayed %d records, want at least the %d of rotated files", seed, got, durable)
		}
	}
}

// TestNoSyncWritebackErrorFailsEverything: a failure to start writeback is
// an I/O error like any other: sticky, reported once.
func TestNoSyncWritebackErrorFailsEverything(t *testing.T) {
	fs := errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpFileSyncTo {
			return errorfs.ErrInjected
		}
		return nil
	}))
	if err := fs.MkdirAll("/j", 0o755); err != nil {
		t.Fatal(err)
	}
	var hooks atomic.Int64
	j, err := Open(Options{FS: fs, Dir: "/j", NoSync: true, WritebackBytes: 1 << 10, OnError: func(error) { hooks.Add(1) }}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	errc := make(chan error, 1)
	j.AppendEntry(1, 0, -1, make([]byte, 2<<10), func(err error) { errc <- err })
	if err := <-errc; !errors.Is(err, errorfs.ErrInjected) {
		t.Fatalf("append: %v, want the injected error", err)
	}
	j.AppendEntry(1, 1, 0, []byte("x"), func(err error) { errc <- err })
	if err := <-errc; !errors.Is(err, errorfs.ErrInjected) || hooks.Load() != 1 {
		t.Fatalf("append after failure: %v (OnError calls %d)", err, hooks.Load())
	}
}

// removeAll deletes the files Release handed back.
func removeAll(t *testing.T, fs vfs.FS, names []string) {
	t.Helper()
	for _, n := range names {
		if err := fs.Remove(n); err != nil {
			t.Fatal(err)
		}
	}
}

// appendWait appends one entry record and waits for it to be durable.
func appendWait(t *testing.T, j *Journal, ledger, entry int64, data []byte) uint64 {
	t.Helper()
	errc := make(chan error, 1)
	end := j.AppendEntry(ledger, entry, entry-1, data, func(err error) { errc <- err })
	if err := <-errc; err != nil {
		t.Fatalf("append %d/%d: %v", ledger, entry, err)
	}
	return end
}

// TestRecycledFiles: released files are renamed and overwritten as the
// next files instead of being deleted (at most RecycleFiles kept), and a
// crash right after a reused file received fewer records than it held
// before never replays the records of its previous life, although they are
// intact on disk and aligned on record boundaries (same sizes in both
// lives): the new id's salt makes them fail their checksum. Without the
// salt this test replays them.
func TestRecycledFiles(t *testing.T) {
	mem := vfs.NewCrashableMem()
	var creates, reuses atomic.Int64
	fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
		switch op.Kind {
		case errorfs.OpCreate:
			creates.Add(1)
		case errorfs.OpReuseForWrite:
			reuses.Add(1)
		}
		return nil
	}))
	if err := fs.MkdirAll("/j", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syncDir(fs, "/"); err != nil {
		t.Fatal(err)
	}
	const maxFile = 8 << 10
	data := bytes.Repeat([]byte{0xab}, 1000) // about 8 records per file
	j, err := Open(Options{FS: fs, Dir: "/j", MaxFileBytes: maxFile, RecycleFiles: 1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	// Ledger 1 fills several files; each is released once the next exists.
	var end uint64
	for e := range int64(60) {
		end = appendWait(t, j, 1, e, data)
		removeAll(t, fs, j.Release(end-uint64(EncodedLen(len(data)))))
	}
	if reuses.Load() == 0 || creates.Load() > 2 {
		t.Fatalf("creates %d, reuses %d: want released files reused", creates.Load(), reuses.Load())
	}
	// Three rotations without a release, then one: a single file is kept,
	// the others are handed back for deletion (and deleted here, as the
	// storage does).
	for e := range int64(30) {
		end = appendWait(t, j, 1, 100+e, data)
	}
	doomed := j.Release(end - uint64(EncodedLen(len(data))))
	if len(doomed) < 2 {
		t.Fatalf("%d files handed back for deletion, want the surplus over RecycleFiles", len(doomed))
	}
	removeAll(t, fs, doomed)
	names, err := fs.List("/j")
	if err != nil {
		t.Fatal(err)
	}
	if len(names) > 3 { // the current file, the previous one, one kept for reuse
		t.Fatalf("%d files on disk: %v", len(names), names)
	}
	// Rotate into the kept file and write only two records (of ledger 2).
	for before, e := reuses.Load(), int64(200); reuses.Load() == before; e++ {
		appendWait(t, j, 1, e, data)
	}
	mark := j.Position()
	for e := range int64(2) {
		appendWait(t, j, 2, e, data)
	}
	clone := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	var got []Record
	_, st, err := Replay(clone, "/j", mark, func(_ uint64, r Record) error {
		got = append(got, r)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if st.Torn != 0 || st.Recycled != 1 {
		t.Errorf("replay stats %+v: want the stale tail counted as recycled, not torn", st)
	}
	if len(got) != 2 || got[0].Ledger != 2 || got[1].Ledger != 2 {
		for _, r := range got {
			t.Logf("replayed ledger %d entry %d", r.Ledger, r.Entry)
		}
		t.Fatalf("replayed %d records after the mark, want the 2 of ledger 2", len(got))
	}
}

// TestReplayV1Files: files written before salting (magic MGJ1) still
// replay.
func TestReplayV1Files(t *testing.T) {
	fs := vfs.NewMem()
	if err := fs.MkdirAll("/j", 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := fs.Create("/j/"+FileName(3), vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	h := fileHeader(3, 500)
	copy(h, fileMagicV1)
	binary.LittleEndian.PutUint32(h[20:24], crc32.Checksum(h[:20], castagnoli))
	rec := appendEntryRecord(h, 4, 0, -1, []byte("old"), entryCRC(4, 0, -1, []byte("old")))
	rec = appendLedgerRecord(rec, RecordFence, 4)
	if _, err := f.Write(rec); err != nil {
		t.Fatal(err)
	}
	f.Close()
	var got []Record
	end, st, err := Replay(fs, "/j", 0, func(_ uint64, r Record) error {
		got = append(got, r)
		return nil
	})
	if err != nil || st.Torn != 0 || len(got) != 2 || got[0].Ledger != 4 || got[1].Type != RecordFence {
		t.Fatalf("replay: %v %+v %+v", err, st, got)
	}
	if want := uint64(500 + len(rec) - fileHeaderLen); end != want {
		t.Fatalf("end %d, want %d", end, want)
	}
}

// TestRecycledFileGone: a file kept for reuse that disappeared (removed by
// hand, say) does not stop the journal: the next rotation creates a new
// file, and everything appended replays.
func TestRecycledFileGone(t *testing.T) {
	fs := vfs.NewMem()
	if err := fs.MkdirAll("/j", 0o755); err != nil {
		t.Fatal(err)
	}
	const maxFile = 8 << 10
	data := bytes.Repeat([]byte{0xcd}, 1000)
	j, err := Open(Options{FS: fs, Dir: "/j", MaxFileBytes: maxFile, RecycleFiles: 1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	var end uint64
	for e := range int64(12) { // past one rotation
		end = appendWait(t, j, 1, e, data)
	}
	if doomed := j.Release(end - uint64(EncodedLen(len(data)))); len(doomed) != 0 {
		t.Fatalf("released %v for deletion, want the one old file kept for reuse", doomed)
	}
	names, err := fs.List("/j")
	if err != nil {
		t.Fatal(err)
	}
	kept := ""
	for _, n := range names {
		if id, ok := parseFileName(n); ok && id != j.fileID {
			kept = n
		}
	}
	if kept == "" {
		t.Fatalf("no kept file among %v", names)
	}
	if err := fs.Remove(fs.PathJoin("/j", kept)); err != nil {
		t.Fatal(err)
	}
	for e := range int64(20) { // rotates into where the kept file was
		end = appendWait(t, j, 2, e, data)
	}
	if err := j.Err(); err != nil {
		t.Fatalf("journal failed after its kept file vanished: %v", err)
	}
	var n int
	if _, _, err := Replay(fs, "/j", 0, func(_ uint64, r Record) error {
		if r.Ledger == 2 {
			n++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n != 20 {
		t.Fatalf("replayed %d records of ledger 2, want 20", n)
	}
}

// TestDirectIORefused: a journal asked for O_DIRECT on a file system that
// cannot give it (an in-memory one) says why, and writes and replays its
// records through the page cache all the same.
func TestDirectIORefused(t *testing.T) {
	fs := vfs.NewMem()
	if err := fs.MkdirAll("/j", 0o755); err != nil {
		t.Fatal(err)
	}
	j, err := Open(Options{FS: fs, Dir: "/j", MaxFileBytes: 8 << 10, DirectIO: true}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if j.DirectIOError() == nil {
		t.Fatal("O_DIRECT on an in-memory file system: no error reported")
	}
	for i := range 50 {
		appendWait(t, j, 3, int64(i), bytes.Repeat([]byte{byte(i)}, 700))
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	n := 0
	if _, st, err := Replay(fs, "/j", 0, func(_ uint64, r Record) error {
		if r.Entry != int64(n) || !bytes.Equal(r.Data, bytes.Repeat([]byte{byte(n)}, 700)) {
			return fmt.Errorf("record %d: entry %d", n, r.Entry)
		}
		n++
		return nil
	}); err != nil || st.Torn != 0 || n != 50 {
		t.Fatalf("replay: %v, %+v, %d records", err, st, n)
	}
}
