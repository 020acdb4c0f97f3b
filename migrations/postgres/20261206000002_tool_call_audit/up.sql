-- The tool-call audit log (issue 37): one row per call end, kept by age
-- (`--tool-call-audit-days`) whatever becomes of the call's turn, chat or agent.
CREATE TABLE tool_call_audit (
    -- The call's server-assigned id: one row per call, and the listing's tie-break.
    tool_call_id uuid PRIMARY KEY,
    -- No foreign keys, no cascades: the ids stay as plain values after the agent,
    -- chat or turn (and with it the call) is deleted.
    agent_id uuid,
    chat_id uuid NOT NULL,
    turn_id uuid NOT NULL,
    call_id text NOT NULL CHECK (octet_length(call_id) BETWEEN 1 AND 128),
    name text NOT NULL CHECK (octet_length(name) BETWEEN 1 AND 1024),
    server text NOT NULL CHECK (octet_length(server) <= 1024),
    tool text NOT NULL CHECK (octet_length(tool) <= 1024),
    status text NOT NULL CHECK (status IN ('complete', 'error', 'refused', 'timed_out', 'canceled', 'unknown')),
    reason text CHECK (reason IN ('stale_run', 'not_in_turn', 'tool_gone', 'denied', 'agent_unreachable', 'agent_unsupported', 'busy', 'agent_restarted', 'stream_lost')),
    -- The `code` of an `error` end.
    error_code bigint,
    duration_ms bigint CHECK (duration_ms >= 0),
    -- Keyed with the deployment's secret (below): never the arguments, which are not kept.
    arguments_digest text NOT NULL CHECK (length(arguments_digest) = 64),
    arguments_size bigint NOT NULL CHECK (arguments_size >= 0),
    -- Bytes of the stored result JSON; never the result.
    result_size bigint CHECK (result_size >= 0),
    truncated boolean NOT NULL,
    ended_at timestamptz NOT NULL
);
-- Listing newest first, overall and per agent or chat; pruning by age.
CREATE INDEX tool_call_audit_by_time ON tool_call_audit (ended_at, tool_call_id);
CREATE INDEX tool_call_audit_by_agent ON tool_call_audit (agent_id, ended_at, tool_call_id);
CREATE INDEX tool_call_audit_by_chat ON tool_call_audit (chat_id, ended_at, tool_call_id);

-- Secrets the whole deployment shares, created on first use, so every replica computes
-- the same keyed digests without a flag to configure.
CREATE TABLE deployment_secrets (
    name text PRIMARY KEY CHECK (octet_length(name) BETWEEN 1 AND 64),
    value bytea NOT NULL CHECK (octet_length(value) BETWEEN 16 AND 1024),
    created_at timestamptz NOT NULL
);
