-- A person's sign-in to an agent's HTTP MCP server (issue 50). SQLite twin of the
-- PostgreSQL migration: the row is the routed request between the HTTP handler (any
-- replica) and the replica holding the agent's stream.
CREATE TABLE mcp_sign_ins (
    id TEXT PRIMARY KEY NOT NULL CHECK (length(id) = 36),
    -- Deleting the agent deletes its sign-ins (the store turns foreign keys on).
    agent_id TEXT NOT NULL REFERENCES workspace_agents (id) ON DELETE CASCADE,
    server_name TEXT NOT NULL CHECK (length(CAST(server_name AS BLOB)) BETWEEN 1 AND 1024),
    status TEXT NOT NULL CHECK (status IN ('asking', 'started', 'exchanging', 'signed_in', 'failed')),
    -- How the sign-in was asked for: 'api_token', or 'chat:<uuid>'.
    via TEXT NOT NULL CHECK (length(CAST(via AS BLOB)) BETWEEN 1 AND 128),
    -- sha256 (hex) of the asking browser's binding; NULL: any browser may finish it.
    browser TEXT CHECK (browser IS NULL OR (length(browser) = 64 AND browser NOT GLOB '*[^0-9a-f]*')),
    -- sha256 (hex) of the OAuth `state`; the state itself is never stored.
    state_hash TEXT UNIQUE CHECK (state_hash IS NULL OR (length(state_hash) = 64 AND state_hash NOT GLOB '*[^0-9a-f]*')),
    authorization_url TEXT CHECK (authorization_url IS NULL OR length(CAST(authorization_url AS BLOB)) BETWEEN 1 AND 8192),
    issuer TEXT CHECK (issuer IS NULL OR length(CAST(issuer AS BLOB)) BETWEEN 1 AND 2048),
    server_url TEXT CHECK (server_url IS NULL OR length(CAST(server_url AS BLOB)) BETWEEN 1 AND 2048),
    error TEXT CHECK (error IS NULL OR length(CAST(error AS BLOB)) BETWEEN 1 AND 2048),
    -- The agent's pending state (and, once the browser is back, the code), sealed.
    key_id TEXT CHECK (key_id IS NULL OR length(key_id) = 16),
    nonce BLOB CHECK (nonce IS NULL OR (typeof(nonce) = 'blob' AND length(nonce) = 12)),
    ciphertext BLOB CHECK (ciphertext IS NULL OR (typeof(ciphertext) = 'blob' AND length(ciphertext) BETWEEN 17 AND 65536)),
    -- The replica working on it, and since when (a claim older than 30 s is stale).
    claimed_by TEXT CHECK (claimed_by IS NULL OR length(CAST(claimed_by AS BLOB)) BETWEEN 1 AND 256),
    claimed_at TEXT,
    created_at TEXT NOT NULL,
    expires_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    CHECK ((key_id IS NULL) = (nonce IS NULL) AND (nonce IS NULL) = (ciphertext IS NULL)),
    CHECK ((claimed_by IS NULL) = (claimed_at IS NULL)),
    -- Only a sign-in under way keeps a secret.
    CHECK (status IN ('started', 'exchanging') OR key_id IS NULL),
    CHECK (status NOT IN ('started', 'exchanging') OR (state_hash IS NOT NULL AND server_url IS NOT NULL AND key_id IS NOT NULL)),
    -- The URL carries the state: kept only while the sign-in waits for the browser.
    CHECK ((status = 'started') = (authorization_url IS NOT NULL)),
    CHECK (status <> 'failed' OR error IS NOT NULL)
) STRICT;

-- The hub's look-up of its agents' sign-ins to work on.
CREATE INDEX mcp_sign_ins_by_agent_status ON mcp_sign_ins (agent_id, status);
