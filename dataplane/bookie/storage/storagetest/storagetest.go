package storagetest

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/bookie/storage"
)

// waitTimeout bounds every wait for a done callback.
const waitTimeout = 30 * time.Second

// Run runs the conformance suite against fresh storages from open.
func Run(t *testing.T, open func(t *testing.T) storage.Storage) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s storage.Storage)
	}{
		{"AddRead", testAddRead},
		{"Overwrite", testOverwrite},
		{"LastEntryAndLAC", testLastEntry},
		{"UnknownLedger", testUnknownLedger},
		{"FenceRejectsAdds", testFence},
		{"FenceUnknownCreates", testFenceUnknown},
		{"RecoveryAddAfterFence", testRecoveryAdd},
		{"Delete", testDelete},
		{"ConcurrentAdds", testConcurrentAdds},
		{"DoneExactlyOnce", testDoneOnce},
		{"EmptyAndLargeEntries", testSizes},
		{"CloseRejects", testClose},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t)
			defer s.Close()
			tc.fn(t, s)
		})
	}
}

// Add adds an entry and waits for done, failing t if done is not called in
// time or is called more than once. It returns done's error.
func Add(t testing.TB, s storage.Storage, ledger, entry, lac int64, data []byte, recovery bool) error {
	t.Helper()
	ch := make(chan error, 2)
	s.AddEntry(ledger, entry, lac, data, recovery, func(err error) { ch <- err })
	return wait(t, ch)
}

// Fence fences ledger and waits for done.
func Fence(t testing.TB, s storage.Storage, ledger int64) error {
	t.Helper()
	ch := make(chan error, 2)
	s.Fence(ledger, func(err error) { ch <- err })
	return wait(t, ch)
}

func wait(t testing.TB, ch chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		select {
		case <-ch:
			t.Fatalf("done called twice")
		default:
		}
		return err
	case <-time.After(waitTimeout):
		t.Fatalf("done not called within %v", waitTimeout)
		return nil
	}
}

// Payload returns deterministic test data for (ledger, entry).
func Payload(ledger, entry int64, n int) []byte {
	b := make([]byte, n)
	x := uint64(ledger)*0x9E3779B97F4A7C15 ^ uint64(entry)*0xBF58476D1CE4E5B9
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x)
	}
	return b
}

func mustAdd(t *testing.T, s storage.Storage, ledger, entry, lac int64, data []byte) {
	t.Helper()
	if err := Add(t, s, ledger, entry, lac, data, false); err != nil {
		t.Fatalf("AddEntry(%d,%d): %v", ledger, entry, err)
	}
}

func mustRead(t *testing.T, s storage.Storage, ledger, entry int64, want []byte) {
	t.Helper()
	got, err := s.ReadEntry(ledger, entry)
	if err != nil {
		t.Fatalf("ReadEntry(%d,%d): %v", ledger, entry, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("ReadEntry(%d,%d) = %d bytes, want %d bytes (content differs)", ledger, entry, len(got), len(want))
	}
}

func testAddRead(t *testing.T, s storage.Storage) {
	for l := int64(1); l <= 3; l++ {
		for e := int64(0); e < 20; e++ {
			mustAdd(t, s, l, e, e-1, Payload(l, e, 100+int(e)))
		}
	}
	for l := int64(1); l <= 3; l++ {
		for e := int64(0); e < 20; e++ {
			mustRead(t, s, l, e, Payload(l, e, 100+int(e)))
		}
	}
	if _, err := s.ReadEntry(1, 20); !errors.Is(err, storage.ErrNoSuchEntry) {
		t.Fatalf("ReadEntry past end: %v, want ErrNoSuchEntry", err)
	}
	// The caller may reuse its buffer after done.
	buf := []byte("original")
	mustAdd(t, s, 9, 0, storage.NoEntry, buf)
	copy(buf, "CLOBBER!")
	mustRead(t, s, 9, 0, []byte("original"))
}

func testOverwrite(t *testing.T, s storage.Storage) {
	mustAdd(t, s, 1, 0, storage.NoEntry, []byte("v1"))
	mustAdd(t, s, 1, 0, storage.NoEntry, []byte("v2"))
	mustRead(t, s, 1, 0, []byte("v2"))
}

func testLastEntry(t *testing.T, s storage.Storage) {
	mustAdd(t, s, 5, 0, storage.NoEntry, []byte("a"))
	last, lac, err := s.LastEntry(5)
	if err != nil || last != 0 || lac != storage.NoEntry {
		t.Fatalf("LastEntry = %d,%d,%v; want 0,-1,nil", last, lac, err)
	}
	mustAdd(t, s, 5, 3, 1, []byte("d"))
	mustAdd(t, s, 5, 2, 0, []byte("c")) // out of order: last and lac are maxima
	last, lac, err = s.LastEntry(5)
	if err != nil || last != 3 || lac != 1 {
		t.Fatalf("LastEntry = %d,%d,%v; want 3,1,nil", last, lac, err)
	}
}

func testUnknownLedger(t *testing.T, s storage.Storage) {
	if _, err := s.ReadEntry(77, 0); !errors.Is(err, storage.ErrNoSuchLedger) {
		t.Fatalf("ReadEntry unknown ledger: %v, want ErrNoSuchLedger", err)
	}
	if _, _, err := s.LastEntry(77); !errors.Is(err, storage.ErrNoSuchLedger) {
		t.Fatalf("LastEntry unknown ledger: %v, want ErrNoSuchLedger", err)
	}
	if f, err := s.IsFenced(77); err != nil || f {
		t.Fatalf("IsFenced unknown ledger = %v,%v; want false,nil", f, err)
	}
	if err := s.DeleteLedger(77); err != nil {
		t.Fatalf("DeleteLedger unknown ledger: %v", err)
	}
	if err := s.ReadOnly(); err != nil {
		t.Fatalf("fresh storage ReadOnly() = %v", err)
	}
}

func testFence(t *testing.T, s storage.Storage) {
	mustAdd(t, s, 3, 0, storage.NoEntry, []byte("x"))
	if f, _ := s.IsFenced(3); f {
		t.Fatal("fenced before Fence")
	}
	if err := Fence(t, s, 3); err != nil {
		t.Fatalf("Fence: %v", err)
	}
	if f, err := s.IsFenced(3); err != nil || !f {
		t.Fatalf("IsFenced = %v,%v; want true", f, err)
	}
	if err := Add(t, s, 3, 1, 0, []byte("y"), false); !errors.Is(err, storage.ErrFenced) {
		t.Fatalf("add to fenced ledger: %v, want ErrFenced", err)
	}
	if _, err := s.ReadEntry(3, 1); !errors.Is(err, storage.ErrNoSuchEntry) {
		t.Fatalf("rejected entry readable: %v", err)
	}
	if err := Fence(t, s, 3); err != nil {
		t.Fatalf("second Fence: %v", err)
	}
	mustRead(t, s, 3, 0, []byte("x"))
}

func testFenceUnknown(t *testing.T, s storage.Storage) {
	if err := Fence(t, s, 11); err != nil {
		t.Fatalf("Fence: %v", err)
	}
	if f, err := s.IsFenced(11); err != nil || !f {
		t.Fatalf("IsFenced = %v,%v; want true", f, err)
	}
	last, lac, err := s.LastEntry(11)
	if err != nil || last != storage.NoEntry || lac != storage.NoEntry {
		t.Fatalf("LastEntry of fenced empty ledger = %d,%d,%v; want -1,-1,nil", last, lac, err)
	}
}

func testRecoveryAdd(t *testing.T, s storage.Storage) {
	mustAdd(t, s, 4, 0, storage.NoEntry, []byte("a"))
	if err := Fence(t, s, 4); err != nil {
		t.Fatal(err)
	}
	if err := Add(t, s, 4, 1, 0, []byte("b"), true); err != nil {
		t.Fatalf("recovery add: %v", err)
	}
	if err := Add(t, s, 4, 0, storage.NoEntry, []byte("a2"), true); err != nil {
		t.Fatalf("recovery overwrite: %v", err)
	}
	mustRead(t, s, 4, 1, []byte("b"))
	mustRead(t, s, 4, 0, []byte("a2"))
	if last, _, _ := s.LastEntry(4); last != 1 {
		t.Fatalf("LastEntry = %d, want 1", last)
	}
}

func testDelete(t *testing.T, s storage.Storage) {
	for e := int64(0); e < 10; e++ {
		mustAdd(t, s, 6, e, e-1, Payload(6, e, 64))
		mustAdd(t, s, 7, e, e-1, Payload(7, e, 64))
	}
	if err := Fence(t, s, 6); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteLedger(6); err != nil {
		t.Fatalf("DeleteLedger: %v", err)
	}
	if _, err := s.ReadEntry(6, 0); !errors.Is(err, storage.ErrNoSuchLedger) {
		t.Fatalf("read deleted ledger: %v, want ErrNoSuchLedger", err)
	}
	if _, _, err := s.LastEntry(6); !errors.Is(err, storage.ErrNoSuchLedger) {
		t.Fatalf("LastEntry deleted ledger: %v, want ErrNoSuchLedger", err)
	}
	for e := int64(0); e < 10; e++ {
		mustRead(t, s, 7, e, Payload(7, e, 64))
	}
	// The id stays dead: a zombie writer cannot re-create the ledger.
	for _, recovery := range []bool{false, true} {
		if err := Add(t, s, 6, 10, 9, []byte("zombie"), recovery); !errors.Is(err, storage.ErrFenced) {
			t.Fatalf("add to a deleted ledger (recovery=%v): %v, want ErrFenced", recovery, err)
		}
	}
	if err := Fence(t, s, 6); err != nil {
		t.Fatalf("fence a deleted ledger: %v", err)
	}
	if _, err := s.ReadEntry(6, 10); !errors.Is(err, storage.ErrNoSuchLedger) {
		t.Fatalf("read deleted ledger after a refused add: %v, want ErrNoSuchLedger", err)
	}
}

func testConcurrentAdds(t *testing.T, s storage.Storage) {
	const writers, perWriter = 16, 100
	var wg sync.WaitGroup
	errs := make(chan error, writers*perWriter)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ledger := int64(100 + w%4)
			var inner sync.WaitGroup
			for i := range perWriter {
				entry := int64(w/4*perWriter + i)
				inner.Add(1)
				s.AddEntry(ledger, entry, entry-1, Payload(ledger, entry, 200), false, func(err error) {
					if err != nil {
						errs <- fmt.Errorf("add (%d,%d): %w", ledger, entry, err)
					}
					inner.Done()
				})
			}
			inner.Wait()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for l := int64(100); l < 104; l++ {
		for e := int64(0); e < writers/4*perWriter; e++ {
			mustRead(t, s, l, e, Payload(l, e, 200))
		}
		last, lac, err := s.LastEntry(l)
		if err != nil || last != writers/4*perWriter-1 || lac != last-1 {
			t.Fatalf("LastEntry(%d) = %d,%d,%v", l, last, lac, err)
		}
	}
}

func testDoneOnce(t *testing.T, s storage.Storage) {
	const n = 500
	var calls [n]atomic.Int32
	var wg sync.WaitGroup
	wg.Add(n)
	for i := range n {
		s.AddEntry(1, int64(i), int64(i)-1, Payload(1, int64(i), 10), false, func(error) {
			calls[i].Add(1)
			wg.Done()
		})
	}
	if err := Fence(t, s, 1); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		s.AddEntry(1, n+int64(i), 0, nil, false, func(err error) {
			if !errors.Is(err, storage.ErrFenced) {
				t.Errorf("add after fence: %v", err)
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(waitTimeout):
		t.Fatal("not every done was called")
	}
	for i := range n {
		if c := calls[i].Load(); c != 1 {
			t.Fatalf("done for entry %d called %d times", i, c)
		}
	}
}

func testSizes(t *testing.T, s storage.Storage) {
	mustAdd(t, s, 8, 0, storage.NoEntry, nil)
	big := Payload(8, 1, 3<<20)
	mustAdd(t, s, 8, 1, 0, big)
	if got, err := s.ReadEntry(8, 0); err != nil || len(got) != 0 {
		t.Fatalf("empty entry = %q,%v", got, err)
	}
	mustRead(t, s, 8, 1, big)
}

func testClose(t *testing.T, s storage.Storage) {
	mustAdd(t, s, 1, 0, storage.NoEntry, []byte("a"))
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := Add(t, s, 1, 1, 0, []byte("b"), false); !errors.Is(err, storage.ErrClosed) {
		t.Fatalf("add after Close: %v, want ErrClosed", err)
	}
	if err := Fence(t, s, 1); !errors.Is(err, storage.ErrClosed) {
		t.Fatalf("Fence after Close: %v, want ErrClosed", err)
	}
	if _, err := s.ReadEntry(1, 0); !errors.Is(err, storage.ErrClosed) {
		t.Fatalf("read after Close: %v, want ErrClosed", err)
	}
}
