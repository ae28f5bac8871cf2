-- The approval queue (common/lifecycle.py): a send an admission decider
-- answered "pending" for starts awaiting_approval; the winning msg.approve /
-- msg.reject op per message, ranked by (epoch, hlc, origin, seq), records
-- who decided (the state itself comes from msg_hold and msg_terminal).
ALTER TABLE messages ADD COLUMN approval_required INTEGER NOT NULL DEFAULT 0;
ALTER TABLE messages ADD COLUMN approval_note TEXT;

CREATE TABLE msg_decision (
    id       TEXT PRIMARY KEY,
    kind     TEXT NOT NULL,  -- msg.approve | msg.reject
    by_user  TEXT,
    by_agent TEXT,
    reason   TEXT,
    at_ms    INTEGER NOT NULL,
    epoch    INTEGER NOT NULL,
    hlc      INTEGER NOT NULL,
    origin   TEXT NOT NULL,
    seq      INTEGER NOT NULL
) WITHOUT ROWID;
