//! Structured logs on stderr through `tracing`, filtered by `RUST_LOG` (default `info`,
//! with the MCP SDK's per-connection chatter at `warn`): human-readable text, or one JSON
//! object per line for log collectors (`--log-format json`). With JSON, every line the
//! process writes is an object, since containers merge stdout and stderr: the operator's
//! lines on stdout ([`operator_line`]), a fatal error ([`fatal`]) and a panic too.

use std::io::{IsTerminal, Write};
use std::sync::OnceLock;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::writer::MakeWriterExt;

/// The filter without `RUST_LOG`: rmcp logs every connection's start and end at `info`,
/// which would drown the agent's own lines with fifty servers.
const DEFAULT_FILTER: &str = "info,rmcp=warn";

/// Always off, whatever `RUST_LOG` says: rmcp's transport worker logs a failed HTTP
/// connection as `worker quit with fatal: … url: "…"`, quoting the endpoint's path and
/// query, which may carry credentials (found by the security scan test). The engine
/// reports the same failure, sanitized, in the discovery report.
const FORCED_OFF: &str = "rmcp::transport::worker=off";

/// The target of the operator's lines ([`operator_line`]): written to stdout, and never
/// filtered out, as the text format's plain lines are not.
const OPERATOR_TARGET: &str = "ctxsync::operator";

/// The format [`init`] installed; text before it (commands run in-process by tests).
static FORMAT: OnceLock<LogFormat> = OnceLock::new();

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
/// With JSON, a panic is logged as an `ERROR` object instead of the default text.
pub fn init(format: LogFormat) {
    init_for(format, true);
}

/// [`init`], with the MCP SDK's own lines (target `rmcp`) off, whatever `RUST_LOG` says,
/// unless `sdk_logs`: `discover` prints a report, and the SDK's lines (which quote
/// protocol messages in its own debug notation) belong only to its `--verbose`.
pub fn init_for(format: LogFormat, sdk_logs: bool) {
    if FORMAT.set(format).is_err() {
        return; // a second init (tests calling commands in-process) is harmless
    }
    let mut filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    if !sdk_logs {
        filter = filter.add_directive("rmcp=off".parse().expect("a valid directive"));
    }
    let filter = filter
        .add_directive(FORCED_OFF.parse().expect("a valid directive"))
        .add_directive(
            format!("{OPERATOR_TARGET}=info")
                .parse()
                .expect("a valid directive"),
        );
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    let _ = match format {
        // Colour codes only for a person at a terminal, not in files or test captures.
        LogFormat::Text => builder
            .with_writer(std::io::stderr)
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
        LogFormat::Json => {
            let writer = std::io::stdout
                .with_filter(|meta| meta.target() == OPERATOR_TARGET)
                .or_else(std::io::stderr);
            let installed = builder
                .with_writer(writer)
                .json()
                .flatten_event(true)
                .with_current_span(false)
                .with_span_list(true)
                .try_init();
            if installed.is_ok() {
                std::panic::set_hook(Box::new(log_panic));
            }
            installed
        }
    };
}

/// Whether [`init`] chose JSON.
fn json() -> bool {
    FORMAT.get() == Some(&LogFormat::Json)
}

/// A line for the operator on stdout (an address, where the token is): plain text, or a
/// JSON object whose `message` is the line.
pub fn operator_line(line: &str) {
    if json() {
        tracing::info!(target: OPERATOR_TARGET, "{line}");
        return;
    }
    // A closed stdout (a supervisor that stopped reading) must never take the process
    // down, so write errors are ignored.
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// The one line a failed command ends with on stderr: `error: …`, or an `ERROR` object.
pub fn fatal(message: &str) {
    if json() {
        tracing::error!("{message}");
    } else {
        eprintln!("{message}");
    }
}

/// Whether the raw command line (or `CTXSYNC_LOG_FORMAT`) asks for JSON logs: for the
/// errors found before the command line could be parsed.
pub fn json_requested(args: &[std::ffi::OsString]) -> bool {
    let mut args = args.iter().map(|arg| arg.to_str().unwrap_or_default());
    while let Some(arg) = args.next() {
        match arg {
            "--log-format" => return args.next() == Some("json"),
            "--log-format=json" => return true,
            _ if arg.starts_with("--log-format=") => return false,
            _ => {}
        }
    }
    std::env::var("CTXSYNC_LOG_FORMAT").is_ok_and(|format| format == "json")
}

/// The JSON panic hook: the panic's message and where it happened, as one `ERROR` object.
fn log_panic(info: &std::panic::PanicHookInfo<'_>) {
    let payload = info.payload();
    let message = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic without a message");
    let location = info
        .location()
        .map(|l| format!("{}:{}", l.file(), l.line()))
        .unwrap_or_default();
    let thread = std::thread::current();
    tracing::error!(
        target: "ctxsync::panic",
        thread = thread.name().unwrap_or("unnamed"),
        location,
        "panicked: {message}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_requested_by_flag_or_environment() {
        let args =
            |list: &[&str]| -> Vec<std::ffi::OsString> { list.iter().map(Into::into).collect() };
        assert!(json_requested(&args(&[
            "ctxsync",
            "server",
            "--log-format",
            "json"
        ])));
        assert!(json_requested(&args(&[
            "ctxsync",
            "--log-format=json",
            "server"
        ])));
        assert!(!json_requested(&args(&[
            "ctxsync",
            "--log-format",
            "text",
            "--bogus"
        ])));
    }
}
