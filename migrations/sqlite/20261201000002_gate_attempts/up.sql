-- The first-turn gate's attempts, one per (chat, agent, agent process): when the wait
-- started and how it ended, so a restarted server knows that a run's first turn
-- already spent its wait. SQLite twin of the PostgreSQL migration.
CREATE TABLE gate_attempts (
    chat_id TEXT NOT NULL REFERENCES chats (id) ON DELETE CASCADE,
    agent_id TEXT NOT NULL REFERENCES workspace_agents (id) ON DELETE CASCADE,
    -- The agent row's run id when the attempt started; '' for a legacy agent.
    agent_run_id TEXT NOT NULL CHECK (length(CAST(agent_run_id AS BLOB)) <= 64),
    started_at TEXT NOT NULL,
    -- The longest the attempt may wait from its start (its budget): an attempt that never
    -- ended has spent the run's wait once this has passed.
    wait_limit_ms INTEGER NOT NULL CHECK (wait_limit_ms >= 0),
    -- NULL while the attempt waits (or if its process died waiting).
    ended_at TEXT,
    timed_out INTEGER NOT NULL DEFAULT 0 CHECK (timed_out IN (0, 1)),
    CHECK (ended_at IS NOT NULL OR timed_out = 0),
    PRIMARY KEY (chat_id, agent_id, agent_run_id)
) STRICT;
-- Deleting an agent finds its rows.
CREATE INDEX gate_attempts_agent_id_idx ON gate_attempts (agent_id);
