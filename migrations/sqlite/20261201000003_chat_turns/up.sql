-- A chat's turns as the API answered them, and the tools find_tools activated for each,
-- so any replica can serve a turn's follow-up requests.
CREATE TABLE chat_turns (
    id TEXT PRIMARY KEY NOT NULL CHECK (length(id) = 36),
    chat_id TEXT NOT NULL REFERENCES chats (id) ON DELETE CASCADE,
    -- 1, 2, 3, … within the chat, assigned in the inserting transaction: "the latest
    -- turn" never depends on a replica's clock. Only the last turns are kept.
    seq INTEGER NOT NULL CHECK (seq > 0),
    mode TEXT NOT NULL CHECK (mode IN ('default', 'plan')),
    -- The answer's note, discovery outcome and inventory error.
    outcome TEXT NOT NULL CHECK (json_valid(outcome) AND json_type(outcome) = 'object'),
    -- The answer's tools, in the order it listed them.
    tools TEXT NOT NULL CHECK (json_valid(tools) AND json_type(tools) = 'array'),
    created_at TEXT NOT NULL,
    UNIQUE (chat_id, seq)
) STRICT;

CREATE TABLE chat_turn_activations (
    turn_id TEXT NOT NULL REFERENCES chat_turns (id) ON DELETE CASCADE,
    tool TEXT NOT NULL CHECK (tool <> '' AND length(CAST(tool AS BLOB)) <= 64),
    activated_at TEXT NOT NULL,
    PRIMARY KEY (turn_id, tool)
) STRICT;
