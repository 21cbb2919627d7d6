package pyinstance

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestFilesAreTheInstanceSourcesOnly(t *testing.T) {
	files := Files()
	for _, want := range []string{MainFile, "requirements.txt", "magnetar_instance/__init__.py",
		"magnetar_instance/main.py", "magnetar_instance/pb/__init__.py", "magnetar_instance/pb/instance_pb2.py",
		"magnetar_instance/pb/function_pb2.py"} {
		if !sourcePath(want) {
			t.Errorf("%s is not embedded (files: %v)", want, files)
		}
	}
	for _, f := range files {
		if strings.HasPrefix(f, "tests/") || strings.HasPrefix(f, "testdata/") || strings.Contains(f, "__pycache__") {
			t.Errorf("%s should not be embedded", f)
		}
	}
}

func TestExtractWritesEveryFileOnceUnderItsVersion(t *testing.T) {
	dir := t.TempDir()
	mainPath, err := Extract(dir)
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "pyinstance-"+Version())
	if mainPath != filepath.Join(root, MainFile) || !filepath.IsAbs(mainPath) {
		t.Fatalf("main path = %s, want %s", mainPath, filepath.Join(root, MainFile))
	}
	for _, name := range Files() {
		got, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(name)))
		if err != nil {
			t.Fatal(err)
		}
		want, _ := sources.ReadFile(name)
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from the embedded file", name)
		}
	}
	// Idempotent: a second call reuses the directory and leaves no
	// temporary directories behind.
	again, err := Extract(dir)
	if err != nil || again != mainPath {
		t.Fatalf("second Extract = %q, %v", again, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("dir holds %d entries after two extracts, want 1", len(entries))
	}
}

func TestExtractConcurrently(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nested", "instances")
	var wg sync.WaitGroup
	paths := make([]string, 8)
	errs := make([]error, 8)
	for i := range paths {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			paths[i], errs[i] = Extract(dir)
		}(i)
	}
	wg.Wait()
	for i := range paths {
		if errs[i] != nil || paths[i] != paths[0] {
			t.Fatalf("extract %d = %q, %v (first %q)", i, paths[i], errs[i], paths[0])
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		names := []string{}
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("dir holds %v after concurrent extracts, want one directory", names)
	}
	if _, err := os.Stat(paths[0]); err != nil {
		t.Fatal(err)
	}
}

func TestVersionIsStable(t *testing.T) {
	if a, b := Version(), Version(); a != b || len(a) != 16 {
		t.Fatalf("Version() = %q then %q", a, b)
	}
}
