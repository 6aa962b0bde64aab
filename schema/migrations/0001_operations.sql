-- Operation records. The whole record is kept as JSON in body; the columns
-- beside it are what baton filters, orders and guards on. seq orders the
-- list and makes its cursor stable.
CREATE TABLE operations (
    seq                    INTEGER PRIMARY KEY AUTOINCREMENT,
    operation_id           TEXT    NOT NULL UNIQUE,
    idempotency_hash       TEXT    NOT NULL,
    actor                  TEXT    NOT NULL,
    action                 TEXT    NOT NULL,
    resource_type          TEXT    NOT NULL,
    resource_id            TEXT    NOT NULL,
    installation_id        INTEGER NOT NULL DEFAULT 0,
    status                 TEXT    NOT NULL,
    cancellation_requested INTEGER NOT NULL DEFAULT 0,
    created_at             INTEGER NOT NULL, -- unix microseconds
    updated_at             INTEGER NOT NULL,
    dispatched_at          INTEGER,          -- outbox: last acknowledged publish
    version                INTEGER NOT NULL DEFAULT 1, -- bumped by every write
    body                   BLOB    NOT NULL
);

CREATE INDEX operations_actor    ON operations (actor, seq);
CREATE INDEX operations_resource ON operations (resource_type, resource_id, seq);
-- The unfinished operations of a resource, oldest first: the executor runs
-- a resource's operations in the order they were created. It is also what
-- the reconciler and a list of queued or running operations read. (There is
-- no index on status alone: every operation changes status twice, and
-- keeping such an index cost more than the lists of finished operations it
-- would speed up.)
CREATE INDEX operations_pending_resource ON operations (resource_type, resource_id, seq)
    WHERE status IN ('queued', 'running');
