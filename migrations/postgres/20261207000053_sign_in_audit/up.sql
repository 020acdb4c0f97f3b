-- The sign-in entries of the audit log (issue 50): a person's sign-in to an agent's MCP
-- server started, completed or failed, and its credentials forgotten, each written in the
-- transaction of the change it records and kept by age (`--tool-call-audit-days`, as
-- `tool_call_audit`) whatever becomes of the agent, its chats or the sign-in row. The
-- table has no column for a token, code, state or verifier.
CREATE TABLE sign_in_audit (
    -- The entry's own id: the listing's tie-break.
    id uuid PRIMARY KEY,
    -- No foreign keys, no cascades: the ids stay as plain values after the agent, the
    -- chat or the sign-in row is deleted.
    agent_id uuid NOT NULL,
    -- The sign-in the entry is about; NULL for forgotten credentials, which outlive theirs.
    sign_in_id uuid,
    server text NOT NULL CHECK (octet_length(server) BETWEEN 1 AND 1024),
    status text NOT NULL CHECK (status IN ('started', 'completed', 'failed', 'forgotten')),
    -- Who asked: the API token, a chat's page (`chat_id` says which), or the agent (it
    -- lost the credential).
    via text NOT NULL CHECK (via IN ('api_token', 'page', 'agent')),
    chat_id uuid,
    -- The authorization server a completed sign-in's credential came from.
    issuer text CHECK (octet_length(issuer) BETWEEN 1 AND 2048),
    -- Why, in words: a failure's error, or why the agent forgot.
    reason text CHECK (octet_length(reason) BETWEEN 1 AND 2048),
    recorded_at timestamptz NOT NULL,
    CHECK ((via = 'page') = (chat_id IS NOT NULL)),
    CHECK ((status = 'forgotten') = (sign_in_id IS NULL)),
    CHECK ((status = 'completed') = (issuer IS NOT NULL)),
    CHECK (status <> 'failed' OR reason IS NOT NULL),
    CHECK (status IN ('failed', 'forgotten') OR reason IS NULL)
);
-- Listing newest first, overall and per agent or chat; pruning by age.
CREATE INDEX sign_in_audit_by_time ON sign_in_audit (recorded_at, id);
CREATE INDEX sign_in_audit_by_agent ON sign_in_audit (agent_id, recorded_at, id);
CREATE INDEX sign_in_audit_by_chat ON sign_in_audit (chat_id, recorded_at, id)
    WHERE chat_id IS NOT NULL;
