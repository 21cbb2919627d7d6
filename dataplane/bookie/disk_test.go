package bookie

import (
	"context"
	"errors"
	"testing"

	"github.com/magnetar-dev/magnetar/dataplane/bookie/storage"
	"github.com/magnetar-dev/magnetar/dataplane/bookie/wire"
)

// TestServerOverDiskStorage runs the protocol against the disk storage and
// reads the entries back after reopening it.
func TestServerOverDiskStorage(t *testing.T) {
	dir := t.TempDir()
	st, err := storage.Open(storage.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, Config{}, st, nil)
	c := dial(t, s)
	ctx := context.Background()
	for e := range int64(20) {
		if err := add(c, addReq(4, e, e-1, "disk", false)); err != nil {
			t.Fatalf("add %d: %v", e, err)
		}
	}
	if lac, err := c.Fence(ctx, 4); err != nil || lac != 18 {
		t.Fatalf("Fence = %d, %v; want 18", lac, err)
	}
	if err := add(c, addReq(4, 20, 19, "late", false)); !errors.Is(err, wire.ErrFenced) {
		t.Fatalf("add after fence = %v, want ErrFenced", err)
	}
	shutdown(t, s)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	st, err = storage.Open(storage.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s = startServer(t, Config{}, st, nil)
	c = dial(t, s)
	if e, err := c.Read(ctx, 4, 19, 0); err != nil || string(e.Payload) != "disk" || e.LAC != 18 {
		t.Fatalf("read after reopen = %+v, %v", e, err)
	}
	if lac, last, err := c.ReadLAC(ctx, 4); err != nil || lac != 18 || last != 19 {
		t.Fatalf("ReadLAC after reopen = %d, %d, %v", lac, last, err)
	}
	if err := add(c, addReq(4, 20, 19, "late", false)); !errors.Is(err, wire.ErrFenced) {
		t.Fatalf("fence lost across reopen: %v", err)
	}
	shutdown(t, s)
}
