-- Tool calls across replicas (issue 37). SQLite twin of the PostgreSQL migration: one
-- process, but the same fencing, so both backends run one code path.

CREATE TABLE call_streams (
    agent_id TEXT PRIMARY KEY NOT NULL CHECK (length(agent_id) = 36),
    agent_run_id TEXT NOT NULL CHECK (length(CAST(agent_run_id AS BLOB)) BETWEEN 1 AND 64),
    generation INTEGER NOT NULL CHECK (generation > 0),
    replica TEXT NOT NULL CHECK (length(CAST(replica AS BLOB)) BETWEEN 1 AND 64),
    lease_until_ms INTEGER NOT NULL
);
CREATE INDEX call_streams_by_replica ON call_streams (replica);

ALTER TABLE tool_calls ADD COLUMN delivered_generation INTEGER;
ALTER TABLE tool_calls
    ADD COLUMN cancel_requested INTEGER NOT NULL DEFAULT 0 CHECK (cancel_requested IN (0, 1));
