-- Tool calls across replicas (issue 37).

-- Which replica holds each agent's call stream. `generation` grows with every stream an
-- agent opens (on any replica) and fences the old one: a replica delivers a call only
-- while its own generation is the row's and its lease has not lapsed. The lease is
-- milliseconds since the Unix epoch, renewed by the holder (one statement per replica).
-- No foreign key: a deleted agent's row lapses and is removed with its stream.
CREATE TABLE call_streams (
    agent_id uuid PRIMARY KEY,
    agent_run_id text NOT NULL CHECK (octet_length(agent_run_id) BETWEEN 1 AND 64),
    generation bigint NOT NULL CHECK (generation > 0),
    replica text NOT NULL CHECK (octet_length(replica) BETWEEN 1 AND 64),
    lease_until_ms bigint NOT NULL
);
CREATE INDEX call_streams_by_replica ON call_streams (replica);

-- The stream generation that delivered the call (NULL while pending), and whether a
-- cancel was asked for on a replica that does not hold the call's stream.
ALTER TABLE tool_calls
    ADD COLUMN delivered_generation bigint,
    ADD COLUMN cancel_requested boolean NOT NULL DEFAULT false;
