package ledger

import (
	"errors"
	"fmt"
	"strconv"
	"testing"

	"github.com/magnetar-dev/magnetar/dataplane/bookie/client"
)

// writeSide writes n entries to a new side ledger and returns its id.
func writeSide(t *testing.T, ml *ManagedLedger, n int) int64 {
	t.Helper()
	ctx := ctxT(t)
	w, err := ml.CreateSideLedger(ctx, "test")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		w.Append(payload(i))
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if w.Entries() != int64(n) {
		t.Fatalf("Entries %d, want %d", w.Entries(), n)
	}
	return w.ID()
}

func sideExists(t *testing.T, f *Factory, id int64) bool {
	t.Helper()
	_, err := f.client.LedgerMetadata(ctxT(t), id)
	if err != nil && !errors.Is(err, client.ErrNoSuchLedger) {
		t.Fatal(err)
	}
	return err == nil
}

func TestSideLedgerWriteRead(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	f := c.newFactory(testConfig())
	ml := openML(t, f, "t/ns/side", nil)
	id := writeSide(t, ml, 250)
	rd, err := ml.OpenSideLedger(ctxT(t), id)
	if err != nil {
		t.Fatal(err)
	}
	if rd.Entries() != 250 {
		t.Fatalf("Entries %d", rd.Entries())
	}
	got, err := rd.Read(ctxT(t), 100, 149)
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range got {
		if string(b) != string(payload(100+i)) {
			t.Fatalf("entry %d = %q", 100+i, b)
		}
	}
	// Side ledgers are not in the managed ledger's list.
	for _, l := range ml.Ledgers() {
		if l.ID == id {
			t.Fatalf("side ledger %d in the ledger list", id)
		}
	}
	if err := ml.DeleteSideLedger(ctxT(t), id); err != nil {
		t.Fatal(err)
	}
	if err := ml.DeleteSideLedger(ctxT(t), id); err != nil {
		t.Fatalf("deleting a deleted side ledger: %v", err)
	}
	if sideExists(t, f, id) {
		t.Fatal("side ledger still there")
	}
}

func TestMarkDeleteWithPropertiesIsDurable(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	f := c.newFactory(testConfig())
	ctx := ctxT(t)
	ml := openML(t, f, "t/ns/mdprops", nil)
	// Opened first: without a cursor, consumed ledgers are trimmed.
	cur, err := ml.OpenCursor(ctx, "c", InitialEarliest)
	if err != nil {
		t.Fatal(err)
	}
	pos := addN(t, ml, 0, 25)
	if err := cur.MarkDeleteWithProperties(ctx, pos[17], map[string]string{"a": "1", "b": "2"}); err != nil {
		t.Fatal(err)
	}
	if err := cur.MarkDeleteWithProperties(ctx, pos[17], map[string]string{"b": ""}); err != nil {
		t.Fatal(err)
	}
	// A crash loses nothing MarkDeleteWithProperties returned for.
	f.crash()
	f2 := c.newFactory(testConfig())
	ml2 := openML(t, f2, "t/ns/mdprops", nil)
	cur2, err := ml2.OpenCursor(ctx, "c", InitialEarliest)
	if err != nil {
		t.Fatal(err)
	}
	if got := cur2.MarkDeletePosition(); got != pos[17] {
		t.Fatalf("mark-delete %v, want %v", got, pos[17])
	}
	if p := cur2.Properties(); p["a"] != "1" || len(p) != 1 {
		t.Fatalf("properties %v", p)
	}
}

func TestSideLedgersGoWithTheirCursor(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	f := c.newFactory(testConfig())
	ctx := ctxT(t)
	var ids []int64
	for i, name := range []string{"t/ns/owner-a", "t/ns/owner-b"} {
		ml := openML(t, f, name, nil)
		addN(t, ml, 0, 5)
		cur, err := ml.OpenCursor(ctx, "__compaction", InitialEarliest)
		if err != nil {
			t.Fatal(err)
		}
		id1, id2 := writeSide(t, ml, 3), writeSide(t, ml, 1)
		other := writeSide(t, ml, 1) // named by no cursor: not ours to delete
		props := map[string]string{SideLedgerProp + "x": strconv.FormatInt(id1, 10), SideLedgerProp + "y": strconv.FormatInt(id2, 10), "z": fmt.Sprint(other)}
		if err := cur.MarkDeleteWithProperties(ctx, cur.MarkDeletePosition(), props); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id1, id2)
		if i == 0 {
			if err := ml.DeleteCursor(ctx, "__compaction"); err != nil {
				t.Fatal(err)
			}
		} else if err := f.Delete(ctx, name); err != nil {
			t.Fatal(err)
		}
		if !sideExists(t, f, other) {
			t.Fatalf("side ledger %d named by no cursor was deleted", other)
		}
	}
	for _, id := range ids {
		if sideExists(t, f, id) {
			t.Fatalf("side ledger %d survived its cursor", id)
		}
	}
}
