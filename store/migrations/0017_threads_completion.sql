-- Replies and threads (issue 26): a notification or message may answer an
-- earlier one (in_reply_to) and belongs to the thread of the first one
-- (thread_id, its own id for a first message; rows older than this migration
-- are their own threads).
ALTER TABLE notes ADD COLUMN in_reply_to TEXT;
ALTER TABLE notes ADD COLUMN thread_id TEXT;
UPDATE notes SET thread_id = id;
CREATE INDEX notes_by_thread ON notes (thread_id);
ALTER TABLE messages ADD COLUMN in_reply_to TEXT;
ALTER TABLE messages ADD COLUMN thread_id TEXT;
UPDATE messages SET thread_id = id;
CREATE INDEX messages_by_thread ON messages (thread_id);

-- Who claimed, besides the session and harness: the key id and agent id,
-- so that only the claim's holder completes it.
ALTER TABLE msg_terminal ADD COLUMN claimed_by_key TEXT;
ALTER TABLE msg_terminal ADD COLUMN claimed_by_agent_id TEXT;

-- Completion (msg.complete): the first completion per message by
-- (hlc, origin, seq); readers show it only while the message is claimed.
CREATE TABLE msg_completion (
    id             TEXT PRIMARY KEY,
    result         TEXT NOT NULL,  -- done | blocked | rejected
    note           TEXT,
    by_session     TEXT,
    by_agent       TEXT,
    by_key         TEXT,
    by_agent_id    TEXT,
    from_workspace TEXT,
    from_project   TEXT,
    at_ms          INTEGER NOT NULL,
    hlc            INTEGER NOT NULL,
    origin         TEXT NOT NULL,
    seq            INTEGER NOT NULL
) WITHOUT ROWID;
