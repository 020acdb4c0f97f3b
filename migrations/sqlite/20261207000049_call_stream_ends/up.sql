-- Agent liveness (issue 49). SQLite twin of the PostgreSQL migration: an ended stream
-- keeps its row with the time the server saw it end; NULL while the stream is open.
ALTER TABLE call_streams ADD COLUMN ended_at_ms INTEGER;
