-- Resource rows are rewritten in place by every push that edits them: leaving half of
-- each page free lets PostgreSQL put the new row version on the same page (a HOT update),
-- so an update adds no index entry and the fingerprint read of a push visits one index
-- entry per row instead of one per version. Applies to pages written from now on.
ALTER TABLE workspace_agent_context_resources SET (fillfactor = 50);
