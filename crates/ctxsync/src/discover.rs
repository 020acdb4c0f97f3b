//! `ctxsync discover`: runs MCP discovery locally (no server), shows live per-server
//! progress on stderr, and prints the final report as a table or as JSON.

use std::fmt::Write as _;
use std::io::{IsTerminal, Write as _};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use ctxsync_agent_diagnostics::{Engine, Progress, RetryPolicy};
use ctxsync_mcp_model::{Report, ReportPhase};

use crate::terminal::{for_terminal, json_for_terminal};

/// The longest progress line drawn on a terminal; longer lists of names are cut.
const MAX_PROGRESS_LINE_CHARS: usize = 100;

/// `ctxsync discover --help`'s description (set on the subcommand, as
/// [`crate::agent::LONG_ABOUT`] is).
pub const LONG_ABOUT: &str = "Discover the workspace's MCP servers locally, exactly as the \
    agent would, and print what each one offers or why it failed, plus any problem in the \
    config files. No server is needed, so it can gate a CI job or a pre-commit hook: it \
    exits 1 when a config file has an error or a declared server failed (after printing the \
    report), and 0 when every server connected, warnings included. --allow-failures exits 0 \
    whatever the outcomes.";

/// `ctxsync discover`'s flags.
#[derive(Debug, Args)]
pub struct DiscoverArgs {
    /// The workspace directory: `.mcp.json` is read from it and MCP servers run in it.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub workspace: PathBuf,
    /// More MCP config files, read after `<workspace>/.mcp.json` (repeatable; relative to
    /// the current directory).
    #[arg(long = "mcp-config", value_name = "PATH")]
    pub mcp_configs: Vec<PathBuf>,
    /// Print the report as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Bound on one MCP server's start, `initialize` and first tool list.
    #[arg(long, value_name = "MS", default_value_t = crate::agent::default_mcp_timeout_ms())]
    pub mcp_timeout_ms: u64,
    /// Exit 0 even when a config file has an error or a server failed (the report still
    /// says so).
    #[arg(long)]
    pub allow_failures: bool,
    /// Also print the MCP SDK's own log lines (e.g. about messages a server should not
    /// have sent) on stderr.
    #[arg(long)]
    pub verbose: bool,
    /// Where Agent Plugins packages come from.
    #[command(flatten)]
    pub plugins: crate::agent::PluginArgs,
}

/// Runs one discovery (no reloads, no retries) until its phase is complete, then prints
/// the report; Ctrl-C or SIGTERM ends it early with an error, and so does a config error
/// or a failed server unless `--allow-failures`, after the report is printed.
pub async fn run(args: DiscoverArgs) -> Result<()> {
    let workspace = crate::agent::workspace_dir(&args.workspace)?;
    let mcp_configs = crate::agent::absolute_paths(args.mcp_configs)?;
    let plugins = args.plugins.setup(&workspace)?;
    // A token in the environment is still a secret to keep out of diagnostics.
    let token = std::env::var(crate::agent::TOKEN_ENV).unwrap_or_default();
    let mut config = crate::agent::engine_config(
        &workspace,
        &mcp_configs,
        &plugins,
        Duration::from_millis(args.mcp_timeout_ms),
        &token,
    );
    // One discovery: no reloads, and no retries (they never move the phase anyway).
    config.watch = false;
    config.retry = RetryPolicy {
        enabled: false,
        ..RetryPolicy::default()
    };
    let engine = Engine::start(config);
    let mut display = ProgressDisplay::new(std::io::stderr().is_terminal());
    let completed = wait_for_completion(&engine, &mut display).await;
    display.finish();
    engine.close().await;
    let report = completed?;
    if args.json {
        let json = serde_json::to_string_pretty(&*report).context("serializing the report")?;
        println!("{}", json_for_terminal(&json));
    } else {
        print!("{}", render_table(&report));
    }
    match failures(&report) {
        Some(failures) if !args.allow_failures => {
            anyhow::bail!("{failures} (the report above says why; --allow-failures exits 0)")
        }
        _ => Ok(()),
    }
}

/// What makes the discovery fail a CI job, in words: config files with an error and
/// servers that did not connect. Warnings never do.
fn failures(report: &Report) -> Option<String> {
    let configs = report
        .config_outcomes
        .iter()
        .filter(|outcome| outcome.error.is_some())
        .count();
    let sign_in = report
        .servers
        .iter()
        .filter(|s| s.needs_authorization)
        .count();
    let servers = report
        .servers
        .iter()
        .filter(|s| !s.connected && !s.needs_authorization)
        .count();
    let mut parts = Vec::new();
    match configs {
        0 => {}
        1 => parts.push("1 MCP config file has an error".to_owned()),
        n => parts.push(format!("{n} MCP config files have errors")),
    }
    match servers {
        0 => {}
        1 => parts.push("1 MCP server failed".to_owned()),
        n => parts.push(format!("{n} MCP servers failed")),
    }
    match sign_in {
        0 => {}
        1 => parts.push("1 MCP server needs a person to sign in".to_owned()),
        n => parts.push(format!("{n} MCP servers need a person to sign in")),
    }
    (!parts.is_empty()).then(|| parts.join(" and "))
}

/// Waits until the phase is Complete, showing progress; Ctrl-C or SIGTERM ends the wait.
async fn wait_for_completion(
    engine: &Engine,
    display: &mut ProgressDisplay,
) -> Result<std::sync::Arc<Report>> {
    let mut reports = engine.subscribe();
    let mut progress = engine.progress();
    let mut progress_open = true;
    let stop = crate::server::wait_for_stop_signal();
    tokio::pin!(stop);
    loop {
        display.show(&progress.borrow_and_update());
        let report = reports.borrow_and_update().clone();
        if report.phase == ReportPhase::Complete {
            return Ok(report);
        }
        tokio::select! {
            changed = reports.changed() => {
                changed.map_err(|_| anyhow::anyhow!("the MCP engine stopped before discovery completed"))?;
            }
            changed = progress.changed(), if progress_open => progress_open = changed.is_ok(),
            () = &mut stop => anyhow::bail!("interrupted before discovery completed"),
        }
    }
}

/// "Starting MCP servers (k/n): names" on stderr: redrawn in place on a terminal, one
/// plain line per change otherwise.
#[derive(Debug)]
struct ProgressDisplay {
    terminal: bool,
    last: Option<String>,
    drawn: bool,
}

impl ProgressDisplay {
    fn new(terminal: bool) -> Self {
        Self {
            terminal,
            last: None,
            drawn: false,
        }
    }

    fn show(&mut self, progress: &Progress) {
        let Some(line) = progress_line(progress) else {
            return;
        };
        if self.last.as_ref() == Some(&line) {
            return;
        }
        let mut stderr = std::io::stderr().lock();
        // A closed stderr must not stop discovery; the progress is only a courtesy.
        let _ = if self.terminal {
            let shown: String = line.chars().take(MAX_PROGRESS_LINE_CHARS).collect();
            self.drawn = true;
            write!(stderr, "\r\x1b[2K{shown}").and_then(|()| stderr.flush())
        } else {
            writeln!(stderr, "{line}")
        };
        self.last = Some(line);
    }

    /// Clears the redrawn line, so the table starts on a clean line.
    fn finish(&mut self) {
        if self.terminal && self.drawn {
            let mut stderr = std::io::stderr().lock();
            let _ = write!(stderr, "\r\x1b[2K").and_then(|()| stderr.flush());
            self.drawn = false;
        }
    }
}

/// The progress line, or `None` while nothing is being started.
fn progress_line(progress: &Progress) -> Option<String> {
    if progress.total == 0 {
        return None;
    }
    let mut line = format!(
        "Starting MCP servers ({}/{})",
        progress.finished, progress.total
    );
    if !progress.connecting.is_empty() {
        let names: Vec<String> = progress
            .connecting
            .iter()
            .map(|name| one_line(name))
            .collect();
        let _ = write!(line, ": {}", names.join(", "));
    }
    Some(line)
}

/// The servers (status, tool count, error or warning), then the config files' outcomes.
fn render_table(report: &Report) -> String {
    let mut out = String::new();
    if report.servers.is_empty() {
        out.push_str("No MCP servers.\n");
    } else {
        let rows: Vec<[String; 7]> = report
            .servers
            .iter()
            .map(|server| {
                let details = server.details.as_ref();
                let revision = details.map_or_else(String::new, |d| one_line(&d.protocol_version));
                let time = details.map_or_else(String::new, |d| {
                    let t = d.timings;
                    human_ms(t.start_ms.unwrap_or(0) + t.handshake_ms + t.tools_ms)
                });
                let (status, note) = match (&server.error, &server.warning) {
                    (Some(error), _) if server.needs_authorization => {
                        ("needs_authorization", one_line(error))
                    }
                    (Some(error), _) if !server.connected => ("failed", one_line(error)),
                    _ if !server.connected => ("failed", "failed to connect".to_owned()),
                    (_, Some(warning)) => ("ok", format!("warning: {}", one_line(warning))),
                    _ => ("ok", String::new()),
                };
                // A plugin's server shows under its own name, beside its plugin.
                let (plugin, name) = match server.plugin() {
                    Some(plugin) => (plugin, &server.name[plugin.len() + 1..]),
                    None => ("-", server.name.as_str()),
                };
                [
                    one_line(name),
                    one_line(plugin),
                    status.to_owned(),
                    server.tools.len().to_string(),
                    revision,
                    time,
                    note,
                ]
            })
            .collect();
        table(
            &mut out,
            [
                "SERVER",
                "PLUGIN",
                "STATUS",
                "TOOLS",
                "MCP",
                "TIME",
                "ERROR OR WARNING",
            ],
            &rows,
        );
    }
    out.push('\n');
    if report.config_outcomes.is_empty() {
        out.push_str("No problems in the MCP config files.\n");
    } else {
        let rows: Vec<[String; 2]> = report
            .config_outcomes
            .iter()
            .map(|outcome| {
                let mut notes = Vec::new();
                if let Some(error) = &outcome.error {
                    notes.push(format!("error: {}", one_line(error)));
                }
                if let Some(warning) = &outcome.warning {
                    notes.push(format!("warning: {}", one_line(warning)));
                }
                [
                    one_line(&outcome.path.display().to_string()),
                    notes.join("; "),
                ]
            })
            .collect();
        table(&mut out, ["CONFIG FILE", "ERROR OR WARNING"], &rows);
    }
    out
}

/// How long a connect took, as a person reads it: `85ms`, `1.2s`.
fn human_ms(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms}ms")
    } else {
        format!("{:.1}s", ms as f64 / 1000.0)
    }
}

/// Left-aligned columns separated by two spaces; the last column is not padded.
fn table<const N: usize>(out: &mut String, header: [&str; N], rows: &[[String; N]]) {
    let mut widths = header.map(|h| h.chars().count());
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut line = |cells: &[&str]| {
        let mut text = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == N {
                text.push_str(cell);
            } else {
                let _ = write!(text, "{cell:<width$}  ", width = widths[i]);
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(&header);
    for row in rows {
        let cells: Vec<&str> = row.iter().map(String::as_str).collect();
        line(&cells);
    }
}

/// Server-supplied (or workspace-supplied) text as one terminal-safe line.
fn one_line(text: &str) -> String {
    for_terminal(text)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use ctxsync_mcp_model::{ConfigFileOutcome, McpConnectTimings, ServerDetails, ServerReport};

    use super::*;

    fn server(
        name: &str,
        tools: usize,
        error: Option<&str>,
        warning: Option<&str>,
    ) -> ServerReport {
        ServerReport {
            name: name.into(),
            connected: error.is_none(),
            tools: (0..tools)
                .map(|i| ctxsync_mcp_model::McpTool {
                    name: format!("t{i}"),
                    description: String::new(),
                    input_schema: serde_json::json!({}),
                    ..Default::default()
                })
                .collect(),
            error: error.map(Into::into),
            warning: warning.map(Into::into),
            details: error.is_none().then(|| ServerDetails {
                protocol_version: "2026-07-28".into(),
                timings: McpConnectTimings {
                    start_ms: Some(5),
                    handshake_ms: 1200,
                    tools_ms: tools as u64,
                },
                ..ServerDetails::default()
            }),
            always_load: false,
            needs_authorization: false,
        }
    }

    /// A server that answered 401.
    fn unauthorized(name: &str) -> ServerReport {
        ServerReport {
            needs_authorization: true,
            ..server(name, 0, Some("answered 401 Unauthorized"), None)
        }
    }

    fn check_table(report: Report, expect: &str) {
        assert_eq!(render_table(&report), expect);
    }

    #[test]
    fn table_of_servers_and_config_outcomes() {
        check_table(
            Report {
                phase: ReportPhase::Complete,
                servers: vec![
                    server("fs", 3, None, None),
                    server("empty", 0, None, Some("kept\nold tools")),
                    server("gone", 0, Some("command not found: gone"), None),
                    server("kit/db", 1, None, None),
                ],
                config_outcomes: vec![ConfigFileOutcome {
                    path: "/w/.mcp.json".into(),
                    error: Some("\"bad\": both command and url".into()),
                    warning: Some("duplicate \"fs\" ignored".into()),
                }],
                pending: Vec::new(),
            },
            "SERVER  PLUGIN  STATUS  TOOLS  MCP         TIME  ERROR OR WARNING\n\
             fs      -       ok      3      2026-07-28  1.2s\n\
             empty   -       ok      0      2026-07-28  1.2s  warning: kept old tools\n\
             gone    -       failed  0                        command not found: gone\n\
             db      kit     ok      1      2026-07-28  1.2s\n\
             \n\
             CONFIG FILE   ERROR OR WARNING\n\
             /w/.mcp.json  error: \"bad\": both command and url; warning: duplicate \"fs\" ignored\n",
        );
    }

    #[test]
    fn a_server_that_needs_a_sign_in_says_so_in_its_status() {
        check_table(
            Report {
                phase: ReportPhase::Complete,
                servers: vec![server("fs", 1, None, None), unauthorized("gh")],
                ..Report::default()
            },
            "SERVER  PLUGIN  STATUS               TOOLS  MCP         TIME  ERROR OR WARNING\n\
             fs      -       ok                   1      2026-07-28  1.2s\n\
             gh      -       needs_authorization  0                        answered 401 Unauthorized\n\
             \n\
             No problems in the MCP config files.\n",
        );
    }

    #[test]
    fn server_supplied_text_loses_its_escape_sequences() {
        check_table(
            Report {
                phase: ReportPhase::Complete,
                servers: vec![
                    server("\x1b]0;pwned\x07evil\x1b[2J", 1, None, None),
                    server(
                        "x",
                        0,
                        Some("boom\x1b[31m red\u{9b}1A\r\x1b]52;c;ZWNobw==\x07"),
                        None,
                    ),
                ],
                config_outcomes: vec![ConfigFileOutcome {
                    path: "/w/\x1b[8m.mcp.json".into(),
                    error: Some("not a regular file (a FIFO)\x1bc".into()),
                    warning: None,
                }],
                pending: Vec::new(),
            },
            "SERVER  PLUGIN  STATUS  TOOLS  MCP         TIME  ERROR OR WARNING\n\
             evil    -       ok      1      2026-07-28  1.2s\n\
             x       -       failed  0                        boom red\n\
             \n\
             CONFIG FILE   ERROR OR WARNING\n\
             /w/.mcp.json  error: not a regular file (a FIFO)\n",
        );
        let progress = Progress {
            total: 1,
            finished: 0,
            connecting: vec!["a\x1b[1;1Hb\nc".into()],
        };
        assert_eq!(
            progress_line(&progress).as_deref(),
            Some("Starting MCP servers (0/1): ab c")
        );
    }

    #[test]
    fn config_errors_and_failed_servers_fail_the_run_warnings_do_not() {
        let report = |servers, config_outcomes| Report {
            phase: ReportPhase::Complete,
            servers,
            config_outcomes,
            pending: Vec::new(),
        };
        let config = |error: Option<&str>, warning: Option<&str>| ConfigFileOutcome {
            path: "/w/.mcp.json".into(),
            error: error.map(Into::into),
            warning: warning.map(Into::into),
        };
        let cases = [
            (report(vec![], vec![]), None),
            (
                report(
                    vec![server("ok", 1, None, Some("kept the previous connection"))],
                    vec![config(None, Some("ignored the top-level key \"x\""))],
                ),
                None,
            ),
            (
                report(
                    vec![server("gone", 0, Some("command not found"), None)],
                    vec![],
                ),
                Some("1 MCP server failed"),
            ),
            (
                report(
                    vec![
                        server("a", 0, Some("x"), None),
                        server("b", 0, Some("y"), None),
                    ],
                    vec![config(Some("invalid JSON at line 1, column 1: x"), None)],
                ),
                Some("1 MCP config file has an error and 2 MCP servers failed"),
            ),
            (
                report(
                    vec![server("a", 0, Some("x"), None), unauthorized("gh")],
                    vec![],
                ),
                Some("1 MCP server failed and 1 MCP server needs a person to sign in"),
            ),
        ];
        for (report, expect) in cases {
            let failures = failures(&report);
            if let Some(text) = &failures {
                ctxsync_test_support::assert_in_words(text);
            }
            assert_eq!(failures.as_deref(), expect);
        }
    }

    #[test]
    fn empty_report() {
        check_table(
            Report {
                phase: ReportPhase::Complete,
                servers: vec![],
                config_outcomes: vec![],
                pending: Vec::new(),
            },
            "No MCP servers.\n\nNo problems in the MCP config files.\n",
        );
    }

    #[test]
    fn progress_lines() {
        let progress = |total, finished, connecting: &[&str]| Progress {
            total,
            finished,
            connecting: connecting.iter().map(|s| s.to_string()).collect(),
        };
        assert_eq!(progress_line(&progress(0, 0, &[])), None);
        assert_eq!(
            progress_line(&progress(3, 1, &["slow", "hung"])).as_deref(),
            Some("Starting MCP servers (1/3): slow, hung")
        );
        assert_eq!(
            progress_line(&progress(2, 2, &[])).as_deref(),
            Some("Starting MCP servers (2/2)")
        );
    }
}
