-- A browser's way into one chat's page: one-time page links and the sessions they are
-- exchanged for. SQLite twin of the PostgreSQL migration. Only the sha256 of a link
-- token or a session id is stored; the raw value exists in the link or cookie alone.
CREATE TABLE page_links (
    token_digest BLOB PRIMARY KEY NOT NULL CHECK (typeof(token_digest) = 'blob' AND length(token_digest) = 32),
    chat_id TEXT NOT NULL REFERENCES chats (id) ON DELETE CASCADE,
    expires_at TEXT NOT NULL,
    created_at TEXT NOT NULL
) STRICT;
-- The sweep and the live-row bound read by expiry; a chat's deletion finds its rows.
CREATE INDEX page_links_expires_at_idx ON page_links (expires_at);
CREATE INDEX page_links_chat_id_idx ON page_links (chat_id);

CREATE TABLE page_sessions (
    session_digest BLOB PRIMARY KEY NOT NULL CHECK (typeof(session_digest) = 'blob' AND length(session_digest) = 32),
    chat_id TEXT NOT NULL REFERENCES chats (id) ON DELETE CASCADE,
    expires_at TEXT NOT NULL,
    created_at TEXT NOT NULL
) STRICT;
CREATE INDEX page_sessions_expires_at_idx ON page_sessions (expires_at);
CREATE INDEX page_sessions_chat_id_idx ON page_sessions (chat_id);
