package ledger

import (
	"errors"
	"slices"
	"testing"
	"time"
)

func TestAckSet(t *testing.T) {
	p := func(l, e int64) Position { return Position{l, e} }
	var s ackSet
	for _, q := range []Position{p(1, 5), p(1, 3), p(1, 4), p(2, 0), p(1, 7), p(1, 6), p(2, 2)} {
		if !s.add(q) {
			t.Fatalf("add %v: reported present", q)
		}
	}
	if s.add(p(1, 4)) {
		t.Fatal("re-add reported new")
	}
	want := []ackRange{{1, 3, 7}, {2, 0, 0}, {2, 2, 2}}
	if !slices.Equal(s.r, want) || s.count != 7 {
		t.Fatalf("runs %v count %d", s.r, s.count)
	}
	for _, tc := range []struct {
		q    Position
		want bool
	}{{p(1, 2), false}, {p(1, 3), true}, {p(1, 7), true}, {p(1, 8), false}, {p(2, 1), false}, {p(2, 2), true}} {
		if s.contains(tc.q) != tc.want {
			t.Errorf("contains(%v) = %v", tc.q, !tc.want)
		}
	}
	if n := s.countThrough(p(1, 5)); n != 3 {
		t.Fatalf("countThrough(1:5) = %d", n)
	}
	if n := s.countThrough(p(9, 0)); n != 7 {
		t.Fatalf("countThrough(9:0) = %d", n)
	}
	s.add(p(2, 1))
	if !slices.Equal(s.r, []ackRange{{1, 3, 7}, {2, 0, 2}}) {
		t.Fatalf("merge: %v", s.r)
	}
	s.removeThrough(p(1, 5))
	if !slices.Equal(s.r, []ackRange{{1, 6, 7}, {2, 0, 2}}) || s.count != 5 {
		t.Fatalf("removeThrough: %v %d", s.r, s.count)
	}
	s.removeThrough(p(2, 0))
	if !slices.Equal(s.r, []ackRange{{2, 1, 2}}) || s.count != 2 {
		t.Fatalf("removeThrough across ledgers: %v %d", s.r, s.count)
	}
}

func TestEscapeName(t *testing.T) {
	for _, n := range []string{"a", "t/ns/persistent/x", "a%2Fb", "with space", "ü/ñ", "..", "-_."} {
		e := escapeName(n)
		if u, err := unescapeName(e); err != nil || u != n {
			t.Errorf("round trip %q -> %q -> %q, %v", n, e, u, err)
		}
		for _, c := range e {
			if c == '/' {
				t.Errorf("escaped %q contains '/'", n)
			}
		}
	}
	if escapeName("a/b") == escapeName("a%2Fb") {
		t.Fatal("escaping is not injective")
	}
	// The keys of stores written before keep their spelling.
	for _, k := range []struct{ got, want string }{
		{escapeName("ü"), "%C3%BC"},
		{escapeName(""), ""},
		{infoKey("public/default/persistent/t x"), "/managed-ledgers/public%2Fdefault%2Fpersistent%2Ft%20x"},
		{cursorsParent("p/d/persistent/t"), "/managed-ledger-cursors/p%2Fd%2Fpersistent%2Ft"},
		{cursorKey("p/d/persistent/t", "sub:1"), "/managed-ledger-cursors/p%2Fd%2Fpersistent%2Ft/sub%3A1"},
	} {
		if got, want := k.got, k.want; got != want {
			t.Errorf("key %q, want %q", got, want)
		}
	}
}

// ackFixture opens a managed ledger with 30 entries in 3 ledgers and a
// durable cursor at the start.
func ackFixture(t *testing.T) (*cluster, *ManagedLedger, *Cursor, []Position) {
	c := newCluster(t, clusterOpts{})
	cfg := testConfig()
	cfg.RetentionTime, cfg.RetentionSize = -1, -1
	f := c.newFactory(cfg)
	ml := openML(t, f, "t/ns/persistent/acks", nil)
	pos := addN(t, ml, 0, 30)
	waitUntil(t, "ledgers closed", func() bool {
		ls := ml.Ledgers()
		return len(ls) >= 3 && ls[0].closed() && ls[1].closed() && ls[2].closed()
	})
	cur, err := ml.OpenCursor(ctxT(t), "sub", InitialEarliest)
	if err != nil {
		t.Fatal(err)
	}
	return c, ml, cur, pos
}

func TestCursorIndividualCumulativeBatchAcks(t *testing.T) {
	_, ml, cur, pos := ackFixture(t)
	if cur.Backlog() != 30 {
		t.Fatalf("backlog %d", cur.Backlog())
	}
	// Individual acks out of order: 1, 2, 5 stay as runs above mark-delete.
	for _, i := range []int{1, 2, 5} {
		if err := cur.Ack(pos[i]); err != nil {
			t.Fatal(err)
		}
	}
	if md := cur.MarkDeletePosition(); md.EntryID != -1 {
		t.Fatalf("mark-delete moved to %v with entry 0 unacked", md)
	}
	if cur.Backlog() != 27 || !cur.IsAcked(pos[2]) || cur.IsAcked(pos[3]) {
		t.Fatalf("backlog %d", cur.Backlog())
	}
	if err := cur.Ack(pos[0]); err != nil {
		t.Fatal(err)
	}
	if md := cur.MarkDeletePosition(); md != pos[2] {
		t.Fatalf("mark-delete %v, want %v", md, pos[2])
	}
	// Acks across the ledger boundary: 9 (last of ledger 0) and 10 (first of ledger 1).
	for _, i := range []int{10, 9, 8, 7, 6} {
		if err := cur.Ack(pos[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := cur.Ack(pos[4]); err != nil {
		t.Fatal(err)
	}
	if cur.MarkDeletePosition() != pos[2] || cur.Backlog() != 30-11+1 {
		t.Fatalf("mark-delete %v backlog %d", cur.MarkDeletePosition(), cur.Backlog())
	}
	if err := cur.Ack(pos[3]); err != nil {
		t.Fatal(err)
	}
	if md := cur.MarkDeletePosition(); md != pos[10] {
		t.Fatalf("mark-delete %v, want %v (across ledgers)", md, pos[10])
	}
	// Batch-index acks: entry 11 holds 3 messages.
	if err := cur.AckBatchIndexes(pos[11], 3, []int{0, 2}); err != nil {
		t.Fatal(err)
	}
	if cur.IsAcked(pos[11]) {
		t.Fatal("partly acknowledged batch counts as acknowledged")
	}
	if bits, n, ok := cur.BatchAckSet(pos[11]); !ok || n != 3 || bits[0] != 0b101 {
		t.Fatalf("BatchAckSet = %b %d %v", bits, n, ok)
	}
	if err := cur.AckBatchIndexes(pos[11], 3, []int{7}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("bad batch index: %v", err)
	}
	if err := cur.AckBatchIndexes(pos[11], 3, []int{1}); err != nil {
		t.Fatal(err)
	}
	if cur.MarkDeletePosition() != pos[11] {
		t.Fatalf("full batch did not advance mark-delete: %v", cur.MarkDeletePosition())
	}
	// Cumulative ack drops the runs below it.
	if err := cur.Ack(pos[20]); err != nil {
		t.Fatal(err)
	}
	if err := cur.AckCumulative(pos[15]); err != nil {
		t.Fatal(err)
	}
	if cur.MarkDeletePosition() != pos[15] || cur.Backlog() != 13 {
		t.Fatalf("after cumulative: %v backlog %d", cur.MarkDeletePosition(), cur.Backlog())
	}
	if err := cur.AckCumulative(pos[3]); err != nil {
		t.Fatalf("cumulative ack below mark-delete: %v", err)
	}
	bad := Position{pos[29].LedgerID, pos[29].EntryID + 5}
	if err := cur.Ack(bad); !errors.Is(err, ErrInvalidPosition) {
		t.Fatalf("ack beyond last: %v", err)
	}
	_ = ml
}

func TestCursorPersistAndRestore(t *testing.T) {
	c, ml, cur, pos := ackFixture(t)
	ctx := ctxT(t)
	for _, i := range []int{0, 1, 4, 12, 13} {
		if err := cur.Ack(pos[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := cur.AckBatchIndexes(pos[7], 4, []int{3}); err != nil {
		t.Fatal(err)
	}
	cur.SetProperty("k", "v")
	if _, err := ml.OpenCursor(ctx, "latest", InitialLatest); err != nil {
		t.Fatal(err)
	}
	if err := ml.Close(ctx); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.RetentionTime, cfg.RetentionSize = -1, -1
	f2 := c.newFactory(cfg)
	ml = openML(t, f2, "t/ns/persistent/acks", nil)
	curs := ml.Cursors()
	if len(curs) != 2 || curs[0].Name() != "latest" || curs[1].Name() != "sub" {
		t.Fatalf("cursors after reopen: %v", curs)
	}
	if lat := curs[0]; lat.MarkDeletePosition() != pos[29] || lat.Backlog() != 0 {
		t.Fatalf("latest cursor at %v backlog %d", lat.MarkDeletePosition(), lat.Backlog())
	}
	cur = curs[1]
	if cur.MarkDeletePosition() != pos[1] || !cur.IsAcked(pos[4]) || !cur.IsAcked(pos[13]) || cur.IsAcked(pos[5]) {
		t.Fatalf("restored mark-delete %v", cur.MarkDeletePosition())
	}
	if bits, n, ok := cur.BatchAckSet(pos[7]); !ok || n != 4 || bits[0] != 0b1000 {
		t.Fatalf("restored batch ack %b %d %v", bits, n, ok)
	}
	if cur.Properties()["k"] != "v" || cur.Backlog() != 30-5 {
		t.Fatalf("restored properties %v backlog %d", cur.Properties(), cur.Backlog())
	}
	ents, err := cur.ReadEntries(ctx, 3)
	if err != nil || len(ents) != 3 || ents[0].Pos != pos[2] || ents[2].Pos != pos[5] {
		t.Fatalf("ReadEntries after restore skips acked entries: %v, %v", ents, err)
	}

	// A persisted ack survives a crash; the background persistence runs
	// within the interval.
	if err := cur.AckCumulative(pos[20]); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "cursor persisted", func() bool {
		cur.mu.Lock()
		defer cur.mu.Unlock()
		return cur.persistedMD == pos[20]
	})
	f2.crash()
	ml = openML(t, c.newFactory(cfg), "t/ns/persistent/acks", nil)
	if md := ml.Cursors()[1].MarkDeletePosition(); md != pos[20] {
		t.Fatalf("mark-delete after crash %v, want %v", md, pos[20])
	}
	if err := ml.DeleteCursor(ctx, "latest"); err != nil {
		t.Fatal(err)
	}
	if err := ml.DeleteCursor(ctx, "latest"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second DeleteCursor: %v", err)
	}
	if len(ml.Cursors()) != 1 {
		t.Fatalf("cursors after delete: %d", len(ml.Cursors()))
	}
}

func TestCursorRewindSeekSkipClear(t *testing.T) {
	_, ml, cur, pos := ackFixture(t)
	ctx := ctxT(t)
	ents, err := cur.ReadEntries(ctx, 12)
	if err != nil || len(ents) != 12 {
		t.Fatalf("read %d, %v", len(ents), err)
	}
	checkEntries(t, ents, 0, 12, pos[:12])
	if cur.ReadPosition() != pos[12] {
		t.Fatalf("read position %v, want %v", cur.ReadPosition(), pos[12])
	}
	if err := cur.Ack(pos[0]); err != nil {
		t.Fatal(err)
	}
	if err := cur.Ack(pos[2]); err != nil {
		t.Fatal(err)
	}
	cur.Rewind()
	ents, _ = cur.ReadEntries(ctx, 2)
	if len(ents) != 2 || ents[0].Pos != pos[1] || ents[1].Pos != pos[3] {
		t.Fatalf("after rewind read %v", ents)
	}
	cur.Seek(pos[25])
	ents, _ = cur.ReadEntries(ctx, 100)
	if len(ents) != 5 || ents[0].Pos != pos[25] {
		t.Fatalf("after seek read %d from %v", len(ents), ents[0].Pos)
	}
	if cur.HasMoreEntries() {
		t.Fatal("HasMoreEntries at the end")
	}
	// Skip 3 unacknowledged entries: 1, 3, 4 (2 is acked).
	if err := cur.SkipEntries(3); err != nil {
		t.Fatal(err)
	}
	if cur.MarkDeletePosition() != pos[4] || cur.Backlog() != 25 {
		t.Fatalf("after skip: %v backlog %d", cur.MarkDeletePosition(), cur.Backlog())
	}
	// Reset back: everything from entry 2 is redelivered, acks dropped.
	if err := cur.Ack(pos[8]); err != nil {
		t.Fatal(err)
	}
	if err := cur.ResetCursor(pos[2]); err != nil {
		t.Fatal(err)
	}
	if cur.MarkDeletePosition() != pos[1] || cur.ReadPosition() != pos[2] || cur.IsAcked(pos[8]) || cur.Backlog() != 28 {
		t.Fatalf("after reset: md %v read %v backlog %d", cur.MarkDeletePosition(), cur.ReadPosition(), cur.Backlog())
	}
	if !cur.HasMoreEntries() {
		t.Fatal("HasMoreEntries after reset")
	}
	// Reset to the first entry of a ledger.
	if err := cur.ResetCursor(pos[10]); err != nil || cur.ReadPosition() != pos[10] {
		t.Fatalf("reset to ledger start: read %v, %v", cur.ReadPosition(), err)
	}
	if err := cur.ResetCursor(Earliest); err != nil || cur.Backlog() != 30 {
		t.Fatalf("reset to earliest: backlog %d, %v", cur.Backlog(), err)
	}
	if err := cur.SkipEntries(1000); err != nil || cur.Backlog() != 0 {
		t.Fatalf("skip past the end: backlog %d, %v", cur.Backlog(), err)
	}
	if err := cur.ResetCursor(Earliest); err != nil {
		t.Fatal(err)
	}
	if err := cur.ClearBacklog(); err != nil || cur.Backlog() != 0 || cur.MarkDeletePosition() != ml.LastConfirmed() {
		t.Fatalf("clear backlog: %d, %v", cur.Backlog(), err)
	}
	if ents, err := cur.ReadEntries(ctx, 10); err != nil || len(ents) != 0 {
		t.Fatalf("read after clear: %d, %v", len(ents), err)
	}
}

func TestNonDurableCursor(t *testing.T) {
	_, ml, _, pos := ackFixture(t)
	ctx := ctxT(t)
	for _, tc := range []struct {
		start     Position
		inclusive bool
		first     int // index of the first entry read; 30 = none
	}{
		{pos[5], true, 5},
		{pos[5], false, 6},
		{pos[9], false, 10},
		{pos[10], true, 10},
		{Earliest, false, 0},
		{Latest, false, 30},
		{Latest, true, 29},
	} {
		cur, err := ml.NewNonDurableCursor(tc.start, tc.inclusive)
		if err != nil {
			t.Fatal(err)
		}
		ents, err := cur.ReadEntries(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		if tc.first == 30 {
			if len(ents) != 0 {
				t.Errorf("start %v inclusive %v: read %v, want nothing", tc.start, tc.inclusive, ents[0].Pos)
			}
			continue
		}
		if len(ents) != 1 || ents[0].Pos != pos[tc.first] {
			t.Errorf("start %v inclusive %v: read %v, want %v", tc.start, tc.inclusive, ents, pos[tc.first])
		}
		if cur.IsDurable() || cur.Name() != "" {
			t.Error("non-durable cursor claims durability")
		}
	}
	if len(ml.Cursors()) != 1 {
		t.Fatal("non-durable cursors are listed")
	}
}

func TestTrimming(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	ctx := ctxT(t)
	f := c.newFactory(testConfig())

	// With a cursor: ledgers are deleted once the mark-delete passes them.
	ml := openML(t, f, "t/ns/persistent/trim", nil)
	cur, err := ml.OpenCursor(ctx, "sub", InitialEarliest)
	if err != nil {
		t.Fatal(err)
	}
	pos := addN(t, ml, 0, 35)
	waitUntil(t, "ledgers closed", func() bool { ls := ml.Ledgers(); return len(ls) >= 4 && ls[2].closed() })
	first := ml.Ledgers()[:3]
	time.Sleep(20 * time.Millisecond) // let a (wrong) trim run if it would
	if len(ml.Ledgers()) < 4 {
		t.Fatal("ledgers trimmed while the cursor had not consumed them")
	}
	if err := cur.AckCumulative(pos[19]); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "consumed ledgers deleted", func() bool {
		ids := ledgerIDs(ml)
		return !slices.Contains(ids, first[0].ID) && !slices.Contains(ids, first[1].ID)
	})
	if !slices.Contains(ledgerIDs(ml), first[2].ID) {
		t.Fatal("unconsumed ledger deleted")
	}
	// The record is updated first, then the ledgers are deleted.
	lc := c.newClient()
	waitUntil(t, "trimmed ledgers deleted from the ledger client", func() bool {
		all, err := lc.Ledgers(ctx)
		return err == nil && !slices.Contains(all, first[0].ID) && !slices.Contains(all, first[1].ID)
	})
	// Reads from the start now begin at the first kept entry.
	ents, err := ml.Read(ctx, Earliest, 1, 0)
	if err != nil || len(ents) != 1 || ents[0].Pos != pos[20] {
		t.Fatalf("read from earliest after trim: %v, %v", ents, err)
	}
	if cur.Backlog() != 15 {
		t.Fatalf("backlog after trim: %d", cur.Backlog())
	}

	// Without cursors and retention 0 nothing but the current ledger stays.
	ml2 := openML(t, f, "t/ns/persistent/trim-nocursor", nil)
	addN(t, ml2, 0, 35)
	waitUntil(t, "only the current ledger left", func() bool { return len(ml2.Ledgers()) == 1 })

	// Infinite retention keeps everything.
	inf := testConfig()
	inf.RetentionTime, inf.RetentionSize = -1, -1
	ml3 := openML(t, f, "t/ns/persistent/trim-infinite", &inf)
	addN(t, ml3, 0, 35)
	waitUntil(t, "ledgers closed", func() bool { ls := ml3.Ledgers(); return len(ls) >= 4 && ls[2].closed() })
	ml3.signal(func() { ml3.trimWanted = true })
	time.Sleep(20 * time.Millisecond)
	if n := ml3.NumberOfEntries(); n != 35 {
		t.Fatalf("infinite retention lost entries: %d left", n)
	}
}

func ledgerIDs(ml *ManagedLedger) []int64 {
	var ids []int64
	for _, l := range ml.Ledgers() {
		ids = append(ids, l.ID)
	}
	return ids
}
