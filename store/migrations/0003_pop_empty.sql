-- "Nothing pending" decisions of pops (msg.empty ops): per mailbox key and
-- request id, the greatest-ranked (epoch, hlc, origin, seq) op. A later or
-- retried copy of the pop meets this decision instead of claiming a message
-- sent in between. Purged locally after limits.pop_empty_keep_secs.
CREATE TABLE pop_empty (
    mailbox         TEXT NOT NULL,
    request_id      TEXT NOT NULL,
    epoch           INTEGER NOT NULL,
    hlc             INTEGER NOT NULL,
    origin          TEXT NOT NULL,
    seq             INTEGER NOT NULL,
    claimer_session TEXT,
    claimer_agent   TEXT,
    at_ms           INTEGER NOT NULL,
    PRIMARY KEY (mailbox, request_id)
) WITHOUT ROWID;
CREATE INDEX pop_empty_age ON pop_empty (at_ms);
