-- A chat's turns as the API answered them, and the tools find_tools activated for each,
-- so any replica can serve a turn's follow-up requests.
CREATE TABLE chat_turns (
    id uuid PRIMARY KEY,
    chat_id uuid NOT NULL REFERENCES chats (id) ON DELETE CASCADE,
    -- 1, 2, 3, … within the chat, assigned in the inserting transaction: "the latest
    -- turn" never depends on a replica's clock. Only the last turns are kept.
    seq bigint NOT NULL CHECK (seq > 0),
    mode text NOT NULL CHECK (mode IN ('default', 'plan')),
    -- The answer's note, discovery outcome and inventory error.
    outcome jsonb NOT NULL CHECK (jsonb_typeof(outcome) = 'object'),
    -- The answer's tools, in the order it listed them.
    tools jsonb NOT NULL CHECK (jsonb_typeof(tools) = 'array'),
    created_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (chat_id, seq)
);

CREATE TABLE chat_turn_activations (
    turn_id uuid NOT NULL REFERENCES chat_turns (id) ON DELETE CASCADE,
    tool text NOT NULL CHECK (tool <> '' AND octet_length(tool) <= 64),
    activated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (turn_id, tool)
);
