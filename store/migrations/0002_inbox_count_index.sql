-- inbox_count reads only (to_agent, read, expires_at_ms): a covering index keeps
-- counting a 100k inbox inside the index instead of visiting every row.
CREATE INDEX notes_inbox_count ON notes (to_agent, read, expires_at_ms);
