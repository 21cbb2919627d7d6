package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/bookie/client"
	"github.com/magnetar-dev/magnetar/dataplane/metadata"
)

// PackageStore keeps uploaded packages, addressed by the SHA-256 of their
// bytes, so every worker can fetch any package and one package uploaded
// twice is stored once.
type PackageStore interface {
	// Put stores the file at path, whose SHA-256 is digest, unless a
	// package with that digest is stored already.
	Put(ctx context.Context, digest, path string) error
	// Get writes the package's bytes to w.
	Get(ctx context.Context, digest string, w io.Writer) error
	// Delete removes a package; deleting an absent one is not an error.
	Delete(ctx context.Context, digest string) error
}

// PackageInfo is a stored package's metadata record.
type PackageInfo struct {
	LedgerID  int64     `json:"ledgerId"`
	Size      int64     `json:"size"`
	Chunk     int       `json:"chunk"`
	CreatedAt time.Time `json:"createdAt"`
}

// packageChunk is the bytes per ledger entry (the bookie protocol's frames
// hold up to 6 MiB).
const packageChunk = 1 << 20

// LedgerPackages stores each package as one closed ledger on the bookies,
// replicated like topic data, and its PackageInfo in the metadata store.
type LedgerPackages struct {
	MD     metadata.Store
	Client *client.Client
	Root   string // e.g. "/functions/packages"
	// Ensemble, WriteQuorum and AckQuorum of package ledgers.
	Ensemble, WriteQuorum, AckQuorum int
}

var _ PackageStore = (*LedgerPackages)(nil)

func (s *LedgerPackages) key(digest string) string { return s.Root + "/" + digest }

// Put implements PackageStore.
func (s *LedgerPackages) Put(ctx context.Context, digest, path string) error {
	if _, err := s.MD.Get(ctx, s.key(digest)); err == nil {
		return nil
	} else if !errors.Is(err, metadata.ErrNotFound) {
		return err
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w, err := s.Client.CreateLedger(ctx, client.CreateOptions{
		Ensemble: s.Ensemble, WriteQuorum: s.WriteQuorum, AckQuorum: s.AckQuorum,
		Custom: map[string]string{"application": "magnetar-functions", "package": digest},
	})
	if err != nil {
		return fmt.Errorf("worker: package ledger: %w", err)
	}
	var size int64
	buf := make([]byte, packageChunk)
	for {
		n, rerr := io.ReadFull(f, buf)
		if n > 0 {
			if _, err := w.Append(ctx, append([]byte(nil), buf[:n]...)); err != nil {
				w.Close(context.WithoutCancel(ctx))
				s.Client.DeleteLedger(context.WithoutCancel(ctx), w.ID())
				return fmt.Errorf("worker: package write: %w", err)
			}
			size += int64(n)
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			return rerr
		}
	}
	if err := w.Close(ctx); err != nil {
		return fmt.Errorf("worker: package ledger close: %w", err)
	}
	b, _ := json.Marshal(PackageInfo{LedgerID: w.ID(), Size: size, Chunk: packageChunk, CreatedAt: time.Now().UTC()})
	if _, err := s.MD.Create(ctx, s.key(digest), b); err != nil {
		s.Client.DeleteLedger(context.WithoutCancel(ctx), w.ID())
		if errors.Is(err, metadata.ErrExists) {
			return nil // stored concurrently by another upload
		}
		return err
	}
	return nil
}

// Get implements PackageStore.
func (s *LedgerPackages) Get(ctx context.Context, digest string, out io.Writer) error {
	kv, err := s.MD.Get(ctx, s.key(digest))
	if err != nil {
		return fmt.Errorf("worker: package %s: %w", digest, err)
	}
	var info PackageInfo
	if err := json.Unmarshal(kv.Value, &info); err != nil {
		return err
	}
	r, err := s.Client.OpenLedger(ctx, info.LedgerID, false)
	if err != nil {
		return fmt.Errorf("worker: package %s ledger %d: %w", digest, info.LedgerID, err)
	}
	lac := r.LastAddConfirmed()
	h := sha256.New()
	w := io.MultiWriter(out, h)
	for first := int64(0); first <= lac; first += 8 {
		ents, err := r.Read(ctx, first, min(first+7, lac))
		if err != nil {
			return fmt.Errorf("worker: package %s read: %w", digest, err)
		}
		for _, e := range ents {
			if _, err := w.Write(e.Payload); err != nil {
				return err
			}
		}
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != digest {
		return fmt.Errorf("worker: package %s read back with digest %s", digest, got)
	}
	return nil
}

// Delete implements PackageStore.
func (s *LedgerPackages) Delete(ctx context.Context, digest string) error {
	kv, err := s.MD.Get(ctx, s.key(digest))
	if errors.Is(err, metadata.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	var info PackageInfo
	if err := json.Unmarshal(kv.Value, &info); err != nil {
		return err
	}
	if err := s.MD.Delete(ctx, s.key(digest), kv.Version); err != nil && !errors.Is(err, metadata.ErrNotFound) {
		return err
	}
	if err := s.Client.DeleteLedger(ctx, info.LedgerID); err != nil && !errors.Is(err, metadata.ErrNotFound) {
		return err
	}
	return nil
}

// DirPackages keeps packages in a directory: for tests without bookies.
type DirPackages struct{ Dir string }

var _ PackageStore = DirPackages{}

// Put implements PackageStore.
func (d DirPackages) Put(_ context.Context, digest, path string) error {
	if err := os.MkdirAll(d.Dir, 0o755); err != nil {
		return err
	}
	return copyFile(path, filepath.Join(d.Dir, digest))
}

// Get implements PackageStore.
func (d DirPackages) Get(_ context.Context, digest string, w io.Writer) error {
	f, err := os.Open(filepath.Join(d.Dir, digest))
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}

// Delete implements PackageStore.
func (d DirPackages) Delete(_ context.Context, digest string) error {
	err := os.Remove(filepath.Join(d.Dir, digest))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp := to + ".tmp"
	out, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, to)
}

// hashFile returns the SHA-256 (hex) and size of a file.
func hashFile(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}
