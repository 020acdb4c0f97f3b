//! The fixture's scripted behaviour: one type that is both the CLI (clap) and the builder.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use clap::{Parser, ValueEnum};
use serde_json::Value;

use crate::{oauth::OAuthConfig, tool_spec::ToolSpec};

/// How the fixture talks MCP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FixtureTransport {
    /// JSON-RPC lines on stdin/stdout.
    Stdio,
    /// MCP streamable HTTP on a loopback port; the URL is printed on stdout.
    Http,
}

/// Which MCP lifecycle the fixture speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FixtureLifecycle {
    /// A server from before 2026-07-28: `initialize` only; it answers
    /// `server/discover` with "method not found", as such servers do.
    Legacy,
    /// The 2026-07-28 revision as well: answers `server/discover` (with the `initialize`
    /// scripts: hang, delay, failure) and `subscriptions/listen` (tool-list changes).
    /// The scripts that follow `initialized` (exits, floods) need the legacy lifecycle.
    Modern,
    /// Like `legacy`, but a stdio process ignores `server/discover` without an answer, as
    /// servers that drop unknown methods do.
    Silent,
    /// Like `legacy`, but `server/discover` gets an empty result (`{}`), as servers that
    /// answer every method they do not know that way do.
    Lenient,
}

/// What a `--malformed-stdout` server writes instead of its answer to `initialize`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MalformedStdout {
    /// Lines of plain text (log noise on stdout), none of them JSON.
    NotJson,
    /// Lines of well-formed JSON that are not JSON-RPC messages.
    NotJsonrpc,
    /// A well-formed `initialize` result whose id is not the request's.
    WrongId,
    /// The start of a response that never ends: `--huge-line-bytes` bytes and no newline,
    /// written in chunks (the fixture never holds the line in memory).
    HugeLine,
}

/// Default size of the `huge-line` message: far beyond any sane JSON-RPC message.
const DEFAULT_HUGE_LINE_BYTES: usize = 256 * 1024 * 1024;

fn parse_tool_json(text: &str) -> Result<ToolSpec, String> {
    let value: Value = serde_json::from_str(text).map_err(|e| format!("invalid JSON: {e}"))?;
    let name = value
        .get("name")
        .and_then(Value::as_str)
        .ok_or("missing string field \"name\"")?;
    let description = value
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let input_schema = match value.get("inputSchema") {
        None => ToolSpec::new(name, description).input_schema,
        Some(Value::Object(schema)) => schema.clone(),
        Some(_) => return Err("\"inputSchema\" must be an object".into()),
    };
    Ok(ToolSpec {
        name: name.to_owned(),
        description: description.to_owned(),
        input_schema,
    })
}

fn parse_header(text: &str) -> Result<(String, String), String> {
    let (name, value) = text
        .split_once(':')
        .ok_or("expected NAME:VALUE, e.g. x-api-key:secret")?;
    let name = name.trim();
    if name.is_empty() {
        return Err("empty header name".into());
    }
    Ok((name.to_ascii_lowercase(), value.trim().to_owned()))
}

/// Scripted behaviour of one fixture server.
///
/// Every field is a CLI flag of the `ctxsync-mcp-fixture` binary and has a builder method,
/// and [`FixtureConfig::to_args`] turns a built value back into flags, so tests can script a
/// child process and an in-process server the same way.
#[derive(Debug, Clone, PartialEq, Parser)]
#[command(
    name = "ctxsync-mcp-fixture",
    version,
    about = "A scripted MCP server for ctxsync tests, demos and benchmarks"
)]
pub struct FixtureConfig {
    /// Transport to serve.
    #[arg(long, value_enum, default_value = "stdio")]
    transport: FixtureTransport,
    /// MCP lifecycle to speak.
    #[arg(long, value_enum, default_value = "legacy")]
    lifecycle: FixtureLifecycle,
    /// Address to bind in HTTP mode.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// HTTP mode: answer 401 unless the request carries this header (NAME:VALUE).
    #[arg(long, value_name = "NAME:VALUE", value_parser = parse_header)]
    require_header: Option<(String, String)>,
    /// HTTP mode: answer every request with this status (401 or 403) and a
    /// `WWW-Authenticate: Bearer` challenge, as a server that wants a sign-in does.
    #[arg(long, value_name = "STATUS", value_parser = clap::value_parser!(u16).range(401..=403))]
    deny_status: Option<u16>,
    /// Number of generated tools (`tool_0`, `tool_1`, ...), after any `--tool-json` tools.
    #[arg(long, default_value_t = 2)]
    tools: usize,
    /// An explicit tool: `{"name": .., "description": .., "inputSchema": {..}}` (repeatable).
    #[arg(long = "tool-json", value_name = "JSON", value_parser = parse_tool_json)]
    tool_specs: Vec<ToolSpec>,
    /// Also offer a `whoami` tool that returns this instance's nonce.
    #[arg(long)]
    whoami: bool,
    /// Append ` [nonce <nonce>]` to every tool description.
    #[arg(long)]
    nonce_in_descriptions: bool,
    /// The per-instance nonce (random when absent).
    #[arg(long)]
    nonce: Option<String>,
    /// The server's instructions (default: `nonce=<nonce> pid=<pid>`).
    #[arg(long, value_name = "TEXT")]
    instructions: Option<String>,
    /// Report the process as `cwd=<dir> env=<NAME,NAME,...>` (its environment variables'
    /// names, sorted; never their values): as the instructions, and as the description of
    /// an extra `report_env` tool.
    #[arg(long, conflicts_with = "instructions")]
    report_env: bool,
    /// Wait this long before answering `initialize`.
    #[arg(long, default_value_t = 0)]
    init_delay_ms: u64,
    /// Never answer `initialize`.
    #[arg(long)]
    hang: bool,
    /// Answer `initialize` with a JSON-RPC error carrying this message.
    #[arg(long, value_name = "MESSAGE")]
    fail_initialize: Option<String>,
    /// Serve this protocol revision only (any `YYYY-MM-DD`, known or not): `initialize` is
    /// answered with it whatever the client asked for.
    #[arg(long, value_name = "VERSION")]
    protocol_version: Option<String>,
    /// Modern lifecycle: serve 2026-07-28 only, and refuse `initialize` at once with
    /// "unsupported protocol version" (-32022), as servers on the Python SDK 2.x do.
    #[arg(long)]
    modern_only: bool,
    /// Exit at start, before reading any request (process mode only).
    #[arg(long)]
    exit_on_start: bool,
    /// Exit this long after the client's `initialized` notification (process mode only).
    #[arg(long)]
    exit_after_ms: Option<u64>,
    /// Exit code for `--exit-on-start`, `--exit-after-ms` and `--stderr-secret`.
    #[arg(long, default_value_t = 1)]
    exit_code: i32,
    /// Exit (by any exit flag) only if this file does not exist yet, and create it: the next
    /// process started with the same marker behaves well.
    #[arg(long, value_name = "PATH")]
    exit_once_marker: Option<PathBuf>,
    /// Page `tools/list` with this many tools per page.
    #[arg(long)]
    page_size: Option<usize>,
    /// Return the same `nextCursor` on every page, forever.
    #[arg(long)]
    repeat_cursor: bool,
    /// Write this text to stderr, then exit with `--exit-code` (process mode only).
    #[arg(long, value_name = "TEXT")]
    stderr_secret: Option<String>,
    /// Write this many bytes to stderr at start.
    #[arg(long, default_value_t = 0)]
    stderr_flood_bytes: usize,
    /// stdio process mode: read the client's `initialize` request, then write KIND to stdout
    /// instead of the answer; afterwards only read stdin until the client closes it.
    #[arg(long, value_enum, value_name = "KIND")]
    malformed_stdout: Option<MalformedStdout>,
    /// Size in bytes of the `--malformed-stdout huge-line` message.
    #[arg(long, default_value_t = DEFAULT_HUGE_LINE_BYTES)]
    huge_line_bytes: usize,
    /// Right after `initialized`, send this many unsolicited `notifications/progress` (for a
    /// progress token the client never issued), while answering requests as usual.
    #[arg(long, default_value_t = 0)]
    notification_flood: usize,
    /// This long after `initialized`, replace the tools with `--changed-tools` generated ones
    /// (`changed_0`, ...) and send `notifications/tools/list_changed`.
    #[arg(long)]
    change_tools_after_ms: Option<u64>,
    /// Number of tools after the change.
    #[arg(long, default_value_t = 1)]
    changed_tools: usize,
    /// After the `--change-tools-after-ms` change, answer every `tools/list` with an error.
    #[arg(long)]
    fail_relist: bool,
    /// Make the `--change-tools-after-ms` change without telling the client (only a
    /// client that lists again sees it).
    #[arg(long)]
    quiet_change: bool,
    /// Give every `tools/list` result this `ttlMs`.
    #[arg(long, value_name = "MS")]
    tools_ttl_ms: Option<u64>,
    /// Give every tool a title, annotations, an output schema, an icon and `_meta`.
    #[arg(long)]
    rich_tools: bool,
    /// Write the process id to this file at start (process mode only).
    #[arg(long, value_name = "PATH")]
    pid_file: Option<PathBuf>,
    /// Append one line (the process id) to this file at every start (process mode only), so
    /// a test can count how often a server was started.
    #[arg(long, value_name = "PATH")]
    start_log: Option<PathBuf>,
    /// Wait this long after starting before reading any request (process mode only), as a
    /// server that loads a lot first does.
    #[arg(long, default_value_t = 0)]
    start_delay_ms: u64,
    /// HTTP mode: answer the first `tools/list` with an event stream that only primes (an
    /// event id and `retry: 300`) and closes, and its answer to the `GET` that resumes it
    /// with that `Last-Event-ID` (SEP-1699), as a server behind a proxy that cuts streams.
    #[arg(long)]
    close_stream_once: bool,
    /// HTTP mode: answer the first request that names a session with 404, once per
    /// server, as a server that restarted and lost its sessions does; later requests pass.
    #[arg(long)]
    forget_session_once: bool,
    /// stdio process mode: drop every `subscriptions/listen` request unanswered, so the
    /// client's listen is never acknowledged.
    #[arg(long)]
    ignore_listen: bool,
    /// Also offer the call tools (`sleep`, `sized_result`, `image`, `fail`, `progress`,
    /// `sample`, `env`, `count`; see their descriptions).
    #[arg(long)]
    call_tools: bool,
    /// Append one JSON line per `tools/call` event to this file:
    /// `{"event":"started"|"cancelled"|"finished","tool":NAME,"request_id":ID}`.
    #[arg(long, value_name = "PATH")]
    call_log: Option<PathBuf>,
    /// HTTP mode: answer a `server/discover` POST with this status and a plain-text body
    /// instead of JSON-RPC, as a legacy server behind a router that knows no such method
    /// does (e.g. 404 or 405).
    #[arg(long, value_name = "STATUS", value_parser = clap::value_parser!(u16).range(400..500))]
    discover_http_status: Option<u16>,
    /// HTTP mode: be an OAuth 2.1 authorization server on the same listener (metadata,
    /// `/register`, `/authorize`, `/token`) and require its bearer tokens on the MCP
    /// endpoint; the `--oauth-*` flags shape it.
    #[arg(long)]
    oauth: bool,
    #[command(flatten)]
    oauth_settings: OAuthConfig,
}

impl Default for FixtureConfig {
    fn default() -> Self {
        Self::parse_from(["ctxsync-mcp-fixture"])
    }
}

impl FixtureConfig {
    /// The default: stdio, two generated tools, answers at once.
    pub fn new() -> Self {
        Self::default()
    }

    /// Parses CLI flags (without the program name).
    pub fn from_args<I, T>(args: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let program = std::iter::once(std::ffi::OsString::from("ctxsync-mcp-fixture"));
        Self::try_parse_from(program.chain(args.into_iter().map(Into::into)))
    }

    /// The CLI flags (without the program name) that reproduce this configuration.
    pub fn to_args(&self) -> Vec<String> {
        let mut args = Vec::new();
        let mut flag = |name: &str, value: Option<String>| {
            args.push(format!("--{name}"));
            args.extend(value);
        };
        if self.transport == FixtureTransport::Http {
            flag("transport", Some("http".into()));
        }
        if self.lifecycle != FixtureLifecycle::Legacy {
            let name = self
                .lifecycle
                .to_possible_value()
                .map(|v| v.get_name().to_owned());
            flag("lifecycle", name);
        }
        flag("listen", Some(self.listen.to_string()));
        if let Some((name, value)) = &self.require_header {
            flag("require-header", Some(format!("{name}:{value}")));
        }
        flag("tools", Some(self.tools.to_string()));
        for spec in &self.tool_specs {
            flag("tool-json", Some(spec.to_json()));
        }
        if self.whoami {
            flag("whoami", None);
        }
        if self.nonce_in_descriptions {
            flag("nonce-in-descriptions", None);
        }
        if let Some(nonce) = &self.nonce {
            flag("nonce", Some(nonce.clone()));
        }
        if let Some(text) = &self.instructions {
            flag("instructions", Some(text.clone()));
        }
        if self.report_env {
            flag("report-env", None);
        }
        flag("init-delay-ms", Some(self.init_delay_ms.to_string()));
        if self.hang {
            flag("hang", None);
        }
        if let Some(message) = &self.fail_initialize {
            flag("fail-initialize", Some(message.clone()));
        }
        if self.modern_only {
            flag("modern-only", None);
        }
        if self.exit_on_start {
            flag("exit-on-start", None);
        }
        if let Some(ms) = self.exit_after_ms {
            flag("exit-after-ms", Some(ms.to_string()));
        }
        flag("exit-code", Some(self.exit_code.to_string()));
        if let Some(path) = &self.exit_once_marker {
            flag("exit-once-marker", Some(path.display().to_string()));
        }
        if let Some(size) = self.page_size {
            flag("page-size", Some(size.to_string()));
        }
        if self.repeat_cursor {
            flag("repeat-cursor", None);
        }
        if let Some(text) = &self.stderr_secret {
            flag("stderr-secret", Some(text.clone()));
        }
        if self.stderr_flood_bytes > 0 {
            flag(
                "stderr-flood-bytes",
                Some(self.stderr_flood_bytes.to_string()),
            );
        }
        if let Some(kind) = self.malformed_stdout {
            let name = kind.to_possible_value().map(|v| v.get_name().to_owned());
            flag("malformed-stdout", name);
        }
        if self.ignore_listen {
            flag("ignore-listen", None);
        }
        if let Some(status) = self.discover_http_status {
            flag("discover-http-status", Some(status.to_string()));
        }
        if self.huge_line_bytes != DEFAULT_HUGE_LINE_BYTES {
            flag("huge-line-bytes", Some(self.huge_line_bytes.to_string()));
        }
        if self.notification_flood > 0 {
            flag(
                "notification-flood",
                Some(self.notification_flood.to_string()),
            );
        }
        if let Some(ms) = self.change_tools_after_ms {
            flag("change-tools-after-ms", Some(ms.to_string()));
        }
        flag("changed-tools", Some(self.changed_tools.to_string()));
        if self.fail_relist {
            flag("fail-relist", None);
        }
        if self.quiet_change {
            flag("quiet-change", None);
        }
        if let Some(ms) = self.tools_ttl_ms {
            flag("tools-ttl-ms", Some(ms.to_string()));
        }
        if self.rich_tools {
            flag("rich-tools", None);
        }
        if let Some(path) = &self.pid_file {
            flag("pid-file", Some(path.display().to_string()));
        }
        if self.call_tools {
            flag("call-tools", None);
        }
        if let Some(path) = &self.call_log {
            flag("call-log", Some(path.display().to_string()));
        }
        self.start_and_protocol_args(&mut flag);
        args
    }

    /// The flags of how the server starts, which protocol it speaks and whom it lets in
    /// (see [`to_args`]).
    ///
    /// [`to_args`]: FixtureConfig::to_args
    fn start_and_protocol_args(&self, flag: &mut impl FnMut(&str, Option<String>)) {
        if let Some(status) = self.deny_status {
            flag("deny-status", Some(status.to_string()));
        }
        if let Some(version) = &self.protocol_version {
            flag("protocol-version", Some(version.clone()));
        }
        if let Some(path) = &self.start_log {
            flag("start-log", Some(path.display().to_string()));
        }
        if self.start_delay_ms > 0 {
            flag("start-delay-ms", Some(self.start_delay_ms.to_string()));
        }
        if self.forget_session_once {
            flag("forget-session-once", None);
        }
        if self.close_stream_once {
            flag("close-stream-once", None);
        }
        if self.oauth {
            flag("oauth", None);
            self.oauth_settings.push_args(flag);
        }
    }

    /// Serve streamable HTTP instead of stdio.
    pub fn http(mut self) -> Self {
        self.transport = FixtureTransport::Http;
        self
    }
    /// Give these instructions instead of the nonce and pid.
    pub fn instructions(mut self, text: impl Into<String>) -> Self {
        self.instructions = Some(text.into());
        self
    }
    /// Report the working directory and environment variable names (see `--report-env`).
    pub fn report_env(mut self) -> Self {
        self.report_env = true;
        self
    }
    /// Speak this MCP lifecycle (the default is [`FixtureLifecycle::Legacy`]).
    pub fn lifecycle(mut self, lifecycle: FixtureLifecycle) -> Self {
        self.lifecycle = lifecycle;
        self
    }
    /// Address to bind in HTTP mode (default `127.0.0.1:0`).
    pub fn listen(mut self, addr: SocketAddr) -> Self {
        self.listen = addr;
        self
    }
    /// HTTP mode: answer 401 without this header.
    pub fn require_header(mut self, name: &str, value: &str) -> Self {
        self.require_header = Some((name.to_ascii_lowercase(), value.to_owned()));
        self
    }
    /// HTTP mode: answer every request with `status` and a challenge.
    pub fn deny_status(mut self, status: u16) -> Self {
        self.deny_status = Some(status);
        self
    }
    /// Number of generated tools (0 allowed).
    pub fn tools(mut self, count: usize) -> Self {
        self.tools = count;
        self
    }
    /// Adds an explicit tool (offered before the generated ones).
    pub fn tool(mut self, spec: ToolSpec) -> Self {
        self.tool_specs.push(spec);
        self
    }
    /// Also offer the `whoami` tool.
    pub fn whoami(mut self) -> Self {
        self.whoami = true;
        self
    }
    /// Put the nonce into every tool description.
    pub fn nonce_in_descriptions(mut self) -> Self {
        self.nonce_in_descriptions = true;
        self
    }
    /// Fix the nonce instead of a random one.
    pub fn nonce(mut self, nonce: impl Into<String>) -> Self {
        self.nonce = Some(nonce.into());
        self
    }
    /// Delay before answering `initialize`.
    pub fn init_delay(mut self, delay: Duration) -> Self {
        self.init_delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self
    }
    /// Never answer `initialize`.
    pub fn hang(mut self) -> Self {
        self.hang = true;
        self
    }
    /// Answer `initialize` with an error carrying `message`.
    pub fn fail_initialize(mut self, message: impl Into<String>) -> Self {
        self.fail_initialize = Some(message.into());
        self
    }
    /// Serve only this protocol revision, known or not.
    pub fn protocol_version(mut self, version: impl Into<String>) -> Self {
        self.protocol_version = Some(version.into());
        self
    }
    /// Serve 2026-07-28 only and refuse `initialize` (with [`FixtureLifecycle::Modern`]).
    pub fn modern_only(mut self) -> Self {
        self.modern_only = true;
        self
    }
    /// Exit at start with `code`.
    pub fn exit_on_start(mut self, code: i32) -> Self {
        self.exit_on_start = true;
        self.exit_code = code;
        self
    }
    /// Exit `delay` after `initialized` with `code`.
    pub fn exit_after(mut self, delay: Duration, code: i32) -> Self {
        self.exit_after_ms = Some(u64::try_from(delay.as_millis()).unwrap_or(u64::MAX));
        self.exit_code = code;
        self
    }
    /// Only the first process that sees no marker file exits; it creates the marker.
    pub fn exit_once(mut self, marker: impl Into<PathBuf>) -> Self {
        self.exit_once_marker = Some(marker.into());
        self
    }
    /// Page `tools/list`.
    pub fn page_size(mut self, size: usize) -> Self {
        self.page_size = Some(size);
        self
    }
    /// Return the same cursor forever.
    pub fn repeat_cursor(mut self) -> Self {
        self.repeat_cursor = true;
        self
    }
    /// Write `text` to stderr, then exit with `code`.
    pub fn stderr_secret(mut self, text: impl Into<String>, code: i32) -> Self {
        self.stderr_secret = Some(text.into());
        self.exit_code = code;
        self
    }
    /// Write `bytes` bytes to stderr at start.
    pub fn stderr_flood(mut self, bytes: usize) -> Self {
        self.stderr_flood_bytes = bytes;
        self
    }
    /// Answer `initialize` with `kind` on stdout instead (stdio process mode only).
    pub fn malformed_stdout(mut self, kind: MalformedStdout) -> Self {
        self.malformed_stdout = Some(kind);
        self
    }
    /// Size of the [`MalformedStdout::HugeLine`] message (default 256 MiB).
    pub fn huge_line_bytes(mut self, bytes: usize) -> Self {
        self.huge_line_bytes = bytes;
        self
    }
    /// Send `count` unsolicited progress notifications right after `initialized`.
    pub fn notification_flood(mut self, count: usize) -> Self {
        self.notification_flood = count;
        self
    }
    /// After `delay`, switch to `count` tools named `changed_*` and notify the client.
    pub fn change_tools_after(mut self, delay: Duration, count: usize) -> Self {
        self.change_tools_after_ms = Some(u64::try_from(delay.as_millis()).unwrap_or(u64::MAX));
        self.changed_tools = count;
        self
    }
    /// After the tool change, fail every `tools/list` (a re-list that breaks).
    pub fn fail_relist(mut self) -> Self {
        self.fail_relist = true;
        self
    }
    /// Make the scripted tool change without a notification.
    pub fn quiet_change(mut self) -> Self {
        self.quiet_change = true;
        self
    }
    /// Answer every `tools/list` with this `ttlMs`.
    pub fn tools_ttl(mut self, ttl: Duration) -> Self {
        self.tools_ttl_ms = Some(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
        self
    }
    /// Give every tool a title, annotations, an output schema, an icon and `_meta`.
    pub fn rich_tools(mut self) -> Self {
        self.rich_tools = true;
        self
    }
    /// Write the pid to `path` at start.
    pub fn pid_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.pid_file = Some(path.into());
        self
    }
    /// Append this process's id to `path` at every start.
    pub fn start_log(mut self, path: impl Into<PathBuf>) -> Self {
        self.start_log = Some(path.into());
        self
    }
    /// Wait `delay` after starting before reading any request.
    pub fn start_delay(mut self, delay: Duration) -> Self {
        self.start_delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self
    }
    /// HTTP mode: close the first `tools/list` stream once (see `--close-stream-once`).
    pub fn close_stream_once(mut self) -> Self {
        self.close_stream_once = true;
        self
    }
    /// HTTP mode: lose the sessions once (see `--forget-session-once`).
    pub fn forget_session_once(mut self) -> Self {
        self.forget_session_once = true;
        self
    }
    /// stdio process mode: never acknowledge `subscriptions/listen` (the request is
    /// dropped unanswered).
    pub fn ignore_listen(mut self) -> Self {
        self.ignore_listen = true;
        self
    }
    /// HTTP mode: answer `server/discover` with `status` (a 4xx) and a plain-text body.
    pub fn discover_http_status(mut self, status: u16) -> Self {
        self.discover_http_status = Some(status);
        self
    }
    /// HTTP mode: be an OAuth 2.1 authorization server shaped by `config` and require its
    /// bearer tokens on the MCP endpoint (see `--oauth`).
    pub fn oauth(mut self, config: OAuthConfig) -> Self {
        self.oauth = true;
        self.oauth_settings = config;
        self
    }
    /// Also offer the call tools (see `--call-tools`).
    pub fn call_tools(mut self) -> Self {
        self.call_tools = true;
        self
    }
    /// Append one JSON line per `tools/call` event to `path` (see `--call-log`).
    pub fn call_log(mut self, path: impl Into<PathBuf>) -> Self {
        self.call_log = Some(path.into());
        self
    }

    pub(crate) fn instructions_value(&self) -> Option<String> {
        if self.report_env {
            return Some(environment_report());
        }
        self.instructions.clone()
    }
    pub(crate) fn lifecycle_value(&self) -> FixtureLifecycle {
        self.lifecycle
    }
    pub(crate) fn transport(&self) -> FixtureTransport {
        self.transport
    }
    pub(crate) fn listen_addr(&self) -> SocketAddr {
        self.listen
    }
    pub(crate) fn required_header(&self) -> Option<&(String, String)> {
        self.require_header.as_ref()
    }
    pub(crate) fn deny_status_value(&self) -> Option<u16> {
        self.deny_status
    }
    pub(crate) fn nonce_value(&self) -> Option<&str> {
        self.nonce.as_deref()
    }
    pub(crate) fn nonce_in_descriptions_enabled(&self) -> bool {
        self.nonce_in_descriptions
    }
    pub(crate) fn init_delay_value(&self) -> Duration {
        Duration::from_millis(self.init_delay_ms)
    }
    pub(crate) fn fails_relist(&self) -> bool {
        self.fail_relist
    }
    pub(crate) fn hangs(&self) -> bool {
        self.hang
    }
    pub(crate) fn initialize_failure(&self) -> Option<&str> {
        self.fail_initialize.as_deref()
    }
    pub(crate) fn protocol_version_value(&self) -> Option<&str> {
        self.protocol_version.as_deref()
    }
    pub(crate) fn is_modern_only(&self) -> bool {
        self.modern_only
    }
    pub(crate) fn exits_on_start(&self) -> bool {
        self.exit_on_start
    }
    pub(crate) fn exit_after_value(&self) -> Option<Duration> {
        self.exit_after_ms.map(Duration::from_millis)
    }
    pub(crate) fn exit_code_value(&self) -> i32 {
        self.exit_code
    }
    pub(crate) fn exit_once_marker_path(&self) -> Option<&PathBuf> {
        self.exit_once_marker.as_ref()
    }
    pub(crate) fn page_size_value(&self) -> Option<usize> {
        self.page_size.filter(|size| *size > 0)
    }
    pub(crate) fn changes_quietly(&self) -> bool {
        self.quiet_change
    }
    pub(crate) fn tools_ttl_value(&self) -> Option<u64> {
        self.tools_ttl_ms
    }
    pub(crate) fn rich_tools_enabled(&self) -> bool {
        self.rich_tools
    }
    pub(crate) fn repeats_cursor(&self) -> bool {
        self.repeat_cursor
    }
    pub(crate) fn stderr_secret_value(&self) -> Option<&str> {
        self.stderr_secret.as_deref()
    }
    pub(crate) fn stderr_flood_value(&self) -> usize {
        self.stderr_flood_bytes
    }
    pub(crate) fn malformed_stdout_value(&self) -> Option<(MalformedStdout, usize)> {
        self.malformed_stdout
            .map(|kind| (kind, self.huge_line_bytes))
    }
    pub(crate) fn notification_flood_value(&self) -> usize {
        self.notification_flood
    }
    pub(crate) fn tool_change(&self) -> Option<(Duration, usize)> {
        self.change_tools_after_ms
            .map(|ms| (Duration::from_millis(ms), self.changed_tools))
    }
    pub(crate) fn pid_file_path(&self) -> Option<&PathBuf> {
        self.pid_file.as_ref()
    }
    pub(crate) fn start_log_path(&self) -> Option<&PathBuf> {
        self.start_log.as_ref()
    }
    pub(crate) fn start_delay_value(&self) -> Duration {
        Duration::from_millis(self.start_delay_ms)
    }
    pub(crate) fn closes_stream_once(&self) -> bool {
        self.close_stream_once
    }
    pub(crate) fn forgets_session_once(&self) -> bool {
        self.forget_session_once
    }
    pub(crate) fn ignores_listen(&self) -> bool {
        self.ignore_listen
    }
    pub(crate) fn discover_http_status_value(&self) -> Option<u16> {
        self.discover_http_status
    }
    pub(crate) fn oauth_value(&self) -> Option<&OAuthConfig> {
        self.oauth.then_some(&self.oauth_settings)
    }
    pub(crate) fn call_tools_enabled(&self) -> bool {
        self.call_tools
    }
    pub(crate) fn call_log_path(&self) -> Option<&PathBuf> {
        self.call_log.as_ref()
    }

    /// The initial tool list (explicit tools, generated tools, `whoami`, `report_env`, then
    /// the call tools).
    pub(crate) fn initial_tools(&self) -> Vec<ToolSpec> {
        let mut tools = self.tool_specs.clone();
        tools.extend(
            (0..self.tools)
                .map(|i| ToolSpec::new(format!("tool_{i}"), format!("Fixture tool {i}"))),
        );
        if self.whoami {
            tools.push(ToolSpec::new(
                "whoami",
                "Returns the nonce of the fixture instance that answered",
            ));
        }
        if self.report_env {
            tools.push(ToolSpec::new("report_env", environment_report()));
        }
        if self.call_tools {
            tools.extend(crate::tool_call::specs());
        }
        tools
    }

    /// The tool list after a scripted change.
    pub(crate) fn changed_tool_list(&self) -> Vec<ToolSpec> {
        (0..self.changed_tools)
            .map(|i| ToolSpec::new(format!("changed_{i}"), format!("Changed fixture tool {i}")))
            .collect()
    }
}

/// `cwd=<dir> env=<NAME,NAME,...>` of this process: variable names only, sorted.
fn environment_report() -> String {
    let mut names: Vec<String> = std::env::vars_os()
        .map(|(name, _)| name.to_string_lossy().into_owned())
        .collect();
    names.sort();
    let cwd = std::env::current_dir().unwrap_or_default();
    format!("cwd={} env={}", cwd.display(), names.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oauth::OAuthClient;

    fn check(config: FixtureConfig) {
        let args = config.to_args();
        let parsed = FixtureConfig::from_args(&args).expect("to_args output parses");
        assert_eq!(parsed, config, "args: {args:?}");
    }

    #[test]
    fn builder_and_flags_round_trip() {
        check(FixtureConfig::new());
        check(FixtureConfig::new().tools(0));
        check(
            FixtureConfig::new()
                .http()
                .require_header("X-Api-Key", "s3cret:with:colons")
                .tool(ToolSpec::new("read", "Reads"))
                .tools(1500)
                .whoami()
                .nonce_in_descriptions()
                .nonce("n-1")
                .instructions("use tool_0 first")
                .init_delay(Duration::from_millis(300))
                .page_size(7)
                .repeat_cursor()
                .fail_initialize("boom")
                .exit_after(Duration::from_millis(20), 3)
                .exit_once("/tmp/marker")
                .stderr_flood(10)
                .change_tools_after(Duration::from_millis(5), 4)
                .fail_relist()
                .pid_file("/tmp/pid")
                .start_log("/tmp/starts")
                .start_delay(Duration::from_millis(40))
                .forget_session_once()
                .close_stream_once()
                .call_tools()
                .call_log("/tmp/calls.jsonl"),
        );
        check(FixtureConfig::new().hang().exit_on_start(7));
        check(
            FixtureConfig::new()
                .lifecycle(FixtureLifecycle::Modern)
                .modern_only(),
        );
        check(
            FixtureConfig::new()
                .lifecycle(FixtureLifecycle::Modern)
                .ignore_listen(),
        );
        check(FixtureConfig::new().http().discover_http_status(405));
        check(FixtureConfig::new().http().deny_status(403));
        check(FixtureConfig::new().protocol_version("2099-01-01"));
        check(FixtureConfig::new().http().oauth(OAuthConfig::default()));
        check(FixtureConfig::new().http().oauth(OAuthConfig {
            token_ttl: Duration::from_secs(2),
            refresh_tokens: false,
            registration: false,
            client_id_metadata_documents: true,
            required_scopes: vec!["tools:read".into(), "tools:call".into()],
            scopes_supported: vec!["tools:read".into()],
            token_endpoint_auth_methods: vec!["client_secret_post".into()],
            clients: vec![
                OAuthClient::confidential("ctxsync", "s3cret:with:colons"),
                OAuthClient::public("cli"),
            ],
            deny: true,
            issuer_in_response: true,
        }));
        for lifecycle in FixtureLifecycle::value_variants() {
            check(FixtureConfig::new().lifecycle(*lifecycle));
        }
        check(FixtureConfig::new().stderr_secret("hunter22", 2));
        for kind in MalformedStdout::value_variants() {
            check(FixtureConfig::new().malformed_stdout(*kind));
        }
        check(
            FixtureConfig::new()
                .malformed_stdout(MalformedStdout::HugeLine)
                .huge_line_bytes(1 << 20)
                .notification_flood(500),
        );
    }

    #[test]
    fn invalid_flags_are_errors() {
        for args in [
            vec!["--tool-json", "{"],
            vec!["--tool-json", "{\"description\": \"x\"}"],
            vec!["--require-header", "no-colon"],
            vec!["--transport", "carrier-pigeon"],
            vec!["--malformed-stdout", "politely-wrong"],
            vec!["--oauth-cimd"],
            vec!["--oauth", "--oauth-auth-method", "private_key_jwt"],
            vec!["--oauth", "--oauth-client", ":secret"],
            vec!["--oauth", "--oauth-client", "id:"],
            vec!["--oauth", "--oauth-token-ttl-secs", "1.5"],
        ] {
            assert!(FixtureConfig::from_args(&args).is_err(), "{args:?}");
        }
    }

    #[test]
    fn initial_tools_order() {
        let names = |config: FixtureConfig| -> Vec<String> {
            config.initial_tools().into_iter().map(|t| t.name).collect()
        };
        assert_eq!(names(FixtureConfig::new().tools(0)), Vec::<String>::new());
        assert_eq!(
            names(
                FixtureConfig::new()
                    .tool(ToolSpec::new("a", ""))
                    .tools(1)
                    .whoami()
            ),
            ["a", "tool_0", "whoami"]
        );
        assert_eq!(
            names(FixtureConfig::new().tools(0).whoami().call_tools()),
            [
                "whoami",
                "sleep",
                "sized_result",
                "image",
                "fail",
                "progress",
                "sample",
                "env",
                "count"
            ]
        );
    }
}
