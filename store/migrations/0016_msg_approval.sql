-- The approval queue (common/lifecycle.py): a send an admission decider
-- answered "pending" for starts awaiting_approval; the winning msg.approve
-- and the winning msg.reject op per message, each ranked by (epoch, hlc,
-- origin, seq), record who decided (the state itself comes from msg_hold and
-- msg_terminal; readers show the one the state bears out).
ALTER TABLE messages ADD COLUMN approval_required INTEGER NOT NULL DEFAULT 0;
ALTER TABLE messages ADD COLUMN approval_note TEXT;

CREATE TABLE msg_decision (
    id       TEXT NOT NULL,
    kind     TEXT NOT NULL,  -- msg.approve | msg.reject
    by_user  TEXT,
    by_agent TEXT,
    reason   TEXT,
    at_ms    INTEGER NOT NULL,
    epoch    INTEGER NOT NULL,
    hlc      INTEGER NOT NULL,
    origin   TEXT NOT NULL,
    seq      INTEGER NOT NULL,
    PRIMARY KEY (id, kind)
) WITHOUT ROWID;
