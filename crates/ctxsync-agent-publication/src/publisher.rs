//! The publisher: one run id per process, snapshots produced on every relevant change, and
//! the push loop that delivers the newest one over each connection after `UpdateStartup`.

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ctxsync_protocol::encoded_size::truncate_to_boundary;
use ctxsync_protocol::limits::{MAX_AGENT_VERSION_BYTES, MAX_DIRECTORY_BYTES};
use ctxsync_protocol::{
    DELTA_DIGEST_SCHEME, DeltaBase, DiscoveryPhase, Resource, ResourceBody, ResourceStatus, RunId,
    Startup, v1,
};
use tokio::sync::watch;
use tokio::time::sleep;
use tonic::Code;
use tracing::{debug, error, info, warn};

use crate::backoff::Backoff;
use crate::connection::{BearerAuth, Connection, ServerTarget};
use crate::error::PublishError;
use crate::report_source::{ReportSource, SourceClosed};
use crate::resolve::{Resolution, ScanConfig, merge_snapshot_errors, resolve_with_watch};
use crate::scan;
use crate::timing::Timing;
use crate::tls::certificate_problem;
use crate::tool_call::{CallRunner, CallWing, Registered, ToolCallConfig};
use crate::watcher::FileWatcher;

/// Default for [`PublisherConfig::max_watched_dirs`].
pub const DEFAULT_MAX_WATCHED_DIRS: usize = 8192;

/// What the publisher needs to run.
#[derive(Clone, PartialEq, Eq)]
pub struct PublisherConfig {
    /// The control plane's agent API: `https://HOST[:PORT]`, or `http://HOST:PORT` (in
    /// clear: a warning at start unless the host is loopback).
    pub server_url: String,
    /// PEM files of certificate authorities trusted for `https://` besides the platform's
    /// (each file may hold several certificates). Read at start even for `http://`, so a
    /// bad file is an error before anything relies on it.
    pub ca_cert_files: Vec<PathBuf>,
    /// The agent's bearer token; never logged.
    pub token: String,
    /// This agent's version, reported in `Startup`.
    pub agent_version: String,
    /// What to scan. `~` and `$VAR`/`${VAR}` in the workspace directory are expanded.
    pub scan: ScanConfig,
    /// Every delay and bound of the publisher.
    pub timing: Timing,
    /// Most directories watched at once ([`DEFAULT_MAX_WATCHED_DIRS`]). Watches (inotify's
    /// `max_user_watches` on Linux) are a per-user resource shared with editors and IDEs,
    /// so the agent never takes them all: beyond this budget, or when the system's limit
    /// is reached first, the rest is polled every [`Timing::poll_interval`] and snapshots
    /// carry a snapshot error saying so until everything is watched again.
    pub max_watched_dirs: usize,
}

impl std::fmt::Debug for PublisherConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PublisherConfig")
            .field("server_url", &self.server_url)
            .field("ca_cert_files", &self.ca_cert_files)
            .field("token", &"[redacted]")
            .field("agent_version", &self.agent_version)
            .field("scan", &self.scan)
            .field("timing", &self.timing)
            .field("max_watched_dirs", &self.max_watched_dirs)
            .finish()
    }
}

/// The state of the connection to the server, for status displays.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ConnectionState {
    /// Connecting or registering (`UpdateStartup`).
    #[default]
    Connecting,
    /// Registered; pushing the newest snapshot whenever it changes.
    Ready,
    /// Registered, but the server does not implement pushes (an older server); waiting
    /// for this connection to end.
    PushesUnsupported,
    /// A transient failure; waiting before the next attempt.
    WaitingToRetry,
    /// The server refused the agent token (rotated, or the agent deleted): nothing is
    /// published. Registering is retried every [`BackoffPolicy::max`](crate::BackoffPolicy::max), never sooner, and
    /// the state stays until the server accepts the token again.
    TokenRefused,
}

/// What the publisher has done so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PublisherStatus {
    /// The newest published snapshot's version (0 before the first).
    pub published_version: u64,
    /// How many times the context was resolved (each sampled the report once).
    pub resolves: u64,
    /// The newest published snapshot's discovery phase.
    pub phase: DiscoveryPhase,
    /// The newest published snapshot's aggregate hash (empty before the first).
    pub aggregate_hash: String,
    /// The newest version the server answered a push for, and whether it accepted it.
    pub last_push: Option<(u64, bool)>,
    /// The state of the connection to the server.
    pub connection: ConnectionState,
}

/// The agent's publication side. One instance per process: it owns the run id.
pub struct Publisher {
    server: ServerTarget,
    auth: BearerAuth,
    startup: Startup,
    scan: ScanConfig,
    timing: Timing,
    max_watched_dirs: usize,
    reports: Option<Box<dyn ReportSource>>,
    status: watch::Sender<PublisherStatus>,
    run_id: uuid::Uuid,
    calls: Option<CallWing>,
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher")
            .field("server", &self.server.url())
            .field("startup", &self.startup)
            .field("scan", &self.scan)
            .field("mcp_discovery", &self.reports.is_some())
            .field("tool_calls", &self.calls.is_some())
            .finish_non_exhaustive()
    }
}

/// A published snapshot: one resolution with its version.
#[derive(Debug)]
struct Published {
    version: u64,
    resolution: Resolution,
}

impl Publisher {
    /// Checks the configuration and generates this process's run id. `reports` is the MCP
    /// engine's report source; `None` (`--no-mcp`) publishes `UNSPECIFIED` and no run id.
    pub fn new(
        config: PublisherConfig,
        reports: Option<Box<dyn ReportSource>>,
    ) -> Result<Self, PublishError> {
        let server = ServerTarget::new(
            &config.server_url,
            &config.timing,
            &config.agent_version,
            &config.ca_cert_files,
        )?;
        let auth = BearerAuth::new(&config.token)?;
        let workspace = expand_directory(&config.scan.workspace_dir)?;
        let metadata = std::fs::metadata(&workspace).map_err(|e| PublishError::Workspace {
            path: workspace.clone(),
            reason: e.to_string(),
        })?;
        if !metadata.is_dir() {
            return Err(PublishError::Workspace {
                path: workspace,
                reason: "not a directory".into(),
            });
        }
        let run_id = uuid::Uuid::new_v4();
        let startup = Startup {
            version: truncate_to_boundary(&config.agent_version, MAX_AGENT_VERSION_BYTES)
                .to_owned(),
            expanded_directory: truncate_to_boundary(
                &workspace.to_string_lossy(),
                MAX_DIRECTORY_BYTES,
            )
            .to_owned(),
            agent_run_id: reports
                .as_ref()
                .and_then(|_| RunId::new(run_id.to_string())),
            // Declared by `with_tool_calls`.
            accepts_tool_calls: false,
        };
        let scan = ScanConfig {
            workspace_dir: workspace,
            ..config.scan
        };
        let (status, _) = watch::channel(PublisherStatus::default());
        Ok(Self {
            server,
            auth,
            startup,
            scan,
            timing: config.timing,
            max_watched_dirs: config.max_watched_dirs,
            reports,
            status,
            run_id,
            calls: None,
        })
    }

    /// Takes tool calls (issue 36): declares `accepts_tool_calls` in `Startup`, opens the
    /// `ToolCalls` stream after each registration and runs calls through `runner` (the
    /// engine's `ToolCaller`). `config.deny` (`--no-tool-calls`) still declares and opens
    /// the stream, refusing every call `denied`; `config.policy` (`--allow-tool-calls`)
    /// refuses `denied` the calls it does not allow. Without a report source there is no run
    /// id to route calls by, so nothing is declared. Fails when `config` is out of bounds.
    pub fn with_tool_calls<R: CallRunner>(
        mut self,
        runner: R,
        config: ToolCallConfig,
    ) -> Result<Self, PublishError> {
        config.check()?;
        match self.startup.agent_run_id.clone() {
            Some(run_id) => {
                self.startup.accepts_tool_calls = true;
                self.calls = Some(CallWing::new(runner, config, run_id));
            }
            None => warn!("tool calls need MCP discovery (a run id); this agent takes none"),
        }
        Ok(self)
    }

    /// This process's run id, sent in `Startup` and on every snapshot; `None` without MCP
    /// discovery, which promises no freshness.
    pub fn run_id(&self) -> Option<&RunId> {
        self.startup.agent_run_id.as_ref()
    }

    /// What is sent by `UpdateStartup` on every new connection.
    pub fn startup(&self) -> &Startup {
        &self.startup
    }

    /// A live view of what the publisher has done.
    pub fn status(&self) -> watch::Receiver<PublisherStatus> {
        self.status.subscribe()
    }

    /// Publishes until a newer process of the same agent supersedes this one, the only
    /// error. Everything else is retried forever: transient failures with backoff, a
    /// refused token every [`BackoffPolicy::max`](crate::BackoffPolicy::max) (see [`ConnectionState::TokenRefused`]).
    /// Cancel by dropping the future.
    pub async fn run(self) -> Result<Infallible, PublishError> {
        let Self {
            server,
            auth,
            startup,
            scan,
            timing,
            max_watched_dirs,
            reports,
            status,
            run_id,
            calls,
        } = self;
        if server.is_plaintext_over_network() {
            warn!(
                server = server.url(),
                "the server URL is http:// to a host that is not loopback: the agent token and the workspace content cross the network unencrypted; use https://"
            );
        }
        let (published_tx, published_rx) = watch::channel(None);
        let (registered, registrations) = watch::channel(None);
        let calls = async move {
            match calls {
                Some(wing) => wing.run(registrations, timing.backoff).await,
                None => std::future::pending().await,
            }
        };
        let watcher = FileWatcher::new(timing.poll_interval, max_watched_dirs);
        let produce = produce(
            scan,
            reports,
            watcher,
            timing.debounce,
            published_tx,
            status.clone(),
        );
        let deliver = Deliver {
            server,
            auth,
            startup,
            backoff: Backoff::new(timing.backoff, run_id.as_u64_pair().0),
            status,
            token_refused: false,
            base: None,
            registered,
            registrations: 0,
        }
        .run(published_rx);
        // The call wing runs beside the push loop, never inside it: neither waits on the
        // other, and a failure of one is not the other's.
        tokio::select! {
            never = produce => match never {},
            result = deliver => result,
            never = calls => match never {},
        }
    }
}

/// Expands `~` and `$VAR`/`${VAR}`, makes the path absolute and removes `.` and `..`.
fn expand_directory(path: &Path) -> Result<PathBuf, PublishError> {
    let raw = path.to_string_lossy();
    let fail = |reason: String| PublishError::Workspace {
        path: path.to_path_buf(),
        reason,
    };
    let home = || std::env::var("HOME").map_err(|_| fail("`~` is used but HOME is not set".into()));
    let mut expanded = match raw.strip_prefix('~') {
        Some(rest) if rest.is_empty() || rest.starts_with('/') => format!("{}{rest}", home()?),
        _ => raw.clone().into_owned(),
    };
    if expanded.contains('$') {
        expanded = expand_variables(&expanded)
            .map_err(|name| fail(format!("the variable `{name}` in the path is not set")))?;
    }
    let absolute = std::path::absolute(&expanded).map_err(|e| fail(e.to_string()))?;
    Ok(scan::normalize(Path::new("/"), &absolute))
}

/// `$NAME` and `${NAME}` from the environment; the error names an unset variable.
fn expand_variables(text: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let (name, tail) = if let Some(braced) = after.strip_prefix('{') {
            match braced.find('}') {
                Some(end) => (&braced[..end], &braced[end + 1..]),
                None => return Err(braced.to_owned()),
            }
        } else {
            let end = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            (&after[..end], &after[end..])
        };
        if name.is_empty() {
            out.push('$');
        } else {
            out.push_str(&std::env::var(name).map_err(|_| name.to_owned())?);
        }
        rest = tail;
    }
    out.push_str(rest);
    Ok(out)
}

/// Resolves on every relevant change and publishes a new version when the result differs
/// from the last published one (the snapshot error included, so entering or leaving
/// degraded watching publishes even when no resource changed). Never returns.
async fn produce(
    scan: ScanConfig,
    mut reports: Option<Box<dyn ReportSource>>,
    mut watcher: FileWatcher,
    debounce: Duration,
    published: watch::Sender<Option<Arc<Published>>>,
    status: watch::Sender<PublisherStatus>,
) -> Infallible {
    let scan = Arc::new(scan);
    let mut reports_open = reports.is_some();
    let mut version = 0u64;
    let mut last: Option<Resolution> = None;
    loop {
        // Sampled once, before the walk: one snapshot describes one engine state.
        let report = reports.as_mut().map(|source| source.sample());
        let job_scan = scan.clone();
        let resolved =
            tokio::task::spawn_blocking(move || resolve_with_watch(&job_scan, report.as_deref()))
                .await;
        let mut resolve_again = false;
        let mut new_version = None;
        match resolved {
            Ok((mut resolution, watch_set)) => {
                resolve_again = watcher.update(watch_set);
                resolution.snapshot_error =
                    merge_snapshot_errors(resolution.snapshot_error.take(), watcher.degraded());
                if last.as_ref() != Some(&resolution) {
                    version += 1;
                    log_published(version, &resolution, last.as_ref());
                    new_version =
                        Some((version, resolution.phase, resolution.aggregate_hash.clone()));
                    published.send_replace(Some(Arc::new(Published {
                        version,
                        resolution: resolution.clone(),
                    })));
                    last = Some(resolution);
                }
            }
            Err(e) => {
                error!(error = %e, "the context resolver failed; waiting for the next change")
            }
        }
        status.send_modify(|s| {
            s.resolves += 1;
            if let Some((version, phase, hash)) = new_version {
                s.published_version = version;
                s.phase = phase;
                s.aggregate_hash = hash;
            }
        });
        if resolve_again {
            continue;
        }
        tokio::select! {
            changed = report_changed(reports.as_mut(), reports_open) => {
                if changed.is_err() {
                    warn!("the MCP discovery report source closed; publishing context file changes only");
                    reports_open = false;
                }
            }
            () = watcher.changed(debounce) => {}
        }
    }
}

async fn report_changed(
    source: Option<&mut Box<dyn ReportSource>>,
    open: bool,
) -> Result<(), SourceClosed> {
    match source {
        Some(source) if open => source.changed().await,
        _ => std::future::pending().await,
    }
}

/// Logs a published version: a summary line, then each server whose outcome changed.
fn log_published(version: u64, resolution: &Resolution, previous: Option<&Resolution>) {
    let servers = || {
        resolution
            .resources
            .iter()
            .filter(|r| matches!(r.body, ResourceBody::McpServer(_)))
    };
    let ok = servers().filter(|r| r.status == ResourceStatus::Ok).count();
    let tools: usize = servers()
        .map(|r| match &r.body {
            ResourceBody::McpServer(body) => body.tools.len(),
            _ => 0,
        })
        .sum();
    info!(
        version,
        phase = resolution.phase.as_str(),
        aggregate_hash = %resolution.aggregate_hash,
        resources = resolution.resources.len(),
        servers_ok = ok,
        servers_not_ok = servers().count() - ok,
        tools,
        snapshot_error = resolution.snapshot_error.as_deref().unwrap_or(""),
        "published context snapshot"
    );
    let before = |source: &str| -> Option<&Resource> {
        previous?.resources.iter().find(|r| r.source == source)
    };
    for row in servers() {
        if before(&row.source) == Some(row) {
            continue;
        }
        let tools = match &row.body {
            ResourceBody::McpServer(body) => body.tools.len(),
            _ => 0,
        };
        info!(
            version,
            server = %row.source,
            status = row.status.as_str(),
            tools,
            error = row.error.as_deref().unwrap_or(""),
            "MCP server outcome"
        );
    }
}

/// The push side: connects, registers, pushes, and starts over on transient failures.
struct Deliver {
    server: ServerTarget,
    auth: BearerAuth,
    startup: Startup,
    backoff: Backoff,
    status: watch::Sender<PublisherStatus>,
    /// From the server's first refusal of the token until it accepts it again.
    token_refused: bool,
    /// The bodies the server holds for this run, as of the last accepted push; `None`
    /// until one is accepted, and after any push whose outcome is unknown. It outlives a
    /// connection: the server keeps the rows, and a refused delta costs one round trip.
    base: Option<DeltaBase>,
    /// The current registration, for the call wing (only when calls are declared);
    /// `None` between connections.
    registered: watch::Sender<Option<Registered>>,
    /// Registrations so far.
    registrations: u64,
}

/// Refused deltas in a row after which a connection sends only full pushes: a server
/// whose digests never match ours (a bug on either side) costs one extra round trip per
/// push at most this many times.
const MAX_DELTA_REFUSALS: u32 = 3;

/// What one connection's push loop knows between pushes.
struct Session {
    /// This connection sends deltas (the server takes them and nothing refused them too often).
    deltas: bool,
    /// Delta pushes refused in a row for a missing base.
    delta_refusals: u32,
    /// The next push is the connection's first delivered one.
    initial: bool,
    /// The newest version pushed and answered (or refused for good).
    attempted: u64,
    /// False once the server said it does not implement pushes.
    pushing: bool,
    /// Some push on this connection was answered.
    answered: bool,
}

/// How a session whose connection closed ended.
enum SessionEnd {
    /// At least one push was answered: the connection worked; reconnect at once.
    AfterRoundTrip,
    /// Nothing was answered after registering.
    Early,
}

/// How a failed call is handled.
enum Failure {
    /// Retry on a new connection after the backoff delay (already waited).
    Transient,
    /// The server refused the token (`Unauthenticated` or `PermissionDenied`); retry at
    /// the longest backoff.
    TokenRefused(tonic::Status),
    /// Stop the publisher.
    Fatal(PublishError),
}

impl Deliver {
    async fn run(
        mut self,
        mut published: watch::Receiver<Option<Arc<Published>>>,
    ) -> Result<Infallible, PublishError> {
        loop {
            self.set_connection(ConnectionState::Connecting);
            let connection = match Connection::open(&self.server, self.auth.clone()).await {
                Ok(connection) => connection,
                Err(e) => {
                    let reason = match certificate_problem(&e) {
                        Some(problem) => format!(
                            "cannot connect to the server: the TLS certificate of {} was refused: {} ({})",
                            self.server.host(),
                            problem.reason,
                            problem.detail
                        ),
                        None => format!("cannot connect to the server: {}", error_chain(&e)),
                    };
                    self.wait_to_retry(&reason).await;
                    continue;
                }
            };
            let ended = self.session(connection, &mut published).await;
            // The call wing keeps a stream it has open until that stream ends, but opens
            // no new one on this connection.
            self.registered.send_replace(None);
            match ended {
                Ok(SessionEnd::AfterRoundTrip) => {} // e.g. a server restart: reconnect at once
                Ok(SessionEnd::Early) => {
                    // Closed before any push was answered: back off, so a server that
                    // accepts and drops connections is not hammered.
                    self.wait_to_retry("the connection closed before any push was answered")
                        .await;
                }
                Err(Failure::Transient) => {}
                Err(Failure::TokenRefused(status)) => self.wait_after_refusal(&status).await,
                Err(Failure::Fatal(e)) => {
                    // The caller reports the returned error; logging it too would say it twice.
                    debug!(error = %e, "stopping the publisher");
                    return Err(e);
                }
            }
        }
    }

    /// One connection: `UpdateStartup`, then pushes until the connection ends.
    async fn session(
        &mut self,
        mut connection: Connection,
        published: &mut watch::Receiver<Option<Arc<Published>>>,
    ) -> Result<SessionEnd, Failure> {
        let answer = self.register(&mut connection).await?;
        let mut session = Session {
            // Deltas need a run id: without one the server cannot tell this process's rows
            // from a predecessor's, and refuses every delta.
            deltas: answer.delta_digest_scheme == DELTA_DIGEST_SCHEME
                && self.startup.agent_run_id.is_some(),
            delta_refusals: 0,
            initial: true,
            attempted: 0,
            pushing: true,
            answered: false,
        };
        loop {
            let snapshot = tokio::select! {
                () = connection.closed() => {
                    info!("the connection to the server closed; reconnecting");
                    return Ok(if session.answered { SessionEnd::AfterRoundTrip } else { SessionEnd::Early });
                }
                snapshot = newer_than(published, session.attempted), if session.pushing => snapshot,
            };
            self.push(&mut connection, &snapshot, &mut session).await?;
        }
    }

    /// `UpdateStartup` on a new connection; the server's answer says whether it takes
    /// deltas.
    async fn register(&mut self, connection: &mut Connection) -> Result<v1::Startup, Failure> {
        let request = v1::UpdateStartupRequest::from(self.startup.clone());
        let answer = match connection.client.update_startup(request).await {
            Ok(answer) => answer.into_inner(),
            Err(status) => {
                return Err(match status.code() {
                    Code::FailedPrecondition => Failure::Fatal(PublishError::Superseded {
                        run_id: self.startup.agent_run_id.clone(),
                        message: status.message().to_owned(),
                    }),
                    Code::Unauthenticated | Code::PermissionDenied => Failure::TokenRefused(status),
                    _ => {
                        self.wait_to_retry(&format!("UpdateStartup failed: {}", describe(&status)))
                            .await;
                        Failure::Transient
                    }
                });
            }
        };
        if std::mem::take(&mut self.token_refused) {
            info!("the server accepts the agent token again; publishing resumes");
        }
        info!(
            run_id = RunId::edge(self.startup.agent_run_id.as_ref()),
            directory = %self.startup.expanded_directory,
            "registered with the server"
        );
        self.set_connection(ConnectionState::Ready);
        if self.startup.accepts_tool_calls {
            self.registrations += 1;
            self.registered.send_replace(Some(Registered {
                generation: self.registrations,
                client: connection.client.clone(),
            }));
        }
        Ok(answer)
    }

    /// Pushes the newest snapshot (as a delta when this session may) and follows the
    /// server's answer; `session.attempted` stays below the version when the same snapshot
    /// must go again.
    async fn push(
        &mut self,
        connection: &mut Connection,
        snapshot: &Published,
        session: &mut Session,
    ) -> Result<(), Failure> {
        let version = snapshot.version;
        let run_id = self.startup.agent_run_id.as_ref();
        let mut request = v1::PushContextStateRequest::from(snapshot.resolution.to_snapshot(
            version,
            run_id,
            session.initial,
        ));
        let (next_base, omitted) = match self.base.as_ref().filter(|_| session.deltas) {
            Some(base) => {
                let next = base.into_delta(&mut request);
                let omitted = request.resources.iter().filter(|r| r.body.is_none());
                (next, omitted.count())
            }
            // Digests only matter to a server that takes deltas.
            None if session.deltas => (DeltaBase::of_full(&request), 0),
            None => (DeltaBase::default(), 0),
        };
        let delta = request.delta;
        // Unknown until answered: a push that fails may or may not have been stored.
        self.base = None;
        match connection.client.push_context_state(request).await {
            Ok(response) => {
                // A full round trip: the connection works, so backoff starts over.
                self.backoff.reset();
                session.answered = true;
                let response = response.into_inner();
                if response.delta_base_missing {
                    session.delta_refusals += 1;
                    if session.delta_refusals >= MAX_DELTA_REFUSALS {
                        warn!(
                            refusals = session.delta_refusals,
                            "the server keeps refusing delta pushes for their base; sending full pushes on this connection"
                        );
                        session.deltas = false;
                    } else {
                        info!(
                            version,
                            "the server does not hold the bodies a delta left out (another run's rows, or a restored database); sending the full snapshot"
                        );
                    }
                    // `session.attempted` stays below `version`: the same snapshot goes again, whole.
                    return Ok(());
                }
                let accepted = response.accepted;
                if accepted && session.deltas {
                    self.base = Some(next_base);
                    if delta {
                        session.delta_refusals = 0;
                        debug!(
                            version,
                            omitted, "the delta left out bodies the server holds"
                        );
                    }
                }
                session.attempted = version;
                session.initial = false;
                self.status
                    .send_modify(|s| s.last_push = Some((version, accepted)));
                if accepted {
                    info!(version, "the server accepted the snapshot");
                } else {
                    warn!(
                        version,
                        "the server did not accept the snapshot (a newer agent process, or a replayed version); waiting for the next change"
                    );
                }
            }
            Err(status) => match status.code() {
                Code::Unimplemented => {
                    self.backoff.reset();
                    session.answered = true;
                    warn!(
                        "the server does not implement PushContextState (an older server); no more pushes on this connection"
                    );
                    session.pushing = false;
                    self.set_connection(ConnectionState::PushesUnsupported);
                }
                Code::Unauthenticated | Code::PermissionDenied => {
                    return Err(Failure::TokenRefused(status));
                }
                // OutOfRange: the server's gRPC message size limit is below the wire
                // limits (its configuration must allow a maximal push).
                Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => {
                    // Retrying the same snapshot cannot help; a later one may differ.
                    session.answered = true;
                    error!(
                        version,
                        error = %describe(&status),
                        "the server refused the snapshot; waiting for the next change"
                    );
                    session.attempted = version;
                }
                _ => {
                    self.wait_to_retry(&format!("push failed: {}", describe(&status)))
                        .await;
                    return Err(Failure::Transient);
                }
            },
        }
        Ok(())
    }

    async fn wait_to_retry(&mut self, reason: &str) {
        // A refused token is not retried sooner because something else failed meanwhile.
        let delay = if self.token_refused {
            self.backoff.longest()
        } else {
            self.backoff.next_delay()
        };
        warn!(retry_in = ?delay, "{reason}");
        self.set_connection(ConnectionState::WaitingToRetry);
        sleep(delay).await;
    }

    /// Says so once per run of refusals, then waits the longest backoff: a rotated token
    /// or a deleted agent stays refused until someone acts, so retrying sooner only adds
    /// load (and every retry a log line).
    async fn wait_after_refusal(&mut self, status: &tonic::Status) {
        let delay = self.backoff.longest();
        if std::mem::replace(&mut self.token_refused, true) {
            debug!(retry_in = ?delay, error = %describe(status), "the server still refuses the agent token");
        } else {
            error!(
                retry_every = ?delay,
                error = %describe(status),
                "the server refused the agent token (mistyped, rotated, or its agent deleted); nothing is published until it is accepted: get a new token with `ctxsync agents rotate AGENT_ID` (or `ctxsync agents create NAME`) and restart the agent with it in CTXSYNC_AGENT_TOKEN"
            );
        }
        self.set_connection(ConnectionState::TokenRefused);
        sleep(delay).await;
    }

    /// Sets the connection state; while the token is refused, connecting and waiting show
    /// as [`ConnectionState::TokenRefused`], so a status display does not flicker.
    fn set_connection(&self, state: ConnectionState) {
        let state = match state {
            ConnectionState::Connecting | ConnectionState::WaitingToRetry if self.token_refused => {
                ConnectionState::TokenRefused
            }
            state => state,
        };
        self.status.send_if_modified(|s| {
            let changed = s.connection != state;
            s.connection = state;
            changed
        });
    }
}

/// The newest published snapshot once its version is above `attempted`.
async fn newer_than(
    published: &mut watch::Receiver<Option<Arc<Published>>>,
    attempted: u64,
) -> Arc<Published> {
    let newest = published
        .wait_for(|p| p.as_ref().is_some_and(|p| p.version > attempted))
        .await
        .ok()
        .and_then(|snapshot| snapshot.clone());
    match newest {
        Some(snapshot) => snapshot,
        // The producer never stops while the publisher runs.
        None => std::future::pending().await,
    }
}

fn describe(status: &tonic::Status) -> String {
    format!("{:?}: {}", status.code(), status.message())
}

/// An error with its sources, e.g. "transport error: tcp connect error: Connection refused".
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_expand_and_unset_ones_are_named() {
        // SAFETY-free: PATH is always set in test environments; use it as a known variable.
        let path = std::env::var("PATH").unwrap();
        assert_eq!(
            expand_variables("a/$PATH/b").unwrap(),
            format!("a/{path}/b")
        );
        assert_eq!(expand_variables("${PATH}x").unwrap(), format!("{path}x"));
        assert_eq!(expand_variables("cost $ 5").unwrap(), "cost $ 5");
        assert_eq!(
            expand_variables("$CTXSYNC_SURELY_UNSET_VARIABLE/x").unwrap_err(),
            "CTXSYNC_SURELY_UNSET_VARIABLE"
        );
    }

    #[test]
    fn directories_are_absolute_and_clean() {
        let dir = expand_directory(Path::new("/tmp/./a/../b")).unwrap();
        assert_eq!(dir, Path::new("/tmp/b"));
        let relative = expand_directory(Path::new("x")).unwrap();
        assert!(relative.is_absolute() && relative.ends_with("x"));
    }
}
