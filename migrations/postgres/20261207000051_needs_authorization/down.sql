-- PostgreSQL cannot drop one label of an enum: the type is rebuilt without it, and a row
-- that used it becomes what it was stored as before, a server that did not connect.
UPDATE workspace_agent_context_resources SET status = 'unreadable' WHERE status = 'needs_authorization';
UPDATE chat_context_resources SET status = 'unreadable' WHERE status = 'needs_authorization';
ALTER TYPE context_resource_status RENAME TO context_resource_status_with_sign_in;
CREATE TYPE context_resource_status AS ENUM ('ok', 'oversize', 'unreadable', 'invalid', 'excluded');
ALTER TABLE workspace_agent_context_resources
    ALTER COLUMN status TYPE context_resource_status USING status::text::context_resource_status;
ALTER TABLE chat_context_resources
    ALTER COLUMN status TYPE context_resource_status USING status::text::context_resource_status;
DROP TYPE context_resource_status_with_sign_in;
