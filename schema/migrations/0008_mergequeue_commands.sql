-- The newest comment command ("/baton queue", "/baton dequeue") the merge
-- queue acted on, per pull request, by the comment's GitHub ID (GitHub's
-- comment IDs only grow). A command whose comment is not newer is not acted
-- on: a signed delivery replayed under another X-GitHub-Delivery (GitHub
-- does not sign that header) carries a comment acted on already, and a
-- command delivered late must not undo a newer one.
CREATE TABLE mergequeue_commands (
    repo_id    INTEGER NOT NULL REFERENCES mergequeue_repos (id) ON DELETE CASCADE,
    pr_number  INTEGER NOT NULL,
    comment_id INTEGER NOT NULL,
    at         INTEGER NOT NULL,
    PRIMARY KEY (repo_id, pr_number)
);
