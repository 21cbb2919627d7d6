// Package pgtest runs a real, throw-away PostgreSQL server for tests. It
// looks for initdb, pg_ctl and postgres in PATH, then
// /usr/lib/postgresql/<newest>/bin, then /usr/local/bin; runs initdb in a
// temporary directory; starts postgres as a child process on a free
// loopback port with its unix socket in that directory and fsync off; and
// hands each test a fresh database. MAGNETAR_POSTGRES_BIN, when set, is
// the only directory searched. When the test runs as root the server
// runs as the user "nobody" (PostgreSQL refuses root), and the temporary
// directory is given to that user.
//
// A test package shares one server per test binary:
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
//	func TestX(t *testing.T) { dsn := pgtest.DSN(t); ... }
//
// The server starts at the first DSN call and stops (pg_ctl stop -m
// immediate) when Main's tests end; without Main, each DSN call gets its
// own server, stopped in t.Cleanup. If this process dies, the server gets
// SIGQUIT (immediate shutdown) through the parent-death signal.
//
// When the binaries are missing, DSN skips the test, unless the
// environment variable MAGNETAR_REQUIRE_POSTGRES=1 (CI sets it), in which
// case it fails it.
//
// Concurrency: DSN and Server methods are safe for concurrent use; Main and
// Stop must be called once, after all users are done. Each Server owns one
// goroutine that waits for the postmaster process; Stop waits for it.
package pgtest
