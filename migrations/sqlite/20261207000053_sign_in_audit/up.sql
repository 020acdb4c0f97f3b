-- The sign-in entries of the audit log (issue 50). SQLite twin of the PostgreSQL
-- migration: no column for a token, code, state or verifier.
CREATE TABLE sign_in_audit (
    -- The entry's own id: the listing's tie-break.
    id TEXT PRIMARY KEY NOT NULL CHECK (length(id) = 36),
    -- No foreign keys, no cascades: the ids stay as plain values after the agent, the
    -- chat or the sign-in row is deleted.
    agent_id TEXT NOT NULL CHECK (length(agent_id) = 36),
    -- The sign-in the entry is about; NULL for forgotten credentials, which outlive theirs.
    sign_in_id TEXT CHECK (sign_in_id IS NULL OR length(sign_in_id) = 36),
    server TEXT NOT NULL CHECK (length(CAST(server AS BLOB)) BETWEEN 1 AND 1024),
    status TEXT NOT NULL CHECK (status IN ('started', 'completed', 'failed', 'forgotten')),
    -- Who asked: the API token, a chat's page (`chat_id` says which), or the agent (it
    -- lost the credential).
    via TEXT NOT NULL CHECK (via IN ('api_token', 'page', 'agent')),
    chat_id TEXT CHECK (chat_id IS NULL OR length(chat_id) = 36),
    -- The authorization server a completed sign-in's credential came from.
    issuer TEXT CHECK (issuer IS NULL OR length(CAST(issuer AS BLOB)) BETWEEN 1 AND 2048),
    -- Why, in words: a failure's error, or why the agent forgot.
    reason TEXT CHECK (reason IS NULL OR length(CAST(reason AS BLOB)) BETWEEN 1 AND 2048),
    recorded_at TEXT NOT NULL,
    CHECK ((via = 'page') = (chat_id IS NOT NULL)),
    CHECK ((status = 'forgotten') = (sign_in_id IS NULL)),
    CHECK ((status = 'completed') = (issuer IS NOT NULL)),
    CHECK (status <> 'failed' OR reason IS NOT NULL),
    CHECK (status IN ('failed', 'forgotten') OR reason IS NULL)
) STRICT;
-- Listing newest first, overall and per agent or chat; pruning by age.
CREATE INDEX sign_in_audit_by_time ON sign_in_audit (recorded_at, id);
CREATE INDEX sign_in_audit_by_agent ON sign_in_audit (agent_id, recorded_at, id);
CREATE INDEX sign_in_audit_by_chat ON sign_in_audit (chat_id, recorded_at, id)
    WHERE chat_id IS NOT NULL;
