DROP TABLE deployment_secrets;
DROP TABLE tool_call_audit;
