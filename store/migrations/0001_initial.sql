-- Initial schema: the op log, the seen-set, replicated state and local promises.
-- Column meanings follow store/ops.py; "rank" columns hold the op that won a merge.

CREATE TABLE oplog (
    origin TEXT NOT NULL,
    seq    INTEGER NOT NULL,
    hlc    INTEGER NOT NULL,
    kind   TEXT NOT NULL,
    key    TEXT NOT NULL,
    epoch  INTEGER NOT NULL,
    body   BLOB NOT NULL,
    PRIMARY KEY (origin, seq)
) WITHOUT ROWID;
CREATE INDEX oplog_by_key ON oplog (key, origin, seq);

-- Contiguous watermark per origin, and seqs seen past a gap.
CREATE TABLE vv (
    origin    TEXT PRIMARY KEY,
    watermark INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE vv_held (
    origin TEXT NOT NULL,
    seq    INTEGER NOT NULL,
    PRIMARY KEY (origin, seq)
) WITHOUT ROWID;

CREATE TABLE node_meta (
    name  TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE memories (
    id            TEXT PRIMARY KEY,
    tier          TEXT,
    namespace     TEXT,
    title         TEXT,
    content       TEXT,
    tags          TEXT NOT NULL,      -- JSON list
    priority      INTEGER NOT NULL,
    confidence    REAL NOT NULL,
    source        TEXT,
    access_count  INTEGER NOT NULL,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    expires_at_ms INTEGER,
    agent_id      TEXT,
    metadata      TEXT NOT NULL,      -- JSON object
    hlc           INTEGER NOT NULL,
    origin        TEXT NOT NULL,
    seq           INTEGER NOT NULL
);
CREATE INDEX memories_by_updated ON memories (updated_at_ms DESC, id DESC);
CREATE INDEX memories_by_namespace ON memories (namespace, updated_at_ms DESC, id DESC);

-- Deleted memory ids; kept for good (see store/in_memory.py).
CREATE TABLE mem_tombstones (
    id TEXT PRIMARY KEY
) WITHOUT ROWID;

CREATE TABLE notes (
    id            TEXT PRIMARY KEY,
    from_agent    TEXT NOT NULL,
    to_agent      TEXT NOT NULL,
    namespace     TEXT,
    title         TEXT,
    payload       TEXT,
    priority      INTEGER NOT NULL,
    tier          TEXT,
    created_at_ms INTEGER NOT NULL,
    expires_at_ms INTEGER,
    read          INTEGER NOT NULL,   -- denormalised from note_reads, for the unread index
    hlc           INTEGER NOT NULL,
    origin        TEXT NOT NULL,
    seq           INTEGER NOT NULL
);
CREATE INDEX notes_inbox ON notes (to_agent, priority DESC, created_at_ms DESC, id DESC);
CREATE INDEX notes_inbox_unread ON notes (to_agent, read, priority DESC, created_at_ms DESC, id DESC);
CREATE INDEX notes_by_expiry ON notes (expires_at_ms) WHERE expires_at_ms IS NOT NULL;

-- Read marks, grow-only; a mark may precede its notification.
CREATE TABLE note_reads (
    agent_id TEXT NOT NULL,
    note_id  TEXT NOT NULL,
    PRIMARY KEY (agent_id, note_id)
) WITHOUT ROWID;

CREATE TABLE agents (
    agent_id         TEXT PRIMARY KEY,
    agent_type       TEXT,
    capabilities     TEXT,            -- JSON
    registered_at_ms INTEGER,
    last_seen_at_ms  INTEGER,
    reg_hlc          INTEGER,         -- NULL until an agent.reg is known
    reg_origin       TEXT,
    reg_seq          INTEGER
);

CREATE TABLE sessions (
    session_id    TEXT PRIMARY KEY,
    workspace     TEXT NOT NULL,
    project       TEXT NOT NULL,
    harness       TEXT NOT NULL,
    owner_user    TEXT,
    started_at_ms INTEGER NOT NULL,
    last_at_ms    INTEGER NOT NULL,
    hlc           INTEGER NOT NULL,
    origin        TEXT NOT NULL,
    seq           INTEGER NOT NULL
);

-- One row per (project, harness) ever named by a session: projects are monotone.
CREATE TABLE project_harnesses (
    workspace   TEXT NOT NULL,
    project     TEXT NOT NULL,
    harness     TEXT NOT NULL,
    first_at_ms INTEGER NOT NULL,
    last_at_ms  INTEGER NOT NULL,
    PRIMARY KEY (workspace, project, harness)
) WITHOUT ROWID;
CREATE INDEX project_harnesses_by_activity ON project_harnesses (last_at_ms DESC);

CREATE TABLE messages (
    id              TEXT PRIMARY KEY,
    to_workspace    TEXT,
    to_project      TEXT,
    to_agent        TEXT,
    from_workspace  TEXT,
    from_project    TEXT,
    from_agent      TEXT,
    from_owner_user TEXT,
    subject         TEXT,
    body            TEXT,
    nature          TEXT,
    evidence        TEXT,
    created_at_ms   INTEGER NOT NULL,
    state           TEXT NOT NULL,    -- denormalised from msg_terminal
    send_epoch      INTEGER NOT NULL,
    hlc             INTEGER NOT NULL, -- (hlc, origin, seq) of the msg.send: mailbox order
    origin          TEXT NOT NULL,
    seq             INTEGER NOT NULL
);
CREATE INDEX messages_mailbox ON messages (to_workspace, to_project, state, hlc, origin, seq);
CREATE INDEX messages_outbox ON messages (from_workspace, from_project, state, hlc, origin, seq);

-- The winning terminal op per message id (the message itself may be unknown yet).
CREATE TABLE msg_terminal (
    id                 TEXT PRIMARY KEY,
    state              TEXT NOT NULL,
    epoch              INTEGER NOT NULL,
    hlc                INTEGER NOT NULL,
    origin             TEXT NOT NULL,
    seq                INTEGER NOT NULL,
    claimed_by_session TEXT,
    claimed_by_agent   TEXT,
    request_id         TEXT,
    claimed_at_ms      INTEGER,
    cancelled_at_ms    INTEGER
);
CREATE INDEX msg_terminal_by_request ON msg_terminal (request_id) WHERE request_id IS NOT NULL;

-- Local, not replicated: the highest epoch this node promised per mailbox.
CREATE TABLE promises (
    mailbox TEXT PRIMARY KEY,
    epoch   INTEGER NOT NULL
) WITHOUT ROWID;
