-- Chats and their pinned copy of an agent's instruction files and skills.
CREATE TABLE chats (
    id uuid PRIMARY KEY,
    -- Deliberately no foreign key: deleting an agent leaves its chats pointing at the
    -- missing id, so readers report the agent as unknown and stale.
    agent_id uuid,
    -- The aggregate hash of the snapshot the chat pinned; NULL until it pins one.
    pinned_aggregate_hash text CHECK (octet_length(pinned_aggregate_hash) <= 64),
    pinned_at timestamptz,
    -- Set when a push changes the agent's aggregate hash away from the pinned one.
    dirty_since timestamptz,
    context_error text,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX chats_agent_id_idx ON chats (agent_id);

CREATE TABLE chat_context_resources (
    chat_id uuid NOT NULL REFERENCES chats (id) ON DELETE CASCADE,
    source text NOT NULL CHECK (source <> '' AND octet_length(source) <= 1024),
    source_path text CHECK (octet_length(source_path) <= 1024),
    -- Only instruction files and skills are pinned; MCP servers are runtime state.
    body_kind context_body_kind NOT NULL CHECK (body_kind IN ('instruction_file', 'skill')),
    body jsonb NOT NULL CHECK (jsonb_typeof(body) = 'object'),
    content_hash text NOT NULL CHECK (octet_length(content_hash) <= 64),
    size_bytes bigint NOT NULL CHECK (size_bytes >= 0),
    status context_resource_status NOT NULL,
    error text,
    pinned_at timestamptz NOT NULL,
    PRIMARY KEY (chat_id, source)
);
