//! Structured logs on stderr through `tracing`, filtered by `RUST_LOG` (default `info`,
//! with the MCP SDK's per-connection chatter at `warn`): human-readable text, or one JSON
//! object per line for log collectors (`--log-format json`).

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

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One readable line per event, coloured at a terminal.
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `message` and the event's
    /// fields at the top level, with the enclosing spans.
    Json,
}

/// Installs the global subscriber writing to stderr in `format`; a second call is a no-op.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER))
        .add_directive(FORCED_OFF.parse().expect("a valid directive"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // A second init (tests calling commands in-process) is harmless.
    let _ = match format {
        // Colour codes only for a person at a terminal, not in files or test captures.
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(true)
            .try_init(),
    };
}
