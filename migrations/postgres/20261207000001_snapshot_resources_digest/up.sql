-- The SHA-256 of the resource fingerprints the snapshot's last push stored: a push whose
-- fingerprints hash the same (a phase-only push, a reconnect's repeat) compares and
-- rewrites no resource row without reading them. NULL until the agent's next push.
ALTER TABLE workspace_agent_context_snapshots ADD COLUMN resources_digest BYTEA;
