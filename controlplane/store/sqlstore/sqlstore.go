package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	_ "modernc.org/sqlite"             // registers the "sqlite" database/sql driver

	"github.com/magnetar-dev/magnetar/controlplane/store"
)

// Store is a store.Store over database/sql, for SQLite or PostgreSQL.
type Store struct {
	d *dialect
	// wdb runs every transaction. For SQLite it has exactly one connection,
	// so writers queue in Go rather than spin on SQLITE_BUSY.
	wdb *sql.DB
	// rdb runs reads outside transactions. For SQLite files it is a pool of
	// read connections (WAL lets them read while the writer writes); for
	// PostgreSQL and in-memory SQLite it is wdb.
	rdb *sql.DB
	q   *queries
	log *slog.Logger

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

var _ store.Store = (*Store)(nil)

// Options tune Open. The zero value is the default.
type Options struct {
	// Logger receives migration and retry messages; nil means slog.Default().
	Logger *slog.Logger
}

// Open opens (creating if needed) the store named by dsn and brings its
// schema up to date:
//
//	sqlite:///abs/path/control.db   SQLite file at /abs/path/control.db
//	sqlite:relative/control.db      SQLite file relative to the working directory
//	                                (the path is taken literally: no URI parameters)
//	sqlite::memory:                 SQLite in memory, private to this Store (tests)
//	postgres://user:pw@host:5432/db?sslmode=disable  (or postgresql://...) PostgreSQL
//
// The SQLite file is opened in WAL mode with synchronous=FULL and a busy
// timeout of 10s; its directory must exist.
func Open(ctx context.Context, dsn string) (*Store, error) {
	return OpenWithOptions(ctx, dsn, Options{})
}

// OpenWithOptions is Open with options.
func OpenWithOptions(ctx context.Context, dsn string, opts Options) (*Store, error) {
	s := &Store{log: opts.Logger}
	if s.log == nil {
		s.log = slog.Default()
	}
	switch {
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		db, err := sql.Open("pgx", dsn)
		if err != nil {
			return nil, fmt.Errorf("sqlstore: open postgres: %w", err)
		}
		db.SetMaxOpenConns(16)
		db.SetMaxIdleConns(4)
		db.SetConnMaxIdleTime(5 * time.Minute)
		s.d, s.wdb, s.rdb = postgresDialect, db, db
	case strings.HasPrefix(dsn, "sqlite:"):
		path := strings.TrimPrefix(dsn, "sqlite:")
		s.d = sqliteDialect
		if path == ":memory:" {
			// One connection: every connection to ":memory:" would be a
			// different database.
			db, err := sql.Open("sqlite", "file::memory:?_txlock=immediate&_pragma=busy_timeout(10000)")
			if err != nil {
				return nil, fmt.Errorf("sqlstore: open sqlite: %w", err)
			}
			db.SetMaxOpenConns(1)
			db.SetMaxIdleConns(1)
			db.SetConnMaxLifetime(0)
			db.SetConnMaxIdleTime(0)
			s.wdb, s.rdb = db, db
			break
		}
		path = strings.TrimPrefix(path, "//")
		if path == "" {
			return nil, fmt.Errorf("sqlstore: bad sqlite dsn %q: want sqlite:///path/to/file.db or sqlite::memory:", dsn)
		}
		// modernc.org/sqlite takes a file: URI; escape the path for it.
		uri := "file:" + (&url.URL{Path: path}).EscapedPath()
		// WAL is a property of the file, set by the write connection (which
		// Open uses first); read connections only need the busy timeout.
		wdb, err := sql.Open("sqlite", uri+"?_txlock=immediate&_pragma=busy_timeout(10000)&_journal_mode=WAL&_synchronous=FULL")
		if err != nil {
			return nil, fmt.Errorf("sqlstore: open sqlite: %w", err)
		}
		wdb.SetMaxOpenConns(1)
		wdb.SetMaxIdleConns(1)
		wdb.SetConnMaxLifetime(0)
		wdb.SetConnMaxIdleTime(0)
		rdb, err := sql.Open("sqlite", uri+"?_query_only=1&_pragma=busy_timeout(10000)")
		if err != nil {
			wdb.Close()
			return nil, fmt.Errorf("sqlstore: open sqlite: %w", err)
		}
		rdb.SetMaxOpenConns(8)
		rdb.SetMaxIdleConns(8)
		s.wdb, s.rdb = wdb, rdb
	default:
		return nil, fmt.Errorf("sqlstore: unsupported dsn %q: want sqlite:///path, sqlite::memory: or postgres://...", redact(dsn))
	}
	s.q = newQueries(s.d)
	// Another process setting up the same new SQLite file (WAL conversion,
	// migrations) can make SQLite answer SQLITE_BUSY at once, without
	// waiting for busy_timeout: try again for a while.
	var err error
	for attempt := 1; ; attempt++ {
		if err = s.wdb.PingContext(ctx); err != nil {
			err = fmt.Errorf("sqlstore: connect %s: %w", s.d.name, err)
		} else {
			err = migrate(ctx, s.wdb, s.d)
		}
		if err == nil || !s.d.retriable(err) || attempt >= 50 {
			break
		}
		s.log.Debug("sqlstore: database busy at open, retrying", "dialect", s.d.name, "attempt", attempt, "err", err)
		if serr := sleep(ctx, backoff(attempt)); serr != nil {
			break
		}
	}
	if err != nil {
		s.closeDBs()
		return nil, err
	}
	return s, nil
}

// backoff is the randomized pause before attempt+1: 2ms, 4ms, ... 64ms,
// plus up to as much again.
func backoff(attempt int) time.Duration {
	d := time.Duration(1<<min(attempt, 6)) * time.Millisecond
	return d + rand.N(d)
}

// sleep waits for d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// redact drops anything that may be a password from a dsn for messages.
func redact(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.User != nil {
		u.User = url.User(u.User.Username())
		return u.String()
	}
	if i := strings.Index(dsn, ":"); i >= 0 {
		return dsn[:i] + ":..."
	}
	return "..."
}

func (s *Store) closeDBs() error {
	err := s.wdb.Close()
	if s.rdb != s.wdb {
		err = errors.Join(err, s.rdb.Close())
	}
	return err
}

// Close closes the database. Calls after Close return store.ErrClosed.
// Close waits for nothing: calls in flight finish or fail.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		s.closeErr = s.closeDBs()
	})
	return s.closeErr
}

// Dialect is "sqlite" or "postgres".
func (s *Store) Dialect() string { return s.d.name }

// DB returns the database handle that runs transactions, for tests and
// operator tooling. Writing through it bypasses the store's invariants.
func (s *Store) DB() *sql.DB { return s.wdb }

func (s *Store) reader() *reader {
	return &reader{s: s, q: s.rdb}
}

// wrapErr turns database/sql's "closed" errors into store.ErrClosed.
func (s *Store) wrapErr(err error) error {
	if err == nil {
		return nil
	}
	if s.closed.Load() || errors.Is(err, sql.ErrConnDone) {
		if !errors.Is(err, store.ErrClosed) {
			return fmt.Errorf("%w: %w", store.ErrClosed, err)
		}
	}
	return err
}

// Tx runs fn in one serializable transaction and commits when fn returns
// nil. On a serialization conflict (PostgreSQL SQLSTATE 40001 or 40P01;
// SQLite SQLITE_BUSY) the transaction is rolled back and fn runs again,
// after a short randomized backoff, up to a bounded number of attempts.
// The Writer passed to fn must not be used after fn returns.
func (s *Store) Tx(ctx context.Context, fn func(w store.Writer) error) error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	var err error
	for attempt := 1; ; attempt++ {
		err = s.tryTx(ctx, fn)
		if err == nil || !s.d.retriable(err) || attempt >= s.d.maxAttempts {
			break
		}
		pause := backoff(attempt)
		s.log.Debug("sqlstore: transaction conflict, retrying", "dialect", s.d.name, "attempt", attempt, "backoff", pause, "err", err)
		if serr := sleep(ctx, pause); serr != nil {
			return fmt.Errorf("sqlstore: tx: %w (after %w)", serr, err)
		}
	}
	return s.wrapErr(err)
}

func (s *Store) tryTx(ctx context.Context, fn func(w store.Writer) error) error {
	var opts *sql.TxOptions
	if s.d.serializable {
		opts = &sql.TxOptions{Isolation: sql.LevelSerializable}
	}
	tx, err := s.wdb.BeginTx(ctx, opts)
	if err != nil {
		return fmt.Errorf("sqlstore: begin: %w", err)
	}
	w := newWriter(s, tx)
	committed := false
	defer func() {
		w.done = true
		if !committed { // fn failed or panicked
			_ = tx.Rollback()
		}
	}()
	if err := fn(w); err != nil {
		return err
	}
	committed = true // Commit ends the transaction whatever it returns
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlstore: commit: %w", err)
	}
	return nil
}

// Reader methods outside a transaction.

func (s *Store) Get(ctx context.Context, kind, name string) (store.Object, error) {
	if s.closed.Load() {
		return store.Object{}, store.ErrClosed
	}
	o, err := s.reader().Get(ctx, kind, name)
	return o, s.wrapErr(err)
}

func (s *Store) GetByUID(ctx context.Context, uid string) (store.Object, error) {
	if s.closed.Load() {
		return store.Object{}, store.ErrClosed
	}
	o, err := s.reader().GetByUID(ctx, uid)
	return o, s.wrapErr(err)
}

func (s *Store) List(ctx context.Context, q store.ListQuery) ([]store.Object, string, error) {
	if s.closed.Load() {
		return nil, "", store.ErrClosed
	}
	objs, next, err := s.reader().List(ctx, q)
	return objs, next, s.wrapErr(err)
}

func (s *Store) Count(ctx context.Context, q store.ListQuery) (int, error) {
	if s.closed.Load() {
		return 0, store.ErrClosed
	}
	n, err := s.reader().Count(ctx, q)
	return n, s.wrapErr(err)
}

func (s *Store) Changes(ctx context.Context, after int64, limit int, kinds ...string) ([]store.Change, error) {
	if s.closed.Load() {
		return nil, store.ErrClosed
	}
	cs, err := s.reader().Changes(ctx, after, limit, kinds...)
	return cs, s.wrapErr(err)
}

func (s *Store) Revision(ctx context.Context) (int64, error) {
	if s.closed.Load() {
		return 0, store.ErrClosed
	}
	r, err := s.reader().Revision(ctx)
	return r, s.wrapErr(err)
}

func (s *Store) ListAudit(ctx context.Context, q store.AuditQuery) ([]store.AuditEvent, string, error) {
	if s.closed.Load() {
		return nil, "", store.ErrClosed
	}
	evs, next, err := s.reader().ListAudit(ctx, q)
	return evs, next, s.wrapErr(err)
}

// Writer methods, each its own transaction.

func (s *Store) Create(ctx context.Context, obj store.Object, requestID string) (out store.Object, err error) {
	err = s.Tx(ctx, func(w store.Writer) error {
		out, err = w.Create(ctx, obj, requestID)
		return err
	})
	return out, err
}

func (s *Store) Update(ctx context.Context, obj store.Object, etag string) (out store.Object, err error) {
	err = s.Tx(ctx, func(w store.Writer) error {
		out, err = w.Update(ctx, obj, etag)
		return err
	})
	return out, err
}

func (s *Store) Delete(ctx context.Context, kind, name, etag string) error {
	return s.Tx(ctx, func(w store.Writer) error {
		return w.Delete(ctx, kind, name, etag)
	})
}

func (s *Store) AppendAudit(ctx context.Context, ev store.AuditEvent) error {
	return s.Tx(ctx, func(w store.Writer) error {
		return w.AppendAudit(ctx, ev)
	})
}
