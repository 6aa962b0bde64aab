-- API tokens. A token is shown once, when it is created; only its SHA-256
-- is kept. The actor of every operation submitted with a token is the
-- token's actor. A token acts on the installations listed in installations
-- (a JSON array of installation IDs), or on every installation when
-- all_installations is set (admin tokens always are). A revoked token stays
-- listed with revoked_at set.
CREATE TABLE api_tokens (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    hash              BLOB    NOT NULL UNIQUE, -- SHA-256 of the token
    actor             TEXT    NOT NULL,
    admin             INTEGER NOT NULL DEFAULT 0,
    all_installations INTEGER NOT NULL DEFAULT 0,
    installations     TEXT    NOT NULL DEFAULT '[]',
    created_at        INTEGER NOT NULL, -- unix microseconds
    revoked_at        INTEGER,
    last_used_at      INTEGER
);
