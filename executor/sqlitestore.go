package executor

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/baton-dev/baton/internal/sqlite"
	"github.com/baton-dev/baton/schema"
)

// SQLiteStore keeps operation records in baton's SQLite database. Writes go
// through the database's group-commit writer, so a Create that returned has
// been fsynced (with the default synchronous=FULL), and concurrent callers
// share one transaction and one fsync.
type SQLiteStore struct {
	db  *sqlite.DB
	now func() time.Time
	// pruned counts the prunes that deleted records on db (see
	// pruneEpoch).
	pruned *atomic.Uint64
}

var _ Store = (*SQLiteStore)(nil)

// NewSQLiteStore returns a store on db. now supplies the time of updates
// made by the store itself (a cancellation); nil means time.Now.
func NewSQLiteStore(db *sqlite.DB, now func() time.Time) *SQLiteStore {
	if now == nil {
		now = time.Now
	}
	return &SQLiteStore{db: db, now: now, pruned: pruneEpochOf(db)}
}

// pruneEpoch implements prunable: it moves before a prune that deletes
// records commits, so that the executor forgets the terminal operations it
// remembers (finishedSet) before the store can create a new operation
// with one of their IDs.
func (s *SQLiteStore) pruneEpoch() uint64 { return s.pruned.Load() }

// Create implements Store.
func (s *SQLiteStore) Create(ctx context.Context, rec *schema.Record) (schema.Record, bool, error) {
	if err := rec.Validate(); err != nil {
		return schema.Record{}, false, err
	}
	body, err := encodeRecord(rec)
	if err != nil {
		return schema.Record{}, false, fmt.Errorf("executor: encode record: %w", err)
	}
	var (
		stored  schema.Record
		created bool
	)
	err = s.db.Write(ctx, func(tx *sqlite.Tx) error {
		res, err := tx.Exec(`INSERT INTO operations
			(operation_id, idempotency_hash, actor, action, resource_type, resource_id, installation_id,
			 status, cancellation_requested, created_at, updated_at, dispatched_at, body)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (operation_id) DO NOTHING`,
			rec.OperationID, rec.IdempotencyHash, rec.Actor, rec.Action, rec.Resource.Type, rec.Resource.ID,
			rec.InstallationID, string(rec.Status), rec.CancellationRequested, rec.CreatedAt.UnixMicro(),
			rec.UpdatedAt.UnixMicro(), microsOrNil(rec.DispatchedAt), body)
		if err != nil {
			return fmt.Errorf("executor: insert operation: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			created = true
			stored = rec.Clone()
			stored.Version = 1
			return nil
		}
		existing, err := scanRecord(tx.QueryRow(selectRecord+` WHERE operation_id = ?`, rec.OperationID))
		if err != nil {
			return err
		}
		if existing.IdempotencyHash != rec.IdempotencyHash {
			return schema.ConflictError(existing.OperationID)
		}
		stored = existing
		return nil
	})
	if err != nil {
		return schema.Record{}, false, err
	}
	return stored, created, nil
}

// Get implements Store.
func (s *SQLiteStore) Get(ctx context.Context, operationID string) (schema.Record, error) {
	return scanRecord(s.db.QueryRow(ctx, selectRecord+` WHERE operation_id = ?`, operationID))
}

// Save implements Store.
func (s *SQLiteStore) Save(ctx context.Context, rec *schema.Record) error {
	return s.SaveGuarded(ctx, rec, nil)
}

// SaveGuarded is Save with a guard run first in the same transaction: if
// the guard returns an error nothing is written and that error is
// returned. The executor passes the lease coordinator's ownership check,
// so that a worker that lost its lease cannot write.
func (s *SQLiteStore) SaveGuarded(ctx context.Context, rec *schema.Record, guard func(*sqlite.Tx) error) error {
	save, err := s.SaveFunc(rec, false)
	if err != nil {
		return err
	}
	return s.db.Write(ctx, func(tx *sqlite.Tx) error {
		if guard != nil {
			if err := guard(tx); err != nil {
				return err
			}
		}
		return save(tx)
	})
}

// ErrStale is returned by a compare-and-swap save when the stored record
// changed since the caller read it.
var ErrStale = errors.New("executor: record changed since it was read")

// SaveFunc validates and encodes rec now, and returns the function that
// writes it inside a transaction of baton's database — the coordinator's,
// so that the save shares the lease's transaction (fenced writes, or the
// save that marks an operation running together with its lease). The
// work left for the writer is only SQL.
//
// The write follows Save's rules, and refuses (ErrIdentityChanged) a record
// whose identity is not the stored one: operationId, idempotencyHash, the
// fields they are computed from, and createdAt (compared at the stored
// microsecond precision) never change after Create. With cas, it also
// requires the stored record to be the version rec was read at (ErrStale
// otherwise). After a successful write rec.Version is the new version, and
// a cancellation requested meanwhile is reflected in
// rec.CancellationRequested.
func (s *SQLiteStore) SaveFunc(rec *schema.Record, cas bool) (func(*sqlite.Tx) error, error) {
	if err := rec.Validate(); err != nil {
		return nil, err
	}
	// What identifies the operation never changes: checkIdentity shows
	// that rec's identity fields are those its two hashes were computed
	// from, and the UPDATE below requires the hashes, the identity columns
	// and createdAt to be the stored ones. The check runs here, in the
	// caller's goroutine, not on the single writer; on a record read back
	// from the store it hashes the stored canonical payload as is, a few
	// microseconds beside a durable save of a few hundred (see
	// BenchmarkCheckIdentity), and only canonicalises a payload that is
	// not byte for byte canonical. Comparing the payload in SQL instead
	// would parse the stored body on the writer, which is the bottleneck.
	if err := checkIdentity(rec); err != nil {
		return nil, err
	}
	body, err := encodeRecord(rec)
	if err != nil {
		return nil, fmt.Errorf("executor: encode record: %w", err)
	}
	from := saveSources[rec.Status]
	if len(from) != 3 {
		return nil, fmt.Errorf("executor: status table allows more than 3 sources of %s", rec.Status)
	}
	return func(tx *sqlite.Tx) error {
		// One statement does the work when the save is allowed; only a
		// refused save reads the record to say why. The body's copy of
		// cancellationRequested may be behind the column's (a cancellation
		// arrived meanwhile): reads merge the two, so it need not be
		// rewritten here.
		var (
			cancelled bool
			version   int64
		)
		// The identity columns and createdAt (at its stored microsecond
		// precision) in the WHERE clause, with checkIdentity done before,
		// keep the body's identity equal to the stored one.
		args := []any{string(rec.Status), rec.CancellationRequested, rec.UpdatedAt.UnixMicro(), rec.InstallationID, body,
			rec.OperationID, rec.IdempotencyHash, rec.Actor, rec.Action, rec.Resource.Type, rec.Resource.ID,
			rec.CreatedAt.UnixMicro(), from[0], from[1], from[2], cas, rec.Version}
		err := tx.QueryRow(`UPDATE operations SET status = ?, cancellation_requested = (cancellation_requested OR ?),
			updated_at = ?, installation_id = ?, body = ?, version = version + 1
			WHERE operation_id = ? AND idempotency_hash = ? AND actor = ? AND action = ?
			  AND resource_type = ? AND resource_id = ? AND created_at = ?
			  AND status IN (?, ?, ?) AND (NOT ? OR version = ?)
			RETURNING cancellation_requested, version`, args...).Scan(&cancelled, &version)
		if err == nil {
			// The caller waits for the commit, which orders these writes
			// before it reads rec again.
			rec.Version = version
			rec.CancellationRequested = rec.CancellationRequested || cancelled
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("executor: update operation: %w", err)
		}
		return s.refused(tx, rec, cas)
	}, nil
}

// saveSources are, for each status, the statuses a save may move a record
// from to it (schema.CanTransition), padded with "" to the three the
// UPDATE of SaveFunc takes: worked out once, not on every save.
var saveSources = func() map[schema.Status][]any {
	m := make(map[schema.Status][]any, len(schema.Statuses))
	for _, to := range schema.Statuses {
		var from []any
		for _, st := range schema.Statuses {
			if schema.CanTransition(st, to) {
				from = append(from, string(st))
			}
		}
		for len(from) < 3 {
			from = append(from, "")
		}
		m[to] = from
	}
	return m
}()

// refused explains why a save changed nothing.
func (s *SQLiteStore) refused(tx *sqlite.Tx, rec *schema.Record, cas bool) error {
	var (
		status, hash, actor, action, resType, resID string
		createdAt, version                          int64
	)
	err := tx.QueryRow(`SELECT status, idempotency_hash, actor, action, resource_type, resource_id, created_at, version
		FROM operations WHERE operation_id = ?`, rec.OperationID).
		Scan(&status, &hash, &actor, &action, &resType, &resID, &createdAt, &version)
	if errors.Is(err, sql.ErrNoRows) {
		return schema.Errorf(schema.CodeNotFound, "operation %s not found", rec.OperationID)
	}
	if err != nil {
		return fmt.Errorf("executor: read operation: %w", err)
	}
	from := schema.Status(status)
	switch {
	case hash != rec.IdempotencyHash || actor != rec.Actor || action != rec.Action ||
		resType != rec.Resource.Type || resID != rec.Resource.ID:
		return fmt.Errorf("%w: save of %s changes what the operation asks for", ErrIdentityChanged, rec.OperationID)
	case createdAt != rec.CreatedAt.UnixMicro():
		return fmt.Errorf("%w: save of %s changes its creation time", ErrIdentityChanged, rec.OperationID)
	case from.Terminal():
		return &schema.Error{Code: schema.CodeAlreadyTerminal, Message: fmt.Sprintf("operation %s is already %s", rec.OperationID, from)}
	case cas && version != rec.Version:
		return ErrStale
	}
	return fmt.Errorf("executor: operation %s cannot move from %s to %s", rec.OperationID, from, rec.Status)
}

// NextPending returns the oldest unfinished operation on the resource.
func (s *SQLiteStore) NextPending(ctx context.Context, res schema.Resource) (string, bool, error) {
	var id string
	err := s.db.QueryRow(ctx, `SELECT operation_id FROM operations INDEXED BY operations_pending_resource
		WHERE resource_type = ? AND resource_id = ? AND status IN ('queued', 'running')
		ORDER BY seq LIMIT 1`, res.Type, res.ID).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("executor: next operation on the resource: %w", err)
	}
	return id, true, nil
}

// nextPendingRecord is NextPending returning the operation's record too,
// read in the same query (see pendingReader).
func (s *SQLiteStore) nextPendingRecord(ctx context.Context, res schema.Resource) (schema.Record, bool, error) {
	rec, err := scanRecord(s.db.QueryRow(ctx, selectRecord+` INDEXED BY operations_pending_resource
		WHERE resource_type = ? AND resource_id = ? AND status IN ('queued', 'running')
		ORDER BY seq LIMIT 1`, res.Type, res.ID))
	if errors.Is(err, schema.ErrNotFound) {
		return schema.Record{}, false, nil
	}
	if err != nil {
		return schema.Record{}, false, fmt.Errorf("executor: next operation on the resource: %w", err)
	}
	return rec, true, nil
}

// OlderPending reports whether the resource of rec has an operation created
// before rec that is not finished: the executor runs a resource's
// operations in the order they were created.
func (s *SQLiteStore) OlderPending(ctx context.Context, rec *schema.Record) (bool, error) {
	var one int
	err := s.db.QueryRow(ctx, `SELECT 1 FROM operations
		WHERE resource_type = ? AND resource_id = ? AND status IN ('queued', 'running')
		  AND seq < (SELECT seq FROM operations WHERE operation_id = ?)
		LIMIT 1`, rec.Resource.Type, rec.Resource.ID, rec.OperationID).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("executor: look for older operations: %w", err)
	}
	return true, nil
}

// RequestCancel implements Store.
func (s *SQLiteStore) RequestCancel(ctx context.Context, operationID string) (schema.Record, error) {
	var out schema.Record
	err := s.db.Write(ctx, func(tx *sqlite.Tx) error {
		rec, err := scanRecord(tx.QueryRow(selectRecord+` WHERE operation_id = ?`, operationID))
		if err != nil {
			return err
		}
		if rec.Status.Terminal() {
			out = rec
			return &schema.Error{
				Code:    schema.CodeAlreadyTerminal,
				Message: fmt.Sprintf("operation %s is already %s", operationID, rec.Status),
				Details: map[string]any{"operationId": operationID, "status": string(rec.Status)},
			}
		}
		now := s.now().UTC()
		rec.CancellationRequested = true
		rec.UpdatedAt = now
		rec.Version++
		if rec.Status == schema.StatusQueued {
			rec.Status = schema.StatusCancelled
			rec.Outcome = schema.OutcomeCancelled
			rec.CompletedAt = &now
			rec.NextAttemptAt = nil
		}
		body, err := encodeRecord(&rec)
		if err != nil {
			return fmt.Errorf("executor: encode record: %w", err)
		}
		if _, err := tx.Exec(`UPDATE operations SET status = ?, cancellation_requested = 1, updated_at = ?, body = ?,
			version = version + 1 WHERE operation_id = ?`, string(rec.Status), now.UnixMicro(), body, operationID); err != nil {
			return fmt.Errorf("executor: update operation: %w", err)
		}
		out = rec
		return nil
	})
	return out, err
}

// List implements Store.
func (s *SQLiteStore) List(ctx context.Context, f ListFilter) ([]schema.Record, string, error) {
	limit := f.Limit
	if limit == 0 {
		limit = 50
	}
	if limit < 0 || limit > 500 {
		return nil, "", schema.Invalidf("limit must be between 1 and 500")
	}
	var (
		where []string
		args  []any
	)
	if f.Status != "" {
		if !f.Status.Valid() {
			return nil, "", schema.Invalidf("status %q is not a known status", f.Status)
		}
		where, args = append(where, "status = ?"), append(args, string(f.Status))
	}
	if f.Action != "" {
		where, args = append(where, "action = ?"), append(args, f.Action)
	}
	if f.ResourceType != "" {
		where, args = append(where, "resource_type = ?"), append(args, f.ResourceType)
	}
	if f.ResourceID != "" {
		where, args = append(where, "resource_id = ?"), append(args, f.ResourceID)
	}
	if f.Actor != "" {
		where, args = append(where, "actor = ?"), append(args, f.Actor)
	}
	if f.Installations != nil {
		in := strings.TrimSuffix(strings.Repeat("?,", len(f.Installations)), ",")
		where = append(where, "installation_id IN ("+in+")")
		for _, id := range f.Installations {
			args = append(args, id)
		}
	}
	if f.Cursor != "" {
		seq, err := decodeCursor(f.Cursor)
		if err != nil {
			return nil, "", err
		}
		where, args = append(where, "seq < ?"), append(args, seq)
	}
	q := `SELECT seq, body, cancellation_requested, dispatched_at, version FROM operations`
	if f.Status == schema.StatusQueued || f.Status == schema.StatusRunning {
		// Through the partial index of unfinished operations.
		q += ` INDEXED BY operations_pending_resource`
		where = append(where, "status IN ('queued', 'running')")
	}
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY seq DESC LIMIT ?"
	args = append(args, limit+1)
	rows, err := s.db.Query(ctx, q, args...)
	if err != nil {
		return nil, "", fmt.Errorf("executor: list operations: %w", err)
	}
	defer rows.Close()
	var (
		out  []schema.Record
		seqs []int64
	)
	for rows.Next() {
		var (
			seq        int64
			body       []byte
			cancelled  bool
			dispatched sql.NullInt64
			version    int64
		)
		if err := rows.Scan(&seq, &body, &cancelled, &dispatched, &version); err != nil {
			return nil, "", fmt.Errorf("executor: list operations: %w", err)
		}
		rec, err := decodeRecord(body, cancelled, dispatched)
		if err != nil {
			return nil, "", err
		}
		rec.Version = version
		out, seqs = append(out, rec), append(seqs, seq)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("executor: list operations: %w", err)
	}
	next := ""
	if len(out) > limit {
		out = out[:limit]
		next = encodeCursor(seqs[limit-1])
	}
	return out, next, nil
}

// MarkDispatched implements Store.
func (s *SQLiteStore) MarkDispatched(ctx context.Context, ids []string, at time.Time) error {
	if len(ids) == 0 {
		return nil
	}
	return s.db.Write(ctx, func(tx *sqlite.Tx) error {
		for _, id := range ids {
			if _, err := tx.Exec(`UPDATE operations SET dispatched_at = ? WHERE operation_id = ?`, at.UnixMicro(), id); err != nil {
				return fmt.Errorf("executor: mark dispatched: %w", err)
			}
		}
		return nil
	})
}

// Undispatched implements Store.
func (s *SQLiteStore) Undispatched(ctx context.Context, before time.Time, limit int) ([]string, error) {
	// The unfinished operations are few beside the finished ones: read them
	// through their partial index, not by scanning the table in seq order.
	rows, err := s.db.Query(ctx, `SELECT operation_id FROM operations INDEXED BY operations_pending_resource
		WHERE status IN ('queued', 'running')
		  AND ((dispatched_at IS NULL AND created_at < ?) OR dispatched_at < ?)
		ORDER BY seq LIMIT ?`, before.UnixMicro(), before.UnixMicro(), limit)
	if err != nil {
		return nil, fmt.Errorf("executor: list undispatched: %w", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("executor: list undispatched: %w", err)
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// encodeRecord returns the stored body of rec. Unlike json.Marshal it does
// not escape <, > and & (nor U+2028, U+2029) inside the payload, which then
// stays byte for byte the canonical form it was created in: a record read
// back can be checked against its idempotencyHash without canonicalising
// its payload again (see hashAsIs).
func encodeRecord(rec *schema.Record) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(rec); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

const selectRecord = `SELECT body, cancellation_requested, dispatched_at, version FROM operations`

func scanRecord(row *sql.Row) (schema.Record, error) {
	var (
		body       []byte
		cancelled  bool
		dispatched sql.NullInt64
		version    int64
	)
	if err := row.Scan(&body, &cancelled, &dispatched, &version); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return schema.Record{}, schema.Errorf(schema.CodeNotFound, "operation not found")
		}
		return schema.Record{}, fmt.Errorf("executor: read operation: %w", err)
	}
	rec, err := decodeRecord(body, cancelled, dispatched)
	rec.Version = version
	return rec, err
}

func decodeRecord(body []byte, cancelled bool, dispatched sql.NullInt64) (schema.Record, error) {
	var rec schema.Record
	if err := json.Unmarshal(body, &rec); err != nil {
		return schema.Record{}, fmt.Errorf("executor: decode operation: %w", err)
	}
	rec.CancellationRequested = rec.CancellationRequested || cancelled
	if dispatched.Valid {
		t := time.UnixMicro(dispatched.Int64).UTC()
		rec.DispatchedAt = &t
	}
	return rec, nil
}

func microsOrNil(t *time.Time) any {
	if t == nil {
		return nil
	}
	return t.UnixMicro()
}

// Cursors are opaque to clients: the base64 of the last seq returned.
func encodeCursor(seq int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte("s" + strconv.FormatInt(seq, 10)))
}

func decodeCursor(c string) (int64, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err == nil && len(b) > 1 && b[0] == 's' {
		if seq, err := strconv.ParseInt(string(b[1:]), 10, 64); err == nil && seq > 0 {
			return seq, nil
		}
	}
	return 0, schema.Invalidf("cursor is not one baton returned")
}
