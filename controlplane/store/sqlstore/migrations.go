package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// migration is one step of the schema. Steps are applied in order, each
// exactly once, and recorded in schema_migrations. A released step is never
// edited: changes go into a new step appended to migrations.
type migration struct {
	version int64
	name    string
	stmts   []string // dialect-neutral DDL; {{blob}} is the binary type
}

// migrations is the whole schema. Times are BIGINT microseconds since the
// Unix epoch (UTC) so both dialects store and return identical values.
var migrations = []migration{
	{
		version: 1,
		name:    "initial",
		stmts: []string{
			`CREATE TABLE counters (
				name  TEXT PRIMARY KEY,
				value BIGINT NOT NULL
			)`,
			`INSERT INTO counters (name, value) VALUES ('revision', 0), ('seq', 0), ('audit_seq', 0)`,
			`CREATE TABLE objects (
				kind        TEXT NOT NULL,
				name        TEXT NOT NULL,
				parent      TEXT NOT NULL,
				org         TEXT NOT NULL,
				uid         TEXT NOT NULL UNIQUE,
				data        {{blob}} NOT NULL,
				etag        TEXT NOT NULL,
				seq         BIGINT NOT NULL UNIQUE,
				revision    BIGINT NOT NULL,
				create_time BIGINT NOT NULL,
				update_time BIGINT NOT NULL,
				PRIMARY KEY (kind, name)
			)`,
			`CREATE INDEX objects_kind_seq ON objects (kind, seq)`,
			`CREATE INDEX objects_kind_parent_seq ON objects (kind, parent, seq)`,
			`CREATE INDEX objects_kind_org_seq ON objects (kind, org, seq)`,
			`CREATE TABLE changes (
				revision    BIGINT PRIMARY KEY,
				kind        TEXT NOT NULL,
				name        TEXT NOT NULL,
				deleted     INTEGER NOT NULL,
				parent      TEXT NOT NULL,
				org         TEXT NOT NULL,
				uid         TEXT NOT NULL,
				data        {{blob}} NOT NULL,
				etag        TEXT NOT NULL,
				seq         BIGINT NOT NULL,
				create_time BIGINT NOT NULL,
				update_time BIGINT NOT NULL
			)`,
			`CREATE INDEX changes_kind_revision ON changes (kind, revision)`,
			`CREATE TABLE request_ids (
				kind        TEXT NOT NULL,
				request_id  TEXT NOT NULL,
				name        TEXT NOT NULL,
				uid         TEXT NOT NULL,
				create_time BIGINT NOT NULL,
				PRIMARY KEY (kind, request_id)
			)`,
			`CREATE TABLE audit (
				seq        BIGINT PRIMARY KEY,
				time       BIGINT NOT NULL,
				org        TEXT NOT NULL,
				principal  TEXT NOT NULL,
				method     TEXT NOT NULL,
				resource   TEXT NOT NULL,
				request_id TEXT NOT NULL,
				outcome    TEXT NOT NULL,
				detail     {{blob}}
			)`,
			`CREATE INDEX audit_org_seq ON audit (org, seq)`,
		},
	},
	{
		version: 2,
		name:    "usage",
		stmts: []string{
			`INSERT INTO counters (name, value) VALUES ('usage_seq', 0)`,
			// One row per idempotency key: the newest total and revision.
			`CREATE TABLE usage_heads (
				idem_key    TEXT PRIMARY KEY,
				org         TEXT NOT NULL,
				cluster     TEXT NOT NULL,
				region      TEXT NOT NULL,
				meter       TEXT NOT NULL,
				hour        BIGINT NOT NULL,
				total       BIGINT NOT NULL,
				revision    BIGINT NOT NULL,
				update_time BIGINT NOT NULL
			)`,
			// What each billing period bills per key: the usage entry
			// (entry 0) and adjustments (entry = the record's revision).
			`CREATE TABLE usage_entries (
				seq         BIGINT PRIMARY KEY,
				idem_key    TEXT NOT NULL,
				entry       BIGINT NOT NULL,
				org         TEXT NOT NULL,
				cluster     TEXT NOT NULL,
				region      TEXT NOT NULL,
				meter       TEXT NOT NULL,
				hour        BIGINT NOT NULL,
				quantity    BIGINT NOT NULL,
				period      TEXT NOT NULL,
				revision    BIGINT NOT NULL,
				update_time BIGINT NOT NULL,
				UNIQUE (idem_key, entry)
			)`,
			`CREATE INDEX usage_entries_org_seq ON usage_entries (org, seq)`,
			`CREATE INDEX usage_entries_org_period ON usage_entries (org, period)`,
		},
	},
}

// ErrSchemaTooNew is returned by Open when the database has a migration
// applied that this binary does not know: it was written by a newer
// Magnetar, and this one refuses to touch it.
var ErrSchemaTooNew = errors.New("sqlstore: database schema is newer than this binary")

// migrate brings the schema up to date in one transaction. Re-running it on
// an up-to-date database writes nothing.
func migrate(ctx context.Context, db *sql.DB, d *dialect) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlstore: migrate: begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit this is a no-op
	if d.lockMigrations != "" {
		if _, err := tx.ExecContext(ctx, d.lockMigrations); err != nil {
			return fmt.Errorf("sqlstore: migrate: lock: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    BIGINT PRIMARY KEY,
		name       TEXT NOT NULL,
		applied_at BIGINT NOT NULL
	)`); err != nil {
		return fmt.Errorf("sqlstore: migrate: create schema_migrations: %w", err)
	}
	applied := map[int64]string{}
	rows, err := tx.QueryContext(ctx, `SELECT version, name FROM schema_migrations`)
	if err != nil {
		return fmt.Errorf("sqlstore: migrate: read schema_migrations: %w", err)
	}
	for rows.Next() {
		var v int64
		var name string
		if err := rows.Scan(&v, &name); err != nil {
			rows.Close()
			return fmt.Errorf("sqlstore: migrate: read schema_migrations: %w", err)
		}
		applied[v] = name
	}
	if err := rows.Close(); err != nil {
		return fmt.Errorf("sqlstore: migrate: read schema_migrations: %w", err)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("sqlstore: migrate: read schema_migrations: %w", err)
	}
	known := migrations[len(migrations)-1].version
	for v, name := range applied {
		if v > known {
			return fmt.Errorf("%w: it has migration %d (%q), this binary knows up to %d; upgrade Magnetar",
				ErrSchemaTooNew, v, name, known)
		}
	}
	for _, m := range migrations {
		if name, ok := applied[m.version]; ok {
			if name != m.name {
				return fmt.Errorf("sqlstore: migrate: migration %d is recorded as %q, this binary calls it %q",
					m.version, name, m.name)
			}
			continue
		}
		for i, stmt := range m.stmts {
			if _, err := tx.ExecContext(ctx, d.ddl(stmt)); err != nil {
				return fmt.Errorf("sqlstore: migrate: migration %d (%s) statement %d: %w", m.version, m.name, i, err)
			}
		}
		if _, err := tx.ExecContext(ctx, d.rebind(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`),
			m.version, m.name, micros(time.Now())); err != nil {
			return fmt.Errorf("sqlstore: migrate: record migration %d: %w", m.version, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlstore: migrate: commit: %w", err)
	}
	return nil
}
