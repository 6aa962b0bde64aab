package mergequeue

import (
	"context"
	"fmt"
	"time"
)

// State is a repository's queue as the API shows it.
type State struct {
	Repository string `json:"repository"`
	// InstallationID is 0 when the queue has no state for the repository
	// (it never saw an event there): the queue is empty.
	InstallationID int64 `json:"installationId"`
	// ReconciledAt is when the last reconcile ran, if one did.
	ReconciledAt *time.Time `json:"reconciledAt,omitempty"`
	Entries      []Entry    `json:"entries"`
}

// Entry is one pull request in a queue.
type Entry struct {
	// Position is the place in the queue, from 1 (the next to merge); 0
	// for a bounced entry, which is no longer in line.
	Position      int        `json:"position"`
	PRNumber      int        `json:"prNumber"`
	PRSHA         string     `json:"prSha"`
	BaseRef       string     `json:"baseRef,omitempty"`
	Status        string     `json:"status"`
	QueuedAt      time.Time  `json:"queuedAt"`
	ReevaluatedAt *time.Time `json:"reevaluatedAt,omitempty"`
	// GateResult is pending, success or failure; "" before the gate was
	// read. GateDetail says which checks it waits for or which failed.
	GateResult       string     `json:"gateResult,omitempty"`
	GateDetail       string     `json:"gateDetail,omitempty"`
	GateResultAt     *time.Time `json:"gateResultAt,omitempty"`
	MergeOperationID string     `json:"mergeOperationId,omitempty"`
	BounceReason     string     `json:"bounceReason,omitempty"`
}

// EventRecord is one entry of a repository's event log: an event the
// queue acted on, and what it did.
type EventRecord struct {
	At         time.Time `json:"at"`
	Event      string    `json:"event"`
	Action     string    `json:"action,omitempty"`
	PRNumber   int       `json:"prNumber,omitempty"`
	DeliveryID string    `json:"deliveryId,omitempty"`
	Details    string    `json:"details"`
}

// AuditRecord is one entry of a repository's audit log: a change of its
// queue.
type AuditRecord struct {
	At       time.Time `json:"at"`
	Action   string    `json:"action"`
	PRNumber int       `json:"prNumber"`
	SHA      string    `json:"sha,omitempty"`
	Detail   string    `json:"detail,omitempty"`
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// Entries returns a repository's queue, in order, with positions. A
// repository the queue has no state for has an empty queue.
func (q *Queue) Entries(ctx context.Context, owner, repo string) (State, error) {
	s := State{Repository: owner + "/" + repo, Entries: []Entry{}}
	st, reconciled, err := loadRepoRow(ctx, q.cfg.DB, nameKey(owner, repo))
	if err != nil || st.id == 0 {
		return s, err
	}
	s.Repository, s.InstallationID, s.ReconciledAt = st.fullName, st.inst, timePtr(reconciled)
	if err := loadEntries(ctx, q.cfg.DB, &st); err != nil {
		return s, err
	}
	pos := 0
	for _, e := range st.entries {
		v := Entry{PRNumber: e.pr, PRSHA: e.sha, BaseRef: e.base, Status: e.status, QueuedAt: e.queuedAt,
			ReevaluatedAt: timePtr(e.reevaluatedAt), GateResult: e.gateResult, GateDetail: e.gateDetail,
			GateResultAt: timePtr(e.gateResultAt), MergeOperationID: e.mergeOperationID, BounceReason: e.bounceReason}
		if e.status != StatusBounced {
			pos++
			v.Position = pos
		}
		s.Entries = append(s.Entries, v)
	}
	return s, nil
}

// EventLog returns a repository's event log, oldest first (at most
// MaxEventLog entries).
func (q *Queue) EventLog(ctx context.Context, owner, repo string) ([]EventRecord, error) {
	rows, err := q.cfg.DB.Query(ctx, `SELECT e.at, e.event, e.action, e.pr_number, e.delivery_id, e.details
		FROM mergequeue_events e JOIN mergequeue_repos r ON r.id = e.repo_id
		WHERE r.name_key = ? ORDER BY e.seq`, nameKey(owner, repo))
	if err != nil {
		return nil, fmt.Errorf("mergequeue: read event log: %w", err)
	}
	defer rows.Close()
	out := []EventRecord{}
	for rows.Next() {
		var e EventRecord
		var at int64
		if err := rows.Scan(&at, &e.Event, &e.Action, &e.PRNumber, &e.DeliveryID, &e.Details); err != nil {
			return nil, fmt.Errorf("mergequeue: read event log: %w", err)
		}
		e.At = time.UnixMicro(at).UTC()
		out = append(out, e)
	}
	return out, rows.Err()
}

// AuditLog returns a repository's audit log, oldest first (at most
// MaxAuditLog entries).
func (q *Queue) AuditLog(ctx context.Context, owner, repo string) ([]AuditRecord, error) {
	rows, err := q.cfg.DB.Query(ctx, `SELECT a.at, a.action, a.pr_number, a.sha, a.detail
		FROM mergequeue_audit a JOIN mergequeue_repos r ON r.id = a.repo_id
		WHERE r.name_key = ? ORDER BY a.seq`, nameKey(owner, repo))
	if err != nil {
		return nil, fmt.Errorf("mergequeue: read audit log: %w", err)
	}
	defer rows.Close()
	out := []AuditRecord{}
	for rows.Next() {
		var a AuditRecord
		var at int64
		if err := rows.Scan(&at, &a.Action, &a.PRNumber, &a.SHA, &a.Detail); err != nil {
			return nil, fmt.Errorf("mergequeue: read audit log: %w", err)
		}
		a.At = time.UnixMicro(at).UTC()
		out = append(out, a)
	}
	return out, rows.Err()
}

// installationOf says which installation a repository's queue belongs to:
// Config.Installations', which knows the installation that has it now
// (the state's may be one GitHub no longer knows: the App installed
// again, the repository transferred), and its refusal (forbidden: not
// installed, suspended) when it has none; without Config.Installations,
// the state's.
func (q *Queue) installationOf(ctx context.Context, owner, repo string) (int64, error) {
	if q.cfg.Installations != nil {
		return q.cfg.Installations.InstallationOf(ctx, owner, repo)
	}
	st, _, err := loadRepoRow(ctx, q.cfg.DB, nameKey(owner, repo))
	if err != nil {
		return 0, err
	}
	return st.inst, nil
}
