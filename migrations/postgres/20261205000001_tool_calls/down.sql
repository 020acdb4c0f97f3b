DROP TABLE tool_calls;
ALTER TABLE chat_turn_activations DROP COLUMN tool_name, DROP COLUMN server;
ALTER TABLE chat_turns DROP COLUMN origins, DROP COLUMN agent_run_id, DROP COLUMN agent_id;
ALTER TABLE workspace_agents DROP COLUMN accepts_tool_calls;
