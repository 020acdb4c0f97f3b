DROP INDEX tool_calls_recent_by_chat;
