// Package atomicfile replaces small files whole: a reader, or the file
// after a crash, has the old content or the new one, never part of either.
package atomicfile

import (
	"os"
	"path/filepath"
)

// WriteFile replaces name with data, with permissions 0600, making its
// directory (0700) if needed: data goes to a temporary file in the same
// directory, is synced, and the file is renamed over name.
func WriteFile(name string, data []byte) error {
	dir := filepath.Dir(name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, filepath.Base(name)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after a successful rename, a no-op
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), name)
}
