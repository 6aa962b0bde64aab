-- Leases (package coordinator). One row per held key; a released or
-- force-released lease has no row. Times are unix microseconds.
CREATE TABLE leases (
    key         TEXT    PRIMARY KEY,
    owner       TEXT    NOT NULL,
    token       INTEGER NOT NULL,
    ttl_us      INTEGER NOT NULL,
    acquired_at INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL
) WITHOUT ROWID;

-- Fencing tokens come from one counter shared by every key: a token is
-- greater than every token issued before it, for any key, across releases,
-- takeovers, force-releases, restarts and processes sharing the file. The
-- counter is never reset and no row of any other table is needed to keep
-- that promise, so history and leases may be deleted freely.
CREATE TABLE lease_tokens (
    id   INTEGER PRIMARY KEY CHECK (id = 1),
    last INTEGER NOT NULL
);
INSERT INTO lease_tokens (id, last) VALUES (1, 0);

-- What happened to each key, for debugging: acquisitions, takeovers
-- (preempted), releases and force-releases. seq orders a key's events:
-- 2*token for the acquisition of token, 2*token+1 for its end. The
-- coordinator keeps about the last 200 per key, trimming now and then
-- rather than on every write.
CREATE TABLE lease_history (
    key            TEXT    NOT NULL,
    seq            INTEGER NOT NULL,
    kind           TEXT    NOT NULL,  -- acquired | preempted | released | force_released
    at             INTEGER NOT NULL,
    owner          TEXT    NOT NULL,
    token          INTEGER NOT NULL,
    ttl_us         INTEGER NOT NULL DEFAULT 0,
    prev_owner     TEXT    NOT NULL DEFAULT '',  -- preempted: the holder whose lease had expired
    prev_token     INTEGER NOT NULL DEFAULT 0,
    expired_for_us INTEGER NOT NULL DEFAULT 0,   -- preempted, force_released: how long the lease had been expired
    PRIMARY KEY (key, seq)
) WITHOUT ROWID;
