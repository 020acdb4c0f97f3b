//! The `ctxsync-mcp-fixture` binary: a scripted MCP server for tests, demos and benchmarks.

use std::process::ExitCode;

use clap::Parser;
use ctxsync_mcp_fixture::{FixtureConfig, run_process};

#[tokio::main]
async fn main() -> ExitCode {
    run_process(FixtureConfig::parse()).await
}
