ALTER TABLE tool_calls DROP COLUMN cancel_requested;
ALTER TABLE tool_calls DROP COLUMN delivered_generation;
DROP TABLE call_streams;
