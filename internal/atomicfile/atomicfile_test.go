package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWriteFileReplacesWhole(t *testing.T) {
	name := filepath.Join(t.TempDir(), "sub", "f.json")
	for _, want := range []string{"first, the longer content", "second"} {
		if err := WriteFile(name, []byte(want)); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(name)
		if err != nil || string(got) != want {
			t.Fatalf("read %q, %v; want %q", got, err, want)
		}
	}
	st, err := os.Stat(name)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, %v; want 0600", st.Mode(), err)
	}
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(name), "*.tmp*"))
	if len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}
