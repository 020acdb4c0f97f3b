-- While discovery is pending, the servers still connecting: [{"server_name", "elapsed_ms"}]
-- as the agent measured them when it built the snapshot (see received_at).
ALTER TABLE workspace_agent_context_snapshots
    ADD COLUMN pending_servers TEXT NOT NULL DEFAULT '[]'
    CHECK (json_valid(pending_servers) AND json_type(pending_servers) = 'array');
