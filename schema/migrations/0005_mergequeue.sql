-- The merge queue (package app/mergequeue). Times are unix microseconds.
-- Every write to these tables is made under the repository's lease
-- (repo:<owner/name lower-cased>) and checked against it in the same
-- transaction.

-- The repositories the merge queue has state for. A repository belongs to
-- one installation (its owner's); installation_id follows it if it moves.
-- full_name is the name as GitHub spells it, used in the resources and
-- idempotency keys of the operations the queue submits.
CREATE TABLE mergequeue_repos (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    name_key        TEXT    NOT NULL UNIQUE,          -- lower(owner/name)
    full_name       TEXT    NOT NULL,
    installation_id INTEGER NOT NULL,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    reconciled_at   INTEGER                           -- the last reconcile that ran
);

-- The queue: one row per pull request in it. seq is the queue order (a pull
-- request keeps its place when it is re-evaluated). A pull request has at
-- most one entry; a bounced entry stays until its label is gone or a
-- reconcile clears it.
CREATE TABLE mergequeue_entries (
    seq                INTEGER PRIMARY KEY AUTOINCREMENT,
    repo_id            INTEGER NOT NULL REFERENCES mergequeue_repos (id) ON DELETE CASCADE,
    pr_number          INTEGER NOT NULL,
    pr_sha             TEXT    NOT NULL,              -- the head the gate is evaluated (and the merge made) at
    base_ref           TEXT    NOT NULL DEFAULT '',   -- the base branch, whose protection names the required checks
    status             TEXT    NOT NULL,              -- queued | evaluating | gate_passed | bounced
    queued_at          INTEGER NOT NULL,
    reevaluated_at     INTEGER,
    gate_result        TEXT    NOT NULL DEFAULT '',   -- '' | pending | success | failure
    gate_detail        TEXT    NOT NULL DEFAULT '',
    gate_result_at     INTEGER,
    merge_operation_id TEXT    NOT NULL DEFAULT '',   -- the github.pulls.merge operation, once submitted
    bounce_reason      TEXT    NOT NULL DEFAULT '',
    posted_sha         TEXT    NOT NULL DEFAULT '',   -- the commit status last asked for (sha, description)
    posted_status      TEXT    NOT NULL DEFAULT '',
    UNIQUE (repo_id, pr_number)
);

CREATE INDEX mergequeue_entries_repo ON mergequeue_entries (repo_id, seq);

-- The event log: the last 100 events of each repository the queue acted
-- on (trimmed in the transaction that appends), oldest first by seq.
CREATE TABLE mergequeue_events (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    repo_id     INTEGER NOT NULL REFERENCES mergequeue_repos (id) ON DELETE CASCADE,
    at          INTEGER NOT NULL,
    event       TEXT    NOT NULL,                     -- X-GitHub-Event, or reconcile | operation
    action      TEXT    NOT NULL DEFAULT '',
    pr_number   INTEGER NOT NULL DEFAULT 0,
    delivery_id TEXT    NOT NULL DEFAULT '',
    details     TEXT    NOT NULL DEFAULT ''
);

CREATE INDEX mergequeue_events_repo ON mergequeue_events (repo_id, seq);

-- The audit log: the last 200 changes of each repository's queue
-- (join | leave | reevaluate | gate_success | gate_failure | merge | bounce).
CREATE TABLE mergequeue_audit (
    seq       INTEGER PRIMARY KEY AUTOINCREMENT,
    repo_id   INTEGER NOT NULL REFERENCES mergequeue_repos (id) ON DELETE CASCADE,
    at        INTEGER NOT NULL,
    action    TEXT    NOT NULL,
    pr_number INTEGER NOT NULL,
    sha       TEXT    NOT NULL DEFAULT '',
    detail    TEXT    NOT NULL DEFAULT ''
);

CREATE INDEX mergequeue_audit_repo ON mergequeue_audit (repo_id, seq);
