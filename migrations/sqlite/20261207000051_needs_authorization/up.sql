-- An MCP server that refused the agent for want of a sign-in (HTTP 401, or 403
-- `insufficient_scope`) is stored with its own status. SQLite cannot change a CHECK in
-- place: the table is rebuilt with the same columns, keys and rows.
CREATE TABLE workspace_agent_context_resources_new (
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
    status TEXT NOT NULL CHECK (status IN ('ok', 'oversize', 'unreadable', 'invalid', 'excluded', 'needs_authorization')),
    error TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (agent_id, source),
    CHECK (body_kind <> 'mcp_config' OR body = '{}'),
    CHECK (status <> 'needs_authorization' OR body_kind = 'mcp_server')
) STRICT;
INSERT INTO workspace_agent_context_resources_new SELECT * FROM workspace_agent_context_resources;
DROP TABLE workspace_agent_context_resources;
ALTER TABLE workspace_agent_context_resources_new RENAME TO workspace_agent_context_resources;
