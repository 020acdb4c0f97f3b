//! Persistence's integration tests, one binary: the store's own behaviour, through its
//! Rust API (what arrives over gRPC is `ctxsync-agent-api`'s suite).

mod common;

mod audit;
mod credentials;
mod gate_attempts;
mod liveness;
mod migrations;
mod page_sessions;
mod postgres_tls;
mod races;
mod sign_in_audit;
mod sign_in_status;
mod sign_ins;
mod stored_fixture;
mod tool_calls;
mod turns;
