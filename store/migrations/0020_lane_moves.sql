-- Records an offline change of the lane count left off the lane their id
-- names (docs/lanes.md, "Changing the lane count"): a message's or a
-- notification's id was minted for its mailbox's or inbox's lane under the
-- old count, and under the new one the id may name another lane than the
-- mailbox's. Every lane holds the whole table (`ai-memory lanes resize`
-- writes it; nothing else does), so a request that names only such an id
-- is handed to the right lane without a search. Empty on a cluster whose
-- lane count never changed.
CREATE TABLE lane_moves (
    id   TEXT PRIMARY KEY,
    lane INTEGER NOT NULL
) WITHOUT ROWID;
