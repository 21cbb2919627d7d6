package bookie

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/metadata"
)

// CookieFile is the name of the instance cookie in the data dir.
const CookieFile = "COOKIE.json"

// CookiePrefix is the metadata prefix of bookie cookies:
// /bookies/cookies/<bookieID>.
const CookiePrefix = "/bookies/cookies"

// Cookie identifies one incarnation of a bookie's disk. The same cookie is
// kept in the data dir and in metadata; a mismatch means the disk was
// wiped, swapped or belongs to another bookie, and the bookie refuses to
// start rather than serve (or lose) data it does not have.
type Cookie struct {
	BookieID   string    `json:"bookieId"`
	InstanceID string    `json:"instanceId"`
	DataDir    string    `json:"dataDir"`
	Created    time.Time `json:"created"`
}

func (c Cookie) equal(o Cookie) bool {
	return c.BookieID == o.BookieID && c.InstanceID == o.InstanceID &&
		c.DataDir == o.DataDir && c.Created.Equal(o.Created)
}

// CookieKey returns the metadata key of a bookie's cookie.
func CookieKey(bookieID string) string { return CookiePrefix + "/" + bookieID }

// CheckCookie verifies the instance cookie of bookie id with data dir dir,
// creating it in both places for a new bookie. Errors naming a mismatch
// wrap ErrCookie.
func CheckCookie(ctx context.Context, md metadata.Store, id, dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("bookie: data dir %q: %w", dir, err)
	}
	path := filepath.Join(abs, CookieFile)
	local, haveLocal, err := readCookieFile(path)
	if err != nil {
		return err
	}
	kv, err := md.Get(ctx, CookieKey(id))
	haveRemote := err == nil
	if err != nil && !errors.Is(err, metadata.ErrNotFound) {
		return fmt.Errorf("bookie: read cookie of %s from metadata: %w", id, err)
	}
	var remote Cookie
	if haveRemote {
		if err := json.Unmarshal(kv.Value, &remote); err != nil {
			return fmt.Errorf("%w: metadata cookie of %s is not valid JSON: %w", ErrCookie, id, err)
		}
	}

	switch {
	case !haveLocal && !haveRemote:
		return createCookie(ctx, md, id, abs, path)
	case haveLocal && local.BookieID != id:
		return fmt.Errorf("%w: data dir %s belongs to bookie %q (instance %s), not %q",
			ErrCookie, abs, local.BookieID, local.InstanceID, id)
	case !haveLocal:
		return fmt.Errorf("%w: data dir %s has no cookie but metadata has one for bookie %q (instance %s, created %s): "+
			"the disk was wiped or replaced; its ledgers are lost to this bookie",
			ErrCookie, abs, id, remote.InstanceID, remote.Created.Format(time.RFC3339))
	case !haveRemote:
		return fmt.Errorf("%w: data dir %s has a cookie for bookie %q (instance %s) but metadata has none: "+
			"the metadata was reset or the bookie was decommissioned", ErrCookie, abs, id, local.InstanceID)
	case !local.equal(remote):
		return fmt.Errorf("%w: data dir %s holds instance %s of bookie %q but metadata expects instance %s (data dir %s)",
			ErrCookie, abs, local.InstanceID, id, remote.InstanceID, remote.DataDir)
	}
	return nil
}

func readCookieFile(path string) (Cookie, bool, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return Cookie{}, false, nil
	}
	if err != nil {
		return Cookie{}, false, fmt.Errorf("bookie: read cookie: %w", err)
	}
	var c Cookie
	if err := json.Unmarshal(b, &c); err != nil {
		return Cookie{}, false, fmt.Errorf("%w: cookie file %s is not valid JSON: %w", ErrCookie, path, err)
	}
	return c, true, nil
}

// createCookie writes a new cookie to metadata first, then durably to the
// data dir. A crash in between leaves a metadata cookie without a local
// one, which the next start refuses as a wiped disk: an operator deletes
// the metadata key of a bookie that never served.
func createCookie(ctx context.Context, md metadata.Store, id, dir, path string) error {
	var rnd [16]byte
	rand.Read(rnd[:])
	c := Cookie{BookieID: id, InstanceID: hex.EncodeToString(rnd[:]), DataDir: dir, Created: time.Now().UTC().Truncate(time.Millisecond)}
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("bookie: create data dir: %w", err)
	}
	if _, err := md.Create(ctx, CookieKey(id), b); err != nil {
		if errors.Is(err, metadata.ErrExists) {
			return fmt.Errorf("%w: another bookie %q registered a cookie concurrently", ErrCookie, id)
		}
		return fmt.Errorf("bookie: write cookie of %s to metadata: %w", id, err)
	}
	if err := writeFileSync(path, b); err != nil {
		return fmt.Errorf("bookie: write cookie file: %w", err)
	}
	return nil
}

// writeFileSync writes path atomically and durably: temp file, fsync,
// rename, fsync of the directory.
func writeFileSync(path string, b []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
