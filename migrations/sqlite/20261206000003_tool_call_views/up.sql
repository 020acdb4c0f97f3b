-- A chat's recent calls, newest first (the page's list and its event stream). SQLite twin
-- of the PostgreSQL migration.
CREATE INDEX tool_calls_recent_by_chat ON tool_calls (chat_id, started_at);
