-- One secondary index on notes for the inbox instead of three (issue 10): every
-- replicated note.new paid for notes_inbox, notes_inbox_unread and
-- notes_inbox_count, and each index is more pages to write per commit.
-- notes_inbox_by_read serves every inbox read:
--   unread, ordered: (to_agent, read = 0) then the order columns, as before;
--   all, ordered:    a merge of the read = 0 and read = 1 ranges, each already
--                    in order (store/queries.py inbox_sql: UNION ALL), no sort;
--   counts:          covering (expires_at_ms is the last column), with or
--                    without read = 0.
-- read is only ever 0 or 1 (EXISTS on insert, SET read = 1 on a read mark).
DROP INDEX IF EXISTS notes_inbox;
DROP INDEX IF EXISTS notes_inbox_unread;
DROP INDEX IF EXISTS notes_inbox_count;
CREATE INDEX notes_inbox_by_read
    ON notes (to_agent, read, priority DESC, created_at_ms DESC, id DESC, expires_at_ms);
