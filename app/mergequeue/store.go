package mergequeue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/baton-dev/baton/internal/sqlite"
)

// Bounds of the logs kept per repository.
const (
	MaxEventLog = 100
	MaxAuditLog = 200
)

// Entry statuses.
const (
	StatusQueued     = "queued"      // joined (or re-evaluated); the gate has not been read yet
	StatusEvaluating = "evaluating"  // required checks are still running on the head
	StatusGatePassed = "gate_passed" // every required check passed on the head: it merges when it is first
	StatusBounced    = "bounced"     // removed for a failed gate or merge (or dequeued); cleared when its label is gone
)

// Gate results.
const (
	GatePending = "pending"
	GateSuccess = "success"
	GateFailure = "failure"
)

// Audit actions.
const (
	AuditJoin        = "join"
	AuditLeave       = "leave"
	AuditReevaluate  = "reevaluate"
	AuditGateSuccess = "gate_success"
	AuditGateFailure = "gate_failure"
	AuditMerge       = "merge"
	AuditBounce      = "bounce"
)

// entry is one row of mergequeue_entries, as a run changes it.
type entry struct {
	seq              int64 // 0 until saved
	pr               int
	sha              string
	base             string
	status           string
	queuedAt         time.Time
	reevaluatedAt    time.Time
	gateResult       string
	gateDetail       string
	gateResultAt     time.Time
	mergeOperationID string
	bounceReason     string
	postedSHA        string
	postedStatus     string

	dirty bool
}

// repoState is a repository's row and queue, as a run loaded it.
type repoState struct {
	id       int64 // 0: no row yet
	inst     int64
	fullName string
	entries  []*entry // in queue order; bounced ones included
}

// commandRow is a comment command acted on (mergequeue_commands).
type commandRow struct {
	pr        int
	commentID int64
}

// lastCommand is the GitHub ID of the newest comment command acted on for
// pull request pr (0: none).
func (r *run) lastCommand(pr int) (int64, error) {
	if r.st.id == 0 {
		return 0, nil
	}
	var id int64
	err := r.q.cfg.DB.QueryRow(r.ctx, `SELECT comment_id FROM mergequeue_commands WHERE repo_id = ? AND pr_number = ?`, r.st.id, pr).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("mergequeue: read the last command of #%d: %w", pr, err)
	}
	return id, nil
}

type logRow struct {
	at         time.Time
	event      string
	action     string
	pr         int
	deliveryID string
	details    string
}

type auditRow struct {
	at     time.Time
	action string
	pr     int
	sha    string
	detail string
}

func micros(t time.Time) int64 { return t.UnixMicro() }

func nullMicros(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixMicro()
}

func fromMicros(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return time.UnixMicro(v.Int64).UTC()
}

// loadRepo reads a repository's row and queue. A repository without a row
// has id 0 and no entries.
func loadRepo(ctx context.Context, db *sqlite.DB, key string) (repoState, error) {
	st, _, err := loadRepoRow(ctx, db, key)
	if err != nil || st.id == 0 {
		return st, err
	}
	return st, loadEntries(ctx, db, &st)
}

// loadRepoRow reads a repository's row: id 0 if it has none.
func loadRepoRow(ctx context.Context, db *sqlite.DB, key string) (repoState, time.Time, error) {
	var st repoState
	var reconciled sql.NullInt64
	err := db.QueryRow(ctx, `SELECT id, installation_id, full_name, reconciled_at FROM mergequeue_repos WHERE name_key = ?`, key).
		Scan(&st.id, &st.inst, &st.fullName, &reconciled)
	if errors.Is(err, sql.ErrNoRows) {
		return st, time.Time{}, nil
	}
	if err != nil {
		return st, time.Time{}, fmt.Errorf("mergequeue: read repository: %w", err)
	}
	return st, fromMicros(reconciled), nil
}

// loadEntries reads the queue of the repository st names.
func loadEntries(ctx context.Context, db *sqlite.DB, st *repoState) error {
	rows, err := db.Query(ctx, `SELECT seq, pr_number, pr_sha, base_ref, status, queued_at, reevaluated_at,
		gate_result, gate_detail, gate_result_at, merge_operation_id, bounce_reason, posted_sha, posted_status
		FROM mergequeue_entries WHERE repo_id = ? ORDER BY seq`, st.id)
	if err != nil {
		return fmt.Errorf("mergequeue: read queue: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		e := &entry{}
		var queued int64
		var reeval, gateAt sql.NullInt64
		if err := rows.Scan(&e.seq, &e.pr, &e.sha, &e.base, &e.status, &queued, &reeval,
			&e.gateResult, &e.gateDetail, &gateAt, &e.mergeOperationID, &e.bounceReason, &e.postedSHA, &e.postedStatus); err != nil {
			return fmt.Errorf("mergequeue: read queue: %w", err)
		}
		e.queuedAt = time.UnixMicro(queued).UTC()
		e.reevaluatedAt, e.gateResultAt = fromMicros(reeval), fromMicros(gateAt)
		st.entries = append(st.entries, e)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("mergequeue: read queue: %w", err)
	}
	return nil
}

// change is what one run writes, in one transaction.
type change struct {
	key        string
	fullName   string
	inst       int64
	now        time.Time
	reconciled bool
	deleted    []int64  // seqs
	entries    []*entry // the queue after the run; dirty or unsaved ones are written
	events     []logRow
	audits     []auditRow
	commands   []commandRow

	repoID int64 // the repository row's id, once saved
}

// save writes c in tx. It runs on the database's writer, behind the
// repository lease's fence: SQL only.
func (c *change) save(tx *sqlite.Tx) error {
	var repoID int64
	if err := tx.QueryRow(`INSERT INTO mergequeue_repos (name_key, full_name, installation_id, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (name_key) DO UPDATE SET full_name = excluded.full_name,
			installation_id = excluded.installation_id, updated_at = excluded.updated_at
		RETURNING id`, c.key, c.fullName, c.inst, micros(c.now), micros(c.now)).Scan(&repoID); err != nil {
		return fmt.Errorf("mergequeue: save repository: %w", err)
	}
	c.repoID = repoID
	if c.reconciled {
		if _, err := tx.Exec(`UPDATE mergequeue_repos SET reconciled_at = ? WHERE id = ?`, micros(c.now), repoID); err != nil {
			return fmt.Errorf("mergequeue: save repository: %w", err)
		}
	}
	for _, seq := range c.deleted {
		if _, err := tx.Exec(`DELETE FROM mergequeue_entries WHERE seq = ? AND repo_id = ?`, seq, repoID); err != nil {
			return fmt.Errorf("mergequeue: delete entry: %w", err)
		}
	}
	for _, e := range c.entries {
		switch {
		case e.seq == 0:
			if err := tx.QueryRow(`INSERT INTO mergequeue_entries (repo_id, pr_number, pr_sha, base_ref, status, queued_at,
				reevaluated_at, gate_result, gate_detail, gate_result_at, merge_operation_id, bounce_reason, posted_sha, posted_status)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING seq`,
				repoID, e.pr, e.sha, e.base, e.status, micros(e.queuedAt), nullMicros(e.reevaluatedAt),
				e.gateResult, e.gateDetail, nullMicros(e.gateResultAt), e.mergeOperationID, e.bounceReason,
				e.postedSHA, e.postedStatus).Scan(&e.seq); err != nil {
				return fmt.Errorf("mergequeue: insert entry: %w", err)
			}
		case e.dirty:
			if _, err := tx.Exec(`UPDATE mergequeue_entries SET pr_sha = ?, base_ref = ?, status = ?, reevaluated_at = ?,
				gate_result = ?, gate_detail = ?, gate_result_at = ?, merge_operation_id = ?, bounce_reason = ?,
				posted_sha = ?, posted_status = ? WHERE seq = ? AND repo_id = ?`,
				e.sha, e.base, e.status, nullMicros(e.reevaluatedAt), e.gateResult, e.gateDetail, nullMicros(e.gateResultAt),
				e.mergeOperationID, e.bounceReason, e.postedSHA, e.postedStatus, e.seq, repoID); err != nil {
				return fmt.Errorf("mergequeue: update entry: %w", err)
			}
		}
	}
	for _, ev := range c.events {
		if _, err := tx.Exec(`INSERT INTO mergequeue_events (repo_id, at, event, action, pr_number, delivery_id, details)
			VALUES (?, ?, ?, ?, ?, ?, ?)`, repoID, micros(ev.at), ev.event, ev.action, ev.pr, ev.deliveryID, ev.details); err != nil {
			return fmt.Errorf("mergequeue: append event: %w", err)
		}
	}
	for _, cm := range c.commands {
		if _, err := tx.Exec(`INSERT INTO mergequeue_commands (repo_id, pr_number, comment_id, at) VALUES (?, ?, ?, ?)
			ON CONFLICT (repo_id, pr_number) DO UPDATE SET comment_id = max(comment_id, excluded.comment_id), at = excluded.at`,
			repoID, cm.pr, cm.commentID, micros(c.now)); err != nil {
			return fmt.Errorf("mergequeue: save command: %w", err)
		}
	}
	for _, a := range c.audits {
		if _, err := tx.Exec(`INSERT INTO mergequeue_audit (repo_id, at, action, pr_number, sha, detail)
			VALUES (?, ?, ?, ?, ?, ?)`, repoID, micros(a.at), a.action, a.pr, a.sha, a.detail); err != nil {
			return fmt.Errorf("mergequeue: append audit: %w", err)
		}
	}
	// Keep the newest MaxEventLog and MaxAuditLog rows: everything older
	// than the N-th newest goes, in the transaction that appended.
	if len(c.events) > 0 {
		if _, err := tx.Exec(`DELETE FROM mergequeue_events WHERE repo_id = ?1 AND seq < (
			SELECT seq FROM mergequeue_events WHERE repo_id = ?1 ORDER BY seq DESC LIMIT 1 OFFSET ?2)`,
			repoID, MaxEventLog-1); err != nil {
			return fmt.Errorf("mergequeue: trim events: %w", err)
		}
	}
	if len(c.audits) > 0 {
		if _, err := tx.Exec(`DELETE FROM mergequeue_audit WHERE repo_id = ?1 AND seq < (
			SELECT seq FROM mergequeue_audit WHERE repo_id = ?1 ORDER BY seq DESC LIMIT 1 OFFSET ?2)`,
			repoID, MaxAuditLog-1); err != nil {
			return fmt.Errorf("mergequeue: trim audit: %w", err)
		}
	}
	return nil
}

// knownRepos lists the repositories the queue has state for: every
// repository with entries has a row, so ReconcileAll visits every queue
// with a pending gate, and a gate that times out bounces with no event.
func knownRepos(ctx context.Context, db *sqlite.DB) ([]Repository, error) {
	rows, err := db.Query(ctx, `SELECT installation_id, full_name FROM mergequeue_repos ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("mergequeue: list repositories: %w", err)
	}
	defer rows.Close()
	var out []Repository
	for rows.Next() {
		var r Repository
		if err := rows.Scan(&r.InstallationID, &r.FullName); err != nil {
			return nil, fmt.Errorf("mergequeue: list repositories: %w", err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// lastAudit returns the newest audit row of pull request pr in the
// repository of id repoID; false if it has none (or no row is left).
func lastAudit(ctx context.Context, db *sqlite.DB, repoID int64, pr int) (auditRow, bool, error) {
	var a auditRow
	var at int64
	err := db.QueryRow(ctx, `SELECT at, action, pr_number, sha, detail FROM mergequeue_audit
		WHERE repo_id = ? AND pr_number = ? ORDER BY seq DESC LIMIT 1`, repoID, pr).Scan(&at, &a.action, &a.pr, &a.sha, &a.detail)
	if errors.Is(err, sql.ErrNoRows) {
		return a, false, nil
	}
	if err != nil {
		return a, false, fmt.Errorf("mergequeue: read audit log: %w", err)
	}
	a.at = time.UnixMicro(at).UTC()
	return a, true, nil
}
