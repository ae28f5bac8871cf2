-- The database's incarnation: a random id created with the database and
-- replaced by `ai-memory restore`, so peers can tell a member that came back
-- from a backup or an empty disk from one that kept its state. A TEXT table
-- (node_meta holds integers). Migrating an existing file gives it one too.
CREATE TABLE store_meta (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;
INSERT INTO store_meta (name, value) VALUES ('incarnation', lower(hex(randomblob(16))));
