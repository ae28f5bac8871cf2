-- Full-text search over memories (title, content, tags), links between
-- memories, per-memory grants and agents' namespace subscriptions. See store/ops.py for the merge rules.

-- External-content FTS5 index: the text lives in memories, the index holds
-- only tokens; triggers keep it in step with every insert, update and delete.
CREATE VIRTUAL TABLE memories_fts USING fts5(
    title, content, tags,
    content = 'memories', content_rowid = 'rowid',
    tokenize = 'unicode61 remove_diacritics 2'
);
INSERT INTO memories_fts (rowid, title, content, tags)
    SELECT rowid, coalesce(title, ''), coalesce(content, ''), tags FROM memories;
CREATE TRIGGER memories_fts_ins AFTER INSERT ON memories BEGIN
    INSERT INTO memories_fts (rowid, title, content, tags)
    VALUES (new.rowid, coalesce(new.title, ''), coalesce(new.content, ''), new.tags);
END;
CREATE TRIGGER memories_fts_del AFTER DELETE ON memories BEGIN
    INSERT INTO memories_fts (memories_fts, rowid, title, content, tags)
    VALUES ('delete', old.rowid, coalesce(old.title, ''), coalesce(old.content, ''), old.tags);
END;
CREATE TRIGGER memories_fts_upd AFTER UPDATE OF title, content, tags ON memories BEGIN
    INSERT INTO memories_fts (memories_fts, rowid, title, content, tags)
    VALUES ('delete', old.rowid, coalesce(old.title, ''), coalesce(old.content, ''), old.tags);
    INSERT INTO memories_fts (rowid, title, content, tags)
    VALUES (new.rowid, coalesce(new.title, ''), coalesce(new.content, ''), new.tags);
END;
CREATE INDEX memories_by_expiry ON memories (expires_at_ms) WHERE expires_at_ms IS NOT NULL;

CREATE TABLE memory_links (
    source_id     TEXT NOT NULL,
    target_id     TEXT NOT NULL,
    relation      TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    PRIMARY KEY (source_id, target_id, relation)
) WITHOUT ROWID;
CREATE INDEX memory_links_by_target ON memory_links (target_id, relation);

CREATE TABLE memory_grants (
    memory_id  TEXT NOT NULL,
    agent_id   TEXT NOT NULL,
    permission TEXT,
    granted    INTEGER NOT NULL,
    at_ms      INTEGER NOT NULL,
    hlc        INTEGER NOT NULL,
    origin     TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    PRIMARY KEY (memory_id, agent_id)
) WITHOUT ROWID;

CREATE TABLE namespace_subscriptions (
    agent_id  TEXT NOT NULL,
    namespace TEXT NOT NULL,
    active    INTEGER NOT NULL,
    at_ms     INTEGER NOT NULL,
    hlc       INTEGER NOT NULL,
    origin    TEXT NOT NULL,
    seq       INTEGER NOT NULL,
    PRIMARY KEY (agent_id, namespace)
) WITHOUT ROWID;
