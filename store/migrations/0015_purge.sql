-- Project purges (issue 27; see common/ops.py msg.purge).
-- Per mailbox, the mark: the greatest msg.purge by (hlc, origin, seq), and
-- the greatest at_ms of all its purges (sessions and harness rows of the
-- project last active before it are hidden from reads).
CREATE TABLE msg_purge (
    workspace  TEXT NOT NULL,
    project    TEXT NOT NULL,
    id         TEXT NOT NULL,
    scope      TEXT,
    by_user    TEXT,
    reason     TEXT,
    at_ms      INTEGER NOT NULL,
    max_at_ms  INTEGER NOT NULL,
    epoch      INTEGER NOT NULL,
    hlc        INTEGER NOT NULL,
    origin     TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    PRIMARY KEY (workspace, project)
) WITHOUT ROWID;

-- Messages a purge removed: the rank of the purged send and its mailbox. A
-- copy ranked at or above it is ignored; a lower one is judged again.
CREATE TABLE msg_purged (
    id           TEXT PRIMARY KEY,
    hlc          INTEGER NOT NULL,
    origin       TEXT NOT NULL,
    seq          INTEGER NOT NULL,
    to_workspace TEXT NOT NULL,
    to_project   TEXT NOT NULL
);
CREATE INDEX msg_purged_by_mailbox ON msg_purged (to_workspace, to_project);
