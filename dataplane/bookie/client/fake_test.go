package client

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/magnetar-dev/magnetar/dataplane/bookie"
	"github.com/magnetar-dev/magnetar/dataplane/bookie/wire"
	"github.com/magnetar-dev/magnetar/dataplane/metadata"
)

// fakeBookies is an in-process set of bookies implementing the BookieConn
// contract over maps, with fault injection. It exercises the client's
// quorum, ensemble-change and recovery rules deterministically; the real
// bookie server is covered by the tests in real_test.go.
type fakeBookies struct {
	mu      sync.Mutex
	bookies map[string]*fakeBookie
}

type fakeBookie struct {
	addr    string
	set     *fakeBookies
	down    bool // every call fails with ErrConnClosed
	hold    bool // adds are held (no reply) until released
	held    []func()
	entries map[[2]int64]wire.Entry
	fenced  map[int64]bool
	// failAdds: adds fail with ErrConnClosed while the bookie answers
	// everything else (a bookie whose writes keep breaking).
	failAdds bool
}

func newFakeBookies(t *testing.T, md metadata.Store, n int) *fakeBookies {
	f := &fakeBookies{bookies: map[string]*fakeBookie{}}
	for i := 0; i < n; i++ {
		f.add(t, md, fmt.Sprintf("bookie-%d:3181", i), "")
	}
	return f
}

// add registers a bookie the way a bookie server does.
func (f *fakeBookies) add(t *testing.T, md metadata.Store, addr, rack string) *fakeBookie {
	t.Helper()
	b := &fakeBookie{addr: addr, set: f, entries: map[[2]int64]wire.Entry{}, fenced: map[int64]bool{}}
	f.mu.Lock()
	f.bookies[addr] = b
	f.mu.Unlock()
	v, _ := json.Marshal(bookie.Registration{ID: addr, Addr: addr, Rack: rack})
	if _, err := md.Put(context.Background(), bookie.AvailableKey(addr), v, metadata.AnyVersion); err != nil {
		t.Fatal(err)
	}
	return b
}

// kill takes a bookie down and removes its registration.
func (f *fakeBookies) kill(t *testing.T, md metadata.Store, addr string) {
	t.Helper()
	f.mu.Lock()
	f.bookies[addr].down = true
	f.mu.Unlock()
	if err := md.Delete(context.Background(), bookie.AvailableKey(addr), metadata.AnyVersion); err != nil {
		t.Fatal(err)
	}
}

// revive brings a killed bookie back at its address with what it stored,
// and registers it again (a restart that kept its disk).
func (f *fakeBookies) revive(t *testing.T, md metadata.Store, addr string) {
	t.Helper()
	f.mu.Lock()
	f.bookies[addr].down = false
	f.mu.Unlock()
	v, _ := json.Marshal(bookie.Registration{ID: addr, Addr: addr})
	if _, err := md.Put(context.Background(), bookie.AvailableKey(addr), v, metadata.AnyVersion); err != nil {
		t.Fatal(err)
	}
}

func (f *fakeBookies) get(addr string) *fakeBookie {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.bookies[addr]
}

func (f *fakeBookies) Get(ctx context.Context, addr string) (BookieConn, error) {
	b := f.get(addr)
	if b == nil {
		return nil, fmt.Errorf("dial %s: %w", addr, wire.ErrConnClosed)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if b.down {
		return nil, fmt.Errorf("dial %s: %w", addr, wire.ErrConnClosed)
	}
	return b, nil
}

func (b *fakeBookie) has(ledger, entry int64) bool {
	b.set.mu.Lock()
	defer b.set.mu.Unlock()
	_, ok := b.entries[[2]int64{ledger, entry}]
	return ok
}

// release answers every held add.
func (b *fakeBookie) release() {
	b.set.mu.Lock()
	held := b.held
	b.held, b.hold = nil, false
	b.set.mu.Unlock()
	for _, f := range held {
		f()
	}
}

func (b *fakeBookie) Add(req *wire.AddRequest, done wire.AddDone) {
	cb := done.AddDone
	b.set.mu.Lock()
	if b.down || b.failAdds {
		b.set.mu.Unlock()
		go cb(wire.ErrConnClosed)
		return
	}
	if wire.Checksum(req.LedgerID, req.EntryID, req.LAC, req.Payload) != req.Checksum {
		b.set.mu.Unlock()
		go cb(wire.ErrChecksum)
		return
	}
	if b.fenced[req.LedgerID] && !req.Recovery {
		b.set.mu.Unlock()
		go cb(wire.ErrFenced)
		return
	}
	b.entries[[2]int64{req.LedgerID, req.EntryID}] = wire.Entry{
		LedgerID: req.LedgerID, EntryID: req.EntryID, LAC: req.LAC,
		Payload: append([]byte(nil), req.Payload...), Checksum: req.Checksum,
	}
	if b.hold {
		b.held = append(b.held, func() { cb(nil) })
		b.set.mu.Unlock()
		return
	}
	b.set.mu.Unlock()
	go cb(nil)
}

func (b *fakeBookie) Read(ctx context.Context, ledgerID, entryID int64, flags wire.ReadFlags) (wire.Entry, error) {
	b.set.mu.Lock()
	defer b.set.mu.Unlock()
	if b.down {
		return wire.Entry{}, wire.ErrConnClosed
	}
	if flags&wire.ReadFenceLedger != 0 {
		b.fenced[ledgerID] = true
	}
	e, ok := b.entries[[2]int64{ledgerID, entryID}]
	if !ok {
		return wire.Entry{}, wire.ErrNoSuchEntry
	}
	return e, nil
}

func (b *fakeBookie) lastLocked(ledgerID int64) (lac, last int64, ok bool) {
	lac, last = -1, -1
	for k, e := range b.entries {
		if k[0] == ledgerID {
			ok = true
			lac, last = max(lac, e.LAC), max(last, e.EntryID)
		}
	}
	return lac, last, ok
}

func (b *fakeBookie) ReadLAC(ctx context.Context, ledgerID int64) (int64, int64, error) {
	b.set.mu.Lock()
	defer b.set.mu.Unlock()
	if b.down {
		return 0, 0, wire.ErrConnClosed
	}
	lac, last, ok := b.lastLocked(ledgerID)
	if !ok {
		return 0, 0, wire.ErrNoSuchLedger
	}
	return lac, last, nil
}

func (b *fakeBookie) Fence(ctx context.Context, ledgerID int64) (int64, error) {
	b.set.mu.Lock()
	defer b.set.mu.Unlock()
	if b.down {
		return 0, wire.ErrConnClosed
	}
	b.fenced[ledgerID] = true
	lac, _, _ := b.lastLocked(ledgerID)
	return lac, nil
}

func (b *fakeBookie) DeleteLedger(ctx context.Context, ledgerID int64) error {
	b.set.mu.Lock()
	defer b.set.mu.Unlock()
	if b.down {
		return wire.ErrConnClosed
	}
	for k := range b.entries {
		if k[0] == ledgerID {
			delete(b.entries, k)
		}
	}
	return nil
}
