DROP TABLE gate_attempts;
