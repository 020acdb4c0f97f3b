ALTER TABLE workspace_agent_context_resources RESET (fillfactor);
