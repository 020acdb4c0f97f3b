DROP TABLE mcp_oauth_clients;
DROP TABLE mcp_credentials;
