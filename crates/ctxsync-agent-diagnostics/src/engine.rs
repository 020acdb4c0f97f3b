//! The MCP engine: one actor task owning every connection, publishing the report as it changes.

use std::{
    collections::{BTreeMap, HashMap},
    hash::BuildHasher,
    path::PathBuf,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use ctxsync_mcp_model::{
    ConfigFileOutcome, McpTool, PendingServer, Report, ReportPhase, ServerDetails, ServerReport,
};
use tokio::{
    sync::{mpsc, oneshot, watch},
    task::JoinHandle,
    time::Instant,
};
use tokio_util::sync::CancellationToken;

mod signed_in;

use crate::{
    config::{ConfigFile, LoadedConfig, ServerEntry, load_config, quote_name},
    connection::{ConnectionTask, EventKind, ServerEvent},
    failure::AccessRefused,
    lifecycle::{DEFAULT_DISCOVER_PROBE_TIMEOUT, McpLifecycle},
    process::ProcessGroups,
    progress::Progress,
    sanitize::{SecretSet, sanitize_diagnostic},
    sign_in::{SignInUpdate, SignIns, Target},
    tool_call::CallTargets,
};

/// Default bound on one server's spawn + `initialize` + first complete `tools/list`.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Default quiet period after a config file change before reloading.
pub const DEFAULT_WATCH_DEBOUNCE: Duration = Duration::from_millis(250);
/// Default interval of the config files' poll (the agent's context files use the same).
pub const DEFAULT_CONFIG_POLL_INTERVAL: Duration = Duration::from_secs(30);
/// Default first retry delay for a failed server.
pub const DEFAULT_RETRY_INITIAL: Duration = Duration::from_secs(5);
/// Default longest retry delay.
pub const DEFAULT_RETRY_MAX: Duration = Duration::from_secs(5 * 60);
/// How long closing connections may take before their tasks are aborted (groups are
/// SIGKILLed either way).
const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);
/// The most [`Engine::close`] waits for an orderly close (the actor's own close is bounded
/// by [`CLOSE_TIMEOUT`]; the rest is slack for a reload it was in the middle of).
const CLOSE_BUDGET: Duration = Duration::from_millis(2500);
/// A connection that lived this long before it was lost resets the retry backoff; one that
/// dies sooner (a crash loop) keeps backing off.
const STABLE_CONNECTION: Duration = Duration::from_secs(60);
/// The default config file, relative to the workspace.
const DEFAULT_CONFIG_FILE: &str = ".mcp.json";
/// Prefix of the warning on a server whose reconnect failed (SPEC §3.2, verbatim).
const RETAINED_WARNING: &str =
    "reconnect with the updated configuration failed; tools are from the previous connection: ";
/// Prefix of the warning on a connected server whose config file could not be read at the
/// last reload (followed by the file and its error), in the words of [`RETAINED_WARNING`].
const HELD_WARNING: &str = "its config file could not be read; tools are from the previous \
    connection until the file is fixed: ";
/// How many kept servers a config file's warning names.
const HELD_NAMED: usize = 8;

/// Retry of failed servers: `initial` doubling to `max`, each delay jittered by ±20%.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Whether failed servers are retried at all.
    pub enabled: bool,
    /// Delay before the first retry.
    pub initial_delay: Duration,
    /// Upper bound of any delay.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            enabled: true,
            initial_delay: DEFAULT_RETRY_INITIAL,
            max_delay: DEFAULT_RETRY_MAX,
        }
    }
}

impl RetryPolicy {
    /// The delay before retry number `failures` (1-based), jittered, never above `max_delay`.
    fn delay(&self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(30);
        let base = self
            .initial_delay
            .saturating_mul(1u32 << doublings)
            .min(self.max_delay);
        // Spread retries of many servers that failed together; std's RandomState is seeded
        // randomly per instance, which is all the randomness jitter needs.
        let random = std::collections::hash_map::RandomState::new().hash_one(failures);
        let factor = 0.8 + (random % 401) as f64 / 1000.0;
        base.mul_f64(factor).min(self.max_delay)
    }
}

/// How the engine is set up. Its `Debug` names the environment's variables and counts
/// the injected secrets, never showing a value.
#[derive(Clone)]
pub struct EngineConfig {
    /// The workspace: stdio servers run here; `.mcp.json` is read from here.
    pub workspace_dir: PathBuf,
    /// Config files read after `<workspace>/.mcp.json` (relative paths are relative to the
    /// workspace). Duplicates are read once. Named explicitly, they may be symlinks leading
    /// outside the workspace; `<workspace>/.mcp.json` may not.
    pub config_paths: Vec<PathBuf>,
    /// Bound on one server's spawn, handshake and first complete `tools/list`.
    pub connect_timeout: Duration,
    /// The MCP lifecycle used with every server.
    pub lifecycle: McpLifecycle,
    /// Under [`McpLifecycle::Auto`], how long `server/discover` may go unanswered before
    /// the fallback to `initialize` (part of the connect timeout).
    pub discover_probe_timeout: Duration,
    /// Retry of failed servers.
    pub retry: RetryPolicy,
    /// The agent's environment: expands `${VAR}`, is passed to stdio servers, and the values
    /// of its secret-named variables (`GITHUB_TOKEN`, `DB_PASSWORD`, ...) are redacted from
    /// diagnostics; ordinary values such as `CI=true` are not.
    pub env: BTreeMap<String, String>,
    /// Secrets the agent holds (e.g. its token) that must never appear in a diagnostic.
    pub injected_secrets: Vec<String>,
    /// Reload when a config file changes.
    pub watch: bool,
    /// Quiet period after a change before the reload.
    pub watch_debounce: Duration,
    /// While watching, config files are also checked this often, which catches the changes
    /// a watch misses (a directory that did not exist, the system's watch limit).
    pub poll_interval: Duration,
    /// Where Agent Plugins packages are found, in precedence order (see
    /// [`crate::discover_plugins`]); their `mcp.json` servers run as `<plugin>/<server>`
    /// after the config files' servers. Defaults to the workspace's and the home
    /// directory's `.agents/plugins`.
    pub plugin_dirs: Vec<PathBuf>,
    /// Under which each plugin gets its persistent data directory (`PLUGIN_DATA`).
    pub plugin_data_dir: PathBuf,
    /// Where each renewal of a person's sign-in goes (and each one that could not be
    /// renewed), for the control plane to keep; none by default.
    pub sign_in_updates: Option<mpsc::UnboundedSender<SignInUpdate>>,
}

impl std::fmt::Debug for EngineConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineConfig")
            .field("workspace_dir", &self.workspace_dir)
            .field("config_paths", &self.config_paths)
            .field("connect_timeout", &self.connect_timeout)
            .field("lifecycle", &self.lifecycle)
            .field("discover_probe_timeout", &self.discover_probe_timeout)
            .field("retry", &self.retry)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("injected_secrets", &self.injected_secrets.len())
            .field("watch", &self.watch)
            .field("watch_debounce", &self.watch_debounce)
            .field("poll_interval", &self.poll_interval)
            .field("plugin_dirs", &self.plugin_dirs)
            .field("plugin_data_dir", &self.plugin_data_dir)
            .field("sign_in_updates", &self.sign_in_updates.is_some())
            .finish()
    }
}

impl EngineConfig {
    /// Defaults: the process environment, 30 s timeout, retries, watching on, plugins from
    /// the workspace's and `$HOME`'s `.agents/plugins` with their data under
    /// [`default_plugin_data_dir`].
    pub fn new(workspace_dir: impl Into<PathBuf>) -> Self {
        let workspace_dir = workspace_dir.into();
        let home = std::env::var_os("HOME").map(PathBuf::from);
        Self {
            plugin_dirs: crate::plugin::default_plugin_dirs(&workspace_dir, home.as_deref()),
            plugin_data_dir: default_plugin_data_dir(),
            workspace_dir,
            config_paths: Vec::new(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            lifecycle: McpLifecycle::default(),
            discover_probe_timeout: DEFAULT_DISCOVER_PROBE_TIMEOUT,
            retry: RetryPolicy::default(),
            // Non-UTF-8 variables cannot appear in a JSON config or a diagnostic; skip them.
            env: std::env::vars_os()
                .filter_map(|(name, value)| {
                    Some((name.into_string().ok()?, value.into_string().ok()?))
                })
                .collect(),
            injected_secrets: Vec::new(),
            watch: true,
            watch_debounce: DEFAULT_WATCH_DEBOUNCE,
            poll_interval: DEFAULT_CONFIG_POLL_INTERVAL,
            sign_in_updates: None,
        }
    }

    /// All config files in order, absolute. The workspace's own file must resolve inside
    /// the workspace; the configured ones were named explicitly and may lead anywhere.
    fn files(&self) -> Vec<ConfigFile> {
        // A workspace that cannot be resolved holds no readable file; its own path as the
        // confinement then refuses every symlink, which is the safe side.
        let root = std::fs::canonicalize(&self.workspace_dir)
            .unwrap_or_else(|_| self.workspace_dir.clone());
        let mut files = vec![ConfigFile::in_workspace(
            self.workspace_dir.join(DEFAULT_CONFIG_FILE),
            root,
        )];
        files.extend(
            self.config_paths
                .iter()
                .map(|path| ConfigFile::named(self.workspace_dir.join(path))),
        );
        files
    }
}

/// Where plugins' data directories live by default: `$XDG_DATA_HOME/ctxsync/plugins`, else
/// `~/.local/share/ctxsync/plugins`, else (no home) the temporary directory's
/// `ctxsync-plugins`.
pub fn default_plugin_data_dir() -> PathBuf {
    let base = std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .filter(|dir| dir.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".local/share")));
    match base {
        Some(base) => base.join("ctxsync").join("plugins"),
        None => std::env::temp_dir().join("ctxsync-plugins"),
    }
}

/// Errors at the engine's boundary.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EngineError {
    /// The engine was closed (or dropped) before the request finished.
    #[error("the MCP engine is closed")]
    Closed,
}

type Waiter = oneshot::Sender<Result<Arc<Report>, EngineError>>;

pub(crate) enum Command {
    Reload(Waiter),
    FilesChanged,
    Close(oneshot::Sender<()>),
    /// What a sign-in to the named server needs to know of it.
    SignInTarget(String, oneshot::Sender<Option<Target>>),
    /// The named server's held sign-in changed: connect it anew.
    SignInChanged(String),
}

impl From<crate::watch::FilesChanged> for Command {
    fn from(_: crate::watch::FilesChanged) -> Command {
        Command::FilesChanged
    }
}

/// The running MCP engine. Dropping it kills every server process group at once; prefer
/// [`Engine::close`] for an orderly shutdown.
#[derive(Debug)]
pub struct Engine {
    commands: mpsc::UnboundedSender<Command>,
    report: watch::Receiver<Arc<Report>>,
    refused: watch::Receiver<Arc<BTreeMap<String, AccessRefused>>>,
    progress: watch::Receiver<Progress>,
    groups: Arc<ProcessGroups>,
    calls: Arc<CallTargets>,
    sign_ins: Arc<SignIns>,
    actor: Mutex<Option<JoinHandle<()>>>,
}

impl Engine {
    /// Starts the engine and its initial reload. Must be called inside a Tokio runtime.
    pub fn start(config: EngineConfig) -> Engine {
        let mut config = config;
        if config.workspace_dir.is_relative()
            && let Ok(cwd) = std::env::current_dir()
        {
            config.workspace_dir = cwd.join(&config.workspace_dir);
        }
        let (commands, commands_rx) = mpsc::unbounded_channel();
        let (report_tx, report) = watch::channel(Arc::new(Report::default()));
        let (refused_tx, refused) = watch::channel(Arc::default());
        let (progress_tx, progress) = watch::channel(Progress::default());
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        let groups = Arc::new(ProcessGroups::default());
        let calls = Arc::new(CallTargets::default());
        let sign_ins = Arc::new(SignIns::new(config.sign_in_updates.clone()));
        let files = config.files();
        let (watcher, poller) = if config.watch {
            let paths: Vec<PathBuf> = files.iter().map(|file| file.path.clone()).collect();
            let plugin_dirs = config.plugin_dirs.clone();
            let mut watched = paths.clone();
            watched.extend(crate::plugin::plugin_watch_paths(&plugin_dirs));
            let watcher = crate::watch::watch_files(&watched, commands.downgrade());
            // Plugin packages come and go: the poll lists them anew each time.
            let polled = move || {
                let mut polled = paths.clone();
                polled.extend(crate::plugin::plugin_watch_paths(&plugin_dirs));
                polled
            };
            let poller =
                crate::watch::poll_files(polled, config.poll_interval, commands.downgrade());
            (watcher, Some(poller))
        } else {
            (None, None)
        };
        let mut injected_secrets = SecretSet::new();
        for secret in &config.injected_secrets {
            injected_secrets.insert(secret);
        }
        let mut base_secrets = injected_secrets.clone();
        base_secrets.insert_environment(config.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let actor = Actor {
            files,
            agent_env: Arc::new(config.env.clone()),
            secrets: Arc::new(base_secrets.clone()),
            base_secrets,
            injected_secrets,
            config,
            slots: BTreeMap::new(),
            held: BTreeMap::new(),
            task_names: HashMap::new(),
            config_outcomes: Vec::new(),
            phase: ReportPhase::Pending,
            reload: None,
            queued: None,
            progress: Progress::default(),
            next_id: 0,
            events_tx,
            events_rx,
            commands_rx,
            report_tx,
            refused_tx,
            progress_tx,
            groups: groups.clone(),
            calls: calls.clone(),
            sign_ins: sign_ins.clone(),
            closing: Vec::new(),
            debounce: None,
            _watcher: watcher,
            _poller: poller,
        };
        let actor = tokio::spawn(actor.run());
        Engine {
            commands,
            report,
            refused,
            progress,
            groups,
            calls,
            sign_ins,
            actor: Mutex::new(Some(actor)),
        }
    }

    /// Runs tool calls on this engine's connected servers (see [`ToolCaller`]).
    ///
    /// [`ToolCaller`]: crate::ToolCaller
    pub fn caller(&self) -> crate::ToolCaller {
        crate::ToolCaller::new(self.calls.clone())
    }

    /// The current report. Never blocks on I/O.
    pub fn report(&self) -> Arc<Report> {
        self.report.borrow().clone()
    }

    /// The HTTP servers whose last connect was refused for want of credentials (HTTP 401 or
    /// 403), by name: what a sign-in has to answer. Their errors say the same in words.
    pub fn refused_access(&self) -> Arc<BTreeMap<String, AccessRefused>> {
        self.refused.borrow().clone()
    }

    /// A receiver that is notified on every change of the report (and never without one).
    pub fn subscribe(&self) -> watch::Receiver<Arc<Report>> {
        self.report.clone()
    }

    /// Progress of the current reload ("Starting MCP servers (k/n): name").
    pub fn progress(&self) -> watch::Receiver<Progress> {
        self.progress.clone()
    }

    /// Re-reads the config files and applies the difference; resolves when every connect
    /// attempt of that reload has a result. Requests during a reload coalesce into one next
    /// reload.
    pub async fn reload(&self) -> Result<Arc<Report>, EngineError> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(Command::Reload(tx))
            .map_err(|_| EngineError::Closed)?;
        rx.await.map_err(|_| EngineError::Closed)?
    }

    /// Closes every connection and kills every server process group; idempotent. Takes at
    /// most 2.5 s whatever the servers do: an actor still busy after that is aborted, and
    /// the groups are killed either way.
    pub async fn close(&self) {
        let mut actor = self
            .actor
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let (tx, rx) = oneshot::channel();
        let sent = self.commands.send(Command::Close(tx)).is_ok();
        let orderly = async {
            if sent {
                // An error means the actor already stopped, which is what we want.
                let _ = rx.await;
            }
            if let Some(actor) = actor.as_mut() {
                // A panicked actor has nothing left to clean up; the groups are killed below.
                let _ = actor.await;
            }
        };
        if tokio::time::timeout(CLOSE_BUDGET, orderly).await.is_err() {
            tracing::warn!(
                budget_ms = CLOSE_BUDGET.as_millis() as u64,
                "the MCP engine did not close in time; killing its servers"
            );
            if let Some(actor) = actor {
                actor.abort();
            }
        }
        self.groups.kill_all();
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        // Synchronous, so no server outlives the engine even if the runtime is going away.
        self.groups.kill_all();
    }
}

/// A running connection task.
#[derive(Debug)]
struct TaskHandle {
    id: u64,
    cancel: CancellationToken,
    join: JoinHandle<()>,
}

/// A connected server.
#[derive(Debug)]
struct Live {
    entry: ServerEntry,
    task: TaskHandle,
    tools: Arc<[McpTool]>,
    list_warning: Option<String>,
    /// What the server said about itself when this connection was made.
    details: ServerDetails,
    /// Set when a re-list after `tools/list_changed` failed: the tools are the previous list.
    relist_warning: Option<String>,
    /// Set while a newer configuration failed to connect and this connection was kept: that
    /// configuration (what the file holds now) and the warning.
    retained: Option<(ServerEntry, String)>,
    connected_at: Instant,
}

/// What one declared name currently is.
#[derive(Debug, Default)]
struct Slot {
    live: Option<Live>,
    attempt: Option<(ServerEntry, TaskHandle)>,
    failed: Option<(ServerEntry, String)>,
    /// The last connect failed because the server refused the agent's credentials.
    refused: Option<AccessRefused>,
    failures: u32,
    retry_due: Option<Instant>,
}

impl Slot {
    /// Every entry the slot holds: live, retained, connecting, failed.
    fn entries(&self) -> impl Iterator<Item = &ServerEntry> {
        let live = self.live.as_ref();
        live.map(|live| &live.entry)
            .into_iter()
            .chain(live.and_then(|live| live.retained.as_ref().map(|(entry, _)| entry)))
            .chain(self.attempt.as_ref().map(|(entry, _)| entry))
            .chain(self.failed.as_ref().map(|(entry, _)| entry))
    }

    /// The entry the file holds now: connecting, kept beside an older live connection,
    /// live, or failed.
    fn current_entry(&self) -> Option<&ServerEntry> {
        let live = self.live.as_ref();
        self.attempt
            .as_ref()
            .map(|(entry, _)| entry)
            .or(live.and_then(|live| live.retained.as_ref().map(|(entry, _)| entry)))
            .or(live.map(|live| &live.entry))
            .or(self.failed.as_ref().map(|(entry, _)| entry))
    }

    /// The file the server's current declaration came from.
    fn source(&self) -> Option<&std::path::Path> {
        let entry = self
            .attempt
            .as_ref()
            .map(|(entry, _)| entry)
            .or(self.live.as_ref().map(|live| &live.entry))
            .or(self.failed.as_ref().map(|(entry, _)| entry))?;
        Some(&entry.source)
    }

    /// The server's outcome; `held` is the warning when its config file could not be read
    /// at the last reload.
    fn report(&self, name: &str, held: Option<&String>) -> Option<ServerReport> {
        if let Some(live) = &self.live {
            let retained = live.retained.as_ref().map(|(_, warning)| warning);
            let warnings: Vec<&str> = [
                held,
                retained,
                live.relist_warning.as_ref(),
                live.list_warning.as_ref(),
            ]
            .into_iter()
            .flatten()
            .map(String::as_str)
            .collect();
            // What the file asks for now, even while the tools come from a connection made
            // with an older entry (a reconnect under way, or a retained connection).
            let current = self
                .attempt
                .as_ref()
                .map(|(entry, _)| entry)
                .or(live.retained.as_ref().map(|(entry, _)| entry))
                .unwrap_or(&live.entry);
            return Some(ServerReport {
                name: name.to_owned(),
                connected: true,
                tools: live.tools.clone(),
                error: None,
                warning: (!warnings.is_empty()).then(|| warnings.join("; ")),
                details: Some(live.details.clone()),
                always_load: current.always_load,
                needs_authorization: false,
            });
        }
        self.failed.as_ref().map(|(entry, error)| ServerReport {
            name: name.to_owned(),
            connected: false,
            tools: Arc::default(),
            error: Some(error.clone()),
            warning: None,
            details: None,
            always_load: entry.always_load,
            needs_authorization: self
                .refused
                .as_ref()
                .is_some_and(AccessRefused::needs_sign_in),
        })
    }
}

/// One reload in progress.
#[derive(Debug)]
struct ReloadRun {
    /// Attempts it waits for: task id → server name and when it started.
    waiting: BTreeMap<u64, (String, std::time::SystemTime)>,
    total: usize,
    waiters: Vec<Waiter>,
    initial: bool,
}

struct Actor {
    config: EngineConfig,
    files: Vec<ConfigFile>,
    agent_env: Arc<BTreeMap<String, String>>,
    /// The agent's environment and injected secrets: redacted from every diagnostic.
    base_secrets: SecretSet,
    /// Only what the agent injects (its token): checked in every server's tools.
    injected_secrets: SecretSet,
    /// Every entry's secrets and the base ones: redacted from every diagnostic.
    secrets: Arc<SecretSet>,
    slots: BTreeMap<String, Slot>,
    /// Servers kept as they were because their config file could not be read at the last
    /// reload, with the warning their report carries while connected.
    held: BTreeMap<String, String>,
    task_names: HashMap<u64, String>,
    config_outcomes: Vec<ConfigFileOutcome>,
    phase: ReportPhase,
    reload: Option<ReloadRun>,
    queued: Option<Vec<Waiter>>,
    progress: Progress,
    next_id: u64,
    events_tx: mpsc::UnboundedSender<ServerEvent>,
    events_rx: mpsc::UnboundedReceiver<ServerEvent>,
    commands_rx: mpsc::UnboundedReceiver<Command>,
    report_tx: watch::Sender<Arc<Report>>,
    refused_tx: watch::Sender<Arc<BTreeMap<String, AccessRefused>>>,
    progress_tx: watch::Sender<Progress>,
    groups: Arc<ProcessGroups>,
    /// Which connection of each server tool calls go to.
    calls: Arc<CallTargets>,
    /// The credentials people's sign-ins gave.
    sign_ins: Arc<SignIns>,
    /// Connections being closed in the background (replaced ones).
    closing: Vec<JoinHandle<()>>,
    debounce: Option<Instant>,
    _watcher: Option<notify::RecommendedWatcher>,
    _poller: Option<crate::watch::Poller>,
}

impl Actor {
    async fn run(mut self) {
        self.start_reload(Vec::new(), true).await;
        loop {
            if self.reload.is_none()
                && let Some(waiters) = self.queued.take()
            {
                self.start_reload(waiters, false).await;
                continue;
            }
            self.closing.retain(|join| !join.is_finished());
            let retry_at = self.next_retry();
            tokio::select! {
                command = self.commands_rx.recv() => match command {
                    // Every Engine handle is gone.
                    None => break,
                    Some(Command::Reload(waiter)) => self.request_reload(Some(waiter)),
                    Some(Command::FilesChanged) => {
                        self.debounce = Some(Instant::now() + self.config.watch_debounce);
                    }
                    Some(Command::Close(done)) => {
                        self.shutdown().await;
                        let _ = done.send(());
                        return;
                    }
                    Some(Command::SignInTarget(name, reply)) => {
                        let _ = reply.send(self.sign_in_target(&name));
                    }
                    Some(Command::SignInChanged(name)) => self.reconnect_signed_in(&name),
                },
                Some(event) = self.events_rx.recv() => self.on_event(event),
                () = sleep_until_opt(self.debounce) => {
                    self.debounce = None;
                    self.request_reload(None);
                }
                () = sleep_until_opt(retry_at) => self.start_due_retries(),
            }
        }
        self.shutdown().await;
    }

    fn request_reload(&mut self, waiter: Option<Waiter>) {
        self.queued.get_or_insert_with(Vec::new).extend(waiter);
    }

    async fn start_reload(&mut self, waiters: Vec<Waiter>, initial: bool) {
        let files = self.files.clone();
        let env = self.agent_env.clone();
        let plugin_dirs = self.config.plugin_dirs.clone();
        let data_root = self.config.plugin_data_dir.clone();
        // File I/O off the runtime threads; the actor just waits for the parse.
        let LoadedConfig {
            entries,
            mut outcomes,
            rejected,
        } = tokio::task::spawn_blocking(move || {
            let mut loaded = load_config(&files, &env);
            let (plugin_entries, plugin_outcomes) =
                crate::plugin::load_plugins(&plugin_dirs, &data_root);
            loaded.entries.extend(plugin_entries);
            loaded.outcomes.extend(plugin_outcomes);
            loaded
        })
        .await
        .unwrap_or_default();
        let held = self.hold_rejected(&entries, &rejected, &mut outcomes);

        let mut secrets = self.base_secrets.clone();
        for entry in &entries {
            secrets.extend(&entry.secrets());
        }
        // A held server still runs with what its file said before: its secrets stay secret.
        for slot in held.keys().filter_map(|name| self.slots.get(name)) {
            for entry in slot.entries() {
                secrets.extend(&entry.secrets());
            }
        }
        self.secrets = Arc::new(secrets);
        self.held = held
            .iter()
            .map(|(name, warning)| (name.clone(), sanitize_diagnostic(warning, &self.secrets)))
            .collect();
        self.config_outcomes = outcomes
            .into_iter()
            .map(|outcome| ConfigFileOutcome {
                error: outcome
                    .error
                    .map(|e| sanitize_diagnostic(&e, &self.secrets)),
                warning: outcome
                    .warning
                    .map(|w| sanitize_diagnostic(&w, &self.secrets)),
                path: outcome.path,
            })
            .collect();

        self.reload = Some(ReloadRun {
            waiting: BTreeMap::new(),
            total: 0,
            waiters,
            initial,
        });
        let desired: BTreeMap<String, ServerEntry> = entries
            .into_iter()
            .map(|entry| (entry.name.clone(), entry))
            .collect();

        let removed: Vec<String> = self
            .slots
            .keys()
            .filter(|name| !desired.contains_key(*name) && !held.contains_key(*name))
            .cloned()
            .collect();
        let mut closing = Vec::new();
        for name in removed {
            if let Some(slot) = self.slots.remove(&name) {
                closing.extend(slot.live.map(|live| live.task));
                closing.extend(slot.attempt.map(|(_, task)| task));
            }
        }
        let closing: Vec<JoinHandle<()>> = closing.into_iter().map(|t| self.cancel(t)).collect();
        // Removal is finished when the reload says so: wait for the processes to be gone.
        close_all(closing).await;

        for (name, entry) in desired {
            self.apply(name, entry);
        }
        self.publish();
        self.finish_reload_if_done();
    }

    /// The servers that files rejected whole declared at their last good read, each with
    /// the warning its report carries: they stay as they are (connected, connecting or
    /// failing) until the file can be read again, since a half-saved edit says nothing
    /// about which servers to remove. A name a readable file declares now is not held.
    /// The rejected file's outcome says which servers it kept.
    fn hold_rejected(
        &self,
        entries: &[ServerEntry],
        rejected: &[PathBuf],
        outcomes: &mut [ConfigFileOutcome],
    ) -> BTreeMap<String, String> {
        let mut held = BTreeMap::new();
        for path in rejected {
            let kept: Vec<&String> = self
                .slots
                .iter()
                .filter(|(name, slot)| {
                    slot.source() == Some(path.as_path())
                        && !entries.iter().any(|entry| &entry.name == *name)
                })
                .map(|(name, _)| name)
                .collect();
            if kept.is_empty() {
                continue;
            }
            let outcome = outcomes.iter_mut().find(|o| &o.path == path);
            let error = outcome
                .as_ref()
                .and_then(|o| o.error.as_deref())
                .unwrap_or("it could not be read");
            let warning = format!("{HELD_WARNING}{}: {error}", path.display());
            let mut named: Vec<String> = kept
                .iter()
                .take(HELD_NAMED)
                .map(|name| quote_name(name))
                .collect();
            if kept.len() > HELD_NAMED {
                named.push(format!("and {} more", kept.len() - HELD_NAMED));
            }
            let note = format!(
                "kept the servers it declared before, as they were, until it is fixed: {}",
                named.join(", ")
            );
            if let Some(outcome) = outcome {
                outcome.warning = Some(match outcome.warning.take() {
                    Some(own) => format!("{own}; {note}"),
                    None => note,
                });
            }
            held.extend(kept.into_iter().map(|name| (name.clone(), warning.clone())));
        }
        held
    }

    /// Brings one declared server in line with `entry`.
    fn apply(&mut self, name: String, entry: ServerEntry) {
        let slot = self.slots.entry(name.clone()).or_default();
        // Only the transport decides whether to connect anew; the rest of the entry (its
        // `alwaysLoad`) applies to what is there without touching the connection.
        if let Some((pending, task)) = &mut slot.attempt {
            if pending.transport == entry.transport {
                pending.always_load = entry.always_load;
                let id = task.id;
                self.wait_for(id, &name);
                return;
            }
            let (_, task) = slot.attempt.take().expect("checked above");
            let join = self.cancel(task);
            self.closing.push(join);
        }
        let slot = self.slots.get_mut(&name).expect("inserted above");
        if let Some(live) = &mut slot.live
            && live.entry.transport == entry.transport
        {
            // Unchanged, or restored after a failed reconnect: the old warning no longer applies.
            live.retained = None;
            live.entry.always_load = entry.always_load;
            return;
        }
        let failed_unchanged = match &mut slot.failed {
            Some((failed, _)) if failed.transport == entry.transport => {
                failed.always_load = entry.always_load;
                true
            }
            _ => false,
        };
        if slot.live.is_none() && failed_unchanged && slot.retry_due.is_some() {
            return; // its scheduled retry covers it
        }
        // New, changed, or failed with a different configuration: connect anew. A live
        // connection stays until the new one succeeds.
        slot.retry_due = None;
        if !failed_unchanged {
            slot.failures = 0;
        }
        let id = self.spawn_attempt(&name, entry);
        self.wait_for(id, &name);
    }

    fn wait_for(&mut self, id: u64, name: &str) {
        if let Some(run) = &mut self.reload
            && run
                .waiting
                .insert(id, (name.to_owned(), std::time::SystemTime::now()))
                .is_none()
        {
            run.total += 1;
        }
    }

    fn spawn_attempt(&mut self, name: &str, entry: ServerEntry) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let cancel = CancellationToken::new();
        // A server's tools are checked against its own secrets and the agent's only: another
        // server's values, or the environment's, are not this server's to leak.
        let mut tool_secrets = entry.secrets();
        tool_secrets.extend(&self.injected_secrets);
        let task = ConnectionTask {
            id,
            tool_secrets: Arc::new(tool_secrets),
            entry: entry.clone(),
            workspace_dir: self.config.workspace_dir.clone(),
            agent_env: self.agent_env.clone(),
            secrets: self.secrets.clone(),
            timeout: self.config.connect_timeout,
            lifecycle: self.config.lifecycle,
            probe_timeout: self.config.discover_probe_timeout,
            events: self.events_tx.clone(),
            cancel: cancel.clone(),
            groups: self.groups.clone(),
            calls: self.calls.clone(),
            sign_ins: self.sign_ins.clone(),
            bearer: Mutex::default(),
            refusals: crate::lifecycle::Refusals::default(),
        };
        let join = tokio::spawn(task.run());
        self.task_names.insert(id, name.to_owned());
        let slot = self.slots.entry(name.to_owned()).or_default();
        slot.attempt = Some((entry, TaskHandle { id, cancel, join }));
        id
    }

    /// Cancels a task and forgets it; the returned handle resolves once it has cleaned up.
    fn cancel(&mut self, task: TaskHandle) -> JoinHandle<()> {
        task.cancel.cancel();
        self.task_names.remove(&task.id);
        if let Some(run) = &mut self.reload {
            run.waiting.remove(&task.id);
        }
        task.join
    }

    fn on_event(&mut self, event: ServerEvent) {
        let Some(name) = self.task_names.get(&event.id).cloned() else {
            return; // from a task we already cancelled
        };
        let Some(slot) = self.slots.get_mut(&name) else {
            return;
        };
        let is_attempt = slot
            .attempt
            .as_ref()
            .is_some_and(|(_, task)| task.id == event.id);
        match event.kind {
            EventKind::Connected {
                tools,
                warning,
                details,
            } if is_attempt => {
                let (entry, task) = slot.attempt.take().expect("is_attempt");
                self.calls.promote(&name, task.id);
                let replaced = slot.live.replace(Live {
                    entry,
                    task,
                    tools,
                    list_warning: warning,
                    details,
                    relist_warning: None,
                    retained: None,
                    connected_at: Instant::now(),
                });
                slot.failed = None;
                slot.refused = None;
                slot.retry_due = None;
                if let Some(old) = replaced {
                    let join = self.cancel(old.task);
                    self.closing.push(join);
                }
                self.attempt_finished(event.id);
            }
            EventKind::ConnectFailed { error, refused } if is_attempt => {
                let (entry, task) = slot.attempt.take().expect("is_attempt");
                // A server that asks for a sign-in no longer stands behind the tools an
                // older connection listed: they go until a person signs in.
                let sign_in = refused.as_ref().is_some_and(AccessRefused::needs_sign_in);
                slot.refused = refused;
                self.task_names.remove(&task.id);
                let dropped = if sign_in { slot.live.take() } else { None };
                if let Some(live) = &mut slot.live {
                    // Keep what works; the live entry keeps its old config, so the next
                    // reload sees a difference and tries the new one again.
                    let warning = format!("{RETAINED_WARNING}{error}");
                    let warning = sanitize_diagnostic(&warning, &self.secrets);
                    live.retained = Some((entry, warning));
                } else {
                    slot.failed = Some((entry, error));
                    schedule_retry(slot, &self.config.retry);
                }
                if let Some(old) = dropped {
                    let join = self.cancel(old.task);
                    self.closing.push(join);
                }
                self.attempt_finished(event.id);
            }
            EventKind::ToolsChanged { tools, warning } => {
                if let Some(live) = slot.live.as_mut().filter(|l| l.task.id == event.id) {
                    live.tools = tools;
                    live.list_warning = warning;
                    live.relist_warning = None;
                    self.publish();
                }
            }
            EventKind::RelistFailed { warning } => {
                if let Some(live) = slot.live.as_mut().filter(|l| l.task.id == event.id) {
                    live.relist_warning = Some(warning);
                    self.publish();
                }
            }
            EventKind::Lost { error, refused } => {
                if slot.live.as_ref().is_some_and(|l| l.task.id == event.id) {
                    let live = slot.live.take().expect("checked");
                    self.task_names.remove(&event.id);
                    if live.connected_at.elapsed() >= STABLE_CONNECTION {
                        slot.failures = 0;
                    }
                    if slot.attempt.is_none() {
                        // A kept connection's retries use the configuration the file holds
                        // now, not the one this connection was made with.
                        let entry = live.retained.map_or(live.entry, |(current, _)| current);
                        slot.failed = Some((entry, error));
                        if refused.is_some() {
                            // Reconnecting would list tools a call cannot use: the server
                            // waits for a person's sign-in, which reconnects it.
                            slot.refused = refused;
                        } else {
                            schedule_retry(slot, &self.config.retry);
                        }
                    }
                    self.closing.push(live.task.join);
                    self.publish();
                }
            }
            EventKind::SignInChanged => {
                if slot.live.as_ref().is_some_and(|l| l.task.id == event.id) {
                    self.reconnect_signed_in(&name);
                }
            }
            // A connect result for a task that is no longer this slot's attempt.
            EventKind::Connected { .. } | EventKind::ConnectFailed { .. } => {}
        }
    }

    fn attempt_finished(&mut self, id: u64) {
        if let Some(run) = &mut self.reload {
            run.waiting.remove(&id);
        }
        self.publish();
        self.finish_reload_if_done();
    }

    fn finish_reload_if_done(&mut self) {
        if !self
            .reload
            .as_ref()
            .is_some_and(|run| run.waiting.is_empty())
        {
            return;
        }
        let run = self.reload.take().expect("checked");
        if run.initial {
            self.phase = ReportPhase::Complete;
        }
        self.publish();
        let report = self.report_tx.borrow().clone();
        for waiter in run.waiters {
            let _ = waiter.send(Ok(report.clone()));
        }
    }

    fn next_retry(&self) -> Option<Instant> {
        self.slots
            .values()
            .filter(|slot| slot.live.is_none() && slot.attempt.is_none())
            .filter_map(|slot| slot.retry_due)
            .min()
    }

    fn start_due_retries(&mut self) {
        let now = Instant::now();
        let due: Vec<(String, ServerEntry)> = self
            .slots
            .iter()
            .filter(|(_, slot)| slot.live.is_none() && slot.attempt.is_none())
            .filter(|(_, slot)| slot.retry_due.is_some_and(|due| due <= now))
            .filter_map(|(name, slot)| Some((name.clone(), slot.failed.as_ref()?.0.clone())))
            .collect();
        for (name, entry) in due {
            if let Some(slot) = self.slots.get_mut(&name) {
                slot.retry_due = None;
            }
            let id = self.spawn_attempt(&name, entry);
            // A retry that overlaps a later reload counts for it, so reload() sees its
            // result. The first run never waits for one: a server's first terminal result
            // ended its part of that run, and retries never hold the phase.
            if self.reload.as_ref().is_some_and(|run| !run.initial) {
                self.wait_for(id, &name);
            }
        }
    }

    fn publish(&mut self) {
        let mut pending: Vec<PendingServer> = match &self.reload {
            Some(run) if run.initial && self.phase == ReportPhase::Pending => run
                .waiting
                .values()
                .map(|(name, since)| PendingServer {
                    name: name.clone(),
                    since: *since,
                })
                .collect(),
            _ => Vec::new(),
        };
        pending.sort_by(|a, b| a.name.cmp(&b.name));
        pending.dedup_by(|later, first| later.name == first.name);
        let report = Report {
            phase: self.phase,
            servers: self
                .slots
                .iter()
                .filter_map(|(name, slot)| slot.report(name, self.held.get(name)))
                .collect(),
            config_outcomes: self.config_outcomes.clone(),
            pending,
        };
        self.report_tx.send_if_modified(|current| {
            if **current == report {
                return false;
            }
            *current = Arc::new(report);
            true
        });
        let refused: BTreeMap<String, AccessRefused> = self
            .slots
            .iter()
            .filter(|(_, slot)| slot.live.is_none())
            .filter_map(|(name, slot)| Some((name.clone(), slot.refused.clone()?)))
            .collect();
        self.refused_tx.send_if_modified(|current| {
            if **current == refused {
                return false;
            }
            *current = Arc::new(refused);
            true
        });
        if let Some(run) = &self.reload {
            let mut connecting: Vec<String> =
                run.waiting.values().map(|(name, _)| name.clone()).collect();
            connecting.sort();
            connecting.dedup();
            self.progress = Progress {
                total: run.total,
                finished: run.total - run.waiting.len(),
                connecting,
            };
        } else {
            self.progress.finished = self.progress.total;
            self.progress.connecting.clear();
        }
        let progress = self.progress.clone();
        self.progress_tx.send_if_modified(|current| {
            if *current == progress {
                return false;
            }
            *current = progress;
            true
        });
    }

    async fn shutdown(&mut self) {
        let mut joins = std::mem::take(&mut self.closing);
        let slots = std::mem::take(&mut self.slots);
        for slot in slots.into_values() {
            for task in slot
                .live
                .map(|l| l.task)
                .into_iter()
                .chain(slot.attempt.map(|a| a.1))
            {
                task.cancel.cancel();
                joins.push(task.join);
            }
        }
        close_all(joins).await;
        self.groups.kill_all();
        // Pending reload() callers learn that the engine closed.
        if let Some(run) = self.reload.take() {
            for waiter in run.waiters {
                let _ = waiter.send(Err(EngineError::Closed));
            }
        }
        for waiter in self.queued.take().into_iter().flatten() {
            let _ = waiter.send(Err(EngineError::Closed));
        }
    }
}

fn schedule_retry(slot: &mut Slot, policy: &RetryPolicy) {
    if !policy.enabled {
        return;
    }
    slot.failures = slot.failures.saturating_add(1);
    slot.retry_due = Some(Instant::now() + policy.delay(slot.failures));
}

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Waits (bounded) for cancelled connection tasks; tasks that overrun are aborted, which drops
/// their processes and so kills their groups.
async fn close_all(joins: Vec<JoinHandle<()>>) {
    let deadline = Instant::now() + CLOSE_TIMEOUT;
    for mut join in joins {
        if tokio::time::timeout_at(deadline, &mut join).await.is_err() {
            join.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_debug_shows_variable_names_but_no_value_or_secret() {
        let mut config = EngineConfig::new("/ws");
        config.env = BTreeMap::from([("GITHUB_TOKEN".to_owned(), "ghp_canary123".to_owned())]);
        config.injected_secrets = vec!["agent-token-canary".to_owned()];
        let debug = format!("{config:?}");
        assert!(debug.contains("GITHUB_TOKEN"), "{debug}");
        assert!(!debug.contains("ghp_canary123"), "{debug}");
        assert!(!debug.contains("agent-token-canary"), "{debug}");
    }

    #[test]
    fn retry_delays_double_with_jitter_and_cap() {
        let policy = RetryPolicy::default();
        for (failures, base) in [(1, 5.0), (2, 10.0), (3, 20.0), (7, 300.0), (40, 300.0)] {
            let delay = policy.delay(failures).as_secs_f64();
            assert!(
                delay >= base * 0.8 - 1e-9 && delay <= (base * 1.2).min(300.0) + 1e-9,
                "failures {failures}: {delay}"
            );
        }
    }
}
