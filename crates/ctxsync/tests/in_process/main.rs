//! The binary crate's tests that run the server inside the test process, one binary
//! (the replica and load-balancer tests also start the `ctxsync` binary as a child).

mod support;

mod audit;
mod browser;
mod browser_sign_in;
mod embedding;
mod grpc_probes;
mod http_api;
mod load_balanced;
mod load_balanced_calls;
mod mcp_details;
mod metrics;
mod one_view;
mod openapi;
mod plugins;
mod replica_sessions;
mod replicas;
mod scenarios;
mod security;
mod sessions;
mod sign_in;
mod tool_calls;
mod tool_calls_audit;
mod turns;
