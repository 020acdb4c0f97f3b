//! Structured logs on stderr through `tracing`, filtered by `RUST_LOG` (default `info`,
//! with the MCP SDK's per-connection chatter at `warn`).

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// The filter without `RUST_LOG`: rmcp logs every connection's start and end at `info`,
/// which would drown the agent's own lines with fifty servers.
const DEFAULT_FILTER: &str = "info,rmcp=warn";

/// Always off, whatever `RUST_LOG` says: rmcp's transport worker logs a failed HTTP
/// connection as `worker quit with fatal: … url: "…"`, quoting the endpoint's path and
/// query, which may carry credentials (found by the security scan test). The engine
/// reports the same failure, sanitized, in the discovery report.
const FORCED_OFF: &str = "rmcp::transport::worker=off";

pub fn init() {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER))
        .add_directive(FORCED_OFF.parse().expect("a valid directive"));
    // A second init (tests calling commands in-process) is harmless.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour codes only for a person at a terminal, not in files or test captures.
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}
