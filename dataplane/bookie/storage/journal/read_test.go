package journal

import (
	"bytes"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestReadInPlace: every entry record can be found by its position
// (Locate), read back in place (ReadRun, ParseEntry) and scanned
// (ScanFile) at the same offset; a released file can no longer be read.
func TestReadInPlace(t *testing.T) {
	fs := vfs.NewMem()
	if err := fs.MkdirAll("/j", 0o755); err != nil {
		t.Fatal(err)
	}
	j, err := Open(Options{FS: fs, Dir: "/j", MaxFileBytes: 4 << 10, RecycleFiles: -1}, 50)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	type placed struct {
		id  uint64
		off int64
	}
	var wg sync.WaitGroup
	ends := make([]uint64, 300)
	for i := range ends {
		wg.Add(1)
		ends[i] = j.AppendEntry(3, int64(i), int64(i)-1, bytes.Repeat([]byte{byte(i)}, i%200), func(err error) {
			if err != nil {
				t.Errorf("append %d: %v", i, err)
			}
			wg.Done()
		})
		if i%50 == 0 {
			wg.Add(1)
			j.AppendFence(9, func(error) { wg.Done() })
		}
		if i%10 == 9 {
			wg.Wait() // small groups, so the files rotate often
		}
	}
	wg.Wait()
	if j.Durable() < ends[len(ends)-1] {
		t.Fatalf("Durable() = %d after every append was acknowledged, want >= %d", j.Durable(), ends[len(ends)-1])
	}
	at := make(map[placed]int)
	for i, end := range ends {
		n := EncodedLen(i % 200)
		id, off, ok := j.Locate(end - uint64(n))
		if !ok {
			t.Fatalf("entry %d not located", i)
		}
		at[placed{id, off}] = i
		run, err := j.ReadRun(id, off, n)
		if err != nil {
			t.Fatal(err)
		}
		l, e, data, err := run.ParseEntry(0)
		if err != nil || l != 3 || e != int64(i) || !bytes.Equal(data, bytes.Repeat([]byte{byte(i)}, i%200)) {
			t.Fatalf("entry %d read in place: (%d,%d) %d bytes, %v", i, l, e, len(data), err)
		}
	}
	sealed := j.Sealed()
	if len(sealed) < 5 {
		t.Fatalf("only %d sealed files", len(sealed))
	}
	scanned := 0
	for _, fi := range sealed {
		var last int64
		err := j.ScanFile(fi.ID, func(off int64, r Record) error {
			last = off + int64(EncodedLen(len(r.Data)))
			if r.Type != RecordEntry {
				last = off + recordHeaderLen + ledgerPayloadLen
				return nil
			}
			if i, ok := at[placed{fi.ID, off}]; !ok || int64(i) != r.Entry {
				t.Fatalf("file %d offset %d: entry %d, located there: %d (%v)", fi.ID, off, r.Entry, i, ok)
			}
			scanned++
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if uint64(last-fileHeaderLen) != fi.Len {
			t.Fatalf("file %d: records end at %d, Len %d", fi.ID, last-fileHeaderLen, fi.Len)
		}
	}
	if scanned == 0 {
		t.Fatal("nothing scanned")
	}

	first := sealed[0]
	if _, ok := j.ReleaseFile(first.ID, first.End()-1); ok {
		t.Fatal("file released although the mark lies inside it")
	}
	doomed, ok := j.ReleaseFile(first.ID, first.End())
	if !ok || doomed == "" {
		t.Fatalf("ReleaseFile = %q, %v", doomed, ok)
	}
	if _, err := j.ReadRun(first.ID, fileHeaderLen, 10); !errors.Is(err, ErrNoSuchFile) {
		t.Fatalf("read of a released file: %v, want ErrNoSuchFile", err)
	}
	if _, ok := j.ReleaseFile(first.ID, first.End()); ok {
		t.Fatal("file released twice")
	}
	cur := j.Files()[len(j.Files())-1]
	if id, ok := parseFileName(cur); !ok {
		t.Fatal(cur)
	} else if _, ok := j.ReleaseFile(id, ends[len(ends)-1]+1); ok {
		t.Fatal("current file released")
	}
}

// TestSyncWithNoSync: with NoSync, appends are acknowledged unsynced and
// Durable stays behind until Sync makes them durable; a crash then keeps
// them.
func TestSyncWithNoSync(t *testing.T) {
	fs := vfs.NewCrashableMem()
	if err := fs.MkdirAll("/j", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syncDir(fs, "/"); err != nil {
		t.Fatal(err)
	}
	j, err := Open(Options{FS: fs, Dir: "/j", NoSync: true, WritebackBytes: -1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	var end uint64
	for i := range 20 {
		errc := make(chan error, 1)
		end = j.AppendEntry(1, int64(i), -1, []byte("data"), func(err error) { errc <- err })
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	if d := j.Durable(); d != 0 {
		t.Fatalf("Durable() = %d with NoSync before Sync", d)
	}
	if err := j.Sync(); err != nil {
		t.Fatal(err)
	}
	if d := j.Durable(); d != end {
		t.Fatalf("Durable() = %d after Sync, want %d", d, end)
	}
	clone := fs.CrashClone(vfs.CrashCloneCfg{})
	n := 0
	if _, _, err := Replay(clone, "/j", 0, func(uint64, Record) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n != 20 {
		t.Fatalf("%d records survived the crash after Sync, want 20", n)
	}
}

// TestNoSyncSyncOffWriter: with NoSync, Sync fdatasyncs on its caller's
// goroutine, so appends are written and acknowledged while it is stuck in
// the fdatasync, and Durable advances only when it returns. (When the
// writer did the sync, the append below waited for it: every in-place
// flush of a --journal-sync=false bookie held adds up for one fdatasync.)
func TestNoSyncSyncOffWriter(t *testing.T) {
	fs := vfs.NewMem()
	if err := fs.MkdirAll("/j", 0o755); err != nil {
		t.Fatal(err)
	}
	j, err := Open(Options{FS: fs, Dir: "/j", NoSync: true, WritebackBytes: -1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	end := appendWait(t, j, 1, 0, []byte("before"))
	entered, release := make(chan struct{}), make(chan struct{})
	j.fileMu.Lock()
	j.f = &slowSyncFile{File: j.f, entered: entered, release: release}
	j.fileMu.Unlock()
	synced := make(chan error, 1)
	go func() { synced <- j.Sync() }()
	<-entered // Sync is inside fdatasync
	appended := make(chan error, 1)
	j.AppendEntry(1, 1, 0, []byte("during"), func(err error) { appended <- err })
	select {
	case err := <-appended:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("an append waited for the Sync stuck in fdatasync")
	}
	if d := j.Durable(); d >= end {
		t.Fatalf("Durable() = %d while the sync of %d has not returned", d, end)
	}
	close(release)
	if err := <-synced; err != nil {
		t.Fatal(err)
	}
	if d := j.Durable(); d < end {
		t.Fatalf("Durable() = %d after Sync, want at least %d", d, end)
	}
}

// slowSyncFile blocks its first SyncData until release is closed.
type slowSyncFile struct {
	vfs.File
	once             sync.Once
	entered, release chan struct{}
}

func (f *slowSyncFile) SyncData() error {
	f.once.Do(func() {
		close(f.entered)
		<-f.release
	})
	return f.File.SyncData()
}
