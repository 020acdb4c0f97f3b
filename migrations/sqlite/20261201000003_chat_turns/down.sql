DROP TABLE chat_turn_activations;
DROP TABLE chat_turns;
