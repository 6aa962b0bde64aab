-- The GitHub account of each installation, by the account's ID (stable
-- across renames, never reused): an API token bound to an installation
-- acts on every installation of the same account, so that it goes on
-- working when the App is uninstalled and installed again (GitHub gives the
-- new installation another ID). Kept for removed installations too. 0 when
-- not known: an installation recorded before this column and not seen
-- since, or an account that is not a user or an organisation (an
-- enterprise's ID is of another numbering). Once known it never changes.
ALTER TABLE installations ADD COLUMN account_id INTEGER NOT NULL DEFAULT 0;

CREATE INDEX installations_account ON installations (account_id) WHERE account_id != 0;
