-- The identity of this database, made once: the sidecar prefixes its cache
-- keys with it, so a Redis shared by two databases never answers for the
-- other one. The embedded twin of postgres/0004_installation.sql.
CREATE TABLE durable_installation (
    singleton  INTEGER PRIMARY KEY DEFAULT 1 CHECK (singleton = 1),
    id         TEXT    NOT NULL,
    created_at INTEGER NOT NULL
);

INSERT INTO durable_installation (id, created_at)
VALUES (lower(hex(randomblob(16))), CAST(strftime('%s', 'now') AS INTEGER) * 1000000);
