-- A person's sign-in to an agent's HTTP MCP server (issue 50): the row is the routed
-- request between the HTTP handler (any replica) and the replica holding the agent's
-- stream. It carries what the agent's start left (the authorization URL in plaintext
-- until the browser is back, the pending state sealed like `mcp_credentials`' secrets,
-- the associated data binding it to this row's id), then the code the browser brought
-- back (sealed with it), until the credential is stored or the sign-in fails; a finished
-- sign-in keeps no secret. The OAuth state is kept only as its sha256.
CREATE TABLE mcp_sign_ins (
    id uuid PRIMARY KEY,
    -- Deleting the agent deletes its sign-ins.
    agent_id uuid NOT NULL REFERENCES workspace_agents (id) ON DELETE CASCADE,
    server_name text NOT NULL CHECK (octet_length(server_name) BETWEEN 1 AND 1024),
    status text NOT NULL CHECK (status IN ('asking', 'started', 'exchanging', 'signed_in', 'failed')),
    -- How the sign-in was asked for: 'api_token', or 'chat:<uuid>'.
    via text NOT NULL CHECK (octet_length(via) BETWEEN 1 AND 128),
    -- sha256 (hex) of the asking browser's binding; NULL: any browser may finish it.
    browser text CHECK (browser ~ '^[0-9a-f]{64}$'),
    -- sha256 (hex) of the OAuth `state`; the state itself is never stored.
    state_hash text UNIQUE CHECK (state_hash ~ '^[0-9a-f]{64}$'),
    authorization_url text CHECK (octet_length(authorization_url) BETWEEN 1 AND 8192),
    issuer text CHECK (octet_length(issuer) BETWEEN 1 AND 2048),
    server_url text CHECK (octet_length(server_url) BETWEEN 1 AND 2048),
    error text CHECK (octet_length(error) BETWEEN 1 AND 2048),
    -- The agent's pending state (and, once the browser is back, the code), sealed.
    key_id text CHECK (octet_length(key_id) = 16),
    nonce bytea CHECK (octet_length(nonce) = 12),
    ciphertext bytea CHECK (octet_length(ciphertext) BETWEEN 17 AND 65536),
    -- The replica working on it, and since when (a claim older than 30 s is stale).
    claimed_by text CHECK (octet_length(claimed_by) BETWEEN 1 AND 256),
    claimed_at timestamptz,
    created_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    CHECK ((key_id IS NULL) = (nonce IS NULL) AND (nonce IS NULL) = (ciphertext IS NULL)),
    CHECK ((claimed_by IS NULL) = (claimed_at IS NULL)),
    -- Only a sign-in under way keeps a secret.
    CHECK (status IN ('started', 'exchanging') OR key_id IS NULL),
    CHECK (status NOT IN ('started', 'exchanging') OR (state_hash IS NOT NULL AND server_url IS NOT NULL AND key_id IS NOT NULL)),
    -- The URL carries the state: kept only while the sign-in waits for the browser.
    CHECK ((status = 'started') = (authorization_url IS NOT NULL)),
    CHECK (status <> 'failed' OR error IS NOT NULL)
);

-- The hub's look-up of its agents' sign-ins to work on.
CREATE INDEX mcp_sign_ins_by_agent_status ON mcp_sign_ins (agent_id, status);
