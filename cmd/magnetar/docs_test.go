package main

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestCLIDocsUpToDate renders the CLI reference into a temporary directory
// and fails when the checked-in docs/cli differs from it: a page added,
// missing or changed.
func TestCLIDocsUpToDate(t *testing.T) {
	const fix = "docs/cli is out of date with the commands: run `go run ./cmd/magnetar docs --dir docs/cli` from the repository root and commit the result"
	fresh := t.TempDir()
	if err := writeCLIDocs(newRootCommand(), fresh); err != nil {
		t.Fatal(err)
	}
	checkedIn := filepath.Join("..", "..", cliDocsDir)
	want, got := mdFiles(t, fresh), mdFiles(t, checkedIn)
	if len(want) < 10 {
		t.Fatalf("only %d pages rendered: %v", len(want), want)
	}
	if strings.Join(want, " ") != strings.Join(got, " ") {
		t.Fatalf("%s\nrendered pages: %v\nchecked-in pages: %v", fix, want, got)
	}
	for _, name := range want {
		w, err := os.ReadFile(filepath.Join(fresh, name))
		if err != nil {
			t.Fatal(err)
		}
		g, err := os.ReadFile(filepath.Join(checkedIn, name))
		if err != nil {
			t.Fatal(err)
		}
		if string(w) != string(g) {
			t.Errorf("%s: %s differs from the commands", fix, name)
		}
	}
}

// mdFiles lists the names of the Markdown files in dir, sorted.
func mdFiles(t *testing.T, dir string) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, len(paths))
	for i, p := range paths {
		names[i] = filepath.Base(p)
	}
	sort.Strings(names)
	return names
}
