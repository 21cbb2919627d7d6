package sqlstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/magnetar-dev/magnetar/controlplane/store"
	"github.com/magnetar-dev/magnetar/controlplane/store/pgtest"
	"github.com/magnetar-dev/magnetar/controlplane/store/sqlstore"
	"github.com/magnetar-dev/magnetar/controlplane/store/storetest"
)

func TestMain(m *testing.M) {
	code := pgtest.Main(m)
	if code == 0 {
		// Every Store the tests opened was closed, and with it every
		// goroutine database/sql and the drivers started.
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func open(t testing.TB, dsn string) *sqlstore.Store {
	t.Helper()
	s, err := sqlstore.Open(ctxT(t), dsn)
	if err != nil {
		t.Fatalf("Open(%s): %v", dsn, err)
	}
	return s
}

func fileDSN(t testing.TB) string {
	return "sqlite://" + filepath.Join(t.TempDir(), "control.db")
}

func TestSQLiteMemory(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return open(t, "sqlite::memory:") })
}

func TestSQLiteFile(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return open(t, fileDSN(t)) })
}

func TestSQLiteFileDurable(t *testing.T) {
	storetest.RunDurable(t, func(t *testing.T) storetest.Reopener {
		dsn := fileDSN(t)
		return func(t *testing.T) store.Store { return open(t, dsn) }
	})
}

func TestPostgres(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return open(t, pgtest.DSN(t)) })
}

func TestPostgresDurable(t *testing.T) {
	storetest.RunDurable(t, func(t *testing.T) storetest.Reopener {
		dsn := pgtest.DSN(t)
		return func(t *testing.T) store.Store { return open(t, dsn) }
	})
}

// backends are the DSNs of one fresh database per backend that keeps data
// across Open calls.
func backends(t *testing.T) map[string]func(t *testing.T) string {
	return map[string]func(t *testing.T) string{
		"sqlite":   func(t *testing.T) string { return fileDSN(t) },
		"postgres": func(t *testing.T) string { return pgtest.DSN(t) },
	}
}

func TestMigrations(t *testing.T) {
	for name, newDSN := range backends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := ctxT(t)
			dsn := newDSN(t)
			s := open(t, dsn)
			if s.Dialect() != name {
				t.Fatalf("dialect %q", s.Dialect())
			}
			count := func(s *sqlstore.Store) int {
				var n int
				if err := s.DB().QueryRowContext(ctx, "SELECT COUNT(*) FROM schema_migrations").Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			}
			n := count(s)
			if n < 1 {
				t.Fatalf("%d migrations recorded", n)
			}
			s.Close()
			// Re-open: nothing more applied.
			s = open(t, dsn)
			if got := count(s); got != n {
				t.Fatalf("re-open recorded %d migrations, want %d", got, n)
			}
			// A migration from the future: refused, and the database is untouched.
			if _, err := s.DB().ExecContext(ctx, "INSERT INTO schema_migrations (version, name, applied_at) VALUES (9999, 'from the future', 0)"); err != nil {
				t.Fatal(err)
			}
			s.Close()
			_, err := sqlstore.Open(ctx, dsn)
			if !errors.Is(err, sqlstore.ErrSchemaTooNew) || !strings.Contains(err.Error(), "9999") {
				t.Fatalf("Open of a newer schema: %v, want ErrSchemaTooNew naming 9999", err)
			}
		})
	}
}

func TestMigrationRenamed(t *testing.T) {
	ctx := ctxT(t)
	dsn := fileDSN(t)
	s := open(t, dsn)
	if _, err := s.DB().ExecContext(ctx, "UPDATE schema_migrations SET name = 'something else' WHERE version = 1"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := sqlstore.Open(ctx, dsn); err == nil || !strings.Contains(err.Error(), "something else") {
		t.Fatalf("Open with a renamed migration: %v", err)
	}
}

func TestOpenDSN(t *testing.T) {
	ctx := ctxT(t)
	for _, dsn := range []string{"", "mysql://x", "sqlite:", "sqlite://"} {
		if s, err := sqlstore.Open(ctx, dsn); err == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded", dsn)
		}
	}
	// A relative path is relative to the working directory.
	dir := t.TempDir()
	t.Chdir(dir)
	s := open(t, "sqlite:rel.db")
	s.Close()
	if _, err := os.Stat(filepath.Join(dir, "rel.db")); err != nil {
		t.Fatalf("sqlite:rel.db did not create rel.db: %v", err)
	}
	// Paths with characters that need escaping in a URI.
	s = open(t, "sqlite://"+filepath.Join(dir, "with space%and#hash.db"))
	s.Close()
	if _, err := os.Stat(filepath.Join(dir, "with space%and#hash.db")); err != nil {
		t.Fatal(err)
	}
	// The password of a bad postgres DSN is not echoed.
	_, err := sqlstore.Open(ctx, "postgres://u:secretpw@127.0.0.1:1/db?connect_timeout=1")
	if err == nil || strings.Contains(err.Error(), "secretpw") {
		t.Fatalf("Open of an unreachable postgres: %v", err)
	}
}

// TestSQLiteMemoryIsPrivate: two in-memory stores do not share data.
func TestSQLiteMemoryIsPrivate(t *testing.T) {
	ctx := ctxT(t)
	a, b := open(t, "sqlite::memory:"), open(t, "sqlite::memory:")
	defer a.Close()
	defer b.Close()
	if _, err := a.Create(ctx, store.Object{Kind: "k", Name: "n"}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get(ctx, "k", "n"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("b sees a's object: %v", err)
	}
}

// TestTimesAgree: both dialects return the same instant for the same
// stored value.
func TestTimesAgree(t *testing.T) {
	ctx := ctxT(t)
	at := time.Date(2031, 2, 3, 4, 5, 6, 789123456, time.FixedZone("Y", -7*3600))
	want := at.UTC().Truncate(time.Microsecond)
	for name, newDSN := range backends(t) {
		t.Run(name, func(t *testing.T) {
			s := open(t, newDSN(t))
			defer s.Close()
			if err := s.AppendAudit(ctx, store.AuditEvent{Org: "o", Time: at}); err != nil {
				t.Fatal(err)
			}
			evs, _, err := s.ListAudit(ctx, store.AuditQuery{Org: "o"})
			if err != nil || len(evs) != 1 {
				t.Fatalf("%v %v", evs, err)
			}
			if evs[0].Time != want {
				t.Fatalf("time %v (%s), want %v", evs[0].Time, evs[0].Time.Location(), want)
			}
		})
	}
}

// TestConcurrentOpen: several processes (here: Stores) opening one new
// database at once apply the schema exactly once, and all succeed.
func TestConcurrentOpen(t *testing.T) {
	for name, newDSN := range backends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := ctxT(t)
			dsn := newDSN(t)
			const n = 4
			stores := make([]*sqlstore.Store, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					stores[i], errs[i] = sqlstore.Open(ctx, dsn)
				}()
			}
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Errorf("Open %d: %v", i, err)
					continue
				}
				defer stores[i].Close()
			}
			if t.Failed() {
				return
			}
			var count int
			if err := stores[0].DB().QueryRowContext(ctx, "SELECT COUNT(*) FROM schema_migrations WHERE version = 1").Scan(&count); err != nil || count != 1 {
				t.Fatalf("migration 1 recorded %d times, %v", count, err)
			}
			// All of them work on the same data.
			if _, err := stores[1].Create(ctx, store.Object{Kind: "k", Name: "n"}, ""); err != nil {
				t.Fatal(err)
			}
			if _, err := stores[n-1].Get(ctx, "k", "n"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestSQLiteFileWAL: the file is in WAL mode, and reads outside a
// transaction go on (seeing only committed data) while a write
// transaction is open.
func TestSQLiteFileWAL(t *testing.T) {
	ctx := ctxT(t)
	s := open(t, fileDSN(t))
	defer s.Close()
	var mode string
	if err := s.DB().QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("journal_mode %q, %v", mode, err)
	}
	if _, err := s.Create(ctx, store.Object{Kind: "k", Name: "old"}, ""); err != nil {
		t.Fatal(err)
	}
	err := s.Tx(ctx, func(w store.Writer) error {
		if _, err := w.Create(ctx, store.Object{Kind: "k", Name: "new"}, ""); err != nil {
			return err
		}
		if _, err := s.Get(ctx, "k", "old"); err != nil {
			return fmt.Errorf("read during a write transaction: %w", err)
		}
		if _, err := s.Get(ctx, "k", "new"); !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("uncommitted object visible outside the transaction: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "k", "new"); err != nil {
		t.Fatal(err)
	}
}

func TestUsageSQLite(t *testing.T) {
	storetest.RunUsage(t, func(t *testing.T) store.Store { return open(t, fileDSN(t)) })
}

func TestUsagePostgres(t *testing.T) {
	storetest.RunUsage(t, func(t *testing.T) store.Store { return open(t, pgtest.DSN(t)) })
}
