//! One server connection as a task: connect (bounded), list tools (guarded), then watch it.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    path::PathBuf,
    sync::Arc,
    time::Duration,
};

use rmcp::{
    ClientHandler, RoleClient, ServiceExt,
    model::{ClientCapabilities, ClientConfig, Implementation, PaginatedRequestParams},
    service::{ClientInitializeError, NotificationContext, Peer},
    transport::{
        StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::{
    config::{ServerEntry, TransportConfig},
    line_limit::MAX_MESSAGE_BYTES,
    process::{ProcessGroups, ServerProcess, SpawnSpec},
    report::ToolInfo,
    sanitize::{MAX_DIAGNOSTIC_BYTES, SecretSet, redact_tools, sanitize_diagnostic},
};

/// Most `tools/list` pages followed before the server is considered broken.
pub const MAX_TOOL_PAGES: usize = 100;
/// Most tools kept per server.
pub const MAX_TOOLS_PER_SERVER: usize = 1000;
/// After a transport closes, how long to wait for the process's exit status.
const EXIT_STATUS_GRACE: Duration = Duration::from_millis(500);
/// How long a graceful MCP close may take before the connection is just dropped.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// What a connection task tells the engine.
#[derive(Debug)]
pub(crate) struct ServerEvent {
    pub id: u64,
    pub kind: EventKind,
}

#[derive(Debug)]
pub(crate) enum EventKind {
    /// The first complete tool listing succeeded.
    Connected {
        tools: Vec<ToolInfo>,
        warning: Option<String>,
    },
    /// Spawn, initialize or the first listing failed (sanitized, bounded).
    ConnectFailed { error: String },
    /// A re-list after `tools/list_changed` succeeded.
    ToolsChanged {
        tools: Vec<ToolInfo>,
        warning: Option<String>,
    },
    /// A connected server went away (sanitized, bounded).
    Lost { error: String },
}

/// Everything one connection task needs.
pub(crate) struct ConnectionTask {
    pub id: u64,
    pub entry: ServerEntry,
    pub workspace_dir: PathBuf,
    pub agent_env: Arc<BTreeMap<String, String>>,
    pub secrets: Arc<SecretSet>,
    /// What this server's tools are checked against: its own secrets and the agent's.
    pub tool_secrets: Arc<SecretSet>,
    pub timeout: Duration,
    pub events: mpsc::UnboundedSender<ServerEvent>,
    pub cancel: CancellationToken,
    pub groups: Arc<ProcessGroups>,
}

/// Receives `notifications/tools/list_changed` for one connection.
#[derive(Debug, Clone)]
struct Client {
    tools_changed: mpsc::UnboundedSender<()>,
}

impl ClientHandler for Client {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("ctxsync-agent", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        // The receiver is gone only when the connection is closing.
        let _ = self.tools_changed.send(());
    }
}

type Session = rmcp::service::RunningService<RoleClient, Client>;

/// Why a connect attempt failed (unsanitized; rendered by [`ConnectionTask::failure`]).
enum ConnectError {
    Cancelled,
    Timeout,
    CommandNotFound(String),
    Spawn(String),
    /// `closed`: the transport closed (the process may have died) rather than an MCP error.
    Initialize {
        detail: String,
        closed: bool,
    },
    Unauthorized(String),
    List(ListFailure),
}

/// A failed tool listing.
#[derive(Debug)]
struct ListFailure {
    message: String,
    /// The transport closed, so the process's exit status may explain more.
    closed: bool,
}

/// Drops the Rust type names rmcp puts into transport errors (`[rmcp::transport::...<...>] `):
/// noise for a person reading a diagnostic.
fn without_type_names(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("[rmcp::") {
        out.push_str(&rest[..start]);
        let mut depth = 0usize;
        let mut end = None;
        for (offset, c) in rest[start..].char_indices() {
            match c {
                '[' | '<' => depth += 1,
                ']' | '>' => depth = depth.saturating_sub(1),
                _ => {}
            }
            if depth == 0 {
                end = Some(start + offset + c.len_utf8());
                break;
            }
        }
        let Some(end) = end else {
            out.push_str(&rest[start..]);
            return out;
        };
        rest = rest[end..].strip_prefix(' ').unwrap_or(&rest[end..]);
    }
    out.push_str(rest);
    out
}

/// `30s` for whole seconds, else `300ms`.
pub(crate) fn human_duration(duration: Duration) -> String {
    if duration.subsec_millis() == 0 && duration.as_secs() > 0 {
        format!("{}s", duration.as_secs())
    } else {
        format!("{}ms", duration.as_millis())
    }
}

impl ConnectionTask {
    fn send(&self, kind: EventKind) {
        // The engine is gone only when it is shutting down; nobody needs the event then.
        let _ = self.events.send(ServerEvent { id: self.id, kind });
    }

    fn sanitize(&self, text: &str) -> String {
        let mut secrets = (*self.secrets).clone();
        // The program name is what "command not found" must show, not a secret.
        if let TransportConfig::Stdio { command, .. } = &self.entry.transport {
            secrets.remove(command);
        }
        sanitize_diagnostic(&without_type_names(text), &secrets)
    }

    /// Runs until cancelled or the connection is lost, reporting through `events`.
    pub(crate) async fn run(self) {
        let (tools_changed, mut tools_changed_rx) = mpsc::unbounded_channel();
        let client = Client { tools_changed };
        let mut process: Option<ServerProcess> = None;
        let attempt = tokio::select! {
            () = self.cancel.cancelled() => Err(ConnectError::Cancelled),
            result = tokio::time::timeout(self.timeout, self.connect(client, &mut process)) => {
                result.unwrap_or(Err(ConnectError::Timeout))
            }
        };
        let (session, tools, warning) = match attempt {
            Ok(connected) => connected,
            Err(error) => {
                let message = self.failure(error, &mut process).await;
                if let Some(process) = process.take() {
                    process.shutdown().await;
                }
                if let Some(message) = message {
                    self.send(EventKind::ConnectFailed { error: message });
                }
                return;
            }
        };
        let tools = redact_tools(tools, &self.tool_secrets);
        self.send(EventKind::Connected { tools, warning });

        let peer = session.peer().clone();
        let stop_session = session.cancellation_token();
        let mut closed = std::pin::pin!(session.waiting());
        let mut session_ended = false;
        let lost = loop {
            tokio::select! {
                () = self.cancel.cancelled() => break None,
                status = exit_of(&mut process) => {
                    break Some(exited(&status, process.as_mut()).await);
                }
                _ = &mut closed => {
                    session_ended = true;
                    let message = match process.as_mut() {
                        Some(child) if child.sent_oversized_message() => oversized(child),
                        Some(child) => match tokio::time::timeout(EXIT_STATUS_GRACE, child.wait()).await {
                            Ok(status) => exited(&status, Some(child)).await,
                            Err(_) => with_stderr("the server closed the connection".into(), Some(child)),
                        },
                        None => "the server closed the connection".to_owned(),
                    };
                    break Some(message);
                }
                Some(()) = tools_changed_rx.recv() => {
                    // Several notifications in a row need one re-list.
                    while tools_changed_rx.try_recv().is_ok() {}
                    match tokio::time::timeout(self.timeout, list_tools(&peer)).await {
                        Ok(Ok((tools, warning))) => {
                            let tools = redact_tools(tools, &self.tool_secrets);
                            self.send(EventKind::ToolsChanged { tools, warning });
                        }
                        Ok(Err(error)) => break Some(format!("re-listing tools after tools/list_changed failed: {}", error.message)),
                        Err(_) => break Some(format!(
                            "re-listing tools after tools/list_changed: no response within {}",
                            human_duration(self.timeout)
                        )),
                    }
                }
            }
        };
        stop_session.cancel();
        if let Some(process) = process.take() {
            process.shutdown().await;
        }
        if !session_ended {
            // Let rmcp finish its close (e.g. an HTTP session DELETE), briefly.
            let _ = tokio::time::timeout(CLOSE_GRACE, &mut closed).await;
        }
        if let Some(error) = lost {
            let error = self.sanitize(&error);
            self.send(EventKind::Lost { error });
        }
    }

    async fn connect(
        &self,
        client: Client,
        process: &mut Option<ServerProcess>,
    ) -> Result<(Session, Vec<ToolInfo>, Option<String>), ConnectError> {
        let session = match &self.entry.transport {
            TransportConfig::Stdio { command, args, env } => {
                let spec = SpawnSpec {
                    command,
                    args,
                    agent_env: &self.agent_env,
                    entry_env: env,
                    cwd: &self.workspace_dir,
                };
                let (child, stdout, stdin) = ServerProcess::spawn(spec, self.groups.clone())
                    .map_err(|error| match error.kind() {
                        std::io::ErrorKind::NotFound => {
                            ConnectError::CommandNotFound(command.clone())
                        }
                        _ => ConnectError::Spawn(format!("cannot start {command}: {error}")),
                    })?;
                *process = Some(child);
                client.serve((stdout, stdin)).await.map_err(|error| {
                    let closed = matches!(
                        error,
                        ClientInitializeError::ConnectionClosed(_)
                            | ClientInitializeError::TransportError { .. }
                    );
                    let detail = match &error {
                        // rmcp's wording ("conflict initialized response id") hides the point.
                        ClientInitializeError::ConflictInitResponseId(expected, got) => format!(
                            "initialize failed: the server answered with id {got}, not the request's id {expected}"
                        ),
                        _ => format!("initialize failed: {error}"),
                    };
                    ConnectError::Initialize { detail, closed }
                })?
            }
            TransportConfig::Http { url, headers } => {
                let headers: HashMap<http::HeaderName, http::HeaderValue> = headers
                    .iter()
                    .filter_map(|(name, value)| {
                        // Both were validated when the config was parsed.
                        Some((
                            http::HeaderName::from_bytes(name.as_bytes()).ok()?,
                            http::HeaderValue::from_str(value).ok()?,
                        ))
                    })
                    .collect();
                let config = StreamableHttpClientTransportConfig::with_uri(url.clone())
                    .custom_headers(headers);
                let transport = StreamableHttpClientTransport::from_config(config);
                client.serve(transport).await.map_err(classify_http_error)?
            }
        };
        // No client-side cache: every listing must describe the server as it is now.
        session
            .peer()
            .set_response_cache_config(rmcp::ClientCacheConfig::disabled())
            .await;
        let offers_tools = session
            .peer()
            .peer_info()
            .is_none_or(|info| info.capabilities.tools.is_some());
        let (tools, warning) = if offers_tools {
            list_tools(session.peer())
                .await
                .map_err(ConnectError::List)?
        } else {
            (Vec::new(), None)
        };
        Ok((session, tools, warning))
    }

    /// The sanitized message for a failed attempt (`None` when cancelled).
    async fn failure(
        &self,
        error: ConnectError,
        process: &mut Option<ServerProcess>,
    ) -> Option<String> {
        let message = match error {
            ConnectError::Cancelled => return None,
            ConnectError::Timeout => {
                let mut message = format!("no response within {}", human_duration(self.timeout));
                // The usual cause of a silent stdio server: it logs to stdout.
                match process.as_ref().map_or(0, ServerProcess::not_json_lines) {
                    0 => {}
                    1 => message.push_str("; the server wrote 1 line on stdout that is not JSON"),
                    lines => message.push_str(&format!(
                        "; the server wrote {lines} lines on stdout that are not JSON"
                    )),
                }
                with_stderr(message, process.as_ref())
            }
            ConnectError::CommandNotFound(command) => {
                format!("command not found: {command} (is it installed and on the agent's PATH?)")
            }
            ConnectError::Spawn(message) => message,
            ConnectError::Unauthorized(detail) => {
                format!("unauthorized; check the headers ({detail})")
            }
            ConnectError::Initialize { detail, closed }
            | ConnectError::List(ListFailure {
                message: detail,
                closed,
            }) => match process.as_mut() {
                // The engine closed the pipe itself: say why, not what the pipe said.
                Some(child) if closed && child.sent_oversized_message() => oversized(child),
                // A process that died explains a closed pipe better than the pipe does.
                Some(child) if closed => {
                    match tokio::time::timeout(EXIT_STATUS_GRACE, child.wait()).await {
                        Ok(status) => exited(&status, Some(child)).await,
                        Err(_) => with_stderr(detail, Some(child)),
                    }
                }
                Some(child) => with_stderr(detail, Some(child)),
                None => detail,
            },
        };
        Some(self.sanitize(&message))
    }
}

fn classify_http_error(error: ClientInitializeError) -> ConnectError {
    let text = error.to_string();
    let mut chain = text.clone();
    let mut source = std::error::Error::source(&error);
    while let Some(inner) = source {
        chain.push_str(&format!(": {inner}"));
        source = inner.source();
    }
    let lower = chain.to_ascii_lowercase();
    let unauthorized = error.is_authorization_required()
        || ["401", "403", "unauthorized", "forbidden", "auth required"]
            .iter()
            .any(|needle| lower.contains(needle));
    if unauthorized {
        ConnectError::Unauthorized(chain)
    } else {
        ConnectError::Initialize {
            detail: format!("initialize failed: {chain}"),
            closed: false,
        }
    }
}

async fn exit_of(process: &mut Option<ServerProcess>) -> std::io::Result<std::process::ExitStatus> {
    match process {
        Some(child) => child.wait().await,
        None => std::future::pending().await,
    }
}

async fn exited(
    status: &std::io::Result<std::process::ExitStatus>,
    process: Option<&mut ServerProcess>,
) -> String {
    let message = match status {
        Ok(status) => format!("the server exited with {status}"),
        Err(error) => format!("the server process could not be waited for: {error}"),
    };
    match process {
        Some(process) => {
            process.settle_stderr().await;
            with_stderr(message, Some(process))
        }
        None => message,
    }
}

/// The diagnostic for a server whose stdout carried a message over [`MAX_MESSAGE_BYTES`].
fn oversized(process: &ServerProcess) -> String {
    let message = format!(
        "the server sent a message larger than {} MiB",
        MAX_MESSAGE_BYTES / (1024 * 1024)
    );
    with_stderr(message, Some(process))
}

/// Appends the stderr tail, keeping its end (the freshest lines) within the diagnostic bound.
fn with_stderr(message: String, process: Option<&ServerProcess>) -> String {
    const SEPARATOR: &str = "; stderr: ";
    let Some(tail) = process.map(ServerProcess::stderr_tail) else {
        return message;
    };
    let budget = MAX_DIAGNOSTIC_BYTES.saturating_sub(message.len() + SEPARATOR.len());
    let tail = keep_end(&tail, budget);
    if tail.is_empty() {
        message
    } else {
        format!("{message}{SEPARATOR}{tail}")
    }
}

/// The end of `text` within `budget` bytes, starting at a line start so that no secret is cut
/// in half (a cut secret would escape redaction).
fn keep_end(text: &str, budget: usize) -> &str {
    if text.len() <= budget {
        return text;
    }
    let mut start = text.len() - budget;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    let end = &text[start..];
    match end.find('\n') {
        Some(newline) => &end[newline + 1..],
        None => "",
    }
}

/// Lists all tools, following cursors with a guard against servers that page forever.
async fn list_tools(
    peer: &Peer<RoleClient>,
) -> Result<(Vec<ToolInfo>, Option<String>), ListFailure> {
    let guard = |message: String| ListFailure {
        message,
        closed: false,
    };
    let mut tools = Vec::new();
    let mut offered = 0usize;
    let mut seen = HashSet::new();
    let mut cursor: Option<String> = None;
    for _page in 0..MAX_TOOL_PAGES {
        let params = cursor
            .clone()
            .map(|cursor| PaginatedRequestParams::default().with_cursor(Some(cursor)));
        let page = peer.list_tools(params).await.map_err(|error| ListFailure {
            closed: matches!(
                error,
                rmcp::ServiceError::TransportClosed | rmcp::ServiceError::TransportSend(_)
            ),
            message: format!("tools/list failed: {error}"),
        })?;
        offered += page.tools.len();
        let room = MAX_TOOLS_PER_SERVER.saturating_sub(tools.len());
        tools.extend(page.tools.into_iter().take(room).map(|tool| ToolInfo {
            name: tool.name.into_owned(),
            description: tool.description.map(|d| d.into_owned()).unwrap_or_default(),
            input_schema: serde_json::Value::Object((*tool.input_schema).clone()),
        }));
        match page.next_cursor {
            None => {
                let warning = (offered > MAX_TOOLS_PER_SERVER).then(|| {
                    format!(
                        "the server offered {offered} tools; only the first {MAX_TOOLS_PER_SERVER} are kept"
                    )
                });
                return Ok((tools, warning));
            }
            Some(next) => {
                if !seen.insert(next.clone()) {
                    return Err(guard(
                        "tools/list repeated a cursor; the server pages forever".into(),
                    ));
                }
                cursor = Some(next);
            }
        }
    }
    Err(guard(format!(
        "tools/list returned more than {MAX_TOOL_PAGES} pages"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rmcp_type_names_are_dropped() {
        for (text, expect) in [
            (
                "Send message error Transport [rmcp::transport::worker::WorkerTransport<rmcp::X<reqwest::Client>>] error: HTTP 401",
                "Send message error Transport error: HTTP 401",
            ),
            ("no types here", "no types here"),
            ("[rmcp::unclosed<", "[rmcp::unclosed<"),
            ("a [rmcp::A] b [rmcp::B<C>] c", "a b c"),
        ] {
            assert_eq!(without_type_names(text), expect);
        }
    }

    #[test]
    fn keep_end_starts_at_a_line() {
        for (text, budget, expect) in [
            ("short", 10, "short"),
            ("one\ntwo\nthree", 9, "three"),
            ("one\ntwo\nthree", 10, "two\nthree"),
            ("no-newline-at-all", 5, ""),
            ("éé\néé", 5, "éé"),
        ] {
            assert_eq!(keep_end(text, budget), expect, "{text:?} {budget}");
        }
    }

    #[test]
    fn durations_read_naturally() {
        for (duration, expect) in [
            (Duration::from_secs(30), "30s"),
            (Duration::from_millis(300), "300ms"),
            (Duration::from_millis(1500), "1500ms"),
            (Duration::ZERO, "0ms"),
        ] {
            assert_eq!(human_duration(duration), expect);
        }
    }
}
