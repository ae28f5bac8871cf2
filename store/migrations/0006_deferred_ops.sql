-- Ops of kinds this version does not know (from a newer peer during a rolling
-- upgrade): logged and replicated as usual, but kept here unapplied until a
-- version that knows the kind opens the database (store/deferred.py). The op
-- log may be collected meanwhile; this copy is not.
CREATE TABLE ops_deferred (
    origin TEXT    NOT NULL,
    seq    INTEGER NOT NULL,
    hlc    INTEGER NOT NULL,
    kind   TEXT    NOT NULL,
    key    TEXT    NOT NULL,
    epoch  INTEGER NOT NULL,
    body   BLOB    NOT NULL,
    PRIMARY KEY (origin, seq)
) WITHOUT ROWID;
