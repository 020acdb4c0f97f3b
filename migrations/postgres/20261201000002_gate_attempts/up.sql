-- The first-turn gate's attempts, one per (chat, agent, agent process): when the wait
-- started and how it ended, so every replica, and a restarted one, knows that a run's
-- first turn already spent its wait.
CREATE TABLE gate_attempts (
    chat_id uuid NOT NULL REFERENCES chats (id) ON DELETE CASCADE,
    agent_id uuid NOT NULL REFERENCES workspace_agents (id) ON DELETE CASCADE,
    -- The agent row's run id when the attempt started; '' for a legacy agent.
    agent_run_id text NOT NULL CHECK (octet_length(agent_run_id) <= 64),
    started_at timestamptz NOT NULL,
    -- The longest the attempt may wait from its start (its budget): an attempt that never
    -- ended has spent the run's wait once this has passed.
    wait_limit_ms bigint NOT NULL CHECK (wait_limit_ms >= 0),
    -- NULL while the attempt waits (or if its replica died waiting).
    ended_at timestamptz,
    timed_out boolean NOT NULL DEFAULT false,
    CHECK (ended_at IS NOT NULL OR NOT timed_out),
    PRIMARY KEY (chat_id, agent_id, agent_run_id)
);
-- Deleting an agent finds its rows.
CREATE INDEX gate_attempts_agent_id_idx ON gate_attempts (agent_id);
