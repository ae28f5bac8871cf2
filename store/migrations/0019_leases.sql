-- Leased claims (issue 26): a claim (or renew) may carry a claim token, the
-- lease's length and deadline (the owner's clock) and which delivery of the
-- message it is. Rows older than this migration are terminal claims.
ALTER TABLE msg_terminal ADD COLUMN token TEXT;
ALTER TABLE msg_terminal ADD COLUMN lease_ms INTEGER;
ALTER TABLE msg_terminal ADD COLUMN lease_until_ms INTEGER;
ALTER TABLE msg_terminal ADD COLUMN delivery INTEGER;
ALTER TABLE msg_terminal ADD COLUMN renewed_at_ms INTEGER;
-- A node's sweep looks for leases past their deadline.
CREATE INDEX msg_terminal_by_lease ON msg_terminal (lease_until_ms)
    WHERE lease_until_ms IS NOT NULL;

-- A completion names the claim it completes: its token (None for a terminal
-- claim) and that claim's rank (epoch, hlc, origin, seq); the latest
-- claim's completion wins. Rows older than this name none (rank 0).
ALTER TABLE msg_completion ADD COLUMN token TEXT;
ALTER TABLE msg_completion ADD COLUMN claim_epoch INTEGER NOT NULL DEFAULT 0;
ALTER TABLE msg_completion ADD COLUMN claim_hlc INTEGER NOT NULL DEFAULT 0;
ALTER TABLE msg_completion ADD COLUMN claim_origin TEXT NOT NULL DEFAULT '';
ALTER TABLE msg_completion ADD COLUMN claim_seq INTEGER NOT NULL DEFAULT 0;

-- A completion remembers its mailbox (the op's key) and whether a purge took
-- it: a completion of a claim ranked below its mailbox's mark keeps only its rank
-- (``purged`` 1, no result or note), so the kept one is the same whatever
-- order the purge and the completions come in, and no purged note is kept.
ALTER TABLE msg_completion ADD COLUMN mailbox TEXT;
ALTER TABLE msg_completion ADD COLUMN purged INTEGER NOT NULL DEFAULT 0;
