package app

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/baton-dev/baton/internal/sqlite"
	"github.com/baton-dev/baton/schema"
)

// DeliveryState is where a delivery stands in the ledger.
type DeliveryState string

// Delivery states.
const (
	// DeliveryPending: recorded, not yet handled by every handler.
	DeliveryPending DeliveryState = "pending"
	// DeliveryHandled: every handler handled it.
	DeliveryHandled DeliveryState = "handled"
	// DeliveryFailed: a handler failed for good (Permanent, or too many
	// failures); the delivery is kept, with its payload, for inspection
	// and EventDispatcher.Replay.
	DeliveryFailed DeliveryState = "failed"
)

// Handler outcomes kept per delivery (DeliveryRecord.Outcome).
const (
	outcomeHandled = "handled" // done; not run again
	outcomeRetry   = "retry"   // asked to retry later (not a failure)
	outcomeError   = "error"   // failed; retried with backoff
	outcomeFailed  = "failed"  // failed for good; not run again
)

// DeliveryRecord is a delivery as the ledger keeps it.
type DeliveryRecord struct {
	Seq            int64         `json:"seq"`
	ID             string        `json:"deliveryId"`
	Event          string        `json:"event"`
	Action         string        `json:"action,omitempty"`
	InstallationID int64         `json:"installationId,omitempty"`
	Repository     string        `json:"repository,omitempty"`
	ReceivedAt     time.Time     `json:"receivedAt"`
	State          DeliveryState `json:"state"`
	// Attempts counts the handler runs that failed ("retry after" runs
	// are not failures).
	Attempts      int        `json:"attempts"`
	NextAttemptAt *time.Time `json:"nextAttemptAt,omitempty"`
	LastError     string     `json:"lastError,omitempty"`
	// Outcome is each handler's outcome: handled, retry, error or failed.
	Outcome   map[string]string `json:"outcome"`
	HandledAt *time.Time        `json:"handledAt,omitempty"`
	// Redeliveries counts the copies of this delivery received after the
	// first (answered 200 and otherwise ignored).
	Redeliveries int `json:"redeliveries"`
}

// DeliveryLedger is the deliveries ledger in baton's SQLite database:
// every signed delivery, recorded (durably) before baton answers GitHub,
// deduplicated by delivery ID, and kept with its payload until it is
// handled. The webhook receiver writes it, the event dispatcher works
// through it, and the recovery loop consults it.
type DeliveryLedger struct {
	db  *sqlite.DB
	now func() time.Time
	// recorded holds a token when a new delivery was recorded since the
	// dispatcher last looked.
	recorded chan struct{}
}

// NewDeliveryLedger returns the ledger kept in db. now is the clock of
// receipt times; nil means time.Now.
func NewDeliveryLedger(db *sqlite.DB, now func() time.Time) (*DeliveryLedger, error) {
	if db == nil {
		return nil, errors.New("app: the deliveries ledger needs a database")
	}
	if now == nil {
		now = time.Now
	}
	return &DeliveryLedger{db: db, now: now, recorded: make(chan struct{}, 1)}, nil
}

// deliveryOrderingKey is the key deliveries are serialized on: the repository,
// else the installation, else the delivery alone.
func deliveryOrderingKey(d Delivery) string {
	switch {
	case d.Repository != "":
		return "repo:" + strings.ToLower(d.Repository)
	case d.InstallationID != 0:
		return "installation:" + strconv.FormatInt(d.InstallationID, 10)
	default:
		return "delivery:" + d.ID
	}
}

// Record stores d (with its payload) unless a delivery with its ID is
// recorded already, in which case it only counts the redelivery. It
// returns once the write is durable; created says whether d was new.
func (l *DeliveryLedger) Record(ctx context.Context, d Delivery) (created bool, err error) {
	created, _, err = l.record(ctx, d)
	return created, err
}

// record is Record, also saying the state of the delivery recorded before
// (the state of d when created).
func (l *DeliveryLedger) record(ctx context.Context, d Delivery) (created bool, state DeliveryState, err error) {
	received := cmp.Or(d.ReceivedAt, l.now())
	key := deliveryOrderingKey(d)
	err = l.db.Write(ctx, func(tx *sqlite.Tx) error {
		var (
			redeliveries int
			st           string
		)
		if err := tx.QueryRow(`INSERT INTO webhook_deliveries
			(delivery_id, event, action, installation_id, repository, ordering_key, received_at, body)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (delivery_id) DO UPDATE SET redeliveries = redeliveries + 1
			RETURNING redeliveries, state`,
			d.ID, d.Event, d.Action, d.InstallationID, d.Repository, key, received.UnixMicro(), d.Payload,
		).Scan(&redeliveries, &st); err != nil {
			return fmt.Errorf("app: record delivery: %w", err)
		}
		created, state = redeliveries == 0, DeliveryState(st)
		return nil
	})
	if err != nil {
		return false, "", err
	}
	if created {
		select {
		case l.recorded <- struct{}{}:
		default:
		}
	}
	return created, state, nil
}

const deliveryColumns = `seq, delivery_id, event, action, installation_id, repository, received_at,
	state, attempts, next_attempt_at, last_error, outcome, handled_at, redeliveries`

type ledgerRow interface{ Scan(...any) error }

func scanDeliveryRecord(row ledgerRow) (DeliveryRecord, error) {
	var (
		r                 DeliveryRecord
		received, next    int64
		handled           sql.NullInt64
		state, outcomeRaw string
	)
	if err := row.Scan(&r.Seq, &r.ID, &r.Event, &r.Action, &r.InstallationID, &r.Repository, &received,
		&state, &r.Attempts, &next, &r.LastError, &outcomeRaw, &handled, &r.Redeliveries); err != nil {
		return DeliveryRecord{}, err
	}
	r.State = DeliveryState(state)
	r.ReceivedAt = time.UnixMicro(received).UTC()
	if next > 0 && r.State == DeliveryPending {
		t := time.UnixMicro(next).UTC()
		r.NextAttemptAt = &t
	}
	if handled.Valid {
		t := time.UnixMicro(handled.Int64).UTC()
		r.HandledAt = &t
	}
	r.Outcome = map[string]string{}
	if err := json.Unmarshal([]byte(outcomeRaw), &r.Outcome); err != nil {
		return DeliveryRecord{}, fmt.Errorf("app: delivery %s: outcome: %w", r.ID, err)
	}
	return r, nil
}

// Get returns the ledger's record of a delivery, or a not_found error.
func (l *DeliveryLedger) Get(ctx context.Context, deliveryID string) (DeliveryRecord, error) {
	r, err := scanDeliveryRecord(l.db.QueryRow(ctx, `SELECT `+deliveryColumns+` FROM webhook_deliveries WHERE delivery_id = ?`, deliveryID))
	if errors.Is(err, sql.ErrNoRows) {
		return DeliveryRecord{}, schema.Errorf(schema.CodeNotFound, "delivery %s is not in the ledger", deliveryID)
	}
	return r, err
}

// DeliveryFilter selects deliveries for DeliveryLedger.List.
type DeliveryFilter struct {
	// State selects one state; "" selects all.
	State DeliveryState
	// Before continues a listing: only deliveries with a smaller Seq.
	// 0 starts at the newest.
	Before int64
	// Limit is the page size. Defaults to 50; at most 500.
	Limit int
}

// List returns deliveries newest first.
func (l *DeliveryLedger) List(ctx context.Context, f DeliveryFilter) ([]DeliveryRecord, error) {
	limit := cmp.Or(f.Limit, 50)
	if limit < 0 || limit > 500 {
		return nil, schema.Invalidf("limit must be between 1 and 500")
	}
	before := f.Before
	if before <= 0 {
		before = 1<<63 - 1
	}
	rows, err := l.db.Query(ctx, `SELECT `+deliveryColumns+` FROM webhook_deliveries
		WHERE seq < ? AND (? = '' OR state = ?) ORDER BY seq DESC LIMIT ?`, before, string(f.State), string(f.State), limit)
	if err != nil {
		return nil, fmt.Errorf("app: list deliveries: %w", err)
	}
	defer rows.Close()
	var out []DeliveryRecord
	for rows.Next() {
		r, err := scanDeliveryRecord(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// Known returns which of ids are in the ledger.
func (l *DeliveryLedger) Known(ctx context.Context, ids []string) (map[string]bool, error) {
	known := make(map[string]bool, len(ids))
	for len(ids) > 0 {
		n := min(len(ids), 200)
		chunk := ids[:n]
		ids = ids[n:]
		args := make([]any, len(chunk))
		for i, id := range chunk {
			args[i] = id
		}
		q := `SELECT delivery_id FROM webhook_deliveries WHERE delivery_id IN (?` + strings.Repeat(`, ?`, n-1) + `)`
		rows, err := l.db.Query(ctx, q, args...)
		if err != nil {
			return nil, fmt.Errorf("app: look up deliveries: %w", err)
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return nil, err
			}
			known[id] = true
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, err
		}
	}
	return known, nil
}

// Prune deletes handled and failed deliveries received before before,
// and returns how many it deleted. Pending deliveries are never pruned.
func (l *DeliveryLedger) Prune(ctx context.Context, before time.Time) (int64, error) {
	var total int64
	for {
		var n int64
		err := l.db.Write(ctx, func(tx *sqlite.Tx) error {
			res, err := tx.Exec(`DELETE FROM webhook_deliveries WHERE seq IN (
				SELECT seq FROM webhook_deliveries WHERE state != 'pending' AND received_at < ? ORDER BY seq LIMIT 1000)`,
				before.UnixMicro())
			if err != nil {
				return err
			}
			n, err = res.RowsAffected()
			return err
		})
		if err != nil {
			return total, fmt.Errorf("app: prune deliveries: %w", err)
		}
		total += n
		if n < 1000 {
			return total, nil
		}
	}
}

// pendingRef is what the dispatcher keeps in memory of a pending delivery.
type pendingRef struct {
	seq     int64
	id      string
	key     string
	readyAt time.Time
}

// pendingAfter returns up to limit pending deliveries with seq > after,
// in order of receipt.
func (l *DeliveryLedger) pendingAfter(ctx context.Context, after int64, limit int) ([]pendingRef, error) {
	rows, err := l.db.Query(ctx, `SELECT seq, delivery_id, ordering_key, next_attempt_at FROM webhook_deliveries
		WHERE state = 'pending' AND seq > ? ORDER BY seq LIMIT ?`, after, limit)
	if err != nil {
		return nil, fmt.Errorf("app: list pending deliveries: %w", err)
	}
	defer rows.Close()
	var out []pendingRef
	for rows.Next() {
		var (
			p    pendingRef
			next int64
		)
		if err := rows.Scan(&p.seq, &p.id, &p.key, &next); err != nil {
			return nil, err
		}
		if next > 0 {
			p.readyAt = time.UnixMicro(next)
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// pendingDelivery is a pending delivery loaded for its handlers.
type pendingDelivery struct {
	Delivery
	rec DeliveryRecord
}

// loadPending loads a pending delivery with its payload; found is false if
// it is no longer pending.
func (l *DeliveryLedger) loadPending(ctx context.Context, seq int64) (pendingDelivery, bool, error) {
	var body []byte
	row := l.db.QueryRow(ctx, `SELECT `+deliveryColumns+`, body FROM webhook_deliveries WHERE seq = ? AND state = 'pending'`, seq)
	rec, err := scanDeliveryRecord(ledgerScanWith(row, &body))
	if errors.Is(err, sql.ErrNoRows) {
		return pendingDelivery{}, false, nil
	}
	if err != nil {
		return pendingDelivery{}, false, fmt.Errorf("app: load delivery: %w", err)
	}
	d := Delivery{
		ID: rec.ID, Event: rec.Event, Action: rec.Action, InstallationID: rec.InstallationID,
		Repository: rec.Repository, ReceivedAt: rec.ReceivedAt, Payload: body,
	}
	return pendingDelivery{Delivery: d, rec: rec}, true, nil
}

// ledgerExtraScan is a row whose Scan fills extra destinations after the
// ones given.
type ledgerExtraScan struct {
	row   ledgerRow
	extra []any
}

func (e ledgerExtraScan) Scan(dest ...any) error { return e.row.Scan(append(dest, e.extra...)...) }

// ledgerScanWith appends destinations to a row's Scan.
func ledgerScanWith(row ledgerRow, extra ...any) ledgerRow {
	return ledgerExtraScan{row: row, extra: extra}
}

// deliveryResult is what a run of the handlers leaves in the ledger.
type deliveryResult struct {
	state     DeliveryState
	attempts  int
	nextAt    time.Time
	lastError string
	outcome   map[string]string
	at        time.Time
}

// saveResult writes a run's result on a pending delivery. A handled
// delivery loses its payload (it is not needed any more).
func (l *DeliveryLedger) saveResult(ctx context.Context, seq int64, r deliveryResult) error {
	outcome, err := json.Marshal(r.outcome)
	if err != nil {
		return err
	}
	var next int64
	if !r.nextAt.IsZero() {
		next = r.nextAt.UnixMicro()
	}
	var handledAt any
	if r.state != DeliveryPending {
		handledAt = r.at.UnixMicro()
	}
	return l.db.Write(ctx, func(tx *sqlite.Tx) error {
		_, err := tx.Exec(`UPDATE webhook_deliveries SET state = ?, attempts = ?, next_attempt_at = ?, last_error = ?,
			outcome = ?, handled_at = ?, body = CASE WHEN ? = 'handled' THEN NULL ELSE body END
			WHERE seq = ? AND state = 'pending'`,
			string(r.state), r.attempts, next, r.lastError, string(outcome), handledAt, string(r.state), seq)
		return err
	})
}

// requeue makes a failed delivery pending again, forgetting its failures
// (handlers that handled it are not run again). It returns the delivery's
// reference for the dispatcher.
func (l *DeliveryLedger) requeue(ctx context.Context, deliveryID string) (pendingRef, error) {
	var ref pendingRef
	err := l.db.Write(ctx, func(tx *sqlite.Tx) error {
		var (
			state, outcomeRaw string
			hasBody           bool
		)
		err := tx.QueryRow(`SELECT seq, ordering_key, state, outcome, body IS NOT NULL FROM webhook_deliveries WHERE delivery_id = ?`, deliveryID).
			Scan(&ref.seq, &ref.key, &state, &outcomeRaw, &hasBody)
		if errors.Is(err, sql.ErrNoRows) {
			return schema.Errorf(schema.CodeNotFound, "delivery %s is not in the ledger", deliveryID)
		}
		if err != nil {
			return err
		}
		if DeliveryState(state) != DeliveryFailed || !hasBody {
			return schema.Invalidf("delivery %s is %s; only a failed delivery can be replayed", deliveryID, state)
		}
		outcome := map[string]string{}
		if err := json.Unmarshal([]byte(outcomeRaw), &outcome); err != nil {
			return err
		}
		for name, o := range outcome {
			if o != outcomeHandled {
				delete(outcome, name)
			}
		}
		b, err := json.Marshal(outcome)
		if err != nil {
			return err
		}
		_, err = tx.Exec(`UPDATE webhook_deliveries SET state = 'pending', attempts = 0, next_attempt_at = 0, last_error = '',
			outcome = ?, handled_at = NULL WHERE seq = ?`, string(b), ref.seq)
		return err
	})
	ref.id = deliveryID
	return ref, err
}
