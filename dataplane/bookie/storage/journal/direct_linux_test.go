package journal

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestDirectIO: with O_DIRECT writes (groups of every size, rotations,
// recycled files; every group direct, or the small ones through the page
// cache in between) every record replays intact and in order, the zeros
// ending each file's last block are not taken for a torn tail, and every
// entry reads back in place while the journal is open. The journal must
// really write with O_DIRECT on the test's file system (else the test is
// skipped), so it would catch misaligned writes (EINVAL) and a tail block
// rewritten with other bytes.
func TestDirectIO(t *testing.T) {
	t.Run("all", func(t *testing.T) { testDirectIO(t, 0) })
	t.Run("mixed", func(t *testing.T) { testDirectIO(t, 16<<10) })
}

func testDirectIO(t *testing.T, directMin int) {
	dir := t.TempDir()
	j, err := Open(Options{FS: vfs.Default, Dir: dir, MaxFileBytes: 1 << 20, RecycleFiles: 2, DirectIO: true}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if j.dio == nil {
		err := j.DirectIOError()
		j.Close()
		t.Skipf("the temp dir's file system refuses O_DIRECT: %v", err)
	}
	j.directMin = directMin // before the first append: the writer reads it after
	type rec struct {
		entry int64
		data  []byte
		end   uint64
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var recs []rec
	var mu sync.Mutex
	var wg sync.WaitGroup
	released := 0
	for i := range 3000 {
		data := make([]byte, rng.IntN(3*directBlock)) // empty, sub-block and multi-block records
		for k := range data {
			data[k] = byte(i + k)
		}
		wg.Add(1)
		end := j.AppendEntry(7, int64(i), int64(i)-1, data, func(err error) {
			if err != nil {
				t.Errorf("append %d: %v", i, err)
			}
			wg.Done()
		})
		mu.Lock()
		recs = append(recs, rec{int64(i), data, end})
		mu.Unlock()
		if rng.IntN(20) == 0 { // a group of one, or of many
			wg.Wait()
		}
		if i == 1500 { // release the first files: the next rotations reuse them
			wg.Wait()
			mark := j.Durable()
			for _, fi := range j.Sealed() {
				if _, ok := j.ReleaseFile(fi.ID, mark); ok {
					released++
				}
			}
		}
	}
	wg.Wait()
	if released == 0 {
		t.Fatal("no file was released for recycling")
	}
	// Read in place, journal open.
	for _, r := range recs[1600:] {
		id, off, ok := j.Locate(r.end - uint64(EncodedLen(len(r.data))))
		if !ok {
			t.Fatalf("entry %d not located", r.entry)
		}
		run, err := j.ReadRun(id, off, EncodedLen(len(r.data)))
		if err != nil {
			t.Fatal(err)
		}
		_, e, data, err := run.ParseEntry(0)
		if err != nil || e != r.entry || !bytes.Equal(data, r.data) {
			t.Fatalf("entry %d read in place: entry %d, %v", r.entry, e, err)
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	var got []Record
	_, st, err := Replay(vfs.Default, dir, recs[1600].end, func(_ uint64, r Record) error {
		r.Data = bytes.Clone(r.Data)
		got = append(got, r)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if st.Torn != 0 {
		t.Fatalf("replay found %d torn files: %+v", st.Torn, st)
	}
	want := recs[1601:]
	if len(got) != len(want) {
		t.Fatalf("replayed %d records, want %d", len(got), len(want))
	}
	for i, r := range got {
		if r.Entry != want[i].entry || !bytes.Equal(r.Data, want[i].data) {
			t.Fatalf("record %d: entry %d (want %d), %d bytes (want %d)", i, r.Entry, want[i].entry, len(r.Data), len(want[i].data))
		}
	}
	if directMin > 0 {
		return
	}
	// All direct: the files end with whole blocks (zero-filled).
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if filepath.Ext(e.Name()) != fileSuffix {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		// (a file rotated to at the very end holds only its header)
		if fi.Size()%directBlock != 0 && fi.Size() != fileHeaderLen {
			t.Errorf("%s: %d bytes, not whole blocks", e.Name(), fi.Size())
		}
	}
}
