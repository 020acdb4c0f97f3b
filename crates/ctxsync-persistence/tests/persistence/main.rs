//! Persistence's integration tests, one binary.

mod common;

mod audit;
mod behaviour;
mod call_channel;
mod delta;
mod gate_attempts;
mod migrations;
mod page_sessions;
mod postgres;
mod postgres_tls;
mod races;
mod server_timings;
mod tool_calls;
mod turns;
