package sqlstore

import (
	"errors"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"modernc.org/sqlite"
)

// dialect holds everything that differs between SQLite and PostgreSQL. All
// SQL in this package is written once, with '?' placeholders and the
// {{blob}} type marker; the dialect rewrites it.
type dialect struct {
	name string
	// blobType replaces {{blob}} in migrations.
	blobType string
	// dollarParams: rewrite '?' placeholders to $1, $2, ...
	dollarParams bool
	// lockMigrations, when not empty, runs first in the migration
	// transaction so that two processes opening the same database at once
	// apply migrations one after the other.
	lockMigrations string
	// serializable: begin transactions with sql.LevelSerializable.
	// (SQLite transactions are serializable by construction: BEGIN
	// IMMEDIATE through a single writer connection.)
	serializable bool
	// maxAttempts bounds how often Tx runs fn when the database reports a
	// serialization conflict.
	maxAttempts int
}

var (
	sqliteDialect = &dialect{
		name:        "sqlite",
		blobType:    "BLOB",
		maxAttempts: 5, // SQLITE_BUSY from another process past busy_timeout
	}
	postgresDialect = &dialect{
		name:           "postgres",
		blobType:       "BYTEA",
		dollarParams:   true,
		lockMigrations: "SELECT pg_advisory_xact_lock(7305895211243)",
		serializable:   true,
		maxAttempts:    40,
	}
)

// rebind rewrites a query written with '?' placeholders for this dialect.
// Queries in this package never contain '?' inside string literals.
func (d *dialect) rebind(q string) string {
	if !d.dollarParams || !strings.Contains(q, "?") {
		return q
	}
	var b strings.Builder
	b.Grow(len(q) + 8)
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(q[i])
	}
	return b.String()
}

// ddl rewrites a migration statement for this dialect.
func (d *dialect) ddl(stmt string) string {
	return strings.ReplaceAll(stmt, "{{blob}}", d.blobType)
}

// SQLite primary result codes (the low byte of an extended code).
const (
	sqliteBusy       = 5
	sqliteLocked     = 6
	sqliteConstraint = 19
)

// retriable reports whether err is a transient conflict after which the
// whole transaction can run again.
func (d *dialect) retriable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// serialization_failure, deadlock_detected
		return pgErr.Code == "40001" || pgErr.Code == "40P01"
	}
	var sqlErr *sqlite.Error
	if errors.As(err, &sqlErr) {
		c := sqlErr.Code() & 0xff
		return c == sqliteBusy || c == sqliteLocked
	}
	return false
}

// uniqueViolation reports whether err is a unique or primary key violation.
func uniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code == "23505"
	}
	var sqlErr *sqlite.Error
	if errors.As(err, &sqlErr) {
		return sqlErr.Code()&0xff == sqliteConstraint
	}
	return false
}
