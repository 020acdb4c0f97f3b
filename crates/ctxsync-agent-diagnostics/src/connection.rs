//! One server connection as a task: connect (bounded), list tools (guarded), then watch it.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    path::PathBuf,
    sync::Arc,
    time::Duration,
};

use ctxsync_mcp_model::{McpConnectTimings, McpIcon, McpTool, McpToolAnnotations, ServerDetails};
use rmcp::{
    ClientHandler, RoleClient,
    model::{
        ClientCapabilities, ClientConfig, Implementation, PaginatedRequestParams,
        ProgressNotificationParam, ServerNotification, SubscriptionFilter,
    },
    service::{ClientInitializeError, ClientServiceExt, NotificationContext, Peer, Subscription},
    transport::{
        StreamableHttpClientTransport, async_rw::AsyncRwTransport,
        common::client_side_sse::ExponentialBackoff,
        streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

mod signed_in;

use crate::{
    config::{OAuthGrant, ServerEntry, TransportConfig},
    failure::{self, AccessRefused, Place},
    lifecycle::{McpLifecycle, ProbeDeadline, ProbeWatch},
    line_limit::MAX_MESSAGE_BYTES,
    process::{ProcessGroups, ServerProcess, SpawnSpec},
    sanitize::{
        MAX_DIAGNOSTIC_BYTES, SecretSet, bound_to, redact_known, redact_tools, sanitize_diagnostic,
    },
    sign_in::{self, SignIns},
    tool_call::{CallTargets, ProgressRoutes},
};

/// Most `tools/list` pages followed before the server is considered broken.
pub const MAX_TOOL_PAGES: usize = 100;
/// Most tools kept per server.
pub const MAX_TOOLS_PER_SERVER: usize = 1000;
/// Longest raw tool name accepted from a server; a longer one leaves that tool out.
pub const MAX_TOOL_NAME_BYTES: usize = 128;
/// Left-out tools named one by one in a server's warning; the rest are counted.
const NAMED_LEFT_OUT_TOOLS: usize = 8;
/// Longest server instructions kept.
pub const MAX_INSTRUCTIONS_BYTES: usize = 8 * 1024;
/// Longest server name, version or title kept.
const MAX_SERVER_LABEL_BYTES: usize = 256;
/// Longest server description kept.
const MAX_SERVER_DESCRIPTION_BYTES: usize = 1024;
/// Bound on opening a `subscriptions/listen` stream; without one, tool-list changes are
/// not heard from a server on the 2026-07-28 revision.
const LISTEN_TIMEOUT: Duration = Duration::from_secs(5);
/// After a transport closes, how long to wait for the process's exit status.
const EXIT_STATUS_GRACE: Duration = Duration::from_millis(500);
/// The longest wait between two tries to resume an HTTP server's event stream.
const MAX_STREAM_RETRY_DELAY: Duration = Duration::from_secs(30);
/// How long a graceful MCP close may take before the connection is just dropped.
const CLOSE_GRACE: Duration = Duration::from_secs(1);
/// The shortest wait before re-listing a tool list whose `ttlMs` expired: a server that
/// says "fresh for 1 ms" is not polled a thousand times a second.
pub const MIN_TOOLS_TTL: Duration = Duration::from_secs(5);

/// One complete tool listing.
struct Listing {
    tools: Vec<McpTool>,
    warning: Option<String>,
    /// When to list again because the result's `ttlMs` expires (never for none or 0).
    refresh_in: Option<Duration>,
}

/// `ttlMs` as a re-list delay: absent or 0 ("no caching promise", the Python SDK's default)
/// is left to change notifications; anything else waits at least [`MIN_TOOLS_TTL`].
fn refresh_delay(ttl_ms: Option<u64>) -> Option<Duration> {
    match ttl_ms {
        None | Some(0) => None,
        Some(ms) => Some(Duration::from_millis(ms).max(MIN_TOOLS_TTL)),
    }
}

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
        tools: Arc<[McpTool]>,
        warning: Option<String>,
        details: ServerDetails,
    },
    /// Spawn, initialize or the first listing failed (sanitized, bounded); an HTTP server
    /// that refused the agent's credentials says so in `refused` too.
    ConnectFailed {
        error: String,
        refused: Option<AccessRefused>,
    },
    /// A re-list after `tools/list_changed` succeeded.
    ToolsChanged {
        tools: Arc<[McpTool]>,
        warning: Option<String>,
    },
    /// A re-list after `tools/list_changed` failed on a working connection: the previous
    /// list stands (sanitized, bounded).
    RelistFailed { warning: String },
    /// A connected server went away (sanitized, bounded); one that refused a request for
    /// want of credentials (a tool call's 403 `insufficient_scope`) says so in `refused`.
    Lost {
        error: String,
        refused: Option<AccessRefused>,
    },
    /// The sign-in this live connection sent was renewed or dropped: the server connects
    /// anew with what is held now.
    SignInChanged,
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
    pub lifecycle: McpLifecycle,
    pub probe_timeout: Duration,
    pub events: mpsc::UnboundedSender<ServerEvent>,
    pub cancel: CancellationToken,
    pub groups: Arc<ProcessGroups>,
    /// Where this connection registers for tool calls once connected.
    pub calls: Arc<CallTargets>,
    /// The sign-ins people made, which an HTTP server's connect sends.
    pub sign_ins: Arc<SignIns>,
    /// The held sign-in's access token this attempt sends, once chosen.
    pub bearer: std::sync::Mutex<Option<String>>,
    /// An HTTP server's last refusal of a request for want of credentials.
    pub refusals: crate::lifecycle::Refusals,
}

/// Receives `notifications/tools/list_changed` and the tool calls' progress for one
/// connection.
#[derive(Debug, Clone)]
struct Client {
    tools_changed: mpsc::UnboundedSender<()>,
    progress: Arc<ProgressRoutes>,
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

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.relay(params);
    }
}

type Session = rmcp::service::RunningService<RoleClient, Client>;
/// A connected server: its session, first listing and self-description.
type Connected = (Session, Listing, ServerDetails);

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
        refused: Option<AccessRefused>,
    },
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

    /// A listing's tools and warning as they may leave this task: the tools redacted of
    /// the server's own secrets, the warning (which names server-supplied tool names)
    /// sanitized.
    fn clean(&self, listing: Listing) -> (Arc<[McpTool]>, Option<String>) {
        let mut tools = listing.tools;
        redact_tools(&mut tools, &self.tool_secrets());
        let warning = listing.warning.map(|warning| self.sanitize(&warning));
        (tools.into(), warning)
    }

    /// Lists the tools again (after a change, or when the last list expired) and returns
    /// when to list again. A failure on a working connection keeps the previous list with
    /// a warning and is tried again after [`MIN_TOOLS_TTL`]; a closed transport is left to
    /// the loop's other arms, which say why it closed.
    async fn relist(&self, peer: &Peer<RoleClient>, why: &str) -> Option<tokio::time::Instant> {
        let delay = match tokio::time::timeout(self.timeout, list_tools(peer, self.place())).await {
            Ok(Ok(listing)) => {
                let refresh_in = listing.refresh_in;
                let (tools, warning) = self.clean(listing);
                self.calls
                    .set_tools(self.id, tools.iter().map(|tool| tool.name.clone()));
                self.send(EventKind::ToolsChanged { tools, warning });
                refresh_in
            }
            Ok(Err(error)) if error.closed => None,
            Ok(Err(error)) => {
                // The message says what failed ("tools/list failed: …") in its own words.
                self.relist_failed(why, &error.message);
                Some(MIN_TOOLS_TTL)
            }
            Err(_) => {
                let detail = format!(
                    "tools/list got no response within {}",
                    human_duration(self.timeout)
                );
                self.relist_failed(why, &detail);
                Some(MIN_TOOLS_TTL)
            }
        };
        delay.map(|delay| tokio::time::Instant::now() + delay)
    }

    /// Opens the tool-list change stream, or says once in the log why there is none.
    async fn listen(&self, peer: &Peer<RoleClient>) -> Option<Subscription> {
        let filter = SubscriptionFilter::builder().tools_list_changed().build();
        match tokio::time::timeout(LISTEN_TIMEOUT, peer.listen(filter)).await {
            Ok(Ok(subscription)) => Some(subscription),
            Ok(Err(error)) => {
                let error = self
                    .sanitize(&failure::request(&error, "subscriptions/listen", self.place()).0);
                tracing::warn!(server = %self.entry.name, %error, "subscriptions/listen refused; tool-list changes will not be heard");
                None
            }
            Err(_) => {
                tracing::warn!(server = %self.entry.name, "subscriptions/listen not acknowledged in time; tool-list changes will not be heard");
                None
            }
        }
    }

    /// The server's self-description with its own secrets redacted, bounded.
    fn redact_details(&self, details: ServerDetails) -> ServerDetails {
        let secrets = self.tool_secrets();
        let clean = |text: &str, max: usize| bound_to(&redact_known(text, &secrets), max);
        ServerDetails {
            protocol_version: clean(&details.protocol_version, MAX_SERVER_LABEL_BYTES),
            name: clean(&details.name, MAX_SERVER_LABEL_BYTES),
            version: clean(&details.version, MAX_SERVER_LABEL_BYTES),
            title: details.title.map(|t| clean(&t, MAX_SERVER_LABEL_BYTES)),
            description: details
                .description
                .map(|d| clean(&d, MAX_SERVER_DESCRIPTION_BYTES)),
            instructions: details
                .instructions
                .map(|i| clean(&i, MAX_INSTRUCTIONS_BYTES)),
            timings: details.timings,
        }
    }

    fn relist_failed(&self, why: &str, detail: &str) {
        let warning = format!(
            "re-listing tools after {why} did not work, so the tools are from the previous list: {detail}"
        );
        let warning = self.sanitize(&warning);
        self.send(EventKind::RelistFailed { warning });
    }

    fn sanitize(&self, text: &str) -> String {
        sanitize_diagnostic(&without_type_names(text), &self.diagnostic_secrets())
    }

    /// What this server's diagnostics, and its tool calls, are sanitized of.
    fn diagnostic_secrets(&self) -> SecretSet {
        let mut secrets = (*self.secrets).clone();
        // The program name is what "command not found" must show, not a secret.
        if let TransportConfig::Stdio { command, .. } = &self.entry.transport {
            secrets.remove(command);
        }
        secrets.extend(&self.sign_ins.secrets());
        secrets
    }

    /// What this server's tools are checked against: its own secrets, the agent's and the
    /// sign-in's token it was sent.
    fn tool_secrets(&self) -> SecretSet {
        let mut secrets = (*self.tool_secrets).clone();
        if let Some(token) = self.sent_bearer() {
            secrets.insert(&token);
        }
        secrets
    }

    /// Runs until cancelled or the connection is lost, reporting through `events`.
    pub(crate) async fn run(self) {
        let (tools_changed, mut tools_changed_rx) = mpsc::unbounded_channel();
        let progress = Arc::new(ProgressRoutes::new(self.diagnostic_secrets()));
        let client = Client {
            tools_changed,
            progress: progress.clone(),
        };
        let mut process: Option<ServerProcess> = None;
        let attempt = tokio::select! {
            () = self.cancel.cancelled() => Err(ConnectError::Cancelled),
            result = tokio::time::timeout(self.timeout, self.connect_signed_in(client, &mut process)) => {
                result.unwrap_or(Err(ConnectError::Timeout))
            }
        };
        let (session, listing, details) = match attempt {
            Ok(connected) => connected,
            Err(error) => return self.connect_failed(error, process).await,
        };
        let mut renew_at = self.renewal_at();
        let mut refresh_at = listing
            .refresh_in
            .map(|delay| tokio::time::Instant::now() + delay);
        let (tools, warning) = self.clean(listing);
        let details = self.redact_details(details);
        let names = tools.iter().map(|tool| tool.name.clone());
        let stdout = process.as_ref().map(ServerProcess::stdout_watch);
        if let Some(stdout) = &stdout {
            // A tool result too large for a message now costs only its call.
            stdout.tolerate_oversized();
        }
        self.calls.insert(
            self.id,
            session.peer().clone(),
            names,
            progress,
            stdout,
            self.refusals.clone(),
        );
        let modern = !session
            .peer()
            .peer_info()
            .is_none_or(|info| info.protocol_version.has_initialize());
        self.send(EventKind::Connected {
            tools,
            warning,
            details,
        });

        let peer = session.peer().clone();
        // On 2026-07-28, tool-list changes come only on a `subscriptions/listen` stream;
        // earlier revisions send the notification the client handler receives.
        // Closing does not wait for a listen the server never acknowledges: a cancelled
        // task leaves at once through the loop's first arm.
        let mut listening = if modern && announces_tool_changes(&peer) {
            tokio::select! {
                () = self.cancel.cancelled() => None,
                subscription = self.listen(&peer) => subscription,
            }
        } else {
            None
        };
        let stop_session = session.cancellation_token();
        let mut closed = std::pin::pin!(session.waiting());
        let mut session_ended = false;
        let lost = loop {
            tokio::select! {
                () = self.cancel.cancelled() => break None,
                status = exit_of(&mut process) => {
                    break Some((exited(&status, process.as_mut()).await, None));
                }
                _ = &mut closed => {
                    session_ended = true;
                    if let Some(refused) = self.refused_request() {
                        break Some(refused);
                    }
                    let message = match process.as_mut() {
                        Some(child) if child.sent_oversized_message() => oversized(child),
                        Some(child) => match tokio::time::timeout(EXIT_STATUS_GRACE, child.wait()).await {
                            Ok(status) => exited(&status, Some(child)).await,
                            Err(_) => with_stderr("the server closed the connection".into(), Some(child)),
                        },
                        None => "the server closed the connection".to_owned(),
                    };
                    break Some((message, None));
                }
                changed = next_tools_change(&mut listening) => {
                    if !changed {
                        // The stream ended or broke: fall back to the notification, if any.
                        listening = None;
                        continue;
                    }
                    refresh_at = self.relist(&peer, "a tool-list change").await;
                }
                Some(()) = tools_changed_rx.recv() => {
                    // Several notifications in a row need one re-list.
                    while tools_changed_rx.try_recv().is_ok() {}
                    refresh_at = self.relist(&peer, "tools/list_changed").await;
                }
                () = sleep_until_some(refresh_at) => {
                    refresh_at = self.relist(&peer, "the tool list's ttlMs expired").await;
                }
                // A request refused for want of credentials (a call's 403
                // `insufficient_scope`): the server waits for a person's sign-in.
                () = self.refusals.noticed() => {
                    if let Some(refused) = self.refused_request() {
                        break Some(refused);
                    }
                }
                () = sleep_until_some(renew_at) => tokio::select! {
                    () = self.cancel.cancelled() => break None,
                    at = self.renew() => renew_at = at,
                },
            }
        };
        self.calls.remove(self.id);
        stop_session.cancel();
        if let Some(process) = process.take() {
            process.shutdown().await;
        }
        if !session_ended {
            // Let rmcp finish its close (e.g. an HTTP session DELETE), briefly.
            let _ = tokio::time::timeout(CLOSE_GRACE, &mut closed).await;
        }
        if let Some((error, refused)) = lost {
            let error = self.sanitize(&error);
            self.send(EventKind::Lost { error, refused });
        }
    }

    /// Why an HTTP connection ended when the server refused a request for want of
    /// credentials: a tool call needing a scope the sign-in did not grant (the refusal: a
    /// person must sign in again), or a token no longer taken (none: the reconnect renews
    /// it).
    fn refused_request(&self) -> Option<(String, Option<AccessRefused>)> {
        let refused = self.refusals.last().filter(AccessRefused::needs_sign_in)?;
        let server = match &self.entry.transport {
            TransportConfig::Http { url, .. } => format!("the server at {url}"),
            TransportConfig::Stdio { .. } => "the server".to_owned(),
        };
        let words = match &refused {
            AccessRefused::Forbidden { .. } => format!(
                "{server} refused a request for want of a scope the sign-in did not grant (403 insufficient_scope): a person must sign in again (the Sign in button on the chat's page, or the chat API's sign-in route)"
            ),
            // The reconnect renews the sign-in (or finds that a person must sign in).
            AccessRefused::Unauthorized { .. } => {
                return Some((
                    format!("{server} stopped accepting the sign-in (401 Unauthorized)"),
                    None,
                ));
            }
        };
        Some((words, Some(refused)))
    }

    /// Tells the engine why the attempt failed (nothing when it was cancelled).
    async fn connect_failed(&self, error: ConnectError, mut process: Option<ServerProcess>) {
        let refused = match &error {
            ConnectError::Initialize { refused, .. } => refused.clone(),
            _ => None,
        };
        let message = self.failure(error, &mut process).await;
        if let Some(process) = process.take() {
            process.shutdown().await;
        }
        if let Some(error) = message {
            self.send(EventKind::ConnectFailed { error, refused });
        }
    }

    /// Connects and lists the tools. A slow server is connected on its first connection
    /// (see `ProbeDeadline`); only a 2026-07-28-only server that was sent the fallback
    /// `initialize` and refused it (see [`ProbeWatch::modern_after_all`]) is tried once
    /// more with `server/discover` alone (a new process, or a new HTTP session), within
    /// what is left of the connect timeout that bounds this whole call.
    async fn connect(
        &self,
        client: Client,
        process: &mut Option<ServerProcess>,
    ) -> Result<Connected, ConnectError> {
        let started = std::time::Instant::now();
        let mut start_ms = None;
        let watch = ProbeWatch::default();
        let first = self
            .handshake(
                client.clone(),
                process,
                self.lifecycle,
                &watch,
                started,
                &mut start_ms,
            )
            .await?;
        let session = match first {
            Ok(session) => session,
            Err(error)
                if self.lifecycle == McpLifecycle::Auto && watch.modern_after_all(&error) =>
            {
                tracing::info!(
                    server = %self.entry.name,
                    "the server speaks 2026-07-28 but answered server/discover after the probe timeout; connecting again with server/discover"
                );
                if let Some(first) = process.take() {
                    first.shutdown().await;
                }
                let retry = ProbeWatch::default();
                self.handshake(
                    client,
                    process,
                    McpLifecycle::Discover,
                    &retry,
                    started,
                    &mut start_ms,
                )
                .await?
                .map_err(|error| self.handshake_error(&error, &retry))?
            }
            Err(error) => return Err(self.handshake_error(&error, &watch)),
        };
        if let Some(info) = session.peer().peer_info()
            && !failure::speaks(&info.protocol_version)
        {
            return Err(ConnectError::Initialize {
                detail: failure::unknown_revision(&info.protocol_version, self.place()),
                closed: false,
                refused: None,
            });
        }
        let handshake_done = started.elapsed();
        // No client-side cache: every listing must describe the server as it is now.
        session
            .peer()
            .set_response_cache_config(rmcp::ClientCacheConfig::disabled())
            .await;
        let offers_tools = session
            .peer()
            .peer_info()
            .is_none_or(|info| info.capabilities.tools.is_some());
        let listing = if offers_tools {
            list_tools(session.peer(), self.place())
                .await
                .map_err(ConnectError::List)?
        } else {
            Listing {
                tools: Vec::new(),
                warning: None,
                refresh_in: None,
            }
        };
        let handshake_ms = millis(handshake_done) - start_ms.unwrap_or(0);
        let timings = McpConnectTimings {
            start_ms,
            handshake_ms,
            tools_ms: millis(started.elapsed() - handshake_done),
        };
        let details = describe(session.peer(), timings);
        Ok((session, listing, details))
    }

    /// Starts the transport (spawning the process into `process` for stdio) and runs the
    /// MCP handshake with `lifecycle`. The outer error is a process that could not be
    /// started; the inner one rmcp's, for [`ProbeWatch::modern_after_all`] to judge. The
    /// discover probe is bounded only for [`McpLifecycle::Auto`], which has a fallback.
    async fn handshake(
        &self,
        client: Client,
        process: &mut Option<ServerProcess>,
        lifecycle: McpLifecycle,
        watch: &ProbeWatch,
        started: std::time::Instant,
        start_ms: &mut Option<u64>,
    ) -> Result<Result<Session, ClientInitializeError>, ConnectError> {
        let mode = lifecycle.mode();
        let probe_timeout = (lifecycle == McpLifecycle::Auto).then_some(self.probe_timeout);
        let session = match &self.entry.transport {
            TransportConfig::Stdio { command, args, env } => {
                // A plugin's server gets its own environment and directory, never the
                // agent's whole environment (see `PluginLaunch::environment`).
                let plugin_env;
                let no_env = BTreeMap::new();
                let (agent_env, entry_env, cwd) = match &self.entry.plugin {
                    Some(launch) => {
                        prepare_plugin_dirs(launch).map_err(ConnectError::Spawn)?;
                        plugin_env = launch.environment(&self.agent_env, env);
                        (&plugin_env, &no_env, launch.cwd.as_path())
                    }
                    None => (&*self.agent_env, env, self.workspace_dir.as_path()),
                };
                let spec = SpawnSpec {
                    command,
                    args,
                    agent_env,
                    entry_env,
                    cwd,
                };
                let (child, stdout, stdin) = ServerProcess::spawn(spec, self.groups.clone())
                    .map_err(|error| match error.kind() {
                        std::io::ErrorKind::NotFound => {
                            ConnectError::CommandNotFound(command.clone())
                        }
                        _ => ConnectError::Spawn(format!(
                            "cannot start {command}: {error}; check the command in .mcp.json"
                        )),
                    })?;
                *process = Some(child);
                // A second process (see `connect`) keeps the first one's start time.
                start_ms.get_or_insert_with(|| millis(started.elapsed()));
                // Our own copy of the pipe's end, to see when the server reads the probe.
                let reading = rustix::io::fcntl_dupfd_cloexec(&stdin, 0).ok();
                let transport = ProbeDeadline::new(
                    AsyncRwTransport::new_client(stdout, stdin),
                    probe_timeout,
                    watch.clone(),
                )
                .reading(reading);
                client.serve_with_lifecycle(transport, mode).await
            }
            TransportConfig::Http {
                url,
                headers,
                oauth,
            } => {
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
                let mut config = StreamableHttpClientTransportConfig::with_uri(url.clone())
                    .custom_headers(headers);
                if let Some(client) = oauth
                    .as_ref()
                    .filter(|client| client.grant == OAuthGrant::ClientCredentials)
                {
                    // A fresh token on every connect: a reconnect after the server refused an
                    // expired one signs in again.
                    let token = sign_in::client_credentials_token(url, client)
                        .await
                        .map_err(ConnectError::Spawn)?;
                    config = config.auth_header(token);
                } else if let Some(token) = self.sent_bearer() {
                    config = config.auth_header(token);
                }
                // A stream the server closes is resumed (GET with Last-Event-ID after the
                // server's `retry`, SEP-1699); when resuming fails, the next try waits
                // longer, but never more than this, so a server back after an outage is
                // heard again soon.
                let mut backoff = ExponentialBackoff::default();
                backoff.max_delay = Some(MAX_STREAM_RETRY_DELAY);
                config.retry_config = Arc::new(backoff);
                let transport = match &self.entry.plugin {
                    // A plugin's headers go to its configured origin only (Agent Plugins
                    // §7.2.1): a redirect elsewhere is refused, not followed.
                    Some(_) => StreamableHttpClientTransport::with_client(
                        same_origin_client(url).map_err(ConnectError::Spawn)?,
                        config,
                    ),
                    None => StreamableHttpClientTransport::from_config(config),
                };
                let transport = ProbeDeadline::new(transport, probe_timeout, watch.clone())
                    .holding_fallback()
                    .recording_refusals(self.refusals.clone());
                client.serve_with_lifecycle(transport, mode).await
            }
        };
        Ok(session)
    }

    /// Where this server is, as a failure's sentence names it.
    fn place(&self) -> Place<'_> {
        match &self.entry.transport {
            TransportConfig::Stdio { .. } => Place::Stdio,
            TransportConfig::Http {
                url,
                headers,
                oauth,
            } => Place::Http {
                url,
                own_credentials: !headers.is_empty()
                    || oauth
                        .as_ref()
                        .is_some_and(|client| client.grant == OAuthGrant::ClientCredentials),
            },
        }
    }

    /// A failed handshake as the connect error that explains it.
    fn handshake_error(&self, error: &ClientInitializeError, watch: &ProbeWatch) -> ConnectError {
        if let Some(version) = watch.unknown_revision() {
            return ConnectError::Initialize {
                detail: failure::unknown_revision(&version, self.place()),
                closed: false,
                refused: None,
            };
        }
        let failed_send = watch.take_failed_send();
        let failed_send = failed_send
            .as_deref()
            .map(|error| error as &(dyn std::error::Error + 'static));
        let failure = failure::handshake(error, self.place(), failed_send);
        ConnectError::Initialize {
            detail: failure.sentence,
            closed: failure.closed,
            refused: failure.refused,
        }
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
                let mut message = format!(
                    "no response within {} (a server that needs longer to start needs a longer connect timeout)",
                    human_duration(self.timeout)
                );
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
            ConnectError::Initialize { detail, closed, .. }
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

/// Creates a plugin server's data directory (owner-only) and, when its working directory
/// lies inside it, that too, before the server starts (Agent Plugins §9.1).
fn prepare_plugin_dirs(launch: &crate::plugin_launch::PluginLaunch) -> Result<(), String> {
    use std::os::unix::fs::DirBuilderExt;
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true).mode(0o700);
    for dir in std::iter::once(&launch.data_dir)
        .chain(Some(&launch.cwd).filter(|cwd| cwd.starts_with(&launch.data_dir)))
    {
        builder.create(dir).map_err(|error| {
            format!(
                "cannot create the plugin data directory {}: {error}",
                dir.display()
            )
        })?;
    }
    Ok(())
}

/// An HTTP client that follows redirects only within `url`'s origin.
fn same_origin_client(url: &str) -> Result<reqwest::Client, String> {
    let origin = url::Url::parse(url)
        .map_err(|error| format!("invalid URL: {error}"))?
        .origin();
    let policy = reqwest::redirect::Policy::custom(move |attempt| {
        if attempt.previous().len() >= 10 {
            attempt.error("too many redirects")
        } else if attempt.url().origin() == origin {
            attempt.follow()
        } else {
            attempt.error("refused a redirect to another origin: a plugin's headers stay with its configured origin")
        }
    });
    reqwest::Client::builder()
        .redirect(policy)
        .build()
        .map_err(|error| format!("cannot set up the HTTP client: {error}"))
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

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// What the server said about itself in its handshake.
fn describe(peer: &Peer<RoleClient>, timings: McpConnectTimings) -> ServerDetails {
    let Some(info) = peer.peer_info() else {
        return ServerDetails {
            timings,
            ..ServerDetails::default()
        };
    };
    let implementation = info.server_info.as_ref();
    ServerDetails {
        protocol_version: info.protocol_version.to_string(),
        name: implementation.map(|i| i.name.clone()).unwrap_or_default(),
        version: implementation
            .map(|i| i.version.clone())
            .unwrap_or_default(),
        title: implementation.and_then(|i| i.title.clone()),
        description: implementation.and_then(|i| i.description.clone()),
        instructions: info.instructions.clone(),
        timings,
    }
}

/// Whether the server says its tool list may change.
fn announces_tool_changes(peer: &Peer<RoleClient>) -> bool {
    peer.peer_info().is_some_and(|info| {
        info.capabilities
            .tools
            .as_ref()
            .is_some_and(|tools| tools.list_changed == Some(true))
    })
}

/// Sleeps until `at`, or forever without one.
async fn sleep_until_some(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Waits for a tool-list change on the subscription: `true` for one, `false` when the
/// stream ended or failed; never resolves without a subscription.
async fn next_tools_change(subscription: &mut Option<Subscription>) -> bool {
    let Some(subscription) = subscription.as_mut() else {
        return std::future::pending().await;
    };
    loop {
        match subscription.next().await {
            Ok(Some(ServerNotification::ToolListChangedNotification(_))) => return true,
            Ok(Some(_)) => {} // only tool changes were asked for
            Ok(None) | Err(_) => return false,
        }
    }
}

/// Why a tool the server offered is left out, if it is: its siblings are kept either way.
fn tool_problem(tool: &rmcp::model::Tool, earlier: &HashSet<String>) -> Option<&'static str> {
    let name = tool.name.as_ref();
    if name.is_empty() {
        return Some("its name is empty");
    }
    if name.len() > MAX_TOOL_NAME_BYTES {
        return Some("its name is longer than 128 bytes");
    }
    if name.chars().any(char::is_control) {
        return Some("its name contains control characters");
    }
    // An object schema: `type` absent (no constraint) or "object", alone or among others.
    let is_object = match tool.input_schema.get("type") {
        None => true,
        Some(serde_json::Value::String(kind)) => kind == "object",
        Some(serde_json::Value::Array(kinds)) => kinds.iter().any(|kind| kind == "object"),
        Some(_) => false,
    };
    if !is_object {
        return Some("its input schema is not an object schema");
    }
    if earlier.contains(name) {
        return Some("an earlier tool has the same name (the first is kept)");
    }
    None
}

/// The left-out tools as one warning: the first few named, the rest counted.
fn left_out_warning(left_out: &[String], total: usize) -> Option<String> {
    if total == 0 {
        return None;
    }
    let mut warning = format!(
        "{total} tool{} left out: {}",
        if total == 1 { "" } else { "s" },
        left_out.join("; ")
    );
    if total > left_out.len() {
        warning.push_str(&format!("; and {} more", total - left_out.len()));
    }
    Some(warning)
}

/// A server-supplied name as a warning may show it: escaped, at most 64 characters.
fn shown_name(name: &str) -> String {
    let escaped: String = name.escape_debug().take(64).collect();
    if name.escape_debug().count() > 64 {
        format!("\"{escaped}...\"")
    } else {
        format!("\"{escaped}\"")
    }
}

/// The engine's copy of a tool, every field the server gave kept.
fn tool_info(tool: rmcp::model::Tool) -> McpTool {
    use rmcp::model::IconTheme;
    let object =
        |map: &serde_json::Map<String, serde_json::Value>| serde_json::Value::Object(map.clone());
    McpTool {
        input_schema: object(&tool.input_schema),
        output_schema: tool.output_schema.as_deref().map(object),
        meta: tool.meta.as_ref().map(|meta| object(meta)),
        name: tool.name.into_owned(),
        description: tool.description.map(|d| d.into_owned()).unwrap_or_default(),
        title: tool.title.unwrap_or_default(),
        annotations: tool.annotations.map(|a| McpToolAnnotations {
            title: a.title.unwrap_or_default(),
            read_only_hint: a.read_only_hint,
            destructive_hint: a.destructive_hint,
            idempotent_hint: a.idempotent_hint,
            open_world_hint: a.open_world_hint,
        }),
        icons: tool
            .icons
            .unwrap_or_default()
            .into_iter()
            .map(|icon| McpIcon {
                src: icon.src,
                mime_type: icon.mime_type.unwrap_or_default(),
                sizes: icon.sizes.unwrap_or_default(),
                // The enum is non-exhaustive: a later theme keeps its wire name.
                theme: match icon.theme {
                    None => String::new(),
                    Some(IconTheme::Light) => "light".into(),
                    Some(IconTheme::Dark) => "dark".into(),
                    Some(other) => serde_json::to_value(other)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_owned))
                        .unwrap_or_default(),
                },
            })
            .collect(),
    }
}

/// Lists all tools, following cursors with a guard against servers that page forever. Tools
/// that cannot be offered (see [`tool_problem`]) are left out with a warning; the rest are
/// ordered by name.
async fn list_tools(peer: &Peer<RoleClient>, place: Place<'_>) -> Result<Listing, ListFailure> {
    let guard = |message: String| ListFailure {
        message,
        closed: false,
    };
    let mut tools = Vec::new();
    let mut names = HashSet::new();
    let mut left_out = Vec::new();
    let mut left_out_total = 0usize;
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
            message: failure::request(&error, "tools/list", place).0,
        })?;
        for tool in page.tools {
            if let Some(problem) = tool_problem(&tool, &names) {
                left_out_total += 1;
                if left_out.len() < NAMED_LEFT_OUT_TOOLS {
                    left_out.push(format!("{} ({problem})", shown_name(&tool.name)));
                }
                continue;
            }
            offered += 1;
            if tools.len() < MAX_TOOLS_PER_SERVER {
                names.insert(tool.name.to_string());
                tools.push(tool_info(tool));
            }
        }
        match page.next_cursor {
            None => {
                let capped = (offered > MAX_TOOLS_PER_SERVER).then(|| {
                    format!(
                        "the server offered {offered} tools; only the first {MAX_TOOLS_PER_SERVER} are kept"
                    )
                });
                let warnings: Vec<String> = [capped, left_out_warning(&left_out, left_out_total)]
                    .into_iter()
                    .flatten()
                    .collect();
                // Servers should order tools deterministically; not all do.
                tools.sort_by(|a, b| a.name.cmp(&b.name));
                return Ok(Listing {
                    tools,
                    warning: (!warnings.is_empty()).then(|| warnings.join("; ")),
                    // The last page's hint describes the list as a whole.
                    refresh_in: refresh_delay(page.ttl_ms),
                });
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
    fn ttl_hints_become_bounded_relist_delays() {
        assert_eq!(refresh_delay(None), None);
        assert_eq!(refresh_delay(Some(0)), None, "0 promises nothing");
        assert_eq!(refresh_delay(Some(1)), Some(MIN_TOOLS_TTL));
        assert_eq!(refresh_delay(Some(60_000)), Some(Duration::from_secs(60)));
        assert!(refresh_delay(Some(u64::MAX)).is_some());
    }

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
