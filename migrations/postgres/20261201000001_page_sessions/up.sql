-- A browser's way into one chat's page, shared by every replica: one-time page links and
-- the sessions they are exchanged for. Only the sha256 of a link token or a session id
-- is stored; the raw value exists in the link or cookie alone.
CREATE TABLE page_links (
    token_digest bytea PRIMARY KEY CHECK (octet_length(token_digest) = 32),
    chat_id uuid NOT NULL REFERENCES chats (id) ON DELETE CASCADE,
    expires_at timestamptz NOT NULL,
    created_at timestamptz NOT NULL
);
-- The sweep and the live-row bound read by expiry; a chat's deletion finds its rows.
CREATE INDEX page_links_expires_at_idx ON page_links (expires_at);
CREATE INDEX page_links_chat_id_idx ON page_links (chat_id);

CREATE TABLE page_sessions (
    session_digest bytea PRIMARY KEY CHECK (octet_length(session_digest) = 32),
    chat_id uuid NOT NULL REFERENCES chats (id) ON DELETE CASCADE,
    expires_at timestamptz NOT NULL,
    created_at timestamptz NOT NULL
);
CREATE INDEX page_sessions_expires_at_idx ON page_sessions (expires_at);
CREATE INDEX page_sessions_chat_id_idx ON page_sessions (chat_id);
