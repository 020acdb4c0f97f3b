//! The agent API's integration tests, one binary: the real gRPC service on loopback over
//! a real store (SQLite and PostgreSQL), for pushes, startups, tokens and the tool-call
//! channel's hub.

mod common;

mod behaviour;
mod delta;
mod postgres;
mod server_timings;
mod tool_call_hub;
