// Package sqlstore implements store.Store over database/sql, for SQLite
// (modernc.org/sqlite, pure Go: the embedded default) and PostgreSQL
// (github.com/jackc/pgx/v5 through its database/sql driver). The control
// plane's server opens it once with Open and shares the *Store; the
// conformance suite in storetest checks both dialects.
//
// # Data source names
//
//	sqlite:///abs/path/control.db    a SQLite file (created if missing; its directory must exist)
//	sqlite:relative/control.db       a SQLite file relative to the working directory
//	sqlite::memory:                  a private in-memory SQLite database (tests)
//	postgres://user@host:5432/db?sslmode=disable   PostgreSQL (also postgresql://)
//
// # Schema
//
// One schema for both dialects, written as the ordered list migrations in
// migrations.go; Open applies the missing ones in one transaction and
// records each in schema_migrations(version, name, applied_at). Re-opening
// is a no-op. A database that records a migration this binary does not know
// is refused with ErrSchemaTooNew. Dialect differences live in dialect.go:
// the binary column type (BLOB / BYTEA), placeholders (? / $n), the
// migration lock (SQLite: BEGIN IMMEDIATE; PostgreSQL: an advisory lock) and
// which errors are serialization conflicts.
//
// Tables:
//
//	counters(name, value)      'revision', 'seq', 'audit_seq': the global counters
//	objects(kind, name, parent, org, uid UNIQUE, data, etag, seq UNIQUE,
//	        revision, create_time, update_time)   PRIMARY KEY (kind, name);
//	        indexes (kind, seq), (kind, parent, seq), (kind, org, seq)
//	changes(revision PK, kind, name, deleted, and the object's columns)
//	        the change log, one row per write; index (kind, revision)
//	request_ids(kind, request_id, name, uid, create_time)  PRIMARY KEY (kind, request_id)
//	audit(seq PK, time, org, principal, method, resource, request_id, outcome, detail)
//	        index (org, seq)
//	usage_heads(idem_key PK, org, cluster, region, meter, hour, total, revision, update_time)
//	        the newest total of each usage key (store.UsageStore)
//	usage_entries(seq PK, idem_key, entry, org, cluster, region, meter, hour, quantity, period,
//	        revision, update_time)   UNIQUE (idem_key, entry); indexes (org, seq), (org, period)
//	        entry 0 is the hour's usage, updated in place; an adjustment is a new
//	        row with entry = the record's revision; seq comes from counters 'usage_seq'
//
// Times are BIGINT microseconds since the Unix epoch, UTC, in both
// dialects, and come back as UTC time.Time values with microsecond
// precision. Every Create, Update and Delete increments the revision
// counter in its own transaction and appends one changes row, so the
// change log is gap-free and in commit order; Create also takes the next
// seq. An object's etag is its revision, quoted ("17"); callers treat it
// as opaque. The change log, request ids and audit rows are kept forever
// (no compaction yet).
//
// Page tokens are base64url of the last returned seq and a hash of the
// query (kind, parent, org; or the audit org), so lists are keyset walks
// (seq > last ORDER BY seq) that survive concurrent writes and restarts. A
// page size of 0 means 50, more than 1000 means 1000, negative is
// store.ErrInvalidArgument. Changes: a limit of 0 or less means 1000, more
// than 10000 means 10000.
//
// # Concurrency
//
// A *Store is safe for concurrent use. Transactions are serializable:
// SQLite runs them one at a time through a single write connection with
// BEGIN IMMEDIATE (WAL mode, so reads outside transactions use a separate
// pool of read-only connections and do not wait for the writer; an
// in-memory database has one connection for everything). PostgreSQL runs
// them at SERIALIZABLE isolation. Tx retries fn on serialization conflicts
// (SQLSTATE 40001 and 40P01; SQLITE_BUSY) with a short randomized backoff,
// a bounded number of times, so fn must have no effects outside the Writer.
// Inside fn, use only the Writer: calling the Store itself from fn can
// deadlock on SQLite. The Writer is invalid once fn returns. The Store
// starts no goroutines.
package sqlstore
