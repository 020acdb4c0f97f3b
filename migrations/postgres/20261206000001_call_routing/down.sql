ALTER TABLE tool_calls DROP COLUMN cancel_requested, DROP COLUMN delivered_generation;
DROP TABLE call_streams;
