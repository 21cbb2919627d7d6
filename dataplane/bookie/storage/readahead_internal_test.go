package storage

import (
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestReadAheadCopiesOutOfGappyRuns: a read-ahead read that spans other
// ledgers' records caches copies of its own entries, not slices of the
// read buffer, which would keep the other ledgers' bytes alive in the read
// cache without counting them.
func TestReadAheadCopiesOutOfGappyRuns(t *testing.T) {
	s, err := Open(Config{Dir: "/b", FS: vfs.NewMem(), FlushInterval: -1, GCInterval: -1,
		DiskCheckInterval: -1, MinFreeDiskBytes: -1, ReadAheadEntries: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	add := func(l, e int64, n int) {
		errc := make(chan error, 1)
		s.AddEntry(l, e, e-1, make([]byte, n), false, func(err error) { errc <- err })
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	for e := int64(0); e < 40; e++ {
		add(2, e, 300)
		add(3, e, 20_000) // between ledger 2's entries in the journal
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	for e := int64(0); e < 2; e++ { // the second read is sequential: read-ahead
		if _, err := s.ReadEntry(2, e); err != nil {
			t.Fatal(err)
		}
	}
	cached := 0
	for e := int64(2); e < 18; e++ {
		d, ok := s.rc.get(2, e)
		if !ok {
			continue
		}
		cached++
		if len(d) != 300 || cap(d) > 1024 {
			t.Fatalf("cached entry %d: len %d cap %d: a slice of the read buffer, not a copy", e, len(d), cap(d))
		}
	}
	if cached == 0 {
		t.Fatal("read-ahead cached nothing")
	}
}
