package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/baton-dev/baton/schema"
)

// migrate applies the migrations schema embeds that the database does not
// have yet, each in its own transaction, recording them in
// schema_migrations. Several processes opening the same file at once
// serialize on BEGIN IMMEDIATE; the loser finds the work done. A database
// written by a newer baton (a version this binary does not know) is
// refused rather than used.
func migrate(ctx context.Context, db *sql.DB) error {
	migrations, err := schema.Migrations()
	if err != nil {
		return err
	}
	// In a transaction begun IMMEDIATE, like the migrations: a bare
	// statement would take a read lock first and then fail at once with
	// SQLITE_BUSY (no busy wait, to avoid a deadlock) when another process
	// wrote in between.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite: begin creating schema_migrations: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		name       TEXT    NOT NULL,
		applied_at INTEGER NOT NULL
	)`); err != nil {
		_ = tx.Rollback()
		return fmt.Errorf("sqlite: create schema_migrations: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlite: create schema_migrations: %w", err)
	}
	for _, m := range migrations {
		if err := apply(ctx, db, m); err != nil {
			return err
		}
	}
	var newest int
	if err := db.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&newest); err != nil {
		return fmt.Errorf("sqlite: read schema version: %w", err)
	}
	if newest > len(migrations) {
		return fmt.Errorf("sqlite: database schema version %d is newer than this baton knows (%d); run a newer baton", newest, len(migrations))
	}
	return nil
}

func apply(ctx context.Context, db *sql.DB, m schema.Migration) error {
	tx, err := db.BeginTx(ctx, nil) // BEGIN IMMEDIATE (see dsn)
	if err != nil {
		return fmt.Errorf("sqlite: begin migration %s: %w", m.Name, err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations WHERE version = ?`, m.Version).Scan(&n); err != nil {
		return fmt.Errorf("sqlite: read migration %s: %w", m.Name, err)
	}
	if n > 0 {
		return nil
	}
	if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
		return fmt.Errorf("sqlite: apply migration %s: %w", m.Name, err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
		m.Version, m.Name, time.Now().UnixMicro()); err != nil {
		return fmt.Errorf("sqlite: record migration %s: %w", m.Name, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlite: commit migration %s: %w", m.Name, err)
	}
	return nil
}
