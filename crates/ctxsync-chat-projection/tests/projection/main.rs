//! The chat projection's integration tests, one binary.

mod common;

mod find_tools;
mod fuzz;
mod mcp_details;
mod naming;
mod pinning;
mod projection;
mod store;
