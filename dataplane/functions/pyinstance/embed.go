package pyinstance

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
)

// MainFile is the entry point, relative to the extracted directory.
const MainFile = "python_instance_main.py"

//go:embed python_instance_main.py requirements.txt magnetar_instance/*.py magnetar_instance/pb/*.py
var sources embed.FS

// Files returns the embedded files' slash-separated paths, sorted.
func Files() []string {
	var names []string
	_ = fs.WalkDir(sources, ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			names = append(names, p)
		}
		return err
	})
	sort.Strings(names)
	return names
}

// Version is a hash of the embedded files' names and contents; it names
// the directory Extract writes.
func Version() string {
	h := sha256.New()
	for _, name := range Files() {
		b, _ := sources.ReadFile(name)
		fmt.Fprintf(h, "%s\x00%d\x00", name, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// Extract writes the instance's sources to dir/pyinstance-<Version()> (once:
// an existing directory of that name is reused) and returns the absolute
// path of its python_instance_main.py.
func Extract(dir string) (mainPath string, err error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("pyinstance: %w", err)
	}
	final := filepath.Join(abs, "pyinstance-"+Version())
	mainPath = filepath.Join(final, MainFile)
	if _, err := os.Stat(mainPath); err == nil {
		return mainPath, nil
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return "", fmt.Errorf("pyinstance: %w", err)
	}
	tmp, err := os.MkdirTemp(abs, ".pyinstance-tmp-")
	if err != nil {
		return "", fmt.Errorf("pyinstance: %w", err)
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	for _, name := range Files() {
		b, err := sources.ReadFile(name)
		if err != nil {
			return "", fmt.Errorf("pyinstance: %w", err)
		}
		target := filepath.Join(tmp, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return "", fmt.Errorf("pyinstance: %w", err)
		}
		if err := os.WriteFile(target, b, 0o644); err != nil {
			return "", fmt.Errorf("pyinstance: %w", err)
		}
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", fmt.Errorf("pyinstance: %w", err)
	}
	if err := os.Rename(tmp, final); err != nil {
		// Another extractor won the race: use its (identical) files.
		if _, statErr := os.Stat(mainPath); statErr == nil {
			return mainPath, nil
		}
		return "", fmt.Errorf("pyinstance: %w", errors.Join(err, fmt.Errorf("extracting to %s", final)))
	}
	return mainPath, nil
}

// sourcePath reports whether name is one of the embedded files.
func sourcePath(name string) bool {
	_, err := fs.Stat(sources, path.Clean(name))
	return err == nil
}
