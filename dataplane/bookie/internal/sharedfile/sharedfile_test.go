package sharedfile

import (
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

type closeCounter struct {
	vfs.File
	closes int
}

func (c *closeCounter) Close() error { c.closes++; return nil }

func TestClosedByLastHolder(t *testing.T) {
	fs := vfs.NewMem()
	f, err := fs.Create("/f", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	cc := &closeCounter{File: f}
	sf := New(cc) // owner + caller
	sf.Acquire()  // a second reader
	sf.Release()  // the caller's read is done
	sf.Release()  // the owner drops it while the second reader reads
	if cc.closes != 0 {
		t.Fatal("closed while a reader holds it")
	}
	sf.Release()
	if cc.closes != 1 {
		t.Fatalf("closed %d times after the last release, want 1", cc.closes)
	}
}
