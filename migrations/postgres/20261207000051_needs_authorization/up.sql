-- An MCP server that refused the agent for want of a sign-in (HTTP 401, or 403
-- `insufficient_scope`) is stored with its own status, so every reader can tell "a person
-- has to sign in" from "did not connect". The new label is not used by this transaction.
ALTER TYPE context_resource_status ADD VALUE IF NOT EXISTS 'needs_authorization';
