-- Agent liveness (issue 49). A call stream that ends keeps its row as a record of when
-- this control plane saw it end (milliseconds since the Unix epoch, its own clock), so
-- every surface can say "offline since"; a new stream of the agent replaces the row.
-- NULL while the stream is open.
ALTER TABLE call_streams ADD COLUMN ended_at_ms bigint;
