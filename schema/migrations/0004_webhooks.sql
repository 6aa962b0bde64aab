-- Webhook deliveries and GitHub App installations (package app).
-- Times are unix microseconds.

-- The deliveries ledger: every delivery GitHub made that passed the
-- signature check, recorded before baton answered 2xx, one row per
-- X-GitHub-Delivery GUID (a redelivery of a GUID already here only bumps
-- redeliveries). seq is the order of receipt; deliveries of one repository
-- are handled in seq order. body keeps the payload until the delivery is
-- handled, so that a delivery accepted before a crash is processed after it.
CREATE TABLE webhook_deliveries (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    delivery_id     TEXT    NOT NULL UNIQUE,          -- X-GitHub-Delivery
    event           TEXT    NOT NULL,                 -- X-GitHub-Event
    action          TEXT    NOT NULL DEFAULT '',
    installation_id INTEGER NOT NULL DEFAULT 0,
    repository      TEXT    NOT NULL DEFAULT '',      -- owner/name as GitHub spells it
    ordering_key    TEXT    NOT NULL,                 -- repo:<owner/name lower-cased> | installation:<id> | delivery:<guid>
    received_at     INTEGER NOT NULL,
    state           TEXT    NOT NULL DEFAULT 'pending', -- pending | handled | failed
    attempts        INTEGER NOT NULL DEFAULT 0,       -- failed handler runs (a "retry after" is not one)
    next_attempt_at INTEGER NOT NULL DEFAULT 0,
    last_error      TEXT    NOT NULL DEFAULT '',
    outcome         TEXT    NOT NULL DEFAULT '{}',    -- JSON: handler name → handled | retry | failed
    handled_at      INTEGER,                          -- when it became handled or failed
    redeliveries    INTEGER NOT NULL DEFAULT 0,       -- duplicates received after the first
    body            BLOB                              -- the payload; NULL once handled
);

CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (seq) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_received ON webhook_deliveries (received_at);

-- The installations of the App, as webhooks and the hourly resync from
-- GET /app/installations report them. A deleted installation keeps its row
-- (deleted_at set, no repositories) so that operations naming it fail as
-- "installation unavailable" rather than "unknown".
CREATE TABLE installations (
    id                   INTEGER PRIMARY KEY,
    account              TEXT    NOT NULL,
    account_type         TEXT    NOT NULL DEFAULT '',  -- User | Organization | Enterprise
    repository_selection TEXT    NOT NULL DEFAULT '',  -- all | selected
    permissions          TEXT    NOT NULL DEFAULT '{}', -- JSON: name → read | write | admin
    events               TEXT    NOT NULL DEFAULT '[]', -- JSON: event names
    suspended            INTEGER NOT NULL DEFAULT 0,
    deleted_at           INTEGER,
    updated_at           INTEGER NOT NULL
);

-- The repositories each installation grants. A repository belongs to one
-- installation of the App (its owner's), so the lower-cased full name is
-- the key that resolves a repository to its installation.
CREATE TABLE installation_repositories (
    name_key        TEXT    PRIMARY KEY,              -- lower(owner/name)
    full_name       TEXT    NOT NULL,
    repository_id   INTEGER NOT NULL DEFAULT 0,
    installation_id INTEGER NOT NULL REFERENCES installations (id) ON DELETE CASCADE
) WITHOUT ROWID;

CREATE INDEX installation_repositories_installation ON installation_repositories (installation_id, name_key);
