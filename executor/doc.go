// Package executor turns requests into operations and carries them out.
//
// # Submitting
//
// [Executor.Submit] gives a request its identity — operationId is the
// SHA-256 of the canonical JSON of {"actor", "idempotencyKey"},
// idempotencyHash that of {"actor", "action", "resource", "payload"} (see
// [OperationID] and [IdempotencyHash]) — stores it first-write-wins, and
// hands the ID to the queue through a [Dispatcher]. The same actor and key
// with the same input resolve to the stored operation; with other input
// they are an idempotency conflict and nothing runs.
//
// # The store
//
// [Store] keeps records; [SQLiteStore] keeps them in baton's SQLite
// database (package internal/sqlite), durable when a call returns. Create is
// first-write-wins; Save validates, never changes an operation's identity,
// refuses to leave a terminal state and never loses a requested
// cancellation; RequestCancel cancels a queued
// operation atomically or flags a running one; List pages newest first
// with a cursor that later inserts do not shift.
//
// # The outbox
//
// Records carry the time the queue last acknowledged them. Submit marks
// dispatched IDs in batches; records still queued without a recent
// dispatch (a crash between store and publish, a message the stream lost)
// are listed by [Store.Undispatched] for the queue's reconciler to publish
// again.
package executor
