-- The former names of repositories the installations registry has, so that
-- an operation submitted or queued under a repository's old name still
-- resolves to its installation after a rename (GitHub redirects the old
-- name to the repository until another repository takes it). An alias
-- resolves through repository_id to whichever installation has the
-- repository now; it is dropped once a repository baton knows has that
-- name, or once no installation in force has the repository under the
-- same owner.
CREATE TABLE repository_aliases (
    name_key      TEXT    PRIMARY KEY,                -- lower(owner/old-name)
    full_name     TEXT    NOT NULL,
    repository_id INTEGER NOT NULL,
    created_at    INTEGER NOT NULL
) WITHOUT ROWID;

CREATE INDEX installation_repositories_repository ON installation_repositories (repository_id);
