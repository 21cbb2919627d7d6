package slowrm

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestRemoveShrinksThenDeletes: on the OS file system a 40 MiB file is cut
// in 8 MiB steps, each smaller than the last, then removed.
func TestRemoveShrinksThenDeletes(t *testing.T) {
	name := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(name, make([]byte, 40<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	var sizes []int64
	err := Remove(vfs.Default, name, Options{Step: 8 << 20, Rate: 1 << 30, OnStep: func(s int64) {
		st, err := os.Stat(name)
		if err != nil || st.Size() != s {
			t.Errorf("after a step to %d the file is %v (%v)", s, st, err)
		}
		sizes = append(sizes, s)
	}})
	if err != nil {
		t.Fatal(err)
	}
	if want := []int64{32 << 20, 24 << 20, 16 << 20, 8 << 20}; len(sizes) != len(want) || sizes[0] != want[0] || sizes[3] != want[3] {
		t.Fatalf("steps %v, want %v", sizes, want)
	}
	if _, err := os.Stat(name); !os.IsNotExist(err) {
		t.Fatalf("file still there: %v", err)
	}
}

// TestRemoveWithoutTruncate: a file system without truncation (the
// in-memory one) removes at once.
func TestRemoveWithoutTruncate(t *testing.T) {
	fs := vfs.NewMem()
	f, err := fs.Create("/x", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(make([]byte, 1<<20))
	f.Close()
	steps := 0
	if err := Remove(fs, "/x", Options{Step: 1 << 10, OnStep: func(int64) { steps++ }}); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Stat("/x"); err == nil || steps != 0 {
		t.Fatalf("file left or shrunk on MemFS (steps %d): %v", steps, err)
	}
}
