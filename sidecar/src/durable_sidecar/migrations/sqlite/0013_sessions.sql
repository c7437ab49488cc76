-- Issue 39: a lease lives as long as the n8n process that holds it. The
-- embedded twin of postgres/0013_sessions.sql. Times are INTEGER
-- microseconds, as everywhere here.

CREATE TABLE durable_sessions (
    session_id        TEXT    PRIMARY KEY,
    namespace         TEXT    NOT NULL,
    host              TEXT    NOT NULL,
    pid               INTEGER NOT NULL,
    mode              TEXT    NOT NULL,
    client            TEXT    NOT NULL DEFAULT '',
    started_at        INTEGER NOT NULL,
    last_heartbeat_at INTEGER NOT NULL,
    alive_until       INTEGER NOT NULL,
    ended_at          INTEGER,
    end_reason        TEXT    NOT NULL DEFAULT '' CHECK (end_reason IN ('', 'closed', 'expired')),
    leases_freed      INTEGER NOT NULL DEFAULT 0
);

CREATE INDEX durable_sessions_live ON durable_sessions (alive_until) WHERE ended_at IS NULL;
CREATE INDEX durable_sessions_ended ON durable_sessions (ended_at) WHERE ended_at IS NOT NULL;

CREATE TABLE durable_session_owners (
    namespace   TEXT    NOT NULL,
    owner       TEXT    NOT NULL,
    session_id  TEXT    NOT NULL,
    seen_at     INTEGER NOT NULL,
    PRIMARY KEY (namespace, owner)
);

CREATE INDEX durable_session_owners_session ON durable_session_owners (session_id);
