-- MCP sign-in credentials (issue 50): the OAuth tokens a person's sign-in to a remote MCP
-- server left, per agent, server URL and issuer, and the dynamic client registrations
-- reused per issuer and redirect URI. Every secret is sealed (ChaCha20-Poly1305) under a
-- key that is not in the database; `key_id` names that key, and the associated data binds
-- each ciphertext to its row, so a copied ciphertext opens nowhere else. Only the
-- metadata a page may show is plaintext.
CREATE TABLE mcp_credentials (
    -- Deleting the agent deletes its credentials; rotating its token keeps them.
    agent_id uuid NOT NULL REFERENCES workspace_agents (id) ON DELETE CASCADE,
    server_name text NOT NULL CHECK (octet_length(server_name) BETWEEN 1 AND 1024),
    server_url text NOT NULL CHECK (octet_length(server_url) BETWEEN 1 AND 2048),
    issuer text NOT NULL CHECK (octet_length(issuer) BETWEEN 1 AND 2048),
    account text CHECK (octet_length(account) <= 1024),
    -- Space-separated, as OAuth writes them.
    scopes text NOT NULL CHECK (octet_length(scopes) <= 4096),
    access_expires_at timestamptz,
    signed_in_at timestamptz NOT NULL,
    -- How the sign-in was asked for: 'api_token', or the chat it came from.
    signed_in_via text NOT NULL CHECK (octet_length(signed_in_via) BETWEEN 1 AND 128),
    updated_at timestamptz NOT NULL,
    -- The access and refresh tokens, the token type and any client secret, sealed.
    key_id text NOT NULL CHECK (octet_length(key_id) = 16),
    nonce bytea NOT NULL CHECK (octet_length(nonce) = 12),
    ciphertext bytea NOT NULL CHECK (octet_length(ciphertext) BETWEEN 17 AND 65536),
    PRIMARY KEY (agent_id, server_url, issuer)
);

CREATE TABLE mcp_oauth_clients (
    issuer text NOT NULL CHECK (octet_length(issuer) BETWEEN 1 AND 2048),
    redirect_uri text NOT NULL CHECK (octet_length(redirect_uri) BETWEEN 1 AND 2048),
    client_id text NOT NULL CHECK (octet_length(client_id) BETWEEN 1 AND 1024),
    -- The client secret, sealed as above; all three NULL for a public client.
    key_id text CHECK (octet_length(key_id) = 16),
    nonce bytea CHECK (octet_length(nonce) = 12),
    client_secret_ciphertext bytea CHECK (octet_length(client_secret_ciphertext) BETWEEN 17 AND 65536),
    created_at timestamptz NOT NULL,
    PRIMARY KEY (issuer, redirect_uri),
    CHECK ((key_id IS NULL) = (nonce IS NULL) AND (nonce IS NULL) = (client_secret_ciphertext IS NULL))
);
