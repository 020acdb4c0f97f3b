DROP TABLE workspace_agent_context_resources;
DROP TABLE workspace_agent_context_snapshots;
DROP TABLE workspace_agents;
DROP TYPE mcp_discovery_phase;
DROP TYPE context_resource_status;
DROP TYPE context_body_kind;
