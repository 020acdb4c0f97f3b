-- Tool calls (issue 36). SQLite twin of the PostgreSQL migration.

-- Each UpdateStartup overwrites it: whether the running process takes calls.
ALTER TABLE workspace_agents
    ADD COLUMN accepts_tool_calls INTEGER NOT NULL DEFAULT 0 CHECK (accepts_tool_calls IN (0, 1));

-- Where a turn's tools came from: the agent and run of the snapshot it was built from
-- (both NULL: no agent or no run, every call refused), and each model-facing name's
-- {"server", "tool"}. A call resolves against these, never the current snapshot.
-- No foreign key: agents are deleted without their chats, and a call of a turn whose
-- agent is gone is refused.
ALTER TABLE chat_turns ADD COLUMN agent_id TEXT CHECK (agent_id IS NULL OR length(agent_id) = 36);
ALTER TABLE chat_turns
    ADD COLUMN agent_run_id TEXT CHECK (agent_run_id IS NULL OR length(CAST(agent_run_id AS BLOB)) BETWEEN 1 AND 64);
ALTER TABLE chat_turns
    ADD COLUMN origins TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(origins) AND json_type(origins) = 'object');

-- An activated tool's origin in the turn's run; NULL when the turn's run was no longer
-- current (a call of it is refused). Column CHECKs only, so down.sql can drop them.
ALTER TABLE chat_turn_activations
    ADD COLUMN server TEXT CHECK (server IS NULL OR length(CAST(server AS BLOB)) BETWEEN 1 AND 1024);
ALTER TABLE chat_turn_activations
    ADD COLUMN tool_name TEXT CHECK (tool_name IS NULL OR length(CAST(tool_name AS BLOB)) BETWEEN 1 AND 1024);

CREATE TABLE tool_calls (
    -- Server-assigned: what the agent sees and dedupes by.
    id TEXT PRIMARY KEY NOT NULL CHECK (length(id) = 36),
    -- Calls are deleted with their turn (a running one is cancelled first).
    turn_id TEXT NOT NULL REFERENCES chat_turns (id) ON DELETE CASCADE,
    chat_id TEXT NOT NULL CHECK (length(chat_id) = 36),
    -- The caller's id, unique within the turn.
    call_id TEXT NOT NULL CHECK (length(CAST(call_id AS BLOB)) BETWEEN 1 AND 128),
    name TEXT NOT NULL CHECK (length(CAST(name AS BLOB)) BETWEEN 1 AND 1024),
    -- '' when the name resolved to nothing (refused not_in_turn).
    server TEXT NOT NULL CHECK (length(CAST(server AS BLOB)) <= 1024),
    tool TEXT NOT NULL CHECK (length(CAST(tool AS BLOB)) <= 1024),
    -- The agent the call goes to; NULL for find_tools (answered by the server) and for
    -- a turn that recorded none. No foreign key: see chat_turns.agent_id.
    agent_id TEXT CHECK (agent_id IS NULL OR length(agent_id) = 36),
    agent_run_id TEXT CHECK (agent_run_id IS NULL OR length(CAST(agent_run_id AS BLOB)) BETWEEN 1 AND 64),
    -- The canonical arguments, only until the agent acknowledged delivery (or the call
    -- ended); then only their digest and size remain.
    arguments TEXT,
    arguments_digest TEXT NOT NULL CHECK (length(arguments_digest) = 64),
    arguments_size INTEGER NOT NULL CHECK (arguments_size >= 0),
    timeout_ms INTEGER NOT NULL CHECK (timeout_ms >= 0),
    status TEXT NOT NULL CHECK (status IN ('running', 'complete', 'error', 'refused', 'timed_out', 'canceled', 'unknown')),
    reason TEXT CHECK (reason IS NULL OR reason IN ('stale_run', 'not_in_turn', 'tool_gone', 'denied', 'agent_unreachable', 'agent_unsupported', 'busy', 'agent_restarted', 'stream_lost')),
    -- {"code", "message"} for `error`.
    error TEXT CHECK (error IS NULL OR (json_valid(error) AND json_type(error) = 'object')),
    -- The CallToolResult for `complete`.
    result TEXT CHECK (result IS NULL OR json_valid(result)),
    truncated INTEGER NOT NULL DEFAULT 0 CHECK (truncated IN (0, 1)),
    -- The latest {"progress", "total"?, "message"?} reported.
    progress TEXT CHECK (progress IS NULL OR (json_valid(progress) AND json_type(progress) = 'object')),
    delivered INTEGER NOT NULL DEFAULT 0 CHECK (delivered IN (0, 1)),
    started_at TEXT NOT NULL,
    ended_at TEXT,
    duration_ms INTEGER CHECK (duration_ms IS NULL OR duration_ms >= 0),
    CHECK ((status = 'running') = (ended_at IS NULL)),
    CHECK (status = 'running' OR arguments IS NULL),
    UNIQUE (turn_id, call_id)
) STRICT;
-- The running calls of an agent, oldest first (resent, or ended when its process goes).
CREATE INDEX tool_calls_running_by_agent ON tool_calls (agent_id, started_at)
    WHERE status = 'running';
