package pgtest_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/magnetar-dev/magnetar/controlplane/store/pgtest"
)

// TestDSN: without pgtest.Main, DSN starts a server for the test; each
// call gets its own empty database that accepts writes.
func TestDSN(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, b := pgtest.DSN(t), pgtest.DSN(t)
	if a == b {
		t.Fatalf("two tests share database %s", a)
	}
	dbA, err := sql.Open("pgx", a)
	if err != nil {
		t.Fatal(err)
	}
	defer dbA.Close()
	dbB, err := sql.Open("pgx", b)
	if err != nil {
		t.Fatal(err)
	}
	defer dbB.Close()
	if _, err := dbA.ExecContext(ctx, "CREATE TABLE t (x INT)"); err != nil {
		t.Fatal(err)
	}
	if _, err := dbB.ExecContext(ctx, "CREATE TABLE t (x INT)"); err != nil {
		t.Fatalf("databases are not separate: %v", err)
	}
	var fsync string
	if err := dbA.QueryRowContext(ctx, "SHOW fsync").Scan(&fsync); err != nil || fsync != "off" {
		t.Fatalf("fsync = %q, %v", fsync, err)
	}
}

func TestStartStop(t *testing.T) {
	if _, err := pgtest.FindBinaries(); err != nil {
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := pgtest.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dsn, drop, err := srv.CreateDatabase(ctx)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.PingContext(ctx); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if err := drop(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatalf("Stop: %v\n%s", err, srv.Log())
	}
	// Stopped: nothing listens on the port any more.
	db, _ = sql.Open("pgx", srv.DSN("postgres"))
	defer db.Close()
	pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
	defer pcancel()
	if err := db.PingContext(pctx); err == nil {
		t.Fatal("server still answers after Stop")
	}
}
