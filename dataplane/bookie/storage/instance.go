package storage

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// instanceFile names the storage's instance id, kept in Dir and in
// JournalDir. The journal may live on a device of its own; if that device
// is replaced or wiped, the acknowledged entries that only the journal held
// (everything after the last checkpoint) are gone, and replaying an empty
// journal would hide it. Comparing the two copies at Open turns that into
// an error.
const instanceFile = "STORAGE_ID"

// ErrInstanceMismatch is returned by Open when Dir and JournalDir do not
// belong to the same storage (a wiped, replaced or foreign directory).
var ErrInstanceMismatch = errors.New("storage: journal and ledger directories belong to different storage instances")

// checkInstance compares the instance ids of Dir and JournalDir, writing
// them on first use. fresh reports that the index holds nothing yet (no
// checkpoint, no ledger), which is when a missing id in Dir is a crash in
// the middle of initialisation rather than a wiped disk. The journal's copy
// is written first, so a missing journal id next to a present Dir id always
// means the journal directory is not the one this storage wrote.
func (s *DiskStorage) checkInstance(fresh bool) error {
	fs := s.fs
	dirID, err := readInstance(fs, s.cfg.Dir)
	if err != nil {
		return err
	}
	jID, err := readInstance(fs, s.cfg.JournalDir)
	if err != nil {
		return err
	}
	switch {
	case dirID != "" && jID == dirID:
		return nil
	case dirID != "" && jID == "":
		return fmt.Errorf("%w: %s has instance %s, journal directory %s has none (wiped or replaced?)",
			ErrInstanceMismatch, s.cfg.Dir, dirID, s.cfg.JournalDir)
	case dirID != "":
		return fmt.Errorf("%w: %s has instance %s, journal directory %s has %s",
			ErrInstanceMismatch, s.cfg.Dir, dirID, s.cfg.JournalDir, jID)
	case jID != "" && !fresh:
		return fmt.Errorf("%w: %s holds data but no instance id, journal directory %s has %s",
			ErrInstanceMismatch, s.cfg.Dir, s.cfg.JournalDir, jID)
	}
	id := jID
	if id == "" {
		var b [16]byte
		if _, err := rand.Read(b[:]); err != nil {
			return err
		}
		id = hex.EncodeToString(b[:])
		if err := writeInstance(fs, s.cfg.JournalDir, id); err != nil {
			return err
		}
	}
	return writeInstance(fs, s.cfg.Dir, id)
}

func readInstance(fs vfs.FS, dir string) (string, error) {
	f, err := fs.Open(fs.PathJoin(dir, instanceFile))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("storage: read instance id: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return "", fmt.Errorf("storage: read instance id: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// writeInstance writes id durably: to a temporary file, synced, renamed,
// and the directory synced, so a crash leaves either no id or the whole id.
func writeInstance(fs vfs.FS, dir, id string) error {
	tmp := fs.PathJoin(dir, instanceFile+".tmp")
	f, err := fs.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("storage: write instance id: %w", err)
	}
	_, err = f.Write([]byte(id + "\n"))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fs.Rename(tmp, fs.PathJoin(dir, instanceFile))
	}
	if err != nil {
		return fmt.Errorf("storage: write instance id: %w", err)
	}
	return syncDir(fs, dir)
}
