-- The identity of this database, made once: the sidecar prefixes its Redis
-- cache keys with it, so a Redis shared by two databases (a test database
-- beside production, a database recreated from scratch) never answers for
-- the other one. One row; the primary key on a constant keeps it one.
CREATE TABLE durable_installation (
    singleton  BOOLEAN     PRIMARY KEY DEFAULT TRUE CHECK (singleton),
    id         TEXT        NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

INSERT INTO durable_installation (id) VALUES (replace(gen_random_uuid()::text, '-', ''));
