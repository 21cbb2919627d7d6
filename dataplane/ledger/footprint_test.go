package ledger

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"
)

// TestIdleManagedLedgersOwnNoGoroutine: once written to, acknowledged and
// left alone, managed ledgers run no goroutine of their own (delivery,
// worker and ledger-handle goroutines exist only while there is work).
func TestIdleManagedLedgersOwnNoGoroutine(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	ctx := ctxT(t)
	f := c.newFactory(testConfig())
	// The first managed ledger opens the connection to the bookie, which
	// is not a per-topic cost.
	warm := openML(t, f, "t/ns/persistent/idle-warm", nil)
	addN(t, warm, 0, 1)
	prev := -1
	waitUntil(t, "goroutines settled", func() bool {
		n := runtime.NumGoroutine()
		settled := n == prev
		prev = n
		return settled
	})
	base := prev

	const n = 20
	for i := range n {
		ml := openML(t, f, fmt.Sprintf("t/ns/persistent/idle-%d", i), nil)
		cur, err := ml.OpenCursor(ctx, "sub", InitialEarliest)
		if err != nil {
			t.Fatal(err)
		}
		pos := addN(t, ml, 0, 3)
		if err := cur.AckCumulative(pos[1]); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "idle managed ledgers own no goroutine", func() bool { return runtime.NumGoroutine() <= base })
}

// TestFirstLedgerCreatedOnFirstAdd: opening a managed ledger creates no
// bookie ledger; the first add does, and a reopen without adds creates
// none either.
func TestFirstLedgerCreatedOnFirstAdd(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	ctx := ctxT(t)
	cfg := testConfig()
	cfg.RetentionTime, cfg.RetentionSize = -1, -1
	lc := c.newClient()
	f := c.newFactory(cfg)
	ml := openML(t, f, "t/ns/persistent/lazy", nil)
	if ls := ml.Ledgers(); len(ls) != 0 {
		t.Fatalf("ledgers after open: %v", ls)
	}
	if all, err := lc.Ledgers(ctx); err != nil || len(all) != 0 {
		t.Fatalf("bookie ledgers after open: %v, %v", all, err)
	}
	if lcf := ml.LastConfirmed(); lcf != (Position{-1, -1}) {
		t.Fatalf("last confirmed of an empty managed ledger: %v", lcf)
	}
	// A cursor opened at the end of the empty managed ledger gets the
	// first entry written later.
	cur, err := ml.OpenCursor(ctx, "sub", InitialLatest)
	if err != nil {
		t.Fatal(err)
	}
	pos := addN(t, ml, 0, 3)
	if ls := ml.Ledgers(); len(ls) != 1 || ls[0].ID != pos[0].LedgerID {
		t.Fatalf("ledgers after the first adds: %v (positions %v)", ls, pos)
	}
	ents, err := cur.ReadEntries(ctx, 10)
	if err != nil || len(ents) != 3 || ents[0].Pos != pos[0] {
		t.Fatalf("cursor opened before the first add read %v, %v", ents, err)
	}
	if err := ml.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// Reopened, it keeps its closed ledger and creates none until written.
	ml = openML(t, c.newFactory(cfg), "t/ns/persistent/lazy", nil)
	ls := ml.Ledgers()
	if len(ls) != 1 || ls[0].ID != pos[0].LedgerID || !ls[0].closed() || ls[0].Entries != 3 {
		t.Fatalf("ledgers after reopen: %v", ls)
	}
	if all, err := lc.Ledgers(ctx); err != nil || len(all) != 1 {
		t.Fatalf("bookie ledgers after reopen: %v, %v", all, err)
	}
	if lcf := ml.LastConfirmed(); lcf != pos[2] {
		t.Fatalf("last confirmed after reopen: %v, want %v", lcf, pos[2])
	}
	more := addN(t, ml, 3, 2)
	if !pos[2].Less(more[0]) || len(ml.Ledgers()) != 2 {
		t.Fatalf("adds after reopen at %v, ledgers %v", more, ml.Ledgers())
	}
	checkEntries(t, readAll(t, ml), 0, 5, append(pos, more...))
}

// TestCreateAndOpenExisting: Factory.Create refuses an existing managed
// ledger, OpenExisting a missing one (and creates nothing).
func TestCreateAndOpenExisting(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	ctx := ctxT(t)
	f := c.newFactory(testConfig())
	if _, err := f.OpenExisting(ctx, "t/ns/persistent/missing", nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("OpenExisting of a missing managed ledger: %v", err)
	}
	if ok, err := f.Exists(ctx, "t/ns/persistent/missing"); err != nil || ok {
		t.Fatalf("OpenExisting created a record: %v, %v", ok, err)
	}
	ml, err := f.Create(ctx, "t/ns/persistent/new", nil)
	if err != nil {
		t.Fatal(err)
	}
	addN(t, ml, 0, 2)
	if _, err := f.Create(ctx, "t/ns/persistent/new", nil); !errors.Is(err, ErrExists) {
		t.Fatalf("Create of a managed ledger open here: %v", err)
	}
	if got, err := f.OpenExisting(ctx, "t/ns/persistent/new", nil); err != nil || got != ml {
		t.Fatalf("OpenExisting of an open managed ledger: %p, %v (want %p)", got, err, ml)
	}
	if err := ml.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Stored but not open anywhere.
	f2 := c.newFactory(testConfig())
	if _, err := f2.Create(ctx, "t/ns/persistent/new", nil); !errors.Is(err, ErrExists) {
		t.Fatalf("Create of a stored managed ledger: %v", err)
	}
	ml = func() *ManagedLedger {
		ml, err := f2.OpenExisting(ctx, "t/ns/persistent/new", nil)
		if err != nil {
			t.Fatal(err)
		}
		return ml
	}()
	if n := ml.NumberOfEntries(); n != 2 {
		t.Fatalf("entries after OpenExisting: %d", n)
	}
}

// TestRolloverByAgeWhenIdle: a ledger holding entries rolls over once it
// is MaxLedgerAge old although nothing is written any more; an empty one
// does not.
func TestRolloverByAgeWhenIdle(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	cfg := testConfig()
	cfg.MaxEntriesPerLedger = 1000
	cfg.MaxLedgerAge = 100 * time.Millisecond
	cfg.RetentionTime, cfg.RetentionSize = -1, -1
	f := c.newFactory(cfg)
	ml := openML(t, f, "t/ns/persistent/aged", nil)
	pos := addN(t, ml, 0, 2)
	waitUntil(t, "the aged ledger rolled over and closed", func() bool {
		ls := ml.Ledgers()
		return len(ls) == 2 && ls[0].ID == pos[0].LedgerID && ls[0].closed() && ls[0].Entries == 2
	})
	// The next ledger stays empty, so it is never rolled over.
	time.Sleep(3 * cfg.MaxLedgerAge)
	if ls := ml.Ledgers(); len(ls) != 2 {
		t.Fatalf("an empty ledger was rolled over: %v", ls)
	}
	more := addN(t, ml, 2, 1)
	if more[0].LedgerID != ml.Ledgers()[1].ID {
		t.Fatalf("add after the rollover went to %v, ledgers %v", more[0], ml.Ledgers())
	}
}

// TestTrimByRetentionTimeWhenIdle: consumed ledgers kept by the retention
// time are deleted once it has passed, with no further add or ack (the
// periodic trim check).
func TestTrimByRetentionTimeWhenIdle(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	ctx := ctxT(t)
	cfg := testConfig()
	cfg.RetentionTime, cfg.RetentionSize = 500*time.Millisecond, -1
	cfg.TrimCheckInterval = 50 * time.Millisecond
	f := c.newFactory(cfg)
	ml := openML(t, f, "t/ns/persistent/retained", nil)
	cur, err := ml.OpenCursor(ctx, "sub", InitialEarliest)
	if err != nil {
		t.Fatal(err)
	}
	pos := addN(t, ml, 0, 25)
	waitUntil(t, "two full ledgers closed", func() bool { ls := ml.Ledgers(); return len(ls) == 3 && ls[1].closed() })
	consumed := ml.Ledgers()[:2]
	if err := cur.AckCumulative(pos[24]); err != nil {
		t.Fatal(err)
	}
	if err := cur.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if ls := ml.Ledgers(); len(ls) != 3 {
		t.Fatalf("consumed ledgers deleted before the retention time: %v", ls)
	}
	waitUntil(t, "consumed ledgers deleted after the retention time", func() bool {
		ids := ledgerIDs(ml)
		return len(ids) == 1 && !slices.Contains(ids, consumed[0].ID) && !slices.Contains(ids, consumed[1].ID)
	})
}
