-- Agents, their latest context snapshot (one row per agent, overwritten) and its resources.
-- SQLite twin of the PostgreSQL migration: uuids as canonical text, jsonb as JSON text,
-- bytea as BLOB, timestamptz as RFC 3339 text, enum types as CHECK-constrained text.
CREATE TABLE workspace_agents (
    id TEXT PRIMARY KEY NOT NULL CHECK (length(id) = 36),
    name TEXT NOT NULL CHECK (name <> '' AND length(CAST(name AS BLOB)) <= 256),
    -- sha256 of the bearer token; the token itself is never stored.
    token_hash BLOB NOT NULL UNIQUE CHECK (typeof(token_hash) = 'blob' AND length(token_hash) = 32),
    -- The run id of the agent process that is running now ('' = legacy, no guarantee).
    agent_run_id TEXT NOT NULL DEFAULT '' CHECK (length(CAST(agent_run_id AS BLOB)) <= 64),
    startup_version TEXT NOT NULL DEFAULT '',
    expanded_directory TEXT NOT NULL DEFAULT '',
    -- The last 16 run ids this row replaced, oldest first; UpdateStartup refuses them.
    retired_agent_run_ids TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(retired_agent_run_ids) AND json_type(retired_agent_run_ids) = 'array'),
    started_at TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
) STRICT;

CREATE TABLE workspace_agent_context_snapshots (
    agent_id TEXT PRIMARY KEY NOT NULL REFERENCES workspace_agents (id) ON DELETE CASCADE,
    agent_run_id TEXT NOT NULL DEFAULT '' CHECK (length(CAST(agent_run_id AS BLOB)) <= 64),
    mcp_discovery_phase TEXT NOT NULL DEFAULT 'unspecified' CHECK (mcp_discovery_phase IN ('unspecified', 'pending', 'complete')),
    version INTEGER NOT NULL CHECK (version >= 0),
    aggregate_hash TEXT NOT NULL CHECK (length(CAST(aggregate_hash AS BLOB)) <= 64),
    snapshot_error TEXT,
    received_at TEXT NOT NULL,
    created_at TEXT NOT NULL
) STRICT;

CREATE TABLE workspace_agent_context_resources (
    agent_id TEXT NOT NULL REFERENCES workspace_agents (id) ON DELETE CASCADE,
    source TEXT NOT NULL CHECK (source <> '' AND length(CAST(source AS BLOB)) <= 1024),
    source_path TEXT CHECK (length(CAST(source_path AS BLOB)) <= 1024),
    body_kind TEXT NOT NULL CHECK (body_kind IN ('instruction_file', 'skill', 'mcp_config', 'mcp_server')),
    -- The body variant's fields under their proto names; an mcp_config body is always {}.
    body TEXT NOT NULL CHECK (json_valid(body) AND json_type(body) = 'object'),
    -- sha256 of the stored body, computed by the server.
    body_digest BLOB NOT NULL CHECK (length(body_digest) = 32),
    content_hash TEXT NOT NULL CHECK (length(CAST(content_hash AS BLOB)) <= 64),
    size_bytes INTEGER NOT NULL CHECK (size_bytes >= 0),
    status TEXT NOT NULL CHECK (status IN ('ok', 'oversize', 'unreadable', 'invalid', 'excluded')),
    error TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (agent_id, source),
    CHECK (body_kind <> 'mcp_config' OR body = '{}')
) STRICT;
