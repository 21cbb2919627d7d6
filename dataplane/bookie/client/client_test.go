package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/bookie/wire"
	"github.com/magnetar-dev/magnetar/dataplane/metadata/memstore"
)

func newTestClient(t *testing.T, nBookies int) (*Client, *fakeBookies, *memstore.Store) {
	t.Helper()
	md := memstore.New()
	t.Cleanup(func() { md.Close() })
	fb := newFakeBookies(t, md, nBookies)
	c, err := New(Config{Metadata: md, Dialer: fb, AddTimeout: 2 * time.Second, SpeculativeReadTimeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return c, fb, md
}

func payload(i int) []byte { return []byte(fmt.Sprintf("entry-%05d", i)) }

// appendN appends n entries concurrently-pipelined and checks that callbacks
// arrive in entry order with ids 0..n-1 (offset by first).
func appendN(t *testing.T, h *WriteHandle, first, n int) {
	t.Helper()
	var mu sync.Mutex
	var got []int64
	var wg sync.WaitGroup
	wg.Add(n)
	for i := 0; i < n; i++ {
		h.AppendAsync(payload(first+i), func(id int64, err error) {
			defer wg.Done()
			if err != nil {
				t.Errorf("append %d: %v", first+i, err)
				return
			}
			mu.Lock()
			got = append(got, id)
			mu.Unlock()
		})
	}
	wg.Wait()
	for i, id := range got {
		if id != int64(first+i) {
			t.Fatalf("callback %d carried entry id %d: out of order", first+i, id)
		}
	}
}

func checkEntries(t *testing.T, c *Client, id int64, n int) {
	t.Helper()
	r, err := c.OpenLedger(context.Background(), id, false)
	if err != nil {
		t.Fatal(err)
	}
	if r.LastAddConfirmed() != int64(n-1) {
		t.Fatalf("ledger %d: last entry %d, want %d", id, r.LastAddConfirmed(), n-1)
	}
	if n == 0 {
		return
	}
	ents, err := r.Read(context.Background(), 0, int64(n-1))
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range ents {
		if string(e.Payload) != string(payload(i)) {
			t.Fatalf("entry %d = %q, want %q", i, e.Payload, payload(i))
		}
		if err := e.Verify(); err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
	}
}

func TestCreateRejectsBadQuorum(t *testing.T) {
	c, _, _ := newTestClient(t, 3)
	for _, o := range []CreateOptions{{Ensemble: 2, WriteQuorum: 3, AckQuorum: 1}, {Ensemble: 3, WriteQuorum: 2, AckQuorum: 3}, {}} {
		if _, err := c.CreateLedger(context.Background(), o); !errors.Is(err, ErrBadQuorum) {
			t.Errorf("CreateLedger(%+v) = %v, want ErrBadQuorum", o, err)
		}
	}
	if _, err := c.CreateLedger(context.Background(), CreateOptions{Ensemble: 4, WriteQuorum: 3, AckQuorum: 2}); !errors.Is(err, ErrNotEnoughBookies) {
		t.Errorf("E=4 on 3 bookies: %v, want ErrNotEnoughBookies", err)
	}
}

func TestWriteStripedCloseRead(t *testing.T) {
	c, fb, _ := newTestClient(t, 4)
	ctx := context.Background()
	h, err := c.CreateLedger(ctx, CreateOptions{Ensemble: 4, WriteQuorum: 3, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, h, 0, 200)
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	m, err := c.LedgerMetadata(ctx, h.ID())
	if err != nil {
		t.Fatal(err)
	}
	if m.State != StateClosed || m.LastEntry != 199 || m.Length != int64(200*len(payload(0))) {
		t.Fatalf("metadata after close: %+v", m)
	}
	// Striping: each entry is on exactly its write set.
	ens := m.Fragments[0].Bookies
	for e := int64(0); e < 200; e++ {
		for idx, addr := range ens {
			if fb.get(addr).has(h.ID(), e) != inWriteSet(idx, e, 4, 3) {
				t.Fatalf("entry %d on bookie %d: placement does not follow the write set", e, idx)
			}
		}
	}
	checkEntries(t, c, h.ID(), 200)
	if _, err := h.Append(ctx, []byte("late")); !errors.Is(err, ErrLedgerClosed) {
		t.Fatalf("append after close: %v", err)
	}
}

// TestAckWaitsForEarlierEntries holds one bookie's replies so entry 0 lacks
// its quorum while later entries have theirs: nothing may be acknowledged
// until entry 0 is.
func TestAckWaitsForEarlierEntries(t *testing.T) {
	c, fb, _ := newTestClient(t, 3)
	ctx := context.Background()
	h, err := c.CreateLedger(ctx, CreateOptions{Ensemble: 3, WriteQuorum: 2, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	// Entry 0 goes to indexes 0,1; entry 1 to 1,2; entry 2 to 2,0. Hold index 0.
	b0 := fb.get(h.Metadata().Fragments[0].Bookies[0])
	fb.mu.Lock()
	b0.hold = true
	fb.mu.Unlock()
	acked := make(chan int64, 3)
	for i := 0; i < 3; i++ {
		h.AppendAsync(payload(i), func(id int64, err error) {
			if err != nil {
				t.Error(err)
			}
			acked <- id
		})
	}
	// Entry 1 has its quorum (indexes 1 and 2) but must wait for entry 0.
	deadline := time.Now().Add(200 * time.Millisecond)
	for time.Now().Before(deadline) {
		if len(acked) != 0 || h.LastAddConfirmed() != -1 {
			t.Fatalf("entry acknowledged before entry 0 reached its quorum")
		}
		time.Sleep(5 * time.Millisecond)
	}
	b0.release()
	for want := int64(0); want < 3; want++ {
		if got := <-acked; got != want {
			t.Fatalf("ack order: got %d, want %d", got, want)
		}
	}
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestEnsembleChange kills a bookie mid-stream with a spare available: the
// writer records a new fragment and no acknowledged entry is lost.
func TestEnsembleChange(t *testing.T) {
	c, fb, md := newTestClient(t, 4)
	ctx := context.Background()
	h, err := c.CreateLedger(ctx, CreateOptions{Ensemble: 3, WriteQuorum: 3, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, h, 0, 50)
	victim := h.Metadata().Fragments[0].Bookies[1]
	fb.kill(t, md, victim)
	appendN(t, h, 50, 50)
	waitFor(t, "ensemble change", func() bool { return len(h.Metadata().Fragments) == 2 })
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	m, _ := c.LedgerMetadata(ctx, h.ID())
	if len(m.Fragments) != 2 {
		t.Fatalf("fragments after bookie loss: %+v", m.Fragments)
	}
	// The new fragment starts at the first entry not yet acknowledged when
	// the change began: entries acknowledged by the two survivors before the
	// failure was noticed stay in the old fragment (re-replicated later).
	f1 := m.Fragments[1]
	if f1.FirstEntry < 50 || f1.FirstEntry > 100 || slices.Contains(f1.Bookies, victim) {
		t.Fatalf("new fragment %+v: want first entry in [50, 100] without %s", f1, victim)
	}
	// Every entry of the new fragment is on all three of its bookies.
	for e := f1.FirstEntry; e < 100; e++ {
		for _, a := range f1.Bookies {
			if !fb.get(a).has(h.ID(), e) {
				t.Fatalf("entry %d missing on %s", e, a)
			}
		}
	}
	checkEntries(t, c, h.ID(), 100)
}

// TestDegradedWithoutSpare: E=Qw=3, Qa=2 on exactly three bookies; losing one
// leaves no replacement, and writes continue on the remaining two.
func TestDegradedWithoutSpare(t *testing.T) {
	c, fb, md := newTestClient(t, 3)
	ctx := context.Background()
	h, err := c.CreateLedger(ctx, CreateOptions{Ensemble: 3, WriteQuorum: 3, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, h, 0, 20)
	fb.kill(t, md, h.Metadata().Fragments[0].Bookies[2])
	appendN(t, h, 20, 80)
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	checkEntries(t, c, h.ID(), 100)
}

// TestFailedBookieTakenBack: E=3, Qw=2, Qa=2 on exactly three bookies. One
// goes down: the adds of its write sets wait, no bookie outside the
// ensemble can replace it. It comes back with its disk: the writer takes it
// back in a new fragment from the first unacknowledged entry, sends it the
// pending entries, and every append succeeds long before AddTimeout.
func TestFailedBookieTakenBack(t *testing.T) {
	c, fb, md := newTestClient(t, 3)
	ctx := context.Background()
	h, err := c.CreateLedger(ctx, CreateOptions{Ensemble: 3, WriteQuorum: 2, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, h, 0, 10)
	victim := h.Metadata().Fragments[0].Bookies[1]
	fb.kill(t, md, victim)
	done := make(chan struct{})
	go func() {
		defer close(done)
		appendN(t, h, 10, 20)
	}()
	waitFor(t, "an add refused by the victim", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.failed[1]
	})
	fb.revive(t, md, victim)
	start := time.Now()
	select {
	case <-done:
	case <-time.After(c.cfg.AddTimeout):
		t.Fatalf("appends still waiting %v after the bookie came back", c.cfg.AddTimeout)
	}
	t.Logf("appends completed %v after the bookie came back", time.Since(start).Round(time.Millisecond))
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	m, _ := c.LedgerMetadata(ctx, h.ID())
	last := m.Fragments[len(m.Fragments)-1]
	if len(m.Fragments) != 2 || last.Bookies[1] != victim || last.FirstEntry < 10 || last.FirstEntry >= 30 {
		t.Fatalf("fragments %+v: want a second one, from an entry in [10, 30), with %s back at index 1", m.Fragments, victim)
	}
	// Every entry of the new fragment is on both bookies of its write set.
	for e := last.FirstEntry; e < 30; e++ {
		for _, idx := range writeSet(nil, e, 3, 2) {
			if !fb.get(last.Bookies[idx]).has(h.ID(), e) {
				t.Fatalf("entry %d missing on %s", e, last.Bookies[idx])
			}
		}
	}
	checkEntries(t, c, h.ID(), 30)
}

// TestBookieFailingAgainAfterTakeBack: a bookie that answers but fails every
// add is taken back and fails again, round after round; the pending adds
// still fail once none has been acknowledged for AddTimeout, instead of
// waiting for ever.
func TestBookieFailingAgainAfterTakeBack(t *testing.T) {
	c, fb, _ := newTestClient(t, 3)
	ctx := context.Background()
	h, err := c.CreateLedger(ctx, CreateOptions{Ensemble: 3, WriteQuorum: 2, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, h, 0, 3)
	b := fb.get(h.Metadata().Fragments[0].Bookies[1])
	fb.mu.Lock()
	b.failAdds = true
	fb.mu.Unlock()
	start := time.Now()
	errs := make(chan error, 3)
	for i := range 3 {
		h.AppendAsync(payload(3+i), func(_ int64, err error) { errs <- err })
	}
	for range 3 {
		select {
		case err := <-errs:
			if !errors.Is(err, ErrNotEnoughBookies) {
				t.Fatalf("append: %v, want ErrNotEnoughBookies", err)
			}
		case <-time.After(4 * c.cfg.AddTimeout):
			t.Fatalf("appends still pending %v after the bookie began failing them", 4*c.cfg.AddTimeout)
		}
	}
	if d := time.Since(start); d < c.cfg.AddTimeout {
		t.Fatalf("appends failed after %v, before AddTimeout (%v)", d, c.cfg.AddTimeout)
	}
}

// TestQuorumLost: with two of three bookies gone and Qa=2 there is no quorum;
// appends fail with ErrNotEnoughBookies instead of hanging.
func TestQuorumLost(t *testing.T) {
	c, fb, md := newTestClient(t, 3)
	ctx := context.Background()
	h, err := c.CreateLedger(ctx, CreateOptions{Ensemble: 3, WriteQuorum: 3, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, h, 0, 5)
	ens := h.Metadata().Fragments[0].Bookies
	fb.kill(t, md, ens[0])
	fb.kill(t, md, ens[1])
	if _, err := h.Append(ctx, payload(5)); !errors.Is(err, ErrNotEnoughBookies) {
		t.Fatalf("append without quorum: %v", err)
	}
}

// TestTwoWritersOldOneFenced: a reader recovers the ledger while its writer
// is alive; the writer's later appends fail with ErrFenced, its Close fails,
// and the recovered ledger holds every entry the writer saw acknowledged.
func TestTwoWritersOldOneFenced(t *testing.T) {
	c, _, _ := newTestClient(t, 3)
	ctx := context.Background()
	h, err := c.CreateLedger(ctx, CreateOptions{Ensemble: 3, WriteQuorum: 3, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, h, 0, 30)
	r, err := c.OpenLedger(ctx, h.ID(), true)
	if err != nil {
		t.Fatal(err)
	}
	if !r.IsClosed() || r.LastAddConfirmed() != 29 {
		t.Fatalf("recovered: closed=%v last=%d, want closed at 29", r.IsClosed(), r.LastAddConfirmed())
	}
	if _, err := h.Append(ctx, payload(30)); !errors.Is(err, ErrFenced) {
		t.Fatalf("old writer append: %v, want ErrFenced", err)
	}
	if err := h.Close(ctx); !errors.Is(err, ErrFenced) {
		t.Fatalf("old writer close: %v, want ErrFenced", err)
	}
	checkEntries(t, c, h.ID(), 30)
}

// TestRecoveryAfterWriterDiedOneBookieDown: the writer vanishes with entries
// beyond its last piggybacked LAC; one bookie of the ensemble is down. The
// recoverer fences the other two, finds the tail and closes the ledger with
// every acknowledged entry.
func TestRecoveryAfterWriterDiedOneBookieDown(t *testing.T) {
	c, fb, md := newTestClient(t, 3)
	ctx := context.Background()
	h, err := c.CreateLedger(ctx, CreateOptions{Ensemble: 3, WriteQuorum: 3, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, h, 0, 40) // the writer "dies" here: no Close
	fb.kill(t, md, h.Metadata().Fragments[0].Bookies[0])
	r, err := c.OpenLedger(ctx, h.ID(), true)
	if err != nil {
		t.Fatal(err)
	}
	if r.LastAddConfirmed() != 39 {
		t.Fatalf("recovered last entry %d, want 39 (the last piggybacked LAC is 38)", r.LastAddConfirmed())
	}
	checkEntries(t, c, h.ID(), 40)
	// A second recovery is a no-op on the closed ledger.
	r2, err := c.OpenLedger(ctx, h.ID(), true)
	if err != nil || r2.LastAddConfirmed() != 39 {
		t.Fatalf("second recovery: %v, last %d", err, r2.LastAddConfirmed())
	}
}

// TestRecoveryDropsUnacknowledgedTail: an entry that reached fewer than Qa
// bookies (and was therefore never acknowledged) is not part of the
// recovered ledger when Qw-Qa+1 replicas say they lack it.
func TestRecoveryDropsUnacknowledgedTail(t *testing.T) {
	c, fb, _ := newTestClient(t, 3)
	ctx := context.Background()
	h, err := c.CreateLedger(ctx, CreateOptions{Ensemble: 3, WriteQuorum: 3, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, h, 0, 10)
	// Entry 10 reaches only one bookie.
	ens := h.Metadata().Fragments[0].Bookies
	b := fb.get(ens[0])
	fb.mu.Lock()
	b.entries[[2]int64{h.ID(), 10}] = b.entries[[2]int64{h.ID(), 9}]
	delete(b.entries, [2]int64{h.ID(), 10})
	fb.mu.Unlock()
	r, err := c.OpenLedger(ctx, h.ID(), true)
	if err != nil {
		t.Fatal(err)
	}
	if r.LastAddConfirmed() != 9 {
		t.Fatalf("recovered last %d, want 9", r.LastAddConfirmed())
	}
}

func TestConcurrentRecoverersConverge(t *testing.T) {
	c, _, _ := newTestClient(t, 3)
	ctx := context.Background()
	h, err := c.CreateLedger(ctx, CreateOptions{Ensemble: 3, WriteQuorum: 2, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, h, 0, 25)
	var wg sync.WaitGroup
	lasts := make([]int64, 4)
	for i := range lasts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := c.OpenLedger(ctx, h.ID(), true)
			if err != nil {
				t.Error(err)
				return
			}
			lasts[i] = r.LastAddConfirmed()
		}()
	}
	wg.Wait()
	for _, l := range lasts {
		if l != 24 {
			t.Fatalf("recoverers disagree: %v", lasts)
		}
	}
}

func TestOpenWithoutRecoveryReadsUpToLAC(t *testing.T) {
	c, _, _ := newTestClient(t, 3)
	ctx := context.Background()
	h, err := c.CreateLedger(ctx, CreateOptions{Ensemble: 3, WriteQuorum: 3, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ { // one at a time, so each entry carries the previous as LAC
		if _, err := h.Append(ctx, payload(i)); err != nil {
			t.Fatal(err)
		}
	}
	r, err := c.OpenLedger(ctx, h.ID(), false)
	if err != nil {
		t.Fatal(err)
	}
	// The bookies have seen LAC 8 piggybacked on entry 9.
	if r.LastAddConfirmed() != 8 {
		t.Fatalf("LAC seen by a non-recovering reader: %d, want 8", r.LastAddConfirmed())
	}
	if _, err := r.Read(ctx, 0, 9); !errors.Is(err, ErrNoSuchEntry) {
		t.Fatalf("read past LAC: %v", err)
	}
	// The writer is not disturbed.
	for i := 10; i < 15; i++ {
		if _, err := h.Append(ctx, payload(i)); err != nil {
			t.Fatal(err)
		}
	}
	if lac, _ := r.ReadLAC(ctx); lac != 13 {
		t.Fatalf("refreshed LAC %d, want 13", lac)
	}
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestReadFallsBackToAnotherReplica: a replica that is down is skipped.
func TestReadFallsBackToAnotherReplica(t *testing.T) {
	c, fb, md := newTestClient(t, 3)
	ctx := context.Background()
	h, err := c.CreateLedger(ctx, CreateOptions{Ensemble: 3, WriteQuorum: 3, AckQuorum: 3})
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, h, 0, 30)
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	fb.kill(t, md, h.Metadata().Fragments[0].Bookies[0])
	checkEntries(t, c, h.ID(), 30)
}

func TestDeleteLedger(t *testing.T) {
	c, fb, _ := newTestClient(t, 3)
	ctx := context.Background()
	h, err := c.CreateLedger(ctx, CreateOptions{Ensemble: 3, WriteQuorum: 3, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, h, 0, 3)
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteLedger(ctx, h.ID()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.OpenLedger(ctx, h.ID(), false); !errors.Is(err, ErrNoSuchLedger) {
		t.Fatalf("open deleted: %v", err)
	}
	for _, a := range h.Metadata().Fragments[0].Bookies {
		if fb.get(a).has(h.ID(), 0) {
			t.Fatalf("bookie %s still has the deleted ledger", a)
		}
	}
}

func TestPlacementSpreadsRacks(t *testing.T) {
	md := memstore.New()
	defer md.Close()
	fb := &fakeBookies{bookies: map[string]*fakeBookie{}}
	for r := 0; r < 3; r++ {
		for i := 0; i < 3; i++ {
			fb.add(t, md, fmt.Sprintf("r%d-b%d:1", r, i), fmt.Sprintf("rack%d", r))
		}
	}
	avail, err := availableBookies(context.Background(), md)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := New(Config{Metadata: md, Dialer: fb})
	for i := 0; i < 50; i++ {
		ens, err := chooseEnsemble(c.rnd, avail, 3, nil)
		if err != nil {
			t.Fatal(err)
		}
		racks := map[byte]bool{}
		for _, a := range ens {
			racks[a[1]] = true
		}
		if len(racks) != 3 {
			t.Fatalf("ensemble %v does not span three racks", ens)
		}
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestAuditorReReplicates: a closed ledger loses a bookie; the auditor copies
// the lost replicas to the spare and updates the fragment, after which every
// entry is again on Qw live bookies.
func TestAuditorReReplicates(t *testing.T) {
	c, fb, md := newTestClient(t, 4)
	ctx := context.Background()
	h, err := c.CreateLedger(ctx, CreateOptions{Ensemble: 3, WriteQuorum: 2, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, h, 0, 60)
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	victim := h.Metadata().Fragments[0].Bookies[0]
	fb.kill(t, md, victim)
	a, err := c.NewAuditor(AuditorConfig{ID: "a1"})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := a.CheckOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.FragmentsRepaired != 1 || rep.EntriesCopied != 40 || rep.UnderReplicatedNow != 0 {
		t.Fatalf("audit report %+v, want 1 fragment / 40 entries repaired", rep)
	}
	m, _ := c.LedgerMetadata(ctx, h.ID())
	ens := m.Fragments[0].Bookies
	if slices.Contains(ens, victim) {
		t.Fatalf("fragment still names the lost bookie: %v", ens)
	}
	for e := int64(0); e < 60; e++ {
		for _, idx := range writeSet(nil, e, 3, 2) {
			if !fb.get(ens[idx]).has(h.ID(), e) {
				t.Fatalf("entry %d missing on %s after re-replication", e, ens[idx])
			}
		}
	}
	// A second pass finds nothing to do.
	if rep, _ := a.CheckOnce(ctx); rep.FragmentsRepaired != 0 {
		t.Fatalf("second audit repaired again: %+v", rep)
	}
	checkEntries(t, c, h.ID(), 60)
}

// TestAuditorFillsDegradedGaps: entries written while one bookie was down
// (no spare) are copied to it once it is back.
func TestAuditorFillsDegradedGaps(t *testing.T) {
	c, fb, md := newTestClient(t, 3)
	ctx := context.Background()
	h, err := c.CreateLedger(ctx, CreateOptions{Ensemble: 3, WriteQuorum: 3, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, h, 0, 10)
	b := h.Metadata().Fragments[0].Bookies[2]
	fb.kill(t, md, b)
	appendN(t, h, 10, 10)
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// The bookie comes back with what it had.
	fb.mu.Lock()
	fb.bookies[b].down = false
	fb.mu.Unlock()
	fb.add(t, md, b, "")
	fb.bookies[b].entries = map[[2]int64]wire.Entry{}
	a, _ := c.NewAuditor(AuditorConfig{ID: "a1"})
	rep, err := a.CheckOnce(ctx)
	if err != nil || rep.FragmentsRepaired != 1 {
		t.Fatalf("audit: %+v %v", rep, err)
	}
	for e := int64(0); e < 20; e++ {
		if !fb.get(b).has(h.ID(), e) {
			t.Fatalf("entry %d not restored on the returning bookie", e)
		}
	}
}

func TestAuditorElection(t *testing.T) {
	c, fb, md := newTestClient(t, 4)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h, err := c.CreateLedger(ctx, CreateOptions{Ensemble: 3, WriteQuorum: 3, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, h, 0, 5)
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for _, id := range []string{"a1", "a2"} {
		a, _ := c.NewAuditor(AuditorConfig{ID: id, Interval: time.Hour})
		wg.Add(1)
		go func() { defer wg.Done(); a.Run(ctx) }()
	}
	victim := h.Metadata().Fragments[0].Bookies[0]
	fb.kill(t, md, victim)
	waitFor(t, "re-replication by the elected auditor", func() bool {
		m, err := c.LedgerMetadata(ctx, h.ID())
		return err == nil && !slices.Contains(m.Fragments[0].Bookies, victim)
	})
	cancel()
	wg.Wait()
}
