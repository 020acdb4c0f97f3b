-- The tool-call audit log (issue 37). SQLite twin of the PostgreSQL migration.
CREATE TABLE tool_call_audit (
    -- The call's server-assigned id: one row per call, and the listing's tie-break.
    tool_call_id TEXT PRIMARY KEY NOT NULL CHECK (length(tool_call_id) = 36),
    -- No foreign keys, no cascades: the ids stay as plain values after the agent,
    -- chat or turn (and with it the call) is deleted.
    agent_id TEXT CHECK (agent_id IS NULL OR length(agent_id) = 36),
    chat_id TEXT NOT NULL CHECK (length(chat_id) = 36),
    turn_id TEXT NOT NULL CHECK (length(turn_id) = 36),
    call_id TEXT NOT NULL CHECK (length(CAST(call_id AS BLOB)) BETWEEN 1 AND 128),
    name TEXT NOT NULL CHECK (length(CAST(name AS BLOB)) BETWEEN 1 AND 1024),
    server TEXT NOT NULL CHECK (length(CAST(server AS BLOB)) <= 1024),
    tool TEXT NOT NULL CHECK (length(CAST(tool AS BLOB)) <= 1024),
    status TEXT NOT NULL CHECK (status IN ('complete', 'error', 'refused', 'timed_out', 'canceled', 'unknown')),
    reason TEXT CHECK (reason IS NULL OR reason IN ('stale_run', 'not_in_turn', 'tool_gone', 'denied', 'agent_unreachable', 'agent_unsupported', 'busy', 'agent_restarted', 'stream_lost')),
    -- The `code` of an `error` end.
    error_code INTEGER,
    duration_ms INTEGER CHECK (duration_ms IS NULL OR duration_ms >= 0),
    -- Keyed with the deployment's secret (below): never the arguments, which are not kept.
    arguments_digest TEXT NOT NULL CHECK (length(arguments_digest) = 64),
    arguments_size INTEGER NOT NULL CHECK (arguments_size >= 0),
    -- Bytes of the stored result JSON; never the result.
    result_size INTEGER CHECK (result_size IS NULL OR result_size >= 0),
    truncated INTEGER NOT NULL CHECK (truncated IN (0, 1)),
    ended_at TEXT NOT NULL
) STRICT;
-- Listing newest first, overall and per agent or chat; pruning by age.
CREATE INDEX tool_call_audit_by_time ON tool_call_audit (ended_at, tool_call_id);
CREATE INDEX tool_call_audit_by_agent ON tool_call_audit (agent_id, ended_at, tool_call_id);
CREATE INDEX tool_call_audit_by_chat ON tool_call_audit (chat_id, ended_at, tool_call_id);

-- Secrets the whole deployment shares, created on first use, so every replica computes
-- the same keyed digests without a flag to configure.
CREATE TABLE deployment_secrets (
    name TEXT PRIMARY KEY NOT NULL CHECK (length(CAST(name AS BLOB)) BETWEEN 1 AND 64),
    value BLOB NOT NULL CHECK (length(value) BETWEEN 16 AND 1024),
    created_at TEXT NOT NULL
) STRICT;
