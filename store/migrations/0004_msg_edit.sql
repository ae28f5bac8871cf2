-- Editing a queued message (common/lifecycle.py): the winning msg.hold /
-- msg.release op per message, and the winning saved content (a release
-- that carried a new subject and body). Both rank by (epoch, hlc, origin,
-- seq); any terminal op in msg_terminal outranks a hold.
CREATE TABLE msg_hold (
    id             TEXT PRIMARY KEY,
    kind           TEXT NOT NULL,  -- msg.hold | msg.release
    epoch          INTEGER NOT NULL,
    hlc            INTEGER NOT NULL,
    origin         TEXT NOT NULL,
    seq            INTEGER NOT NULL,
    holder_session TEXT,
    holder_agent   TEXT,
    holder_user    TEXT,
    at_ms          INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE msg_revision (
    id           TEXT PRIMARY KEY,
    subject      TEXT,
    body         TEXT,
    epoch        INTEGER NOT NULL,
    hlc          INTEGER NOT NULL,
    origin       TEXT NOT NULL,
    seq          INTEGER NOT NULL,
    edited_at_ms INTEGER NOT NULL
) WITHOUT ROWID;
