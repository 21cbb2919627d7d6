package client

import (
	"context"
	"runtime"
	"slices"
	"testing"
	"time"
)

// TestLedgerIDsFromBlocks: ids come from blocks that do not overlap between
// clients, start above the ids the old one-at-a-time sequence handed out,
// grow within a client and honour CreateOptions.After.
func TestLedgerIDsFromBlocks(t *testing.T) {
	c1, fb, md := newTestClient(t, 3)
	ctx := context.Background()
	// Ledgers created before blocks existed took ids 1..5.
	for range 5 {
		if _, err := md.NextID(ctx, ledgerIDSeq); err != nil {
			t.Fatal(err)
		}
	}
	c2, err := New(Config{Metadata: md, Dialer: fb})
	if err != nil {
		t.Fatal(err)
	}
	create := func(c *Client, after int64) int64 {
		t.Helper()
		h, err := c.CreateLedger(ctx, CreateOptions{Ensemble: 1, WriteQuorum: 1, AckQuorum: 1, After: after})
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Close(ctx); err != nil {
			t.Fatal(err)
		}
		return h.ID()
	}
	var ids1, ids2 []int64
	for range 3 {
		ids1 = append(ids1, create(c1, 0))
		ids2 = append(ids2, create(c2, 0))
	}
	if !slices.IsSorted(ids1) || !slices.IsSorted(ids2) || ids1[0] <= 5 || ids2[0] <= 5 {
		t.Fatalf("ids not growing or reusing old ones: %v %v", ids1, ids2)
	}
	all := append(slices.Clone(ids1), ids2...)
	slices.Sort(all)
	if len(slices.Compact(all)) != 6 {
		t.Fatalf("duplicate ids: %v %v", ids1, ids2)
	}
	// The blocks are disjoint: one client's ids all lie on one side of
	// the other's, so After = the higher client's last id makes the lower
	// one take a fresh block above it.
	lo, hi := c1, ids2[2]
	if ids1[0] > ids2[0] {
		lo, hi = c2, ids1[2]
	}
	if id := create(lo, hi); id <= hi {
		t.Fatalf("id %d not after %d", id, hi)
	}
	ids, err := c1.Ledgers(ctx)
	if err != nil || len(ids) != 7 {
		t.Fatalf("ledgers: %v, %v", ids, err)
	}
}

// TestLedgerIDTakenIsSkipped: an id whose record another client (one still
// using the one-at-a-time sequence) created first is skipped.
func TestLedgerIDTakenIsSkipped(t *testing.T) {
	c, _, md := newTestClient(t, 1)
	ctx := context.Background()
	opts := CreateOptions{Ensemble: 1, WriteQuorum: 1, AckQuorum: 1}
	h, err := c.CreateLedger(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	first := h.ID()
	legacy, err := md.NextID(ctx, ledgerIDSeq) // lands inside our block
	if err != nil {
		t.Fatal(err)
	}
	if legacy != first+1 {
		t.Fatalf("test set-up: legacy id %d, first block id %d", legacy, first)
	}
	m := &LedgerMetadata{ID: legacy, Ensemble: 1, WriteQuorum: 1, AckQuorum: 1, State: StateOpen, LastEntry: -1,
		Fragments: []Fragment{{Bookies: []string{"bookie-0:3181"}}}}
	if err := (metaStore{md}).create(ctx, m); err != nil {
		t.Fatal(err)
	}
	h2, err := c.CreateLedger(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if h2.ID() != legacy+1 {
		t.Fatalf("second ledger got id %d, want %d (skipping the taken %d)", h2.ID(), legacy+1, legacy)
	}
	if kv, err := md.Get(ctx, idBlockKey); err != nil || len(kv.Value) == 0 {
		t.Fatalf("block key: %v, %v", kv, err)
	}
	for _, x := range []*WriteHandle{h, h2} {
		if err := x.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestNewBookieUsedAtOnce: the cached list of bookies does not hide one
// that registered since, when a new ledger needs it.
func TestNewBookieUsedAtOnce(t *testing.T) {
	c, fb, md := newTestClient(t, 2)
	ctx := context.Background()
	h, err := c.CreateLedger(ctx, CreateOptions{Ensemble: 2, WriteQuorum: 2, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	h.Close(ctx)
	if _, err := c.CreateLedger(ctx, CreateOptions{Ensemble: 3, WriteQuorum: 3, AckQuorum: 3}); err == nil {
		t.Fatal("ledger of 3 bookies created with 2 registered")
	}
	fb.add(t, md, "bookie-new:3181", "")
	h, err = c.CreateLedger(ctx, CreateOptions{Ensemble: 3, WriteQuorum: 3, AckQuorum: 3})
	if err != nil {
		t.Fatalf("ledger of 3 bookies once the third registered: %v", err)
	}
	if m := h.Metadata(); !slices.Contains(m.Fragments[0].Bookies, "bookie-new:3181") {
		t.Fatalf("ensemble %v", m.Fragments[0].Bookies)
	}
	appendN(t, h, 0, 3)
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestIdleWriteHandlesOwnNoGoroutine: a write handle runs its delivery
// goroutine only while callbacks are waiting.
func TestIdleWriteHandlesOwnNoGoroutine(t *testing.T) {
	c, _, _ := newTestClient(t, 3)
	ctx := context.Background()
	base := runtime.NumGoroutine()
	var hs []*WriteHandle
	for range 20 {
		h, err := c.CreateLedger(ctx, CreateOptions{Ensemble: 3, WriteQuorum: 2, AckQuorum: 2})
		if err != nil {
			t.Fatal(err)
		}
		appendN(t, h, 0, 5)
		hs = append(hs, h)
	}
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines with 20 idle write handles, %d before", runtime.NumGoroutine(), base)
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, h := range hs {
		if err := h.Close(ctx); err != nil {
			t.Fatal(err)
		}
		checkEntries(t, c, h.ID(), 5)
	}
}
