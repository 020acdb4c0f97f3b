-- Chats and their pinned copy of an agent's instruction files and skills.
CREATE TABLE chats (
    id TEXT PRIMARY KEY NOT NULL CHECK (length(id) = 36),
    -- Deliberately no foreign key: deleting an agent leaves its chats pointing at the
    -- missing id, so readers report the agent as unknown and stale.
    agent_id TEXT CHECK (length(agent_id) = 36),
    -- The aggregate hash of the snapshot the chat pinned; NULL until it pins one.
    pinned_aggregate_hash TEXT CHECK (length(CAST(pinned_aggregate_hash AS BLOB)) <= 64),
    pinned_at TEXT,
    -- Set when a push changes the agent's aggregate hash away from the pinned one.
    dirty_since TEXT,
    context_error TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
) STRICT;
CREATE INDEX chats_agent_id_idx ON chats (agent_id);

CREATE TABLE chat_context_resources (
    chat_id TEXT NOT NULL REFERENCES chats (id) ON DELETE CASCADE,
    source TEXT NOT NULL CHECK (source <> '' AND length(CAST(source AS BLOB)) <= 1024),
    source_path TEXT CHECK (length(CAST(source_path AS BLOB)) <= 1024),
    -- Only instruction files and skills are pinned; MCP servers are runtime state.
    body_kind TEXT NOT NULL CHECK (body_kind IN ('instruction_file', 'skill')),
    body TEXT NOT NULL CHECK (json_valid(body) AND json_type(body) = 'object'),
    content_hash TEXT NOT NULL CHECK (length(CAST(content_hash AS BLOB)) <= 64),
    size_bytes INTEGER NOT NULL CHECK (size_bytes >= 0),
    status TEXT NOT NULL CHECK (status IN ('ok', 'oversize', 'unreadable', 'invalid', 'excluded')),
    error TEXT,
    pinned_at TEXT NOT NULL,
    PRIMARY KEY (chat_id, source)
) STRICT;
