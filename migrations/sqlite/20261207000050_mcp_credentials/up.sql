-- MCP sign-in credentials (issue 50). SQLite twin of the PostgreSQL migration: the OAuth
-- tokens per agent, server URL and issuer, and the client registrations per issuer and
-- redirect URI, every secret sealed under a key that is not in the database.
CREATE TABLE mcp_credentials (
    -- Deleting the agent deletes its credentials (the store turns foreign keys on).
    agent_id TEXT NOT NULL REFERENCES workspace_agents (id) ON DELETE CASCADE,
    server_name TEXT NOT NULL CHECK (length(CAST(server_name AS BLOB)) BETWEEN 1 AND 1024),
    server_url TEXT NOT NULL CHECK (length(CAST(server_url AS BLOB)) BETWEEN 1 AND 2048),
    issuer TEXT NOT NULL CHECK (length(CAST(issuer AS BLOB)) BETWEEN 1 AND 2048),
    account TEXT CHECK (account IS NULL OR length(CAST(account AS BLOB)) <= 1024),
    -- Space-separated, as OAuth writes them.
    scopes TEXT NOT NULL CHECK (length(CAST(scopes AS BLOB)) <= 4096),
    access_expires_at TEXT,
    signed_in_at TEXT NOT NULL,
    -- How the sign-in was asked for: 'api_token', or the chat it came from.
    signed_in_via TEXT NOT NULL CHECK (length(CAST(signed_in_via AS BLOB)) BETWEEN 1 AND 128),
    updated_at TEXT NOT NULL,
    -- The access and refresh tokens, the token type and any client secret, sealed.
    key_id TEXT NOT NULL CHECK (length(key_id) = 16),
    nonce BLOB NOT NULL CHECK (typeof(nonce) = 'blob' AND length(nonce) = 12),
    ciphertext BLOB NOT NULL CHECK (typeof(ciphertext) = 'blob' AND length(ciphertext) BETWEEN 17 AND 65536),
    PRIMARY KEY (agent_id, server_url, issuer)
) STRICT;

CREATE TABLE mcp_oauth_clients (
    issuer TEXT NOT NULL CHECK (length(CAST(issuer AS BLOB)) BETWEEN 1 AND 2048),
    redirect_uri TEXT NOT NULL CHECK (length(CAST(redirect_uri AS BLOB)) BETWEEN 1 AND 2048),
    client_id TEXT NOT NULL CHECK (length(CAST(client_id AS BLOB)) BETWEEN 1 AND 1024),
    -- The client secret, sealed as above; all three NULL for a public client.
    key_id TEXT CHECK (key_id IS NULL OR length(key_id) = 16),
    nonce BLOB CHECK (nonce IS NULL OR (typeof(nonce) = 'blob' AND length(nonce) = 12)),
    client_secret_ciphertext BLOB CHECK (client_secret_ciphertext IS NULL OR (typeof(client_secret_ciphertext) = 'blob' AND length(client_secret_ciphertext) BETWEEN 17 AND 65536)),
    created_at TEXT NOT NULL,
    PRIMARY KEY (issuer, redirect_uri),
    CHECK ((key_id IS NULL) = (nonce IS NULL) AND (nonce IS NULL) = (client_secret_ciphertext IS NULL))
) STRICT;
