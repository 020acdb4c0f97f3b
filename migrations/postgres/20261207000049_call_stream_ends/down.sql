DELETE FROM call_streams WHERE ended_at_ms IS NOT NULL;
ALTER TABLE call_streams DROP COLUMN ended_at_ms;
