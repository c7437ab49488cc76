-- Issue 39: a lease lives as long as the n8n process that holds it.
--
-- durable_sessions: one row per n8n process (regular, main, worker, webhook)
-- that runs the nodes, kept alive by heartbeats (alive_until moves forward);
-- any sidecar replica ends a session whose alive_until has passed and frees
-- the leases of its owners. durable_session_owners: which lease owners (n8n
-- execution ids, Resume Trigger claim tokens, key holders) each session runs,
-- learnt from the calls themselves. Every time is database time.

CREATE TABLE durable_sessions (
    session_id        text        PRIMARY KEY,
    namespace         text        NOT NULL,
    host              text        NOT NULL,
    pid               integer     NOT NULL,
    mode              text        NOT NULL,
    client            text        NOT NULL DEFAULT '',
    started_at        timestamptz NOT NULL DEFAULT now(),
    last_heartbeat_at timestamptz NOT NULL DEFAULT now(),
    alive_until       timestamptz NOT NULL,
    ended_at          timestamptz,
    end_reason        text        NOT NULL DEFAULT '' CHECK (end_reason IN ('', 'closed', 'expired')),
    leases_freed      integer     NOT NULL DEFAULT 0
);

-- The sweep: live sessions by when they lapse.
CREATE INDEX durable_sessions_live ON durable_sessions (alive_until) WHERE ended_at IS NULL;
-- Pruning ended sessions.
CREATE INDEX durable_sessions_ended ON durable_sessions (ended_at) WHERE ended_at IS NOT NULL;

CREATE TABLE durable_session_owners (
    namespace   text        NOT NULL,
    owner       text        NOT NULL,
    session_id  text        NOT NULL,
    seen_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace, owner)
);

CREATE INDEX durable_session_owners_session ON durable_session_owners (session_id);
