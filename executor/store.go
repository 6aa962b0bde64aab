package executor

import (
	"context"
	"time"

	"github.com/baton-dev/baton/schema"
)

// Store keeps operation records. It is the source of truth of baton: the
// queue only delivers identifiers. Implementations: *SQLiteStore.
type Store interface {
	// Create stores rec if no record with its OperationID exists and
	// returns it with created=true. If one exists with the same
	// IdempotencyHash it returns that record, created=false. If one exists
	// with a different hash it returns schema.ConflictError naming it and
	// changes nothing.
	Create(ctx context.Context, rec *schema.Record) (stored schema.Record, created bool, err error)
	// Get returns the record, or schema.ErrNotFound.
	Get(ctx context.Context, operationID string) (schema.Record, error)
	// Save writes rec over the stored record after validating it. It
	// refuses a move the status table does not allow (leaving a terminal
	// state among them, as schema.ErrAlreadyTerminal) and never turns
	// cancellationRequested back to false: a cancellation requested while
	// the caller held its copy is kept, and reported back in rec. It also
	// refuses, with ErrIdentityChanged, a record whose identity differs
	// from the stored one: operationId, idempotencyHash, actor, idempotency
	// key, action, resource, payload and createdAt never change after
	// Create.
	Save(ctx context.Context, rec *schema.Record) error
	// RequestCancel cancels a queued operation at once, flags a running one
	// (the executor stops at its next boundary), or returns
	// schema.ErrAlreadyTerminal. It returns the record as it now stands.
	RequestCancel(ctx context.Context, operationID string) (schema.Record, error)
	// List returns records matching f, newest first, and the cursor of the
	// next page ("" at the end).
	List(ctx context.Context, f ListFilter) (records []schema.Record, next string, err error)
	// MarkDispatched records that the queue acknowledged these operations
	// at the given time (the outbox).
	MarkDispatched(ctx context.Context, ids []string, at time.Time) error
	// Undispatched returns up to limit operations that are queued or
	// running and were last dispatched before the given time, or never
	// dispatched and created before it.
	Undispatched(ctx context.Context, before time.Time, limit int) ([]string, error)
}

// ListFilter selects records for Store.List. Empty fields match anything.
type ListFilter struct {
	Status       schema.Status
	Action       string
	ResourceType string
	ResourceID   string
	Actor        string
	// Installations, if not nil, keeps the operations of these
	// installations only (an empty list keeps none): what a token bound to
	// installations may see.
	Installations []int64
	// Limit is the page size. Defaults to 50; at most 500.
	Limit int
	// Cursor continues a previous List; "" starts at the newest record.
	Cursor string
}
