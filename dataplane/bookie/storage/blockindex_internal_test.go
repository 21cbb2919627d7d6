package storage

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/magnetar-dev/magnetar/dataplane/bookie/storage/entrylog"
)

// randomBlock returns up to blockMaxEntries entries from first on: gaps
// between entries, files changing, offsets before and after the previous
// record (entries merged from different flushes), journal and entry-log
// files.
func randomBlock(r *rand.Rand, first int64) []indexed {
	n := 1 + r.IntN(blockMaxEntries)
	items := make([]indexed, 0, n)
	e := first
	loc := entrylog.Location{Log: r.Uint64N(8), Offset: r.Uint64N(1 << 40)}
	for range n {
		switch r.IntN(4) {
		case 0:
			loc.Log = r.Uint64N(8) | uint64(r.IntN(2))<<63
			loc.Offset = r.Uint64N(1 << 40)
		case 1:
			loc.Offset = r.Uint64N(1 << 20) // likely before the previous record
		default:
			loc.Offset = recordEnd(loc) + r.Uint64N(1<<16)
		}
		loc.Length = r.Uint32N(1 << 22)
		if r.IntN(50) == 0 {
			loc.Length = math.MaxUint32
		}
		items = append(items, indexed{e, loc})
		e += 1 + r.Int64N(3)
		if r.IntN(40) == 0 {
			e += r.Int64N(1 << 40)
		}
	}
	return items
}

func TestBlockRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 300 {
		first := r.Int64N(1 << 50)
		if i%10 == 0 {
			first = 0
		}
		want := randomBlock(r, first)
		v := appendBlock(nil, want)
		got, err := decodeBlockItems(nil, first, v)
		if err != nil {
			t.Fatalf("block %d: %v", i, err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("block %d: decoded %v, want %v", i, got, want)
		}
		// A lookup stops early and sees the entries before it intact.
		k := r.IntN(len(want))
		seen := 0
		if err := decodeBlock(first, v, func(x indexed) bool {
			seen++
			return x.entry < want[k].entry
		}); err != nil || seen != k+1 {
			t.Fatalf("block %d: early stop at %d saw %d (%v)", i, k, seen, err)
		}
		// Every truncation is an error, not a shorter block.
		for cut := 0; cut < len(v); cut++ {
			if _, err := decodeBlockItems(nil, first, v[:cut]); err == nil {
				t.Fatalf("block %d truncated to %d of %d bytes decoded", i, cut, len(v))
			}
		}
	}
	// A typical run: consecutive entries of a ledger a little apart in one
	// journal file take a few bytes each.
	items := make([]indexed, blockMaxEntries)
	loc := entrylog.Location{Log: journalBit | 7, Offset: 1 << 30, Length: 1024}
	for i := range items {
		items[i] = indexed{int64(1000 + i), loc}
		loc.Offset = recordEnd(loc) + 3*1057 // other ledgers' records between
	}
	if n := len(appendBlock(nil, items)); n > 7*blockMaxEntries {
		t.Errorf("block of %d consecutive entries takes %d bytes, want at most %d", blockMaxEntries, n, 7*blockMaxEntries)
	}
}

// FuzzDecodeBlock: no input makes the decoder panic or yield entries out of
// order, and whatever decodes re-encodes to the same bytes.
func FuzzDecodeBlock(f *testing.F) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 8 {
		f.Add(int64(r.IntN(100)), appendBlock(nil, randomBlock(r, 5)))
	}
	f.Add(int64(0), []byte{0})
	f.Add(int64(math.MaxInt64-1), []byte{2, 1, 0, 0, 5})
	f.Fuzz(func(t *testing.T, first int64, v []byte) {
		var got []indexed
		err := decodeBlock(first, v, func(x indexed) bool {
			if len(got) > 0 && x.entry <= got[len(got)-1].entry {
				t.Fatalf("entries out of order: %d after %d", x.entry, got[len(got)-1].entry)
			}
			got = append(got, x)
			return true
		})
		if err != nil {
			return
		}
		if len(got) == 0 || got[0].entry != first {
			t.Fatalf("decoded %d entries, first %v, from key %d", len(got), got, first)
		}
		if re := appendBlock(nil, got); !bytes.Equal(re, v) {
			// Varints have one encoding each only when minimal; a
			// non-minimal input may decode, but must decode to the same
			// entries again.
			again, err := decodeBlockItems(nil, first, re)
			if err != nil || !slices.Equal(again, got) {
				t.Fatalf("re-encoding changed the block: %v (%v)", again, err)
			}
		}
	})
}

func openInternal(t *testing.T, fs vfs.FS, copyToEntryLogs bool) *DiskStorage {
	t.Helper()
	s, err := Open(Config{Dir: "/b", FS: fs, FlushInterval: -1, GCInterval: -1, DiskCheckInterval: -1,
		MinFreeDiskBytes: -1, CopyToEntryLogs: copyToEntryLogs, ReadAheadEntries: -1})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func addInternal(t *testing.T, s *DiskStorage, l, e int64, data []byte) {
	t.Helper()
	errc := make(chan error, 1)
	s.AddEntry(l, e, e-1, data, false, func(err error) { errc <- err })
	if err := <-errc; err != nil {
		t.Fatalf("add (%d,%d): %v", l, e, err)
	}
}

// blocksOf returns the index blocks of ledger: first entry and entries.
func blocksOf(t *testing.T, s *DiskStorage, ledger int64) [][]indexed {
	t.Helper()
	lo, hi := ledgerBlockBounds(ledger)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	var out [][]indexed
	for it.First(); it.Valid(); it.Next() {
		_, first, ok := decodeBlockKey(it.Key())
		if !ok {
			t.Fatalf("bad block key %x", it.Key())
		}
		items, err := decodeBlockItems(nil, first, it.Value())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, items)
	}
	return out
}

// checkDisjoint fails unless the blocks of ledger cover disjoint, ascending
// ranges (the invariant lookups rely on) and hold exactly want entries.
func checkDisjoint(t *testing.T, s *DiskStorage, ledger int64, want int) {
	t.Helper()
	last, n := int64(math.MinInt64), 0
	for _, b := range blocksOf(t, s, ledger) {
		if b[0].entry <= last {
			t.Fatalf("ledger %d: block from %d overlaps the previous one, which ends at %d", ledger, b[0].entry, last)
		}
		last = b[len(b)-1].entry
		n += len(b)
	}
	if n != want {
		t.Fatalf("ledger %d: %d entries indexed, want %d", ledger, n, want)
	}
}

// TestFlushMergesOverlappingBlocks: entries that are not above a ledger's
// highest indexed entry (re-added ones, as recovery writes them, and ones
// that arrived late) are merged into the blocks they overlap; the newest
// location of an entry wins and blocks stay disjoint, also after a restart
// (when the highest indexed entry is looked up again).
func TestFlushMergesOverlappingBlocks(t *testing.T) {
	for _, copyMode := range []bool{false, true} {
		fs := vfs.NewMem()
		s := openInternal(t, fs, copyMode)
		data := func(e int64, gen byte) []byte { return bytes.Repeat([]byte{byte(e), gen}, 40) }
		flush := func() {
			t.Helper()
			if err := s.Flush(); err != nil {
				t.Fatal(err)
			}
		}
		for e := int64(100); e < 400; e += 2 { // even entries first
			addInternal(t, s, 1, e, data(e, 1))
		}
		flush()
		checkDisjoint(t, s, 1, 150)
		if n := len(blocksOf(t, s, 1)); n != 2 {
			t.Fatalf("150 in-order entries in %d blocks, want 2", n)
		}
		// Entries below the highest indexed one, interleaved with it,
		// re-added (new data), and above it, in one flush.
		for e := int64(0); e < 500; e += 7 {
			addInternal(t, s, 1, e, data(e, 2))
		}
		flush()
		want := map[int64]byte{}
		for e := int64(100); e < 400; e += 2 {
			want[e] = 1
		}
		for e := int64(0); e < 500; e += 7 {
			want[e] = 2
		}
		check := func() {
			t.Helper()
			checkDisjoint(t, s, 1, len(want))
			for e := int64(0); e < 520; e++ {
				got, err := s.readIndexed(1, e)
				gen, ok := want[e]
				switch {
				case !ok && !errors.Is(err, ErrNoSuchEntry):
					t.Fatalf("entry %d never added: read %d bytes, %v", e, len(got), err)
				case ok && err != nil:
					t.Fatalf("entry %d: %v", e, err)
				case ok && !bytes.Equal(got, data(e, gen)):
					t.Fatalf("entry %d: data of generation %d, want %d", e, got[1], gen)
				}
			}
		}
		check()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s = openInternal(t, fs, copyMode)
		// After the restart, whose first flush of the ledger must look its
		// highest indexed entry up again: below it, then in order above.
		for e := int64(1); e < 100; e += 10 {
			addInternal(t, s, 1, e, data(e, 3))
			want[e] = 3
		}
		flush()
		check()
		for e := int64(500); e < 520; e++ {
			addInternal(t, s, 1, e, data(e, 4))
			want[e] = 4
		}
		flush()
		check()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMigrateEntryKeys: an index written with a key per entry (before
// blocks) is rewritten as blocks at Open, and every entry reads back.
func TestMigrateEntryKeys(t *testing.T) {
	fs := vfs.NewMem()
	s := openInternal(t, fs, false)
	const n = 300
	for e := int64(0); e < n; e++ {
		for l := int64(1); l <= 2; l++ {
			addInternal(t, s, l, e, bytes.Repeat([]byte{byte(l), byte(e)}, 30))
		}
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	// Rewrite the blocks as the old per-entry keys.
	b := s.db.NewBatch()
	for l := int64(1); l <= 2; l++ {
		for _, blk := range blocksOf(t, s, l) {
			for _, x := range blk {
				if err := b.Set(entryKey(nil, l, x.entry), x.loc.AppendEncode(nil), nil); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if err := b.DeleteRange([]byte{prefixBlock}, []byte{prefixBlock + 1}, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if len(blocksOf(t, s, 1)) != 0 {
		t.Fatal("blocks left")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openInternal(t, fs, false)
	defer s.Close()
	for l := int64(1); l <= 2; l++ {
		checkDisjoint(t, s, l, n)
		for e := int64(0); e < n; e++ {
			got, err := s.readIndexed(l, e)
			if err != nil || !bytes.Equal(got, bytes.Repeat([]byte{byte(l), byte(e)}, 30)) {
				t.Fatalf("entry (%d,%d) after migration: %v", l, e, err)
			}
		}
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixEntry}, UpperBound: []byte{prefixEntry + 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	if it.First() {
		t.Fatalf("entry key %x left after migration", it.Key())
	}
}

// BenchmarkLookup: the index lookup of a random flushed entry (no cache),
// among 100,000 entries of each of 4 ledgers.
func BenchmarkLookup(b *testing.B) {
	s, err := Open(Config{Dir: b.TempDir(), FlushInterval: -1, GCInterval: -1, DiskCheckInterval: -1,
		MinFreeDiskBytes: -1, JournalNoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const n = 100_000
	data := make([]byte, 100)
	errc := make(chan error, 1)
	for e := int64(0); e < n; e++ {
		for l := int64(1); l <= 4; l++ {
			s.AddEntry(l, e, e-1, data, false, func(err error) { errc <- err })
			if err := <-errc; err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := s.Flush(); err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(5, 6))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := s.lookup(1+r.Int64N(4), r.Int64N(n)); err != nil {
			b.Fatal(err)
		}
	}
}

// TestWriteCacheReadsOutliveRecycling: entries read from the write cache
// (before and during a flush) stay intact after their arena chunks are
// recycled into later caches and overwritten by later adds.
func TestWriteCacheReadsOutliveRecycling(t *testing.T) {
	s := openInternal(t, vfs.NewMem(), false)
	defer s.Close()
	const perRound = 3000 // ~3 MiB of 1 KiB entries: several chunks
	var held [][]byte
	var want [][]byte
	for round := range 6 {
		for e := range int64(perRound) {
			id := int64(round)*perRound + e
			addInternal(t, s, 1, id, bytes.Repeat([]byte{byte(id), byte(round)}, 512))
		}
		// Read some while they are in the active cache.
		for e := int64(0); e < perRound; e += 97 {
			id := int64(round)*perRound + e
			d, err := s.ReadEntry(1, id)
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, d)
			want = append(want, bytes.Repeat([]byte{byte(id), byte(round)}, 512))
		}
		if err := s.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	for i := range held {
		if !bytes.Equal(held[i], want[i]) {
			t.Fatalf("read %d changed after its cache was recycled: starts %x, want %x", i, held[i][:4], want[i][:4])
		}
	}
}

// TestFlushingSnapshotReadsAreCopies: an entry read from the snapshot being
// flushed is a copy, intact after the snapshot's arena is recycled and
// written over by later adds. (The swap and release a flush makes are done
// by hand here, so the read lands between them deterministically.)
func TestFlushingSnapshotReadsAreCopies(t *testing.T) {
	s := openInternal(t, vfs.NewMem(), false)
	defer s.Close()
	want := bytes.Repeat([]byte{0xab}, 1000)
	addInternal(t, s, 1, 0, want)
	s.flushMu.Lock()
	s.mu.Lock()
	snap := s.active
	s.active, s.flushing = newWriteCache(0), snap
	s.mu.Unlock()
	got, err := s.ReadEntry(1, 0)
	if err != nil {
		s.flushMu.Unlock()
		t.Fatal(err)
	}
	s.mu.Lock()
	s.active, s.flushing = snap, nil // back, so Close flushes it
	s.mu.Unlock()
	s.flushMu.Unlock()
	// Write over the chunk the entry sits in, as a recycled chunk would be.
	for i := range snap.arena {
		snap.arena[i] = 0
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read from the flushing snapshot changed with its arena: starts %x", got[:4])
	}
}
