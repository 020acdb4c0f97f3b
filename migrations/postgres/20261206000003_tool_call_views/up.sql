-- A chat's recent calls, newest first (the page's list and its event stream): without it
-- each read scans every call of every chat.
CREATE INDEX tool_calls_recent_by_chat ON tool_calls (chat_id, started_at);
