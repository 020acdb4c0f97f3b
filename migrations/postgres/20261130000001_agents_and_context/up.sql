-- Agents, their latest context snapshot (one row per agent, overwritten) and its resources.
CREATE TYPE context_body_kind AS ENUM ('instruction_file', 'skill', 'mcp_config', 'mcp_server');
CREATE TYPE context_resource_status AS ENUM ('ok', 'oversize', 'unreadable', 'invalid', 'excluded');
CREATE TYPE mcp_discovery_phase AS ENUM ('unspecified', 'pending', 'complete');

CREATE TABLE workspace_agents (
    id uuid PRIMARY KEY,
    name text NOT NULL CHECK (name <> '' AND octet_length(name) <= 256),
    -- sha256 of the bearer token; the token itself is never stored.
    token_hash bytea NOT NULL UNIQUE CHECK (octet_length(token_hash) = 32),
    -- The run id of the agent process that is running now ('' = legacy, no guarantee).
    agent_run_id text NOT NULL DEFAULT '' CHECK (octet_length(agent_run_id) <= 64),
    startup_version text NOT NULL DEFAULT '',
    expanded_directory text NOT NULL DEFAULT '',
    -- The last 16 run ids this row replaced, oldest first; UpdateStartup refuses them.
    retired_agent_run_ids jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(retired_agent_run_ids) = 'array'),
    started_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE workspace_agent_context_snapshots (
    agent_id uuid PRIMARY KEY REFERENCES workspace_agents (id) ON DELETE CASCADE,
    agent_run_id text NOT NULL DEFAULT '' CHECK (octet_length(agent_run_id) <= 64),
    mcp_discovery_phase mcp_discovery_phase NOT NULL DEFAULT 'unspecified',
    version bigint NOT NULL CHECK (version >= 0),
    aggregate_hash text NOT NULL CHECK (octet_length(aggregate_hash) <= 64),
    snapshot_error text,
    received_at timestamptz NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE workspace_agent_context_resources (
    agent_id uuid NOT NULL REFERENCES workspace_agents (id) ON DELETE CASCADE,
    source text NOT NULL CHECK (source <> '' AND octet_length(source) <= 1024),
    source_path text CHECK (octet_length(source_path) <= 1024),
    body_kind context_body_kind NOT NULL,
    -- The body variant's fields under their proto names; an mcp_config body is always {}.
    body jsonb NOT NULL CHECK (jsonb_typeof(body) = 'object'),
    -- sha256 of the stored body, computed by the server, so an unchanged row is found
    -- without reading bodies back.
    body_digest bytea NOT NULL CHECK (octet_length(body_digest) = 32),
    content_hash text NOT NULL CHECK (octet_length(content_hash) <= 64),
    size_bytes bigint NOT NULL CHECK (size_bytes >= 0),
    status context_resource_status NOT NULL,
    error text,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (agent_id, source),
    CHECK (body_kind <> 'mcp_config' OR body = '{}'::jsonb)
);
