-- Users, API keys and per-project grants (issue 7): replicated records like
-- any other, every one an op under the key 'ident:dir' (see common/ops.py
-- for the merge rules). Removal and revocation are monotone flags: a removed
-- user or a revoked key never comes back.

CREATE TABLE users (
    name          TEXT PRIMARY KEY,
    root          INTEGER NOT NULL,
    password_hash TEXT,
    removed       INTEGER NOT NULL,
    created_at_ms INTEGER NOT NULL,
    hlc           INTEGER NOT NULL,
    origin        TEXT NOT NULL,
    seq           INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE api_keys (
    id            TEXT PRIMARY KEY,
    user          TEXT NOT NULL,
    agent         TEXT,
    label         TEXT,
    hash          TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    revoked       INTEGER NOT NULL,
    hlc           INTEGER NOT NULL,
    origin        TEXT NOT NULL,
    seq           INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX api_keys_by_hash ON api_keys (hash);
CREATE INDEX api_keys_by_user ON api_keys (user);

-- project '' is the whole workspace (scope names are never empty).
CREATE TABLE project_grants (
    user      TEXT NOT NULL,
    workspace TEXT NOT NULL,
    project   TEXT NOT NULL,
    access    TEXT NOT NULL,
    granted   INTEGER NOT NULL,
    at_ms     INTEGER NOT NULL,
    hlc       INTEGER NOT NULL,
    origin    TEXT NOT NULL,
    seq       INTEGER NOT NULL,
    PRIMARY KEY (user, workspace, project)
) WITHOUT ROWID;
