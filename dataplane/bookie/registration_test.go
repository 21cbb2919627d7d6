package bookie

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/bookie/storage/memstorage"
	"github.com/magnetar-dev/magnetar/dataplane/metadata"
	"github.com/magnetar-dev/magnetar/dataplane/metadata/memstore"
)

func newMemstore(t *testing.T) *memstore.Store {
	t.Helper()
	md, err := memstore.NewWithOptions(memstore.Options{TickInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { md.Close() })
	return md
}

func registered(t *testing.T, md metadata.Store) []Registration {
	t.Helper()
	regs, err := ListAvailable(context.Background(), md)
	if err != nil {
		t.Fatal(err)
	}
	return regs
}

func TestRegistrationLifecycle(t *testing.T) {
	md := newMemstore(t)
	st := memstorage.New()
	cfg := Config{ID: "bk1", DataDir: t.TempDir(), Rack: "r1", Region: "eu", ReadOnlyPollPeriod: 10 * time.Millisecond,
		ListenAddr: "127.0.0.1:0", Logger: quietLogger}
	s, err := New(cfg, st, md)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	regs := registered(t, md)
	want := Registration{ID: "bk1", Addr: s.Addr().String(), Rack: "r1", Region: "eu", Instance: s.instance}
	if len(regs) != 1 || regs[0] != want || want.Instance == "" {
		t.Fatalf("registrations %+v, want [%+v]", regs, want)
	}
	kv, err := md.Get(context.Background(), AvailableKey("bk1"))
	if err != nil || !kv.Ephemeral {
		t.Fatalf("registration key %+v, %v: want ephemeral", kv, err)
	}

	// Read-only storage is published.
	st.SetReadOnly(errors.New("disk full"))
	eventually(t, "read-only registration", func() bool {
		r := registered(t, md)
		return len(r) == 1 && r[0].ReadOnly
	})
	st.SetReadOnly(nil)
	eventually(t, "writable registration", func() bool {
		r := registered(t, md)
		return len(r) == 1 && !r[0].ReadOnly
	})

	// A lost session is replaced and the key comes back.
	old := s.sessionID.Load()
	if err := md.ExpireSession(old); err != nil {
		t.Fatal(err)
	}
	eventually(t, "re-registration with a new session", func() bool {
		return s.sessionID.Load() != old && len(registered(t, md)) == 1
	})

	// Shutdown withdraws the registration.
	shutdown(t, s)
	if r := registered(t, md); len(r) != 0 {
		t.Fatalf("registrations after shutdown: %+v", r)
	}
}

func TestSecondBookieWithSameIDRefused(t *testing.T) {
	md := newMemstore(t)
	startServer(t, Config{ID: "dup", DataDir: t.TempDir()}, memstorage.New(), md)
	// Same id, same metadata, other disk: the cookie check refuses it first.
	s2, err := New(Config{ID: "dup", DataDir: t.TempDir(), ListenAddr: "127.0.0.1:0", Logger: quietLogger}, memstorage.New(), md)
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.Start(context.Background()); !errors.Is(err, ErrCookie) {
		t.Fatalf("second bookie with the same id = %v, want ErrCookie", err)
	}
	shutdown(t, s2)
}

func TestCookie(t *testing.T) {
	ctx := context.Background()
	md := newMemstore(t)
	dirA, dirB := t.TempDir(), t.TempDir()

	// New bookies: cookie written in both places.
	for id, dir := range map[string]string{"a": dirA, "b": dirB} {
		if err := CheckCookie(ctx, md, id, dir); err != nil {
			t.Fatalf("new bookie %s: %v", id, err)
		}
		local, ok, err := readCookieFile(filepath.Join(dir, CookieFile))
		if err != nil || !ok || local.BookieID != id || local.InstanceID == "" {
			t.Fatalf("cookie file of %s: %+v %v %v", id, local, ok, err)
		}
		kv, err := md.Get(ctx, CookieKey(id))
		if err != nil {
			t.Fatal(err)
		}
		var remote Cookie
		if err := json.Unmarshal(kv.Value, &remote); err != nil || !remote.equal(local) {
			t.Fatalf("metadata cookie %+v differs from file %+v (%v)", remote, local, err)
		}
	}
	// Restart with the same disk: accepted.
	if err := CheckCookie(ctx, md, "a", dirA); err != nil {
		t.Fatalf("restart: %v", err)
	}

	tests := []struct {
		name, id, dir, msg string
		setup              func(t *testing.T)
	}{
		{name: "wiped dir", id: "a", dir: t.TempDir(), msg: "wiped"},
		{name: "swapped dir", id: "a", dir: dirB, msg: `belongs to bookie "b"`},
		{name: "metadata cookie missing", id: "b", dir: dirB, msg: "metadata has none", setup: func(t *testing.T) {
			if err := md.Delete(ctx, CookieKey("b"), metadata.AnyVersion); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "other instance", id: "a", dir: dirA, msg: "expects instance", setup: func(t *testing.T) {
			path := filepath.Join(dirA, CookieFile)
			c, _, err := readCookieFile(path)
			if err != nil {
				t.Fatal(err)
			}
			c.InstanceID = "0000"
			b, _ := json.Marshal(c)
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "corrupt file", id: "c", dir: func() string {
			d := t.TempDir()
			os.WriteFile(filepath.Join(d, CookieFile), []byte("{not json"), 0o644)
			return d
		}(), msg: "not valid JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.setup != nil {
				tt.setup(t)
			}
			err := CheckCookie(ctx, md, tt.id, tt.dir)
			if !errors.Is(err, ErrCookie) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("CheckCookie = %v, want ErrCookie mentioning %q", err, tt.msg)
			}
		})
	}
}

func TestStartRefusedOnCookieMismatch(t *testing.T) {
	md := newMemstore(t)
	dir := t.TempDir()
	s := startServer(t, Config{ID: "bk", DataDir: dir}, memstorage.New(), md)
	shutdown(t, s)
	// Wiped disk: refused, nothing left running or registered.
	s2, err := New(Config{ID: "bk", DataDir: t.TempDir(), ListenAddr: "127.0.0.1:0", Logger: quietLogger}, memstorage.New(), md)
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.Start(context.Background()); !errors.Is(err, ErrCookie) {
		t.Fatalf("Start with wiped disk = %v, want ErrCookie", err)
	}
	if r := registered(t, md); len(r) != 0 {
		t.Fatalf("refused bookie registered: %+v", r)
	}
	// The original disk still works.
	startServer(t, Config{ID: "bk", DataDir: dir}, memstorage.New(), md)
	if r := registered(t, md); len(r) != 1 {
		t.Fatalf("registrations %+v", r)
	}
}

func TestDefaultIDIsAdvertisedAddress(t *testing.T) {
	md := newMemstore(t)
	s := startServer(t, Config{DataDir: t.TempDir()}, memstorage.New(), md)
	if s.ID() != s.Addr().String() {
		t.Fatalf("ID %q, want the address %q", s.ID(), s.Addr())
	}
	if r := registered(t, md); len(r) != 1 || r[0].ID != s.ID() || r[0].Addr != s.Addr().String() {
		t.Fatalf("registrations %+v", r)
	}
}

// TestRestartReplacesOwnStaleRegistration: a bookie killed without closing
// its session leaves its key until the session expires; the same disk
// restarted replaces it at once, while another disk claiming the same id
// is still refused.
func TestRestartReplacesOwnStaleRegistration(t *testing.T) {
	ctx := context.Background()
	md := memstore.New()
	defer md.Close()
	dir := t.TempDir()
	// An earlier incarnation: registered, then "killed" (session left open).
	if err := CheckCookie(ctx, md, "b1", dir); err != nil {
		t.Fatal(err)
	}
	c, _, _ := readCookieFile(filepath.Join(dir, CookieFile))
	sess, err := md.NewSession(ctx, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	stale, _ := json.Marshal(Registration{ID: "b1", Addr: "x", Instance: c.InstanceID})
	if _, err := sess.CreateEphemeral(ctx, AvailableKey("b1"), stale); err != nil {
		t.Fatal(err)
	}
	srv, err := New(Config{ID: "b1", ListenAddr: "127.0.0.1:0", DataDir: dir}, memstorage.New(), md)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatalf("restart on the same disk refused: %v", err)
	}
	defer srv.Shutdown(ctx)
	regs, err := ListAvailable(ctx, md)
	if err != nil || len(regs) != 1 || regs[0].Addr == "x" {
		t.Fatalf("registrations after restart: %+v %v", regs, err)
	}

	// A different disk with the same id: refused while b1 is registered.
	other, err := New(Config{ID: "b1", ListenAddr: "127.0.0.1:0", DataDir: t.TempDir()}, memstorage.New(), md)
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Start(ctx); err == nil {
		other.Shutdown(ctx)
		t.Fatal("a second disk took over a live bookie id")
	}
}
