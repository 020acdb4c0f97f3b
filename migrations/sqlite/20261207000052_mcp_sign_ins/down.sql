DROP TABLE mcp_sign_ins;
