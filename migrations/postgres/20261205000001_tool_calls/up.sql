-- Tool calls (issue 36).

-- Each UpdateStartup overwrites it: whether the running process takes calls.
ALTER TABLE workspace_agents ADD COLUMN accepts_tool_calls boolean NOT NULL DEFAULT false;

-- Where a turn's tools came from: the agent and run of the snapshot it was built from
-- (both NULL: no agent or no run, every call refused), and each model-facing name's
-- {"server", "tool"}. A call resolves against these, never the current snapshot.
-- No foreign key: agents are deleted without their chats, and a call of a turn whose
-- agent is gone is refused.
ALTER TABLE chat_turns
    ADD COLUMN agent_id uuid,
    ADD COLUMN agent_run_id text CHECK (octet_length(agent_run_id) BETWEEN 1 AND 64),
    ADD COLUMN origins jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(origins) = 'object');

-- An activated tool's origin in the turn's run; NULL when the turn's run was no longer
-- current (a call of it is refused).
ALTER TABLE chat_turn_activations
    ADD COLUMN server text CHECK (octet_length(server) BETWEEN 1 AND 1024),
    ADD COLUMN tool_name text CHECK (octet_length(tool_name) BETWEEN 1 AND 1024);

CREATE TABLE tool_calls (
    -- Server-assigned: what the agent sees and dedupes by.
    id uuid PRIMARY KEY,
    -- Calls are deleted with their turn (a running one is cancelled first).
    turn_id uuid NOT NULL REFERENCES chat_turns (id) ON DELETE CASCADE,
    chat_id uuid NOT NULL,
    -- The caller's id, unique within the turn.
    call_id text NOT NULL CHECK (octet_length(call_id) BETWEEN 1 AND 128),
    name text NOT NULL CHECK (octet_length(name) BETWEEN 1 AND 1024),
    -- '' when the name resolved to nothing (refused not_in_turn).
    server text NOT NULL CHECK (octet_length(server) <= 1024),
    tool text NOT NULL CHECK (octet_length(tool) <= 1024),
    -- The agent the call goes to; NULL for find_tools (answered by the server) and for
    -- a turn that recorded none. No foreign key: see chat_turns.agent_id.
    agent_id uuid,
    agent_run_id text CHECK (octet_length(agent_run_id) BETWEEN 1 AND 64),
    -- The canonical arguments, only until the agent acknowledged delivery (or the call
    -- ended); then only their digest and size remain.
    arguments text,
    arguments_digest text NOT NULL CHECK (length(arguments_digest) = 64),
    arguments_size bigint NOT NULL CHECK (arguments_size >= 0),
    timeout_ms bigint NOT NULL CHECK (timeout_ms >= 0),
    status text NOT NULL CHECK (status IN ('running', 'complete', 'error', 'refused', 'timed_out', 'canceled', 'unknown')),
    reason text CHECK (reason IN ('stale_run', 'not_in_turn', 'tool_gone', 'denied', 'agent_unreachable', 'agent_unsupported', 'busy', 'agent_restarted', 'stream_lost')),
    -- JSON as text, not jsonb: a tool's output may hold "\u0000", which jsonb refuses,
    -- and an end that cannot be stored would leave the call running.
    -- {"code", "message"} for `error`.
    error text CHECK (json_typeof(error::json) = 'object'),
    -- The CallToolResult for `complete`.
    result text CHECK (result IS NULL OR json_typeof(result::json) IS NOT NULL),
    truncated boolean NOT NULL DEFAULT false,
    -- The latest {"progress", "total"?, "message"?} reported.
    progress text CHECK (json_typeof(progress::json) = 'object'),
    delivered boolean NOT NULL DEFAULT false,
    started_at timestamptz NOT NULL,
    ended_at timestamptz,
    duration_ms bigint CHECK (duration_ms >= 0),
    CHECK ((status = 'running') = (ended_at IS NULL)),
    CHECK (status = 'running' OR arguments IS NULL),
    UNIQUE (turn_id, call_id)
);
-- The running calls of an agent, oldest first (resent, or ended when its process goes).
CREATE INDEX tool_calls_running_by_agent ON tool_calls (agent_id, started_at)
    WHERE status = 'running';
