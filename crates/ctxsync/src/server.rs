//! `ctxsync server`: the control plane. Serves the agent API over gRPC and the chat API
//! with the web page over HTTP, on loopback by default, until Ctrl-C or SIGTERM; both over
//! TLS when given a certificate (see [`crate::tls`]).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use std::sync::Arc;

use ctxsync_agent_api::{AgentApi, AgentApiMetrics, CallHub, CallHubConfig, SignInSettings};
use ctxsync_first_turn_gate::GateConfig;
use ctxsync_first_turn_gate::store::StoreGate;
use ctxsync_persistence::{
    ChatId, DEFAULT_CONNECTION_TIMEOUT, DEFAULT_OPERATION_TIMEOUT, DatabaseConfig, Keyring,
    SecretsKey, Store, StoreOptions,
};

use crate::http::api_token::TokenSource;
use crate::http::bounds::EventStreams;
use crate::http::{AppState, Auth};
use crate::limits::{LimitArgs, Limits};
use crate::listen::HttpSettings;
use crate::public_url::PublicUrl;
use crate::secret::Secret;
use crate::tls::{ReloadingCert, TlsFiles};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_stream::StreamExt;

/// HTTP/2 windows large enough that a multi-MiB snapshot crosses without waiting for
/// window updates (h2's default is 64 KiB).
const GRPC_STREAM_WINDOW_BYTES: u32 = 4 << 20;
const GRPC_CONNECTION_WINDOW_BYTES: u32 = 16 << 20;

/// `ctxsync server`'s flags: the command-line form of [`ServerConfig`].
#[derive(Debug, Args)]
pub struct ServerArgs {
    /// PostgreSQL (`postgres://…`) or SQLite (`sqlite://PATH`) database URL; default: the
    /// embedded SQLite database in the data directory.
    #[arg(long, env = "CTXSYNC_DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<Secret>,
    /// Directory for the embedded database and the generated API token; default:
    /// `$XDG_DATA_HOME/ctxsync`, else `~/.local/share/ctxsync`. The `agents` commands and
    /// the chat commands must be given the same one (or the same CTXSYNC_DATA_DIR).
    #[arg(long, env = "CTXSYNC_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Address of the agent API (gRPC): what `ctxsync agent --server` connects to.
    #[arg(long, default_value = "127.0.0.1:4770")]
    pub grpc_addr: SocketAddr,
    /// Address of the chat API and web page (HTTP): what `ctxsync context`, `call`,
    /// `chats`, `turn` and `link` connect to with their `--server`.
    #[arg(long, default_value = "127.0.0.1:4780")]
    pub http_addr: SocketAddr,
    /// Where people's browsers reach the chat API (an http or https URL, no query), so
    /// page links are full URLs; default: the HTTP listener's address when it is
    /// loopback, else links are paths under whatever address the caller used.
    #[arg(long, env = "CTXSYNC_PUBLIC_URL", value_name = "URL")]
    pub public_url: Option<PublicUrl>,
    /// Bearer token of the HTTP API; default: generated once into `<data-dir>/api-token`.
    #[arg(long, env = "CTXSYNC_API_TOKEN", hide_env_values = true)]
    pub api_token: Option<Secret>,
    /// PEM certificate chain (leaf first): both listeners then speak only TLS 1.2/1.3.
    /// Re-read, with the key, when either file changes or on SIGHUP.
    #[arg(
        long,
        env = "CTXSYNC_TLS_CERT",
        value_name = "FILE",
        requires = "tls_key"
    )]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(
        long,
        env = "CTXSYNC_TLS_KEY",
        value_name = "FILE",
        requires = "tls_cert"
    )]
    pub tls_key: Option<PathBuf>,
    /// How long a chat's first turn waits for MCP discovery of the current agent process.
    #[arg(long, default_value = "15000", value_name = "MS")]
    pub discovery_budget_ms: u64,
    /// How long a first turn waits for the current agent process's first snapshot.
    #[arg(long, default_value = "3000", value_name = "MS")]
    pub snapshot_grace_ms: u64,
    /// How often a waiting turn re-reads state in case a notification was lost.
    #[arg(long, default_value = "1000", value_name = "MS", hide = true)]
    pub gate_recheck_ms: u64,
    /// How often an open context event stream re-reads its chat in case a notification
    /// was lost.
    #[arg(long, default_value_t = millis(crate::http::bounds::DEFAULT_EVENT_RECHECK), value_name = "MS", hide = true, value_parser = clap::value_parser!(u64).range(1..))]
    pub event_recheck_ms: u64,
    /// Most tool definitions a turn carries; over this (or the byte budget) a turn defers
    /// tools behind find_tools and lists them compactly in its description.
    #[arg(long, default_value_t = ctxsync_chat_projection::ToolBudget::default().max_tools, value_name = "N", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub turn_max_tools: usize,
    /// Most bytes of tool definitions (names, descriptions and schemas, as JSON) a turn
    /// carries before it defers tools behind find_tools.
    #[arg(long, default_value_t = ctxsync_chat_projection::ToolBudget::default().max_bytes, value_name = "BYTES", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1024..))]
    pub turn_max_tool_bytes: usize,
    /// How long a request waits for a database connection (and PostgreSQL for a new
    /// connection to open) before it is answered "database unavailable".
    #[arg(
        long,
        default_value_t = millis(DEFAULT_CONNECTION_TIMEOUT),
        value_name = "MS",
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub db_connection_timeout_ms: u64,
    /// Bound on one database operation, connection wait included; past it the request
    /// is answered "database unavailable" even if the database never replies.
    #[arg(
        long,
        default_value_t = millis(DEFAULT_OPERATION_TIMEOUT),
        value_name = "MS",
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub db_operation_timeout_ms: u64,
    /// Answer agents as a server that predates delta pushes, so they send every body on
    /// every push. For rolling upgrades behind a balancer that spreads one connection's
    /// calls over replicas (gRPC-aware, per request): an older replica would read a
    /// delta as a full push with rows missing.
    #[arg(long, env = "CTXSYNC_NO_DELTA_PUSHES")]
    pub no_delta_pushes: bool,
    /// How often the gRPC health service (`grpc.health.v1.Health`, no token needed) asks
    /// the database, in milliseconds; it answers NOT_SERVING while the database does not.
    #[arg(long, env = "CTXSYNC_HEALTH_INTERVAL_MS", default_value_t = millis(crate::probes::DEFAULT_HEALTH_INTERVAL),
        value_parser = clap::value_parser!(u64).range(10..=3_600_000))]
    pub health_interval_ms: u64,
    /// The longest deadline a tool call may ask for (`timeout_ms`; a call asks 60000 by
    /// default); above it the call is refused with 400.
    #[arg(long, default_value_t = millis(DEFAULT_TOOL_CALL_MAX), value_name = "MS",
        value_parser = clap::value_parser!(u64).range(1..=MAX_TOOL_CALL_MAX_MS))]
    pub tool_call_max_ms: u64,
    /// How often an idle tool-call stream carries a heartbeat to its agent, in
    /// milliseconds: below a load balancer's idle timeout, which HTTP/2 pings do not
    /// reset. (How long silence from an agent is tolerated does not change.)
    #[arg(long, value_name = "MS", default_value_t = DEFAULT_CALL_HEARTBEAT_MS,
        value_parser = clap::value_parser!(u64).range(100..=DEFAULT_CALL_HEARTBEAT_MS))]
    pub tool_call_heartbeat_ms: u64,
    /// How many days the tool-call audit log (`GET /api/tool-calls`) keeps a call's end,
    /// whatever becomes of its turn, chat or agent.
    #[arg(long, default_value_t = DEFAULT_TOOL_CALL_AUDIT_DAYS, value_name = "DAYS",
        value_parser = clap::value_parser!(u64).range(1..=MAX_TOOL_CALL_AUDIT_DAYS))]
    pub tool_call_audit_days: u64,
    /// How many MiB of find_tools indexes (one per distinct catalog a chat searched) this
    /// server keeps in memory; the least recently used go first. A catalog not kept is
    /// indexed again on its next search.
    #[arg(long, default_value_t = DEFAULT_FIND_TOOLS_CACHE_MIB, value_name = "MIB",
        value_parser = clap::value_parser!(u64).range(0..=MAX_FIND_TOOLS_CACHE_MIB))]
    pub find_tools_cache_mib: u64,
    /// The key that seals MCP sign-in credentials in the database: a file of 32 random
    /// bytes, raw (`head -c 32 /dev/urandom > FILE`), readable by the server alone, the
    /// same file on every replica. Required for sign-in with --database-url; the embedded
    /// default generates one into the data directory.
    #[arg(long, env = "CTXSYNC_SECRETS_KEY_FILE", value_name = "FILE")]
    pub secrets_key_file: Option<PathBuf>,
    /// During a key rotation, the previous --secrets-key-file: what it sealed still
    /// opens (see the README's key rotation).
    #[arg(
        long,
        env = "CTXSYNC_PREVIOUS_SECRETS_KEY_FILE",
        value_name = "FILE",
        requires = "secrets_key_file"
    )]
    pub previous_secrets_key_file: Option<PathBuf>,
    /// The https URL of a client id metadata document naming this server as an OAuth
    /// client (SEP-991), offered to authorization servers that accept one; default:
    /// `{public-url}/oauth/client-metadata.json` when the public URL is https.
    #[arg(long, env = "CTXSYNC_OAUTH_CLIENT_METADATA_URL", value_name = "URL", value_parser = https_url)]
    pub oauth_client_metadata_url: Option<String>,
    /// What one caller can cost, and the shutdown grace.
    #[command(flatten)]
    pub limits: LimitArgs,
}

/// An https URL with a path (what a client id metadata document's URL must be).
fn https_url(text: &str) -> Result<String, String> {
    let rest = text
        .strip_prefix("https://")
        .ok_or("the URL must start with https://")?;
    match rest.split_once('/') {
        Some((host, path)) if !host.is_empty() && !path.is_empty() => Ok(text.to_owned()),
        _ => Err(
            "the URL needs a host and a path (e.g. https://example.com/oauth/client.json)".into(),
        ),
    }
}

/// Where the key sealing sign-in credentials comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SecretsKeySource {
    /// No key: sign-in answers 503 saying how to give one.
    Off,
    /// The embedded default's data directory (generated there on first use, mode 0600).
    DataDir,
    /// A key file, and during a rotation the previous one.
    File {
        /// The current key.
        current: PathBuf,
        /// The key being rotated out.
        previous: Option<PathBuf>,
    },
}

/// `--find-tools-cache-mib`'s default.
pub const DEFAULT_FIND_TOOLS_CACHE_MIB: u64 =
    (ctxsync_chat_projection::DEFAULT_INDEX_CACHE_BYTES >> 20) as u64;
/// `--find-tools-cache-mib`'s ceiling: 64 GiB.
const MAX_FIND_TOOLS_CACHE_MIB: u64 = 64 << 10;

/// `--tool-call-heartbeat-ms`'s default and ceiling (agent and server): the channel's
/// heartbeat, a third of the other side's silence limit.
pub const DEFAULT_CALL_HEARTBEAT_MS: u64 =
    ctxsync_protocol::tool_call::CALL_HEARTBEAT.as_millis() as u64;

/// `--tool-call-max-ms`'s ceiling: the channel's longest deadline (a day).
const MAX_TOOL_CALL_MAX_MS: u64 = 24 * 60 * 60 * 1000;

/// `--tool-call-max-ms`'s default: ten minutes.
pub const DEFAULT_TOOL_CALL_MAX: Duration = Duration::from_secs(600);

/// `--tool-call-audit-days`' default.
pub const DEFAULT_TOOL_CALL_AUDIT_DAYS: u64 = 30;
/// `--tool-call-audit-days`' ceiling: ten years.
const MAX_TOOL_CALL_AUDIT_DAYS: u64 = 3650;
/// How often the server deletes audit rows past their retention (and once at start-up):
/// often enough that the log never runs much past it, rarely enough to cost nothing.
pub const AUDIT_PRUNE_INTERVAL: Duration = Duration::from_secs(60 * 60);

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn days(days: u64) -> Duration {
    Duration::from_secs(days * 24 * 60 * 60)
}

/// Everything [`start`] needs; [`ServerArgs`] is its command-line form. Its `Debug`
/// shows neither the API token nor the database password.
#[derive(Clone)]
pub struct ServerConfig {
    /// The database to open.
    pub database: DatabaseConfig,
    /// Where the API token file (`api-token`) is read from or generated into.
    pub data_dir: PathBuf,
    /// Address of the agent API (gRPC); port 0 picks a free one.
    pub grpc_addr: SocketAddr,
    /// Address of the chat API and web page (HTTP); port 0 picks a free one.
    pub http_addr: SocketAddr,
    /// The HTTP API's bearer token; `None` reads or generates `<data_dir>/api-token`.
    pub api_token: Option<String>,
    /// Where browsers reach the chat API; `None` defaults to the HTTP listener's address
    /// when that is loopback.
    pub public_url: Option<PublicUrl>,
    /// TLS on both listeners; `None` serves plain text.
    pub tls: Option<TlsFiles>,
    /// How often the TLS files are checked for changes.
    pub tls_reload_interval: Duration,
    /// How long a first turn waits for the current agent process's MCP discovery.
    pub discovery_budget: Duration,
    /// How long a first turn waits for the current agent process's first snapshot.
    pub snapshot_grace: Duration,
    /// How often a waiting turn re-reads state in case a notification was lost.
    pub gate_recheck: Duration,
    /// How often an open context event stream re-reads its chat without a notification.
    pub event_recheck: Duration,
    /// A turn's budget for tool definitions.
    pub tool_budget: ctxsync_chat_projection::ToolBudget,
    /// Pool size and database timeouts.
    pub store: StoreOptions,
    /// What one caller can cost: connections, streams, time; and the shutdown grace.
    pub limits: Limits,
    /// Whether `UpdateStartup` answers offer delta pushes.
    pub delta_pushes: bool,
    /// How often gRPC health asks the database.
    pub health_interval: Duration,
    /// The longest deadline a tool call may ask for.
    pub tool_call_max: Duration,
    /// The call hub's grace and re-check interval.
    pub calls: CallHubConfig,
    /// How long the tool-call audit log keeps a call's end.
    pub tool_call_audit_retention: Duration,
    /// At most this many bytes of find_tools indexes are kept.
    pub find_tools_cache_bytes: usize,
    /// The key that seals sign-in credentials.
    pub secrets_key: SecretsKeySource,
    /// `--oauth-client-metadata-url`.
    pub oauth_client_metadata_url: Option<String>,
}

impl std::fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerConfig")
            .field("database", &self.database)
            .field("data_dir", &self.data_dir)
            .field("grpc_addr", &self.grpc_addr)
            .field("http_addr", &self.http_addr)
            .field("public_url", &self.public_url)
            .field("api_token", &self.api_token.as_ref().map(|_| "[redacted]"))
            .field("tls", &self.tls)
            .field("discovery_budget", &self.discovery_budget)
            .field("snapshot_grace", &self.snapshot_grace)
            .field("tool_budget", &self.tool_budget)
            .field("limits", &self.limits)
            .field("delta_pushes", &self.delta_pushes)
            .field("health_interval", &self.health_interval)
            .field("tool_call_max", &self.tool_call_max)
            .field("tool_call_audit_retention", &self.tool_call_audit_retention)
            .field("find_tools_cache_bytes", &self.find_tools_cache_bytes)
            .field("secrets_key", &self.secrets_key)
            .finish_non_exhaustive()
    }
}

impl ServerConfig {
    /// An embedded-SQLite server in `data_dir` on free loopback ports with the default
    /// budgets and a generated API token: the demo, tests and benchmarks start from this.
    pub fn ephemeral(data_dir: &Path) -> Self {
        Self {
            database: DatabaseConfig::sqlite_in(data_dir),
            data_dir: data_dir.to_path_buf(),
            grpc_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            http_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            api_token: None,
            public_url: None,
            tls: None,
            tls_reload_interval: crate::tls::DEFAULT_RELOAD_INTERVAL,
            discovery_budget: GateConfig::default().discovery_budget,
            snapshot_grace: GateConfig::default().snapshot_grace,
            gate_recheck: GateConfig::default().recheck_interval,
            event_recheck: crate::http::bounds::DEFAULT_EVENT_RECHECK,
            tool_budget: ctxsync_chat_projection::ToolBudget::default(),
            store: StoreOptions::default(),
            limits: Limits::default(),
            delta_pushes: true,
            health_interval: crate::probes::DEFAULT_HEALTH_INTERVAL,
            tool_call_max: DEFAULT_TOOL_CALL_MAX,
            find_tools_cache_bytes: ctxsync_chat_projection::DEFAULT_INDEX_CACHE_BYTES,
            calls: CallHubConfig::default(),
            tool_call_audit_retention: days(DEFAULT_TOOL_CALL_AUDIT_DAYS),
            secrets_key: SecretsKeySource::DataDir,
            oauth_client_metadata_url: None,
        }
    }

    /// The configuration the flags describe; fails on an invalid `--database-url`.
    pub fn from_args(args: ServerArgs) -> Result<Self> {
        let data_dir = args.data_dir.unwrap_or_else(crate::paths::default_data_dir);
        let secrets_key = match (args.secrets_key_file, &args.database_url) {
            (Some(current), _) => SecretsKeySource::File {
                current,
                previous: args.previous_secrets_key_file,
            },
            // The embedded default keeps its own key beside its database.
            (None, None) => SecretsKeySource::DataDir,
            // A shared database: every replica must be given the same key.
            (None, Some(_)) => SecretsKeySource::Off,
        };
        Ok(Self {
            database: crate::paths::database(
                args.database_url.as_ref().map(Secret::expose),
                &data_dir,
            )?,
            data_dir,
            grpc_addr: args.grpc_addr,
            http_addr: args.http_addr,
            api_token: args.api_token.map(Secret::into_inner),
            public_url: args.public_url,
            tls: args
                .tls_cert
                .zip(args.tls_key)
                .map(|(cert, key)| TlsFiles { cert, key }),
            tls_reload_interval: crate::tls::DEFAULT_RELOAD_INTERVAL,
            discovery_budget: Duration::from_millis(args.discovery_budget_ms),
            snapshot_grace: Duration::from_millis(args.snapshot_grace_ms),
            gate_recheck: Duration::from_millis(args.gate_recheck_ms),
            event_recheck: Duration::from_millis(args.event_recheck_ms),
            tool_budget: ctxsync_chat_projection::ToolBudget {
                max_tools: args.turn_max_tools,
                max_bytes: args.turn_max_tool_bytes,
            },
            store: StoreOptions {
                connection_timeout: Duration::from_millis(args.db_connection_timeout_ms),
                operation_timeout: Duration::from_millis(args.db_operation_timeout_ms),
                ..StoreOptions::default()
            },
            limits: args.limits.into(),
            delta_pushes: !args.no_delta_pushes,
            health_interval: Duration::from_millis(args.health_interval_ms),
            tool_call_max: Duration::from_millis(args.tool_call_max_ms),
            calls: CallHubConfig {
                heartbeat: Duration::from_millis(args.tool_call_heartbeat_ms),
                ..CallHubConfig::default()
            },
            tool_call_audit_retention: days(args.tool_call_audit_days),
            find_tools_cache_bytes: usize::try_from(args.find_tools_cache_mib << 20)
                .unwrap_or(usize::MAX),
            secrets_key,
            oauth_client_metadata_url: args.oauth_client_metadata_url,
        })
    }
}

/// A started server. Dropping it does not stop it; call [`RunningServer::shutdown`].
pub struct RunningServer {
    /// The agent API's bound address.
    pub grpc_addr: SocketAddr,
    /// The chat API's bound address.
    pub http_addr: SocketAddr,
    /// The open database.
    pub store: Store,
    /// The HTTP API's bearer token.
    pub api_token: String,
    /// Where browsers reach the chat API (`--public-url`, else the loopback listener's
    /// address); `None` when neither is known.
    pub public_url: Option<PublicUrl>,
    /// Where the API token came from.
    pub api_token_source: TokenSource,
    /// The certificate both listeners serve, when TLS is on.
    pub tls: Option<Arc<ReloadingCert>>,
    auth: Arc<Auth>,
    shutdown: watch::Sender<bool>,
    shutdown_grace: Duration,
    tasks: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for RunningServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunningServer")
            .field("grpc_addr", &self.grpc_addr)
            .field("http_addr", &self.http_addr)
            .field("store", &self.store)
            .field("api_token", &"[redacted]")
            .field("api_token_source", &self.api_token_source)
            .field("tls", &self.tls.is_some())
            .finish_non_exhaustive()
    }
}

impl RunningServer {
    /// The gRPC endpoint agents connect to.
    pub fn agent_url(&self) -> String {
        format!("{}://{}", self.scheme(), self.grpc_addr)
    }

    /// The chat API's base URL.
    pub fn http_url(&self) -> String {
        format!("{}://{}", self.scheme(), self.http_addr)
    }

    fn scheme(&self) -> &'static str {
        if self.tls.is_some() { "https" } else { "http" }
    }

    /// A one-time link that opens the chat's page in a browser (the browser cannot send
    /// the bearer token): it shows a button whose POST exchanges the link's token for a
    /// session cookie bound to this chat alone. The link lives in the store, so any
    /// replica on the same database opens it. Under the public URL when there is one,
    /// else under [`Self::http_url`].
    pub async fn page_link(&self, chat: ChatId) -> Result<String> {
        let token = self
            .auth
            .mint_link_token(chat)
            .await
            .context("minting a page link")?;
        let path = crate::http::page_path(chat, &token);
        Ok(match &self.public_url {
            Some(public) => public.join(&path),
            None => format!("{}{path}", self.http_url()),
        })
    }

    /// Stops accepting, ends event streams, lets in-flight requests finish within the
    /// shutdown grace, then cuts what remains.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        // A little past the grace: the HTTP side cuts its own stragglers at the grace.
        let deadline = tokio::time::Instant::now() + self.shutdown_grace + SHUTDOWN_SLACK;
        for mut task in self.tasks {
            if tokio::time::timeout_at(deadline, &mut task).await.is_err() {
                tracing::warn!("requests still running after the shutdown grace were cut");
                task.abort();
            }
        }
    }
}

/// How long past the grace shutdown waits for a listener task before aborting it.
const SHUTDOWN_SLACK: Duration = Duration::from_millis(500);

/// Opens the database (applying migrations) and starts the listeners.
pub async fn start(config: ServerConfig) -> Result<RunningServer> {
    let limits = config.limits.clone();
    limits.check(config.discovery_budget + config.snapshot_grace)?;
    let store = Store::open_with(config.database.clone(), config.store.clone())
        .await
        .context("opening the database")?;
    let (shutdown, shutdown_rx) = watch::channel(false);
    let tls = match &config.tls {
        Some(files) => Some(ReloadingCert::load(files.clone())?),
        None => None,
    };
    // Bound first: sign-in's redirect URI names the public URL, which may name the port.
    let http_listener = tokio::net::TcpListener::bind(config.http_addr)
        .await
        .with_context(|| format!("binding the HTTP API to {}", config.http_addr))?;
    let http_addr = http_listener.local_addr()?;
    let public_url = config
        .public_url
        .clone()
        .or_else(|| PublicUrl::for_listener(http_addr, tls.is_some()));
    // One hub per process: the agent API's call streams and the HTTP routes share it.
    let mut hub_config = config.calls.clone();
    hub_config.sign_in = sign_in_settings(&config, public_url.as_ref())?;
    if let (
        Some(settings),
        SecretsKeySource::File {
            previous: Some(_), ..
        },
    ) = (&hub_config.sign_in, &config.secrets_key)
    {
        // A key rotation: what the previous key sealed is sealed again under the new one,
        // so the previous key can go once every replica has started with both.
        let resealed = store
            .rekey_credentials(&settings.keyring)
            .await
            .context("resealing the stored sign-in credentials under the new secrets key")?;
        tracing::info!(
            resealed,
            "stored sign-in credentials sealed under the current secrets key"
        );
    }
    let calls = CallHub::new(store.clone(), hub_config);
    let mut tasks = Vec::new();
    if let Some(cert) = &tls {
        tasks.push(tokio::spawn(
            cert.clone()
                .watch(config.tls_reload_interval, shutdown_rx.clone()),
        ));
    }
    let agent_api = serve_agent_api(&config, &store, &calls, tls.as_ref(), &shutdown_rx).await?;
    tasks.extend(agent_api.tasks);
    tasks.push(prune_audit_log(
        store.clone(),
        config.tool_call_audit_retention,
        shutdown_rx.clone(),
    ));

    let (api_token, api_token_source) =
        crate::http::api_token::resolve(config.api_token.clone(), &config.data_dir)?;
    let auth = Arc::new(Auth::new(api_token.clone(), store.clone(), tls.is_some()));
    let state = app_state(
        &config,
        &store,
        auth.clone(),
        agent_api.metrics,
        calls,
        &shutdown_rx,
    );
    let http_task = serve_chat_api(
        &config,
        state,
        (http_listener, public_url.clone()),
        tls.as_ref(),
        &shutdown_rx,
    )?;
    tasks.push(http_task);
    if tls.is_none() {
        warn_if_exposed(agent_api.addr, http_addr);
    }

    Ok(RunningServer {
        grpc_addr: agent_api.addr,
        http_addr,
        store,
        api_token,
        public_url,
        api_token_source,
        tls,
        auth,
        shutdown,
        shutdown_grace: limits.shutdown_grace,
        tasks,
    })
}

/// The agent API as started: its address, its metrics and its tasks (listener, probes).
struct AgentApiListener {
    addr: SocketAddr,
    metrics: Arc<AgentApiMetrics>,
    tasks: Vec<JoinHandle<()>>,
}

/// Binds the agent API (gRPC, with the health and reflection probes) and serves it until
/// the shutdown signal.
async fn serve_agent_api(
    config: &ServerConfig,
    store: &Store,
    calls: &Arc<CallHub>,
    tls: Option<&Arc<ReloadingCert>>,
    shutdown_rx: &watch::Receiver<bool>,
) -> Result<AgentApiListener> {
    let limits = &config.limits;
    let grpc_listener = tokio::net::TcpListener::bind(config.grpc_addr)
        .await
        .with_context(|| format!("binding the agent API to {}", config.grpc_addr))?;
    let grpc_addr = grpc_listener.local_addr()?;
    let api = AgentApi::new(store.clone())
        .offer_deltas(config.delta_pushes)
        .with_calls(calls.clone());
    let metrics = api.metrics();
    let probes =
        crate::probes::start(store.clone(), config.health_interval, shutdown_rx.clone()).await?;
    let grpc = tonic::transport::Server::builder()
        .initial_stream_window_size(GRPC_STREAM_WINDOW_BYTES)
        .initial_connection_window_size(GRPC_CONNECTION_WINDOW_BYTES)
        .max_concurrent_streams(limits.grpc_max_streams_per_connection)
        .timeout(limits.grpc_request_timeout)
        .http2_keepalive_interval(Some(limits.grpc_keepalive))
        .http2_keepalive_timeout(Some(limits.grpc_keepalive))
        .add_routes(probes.routes)
        .add_service(api.into_server());
    let mut grpc_shutdown = shutdown_rx.clone();
    let stopped = async move {
        let _ = grpc_shutdown.wait_for(|stop| *stop).await;
    };
    let grpc_tls = match tls {
        Some(cert) => Some(cert.acceptor(&[b"h2"])?),
        None => None,
    };
    let connections = crate::listen::accept(
        grpc_listener,
        grpc_tls,
        limits.grpc_max_connections,
        shutdown_rx.clone(),
    );
    let incoming =
        tokio_stream::wrappers::ReceiverStream::new(connections).map(Ok::<_, std::io::Error>);
    let grpc_task = tokio::spawn(async move {
        if let Err(e) = grpc.serve_with_incoming_shutdown(incoming, stopped).await {
            tracing::error!(error = %e, "agent API server failed");
        }
    });
    tracing::info!(%grpc_addr, backend = ?store.backend(), tls = tls.is_some(), "agent API listening");
    Ok(AgentApiListener {
        addr: grpc_addr,
        metrics,
        tasks: vec![probes.monitor, grpc_task],
    })
}

/// The chat API's shared state: the store, the first-turn gate on it, authentication,
/// the agent API's metrics (for `/metrics`) and the configured budgets.
fn app_state(
    config: &ServerConfig,
    store: &Store,
    auth: Arc<Auth>,
    agent_api: Arc<AgentApiMetrics>,
    calls: Arc<CallHub>,
    shutdown_rx: &watch::Receiver<bool>,
) -> AppState {
    let limits = &config.limits;
    let gate_config = GateConfig {
        discovery_budget: config.discovery_budget,
        snapshot_grace: config.snapshot_grace,
        recheck_interval: config.gate_recheck,
        ..GateConfig::default()
    };
    AppState {
        store: store.clone(),
        gate: StoreGate::over_store(store.clone(), gate_config),
        auth,
        agent_api,
        event_streams: Arc::new(EventStreams::new(
            limits.max_event_streams,
            limits.max_event_streams_per_chat,
        )),
        health: Arc::default(),
        event_recheck: config.event_recheck,
        tool_budget: config.tool_budget,
        calls,
        tool_call_max: config.tool_call_max,
        find_indexes: Arc::new(ctxsync_chat_projection::ToolIndexCache::new(
            config.find_tools_cache_bytes,
        )),
        // Known once the listener is bound (its port may be picked then).
        public_url: None,
        stopping: shutdown_rx.clone(),
    }
}

/// Serves the chat API and web page (HTTP) on its bound listener until the shutdown
/// signal, with the public URL page links use.
fn serve_chat_api(
    config: &ServerConfig,
    mut state: AppState,
    (http_listener, public_url): (tokio::net::TcpListener, Option<PublicUrl>),
    tls: Option<&Arc<ReloadingCert>>,
    shutdown_rx: &watch::Receiver<bool>,
) -> Result<JoinHandle<()>> {
    let limits = &config.limits;
    let http_addr = http_listener.local_addr()?;
    state.public_url = public_url;
    let app = with_request_timeout(crate::http::router(state), limits.http_request_timeout);
    let http_tls = match tls {
        Some(cert) => Some(cert.acceptor(&[b"http/1.1"])?),
        None => None,
    };
    let connections = crate::listen::accept(
        http_listener,
        http_tls,
        limits.http_max_connections,
        shutdown_rx.clone(),
    );
    let settings = HttpSettings {
        header_read_timeout: limits.http_header_read_timeout,
        shutdown_grace: limits.shutdown_grace,
    };
    let http_task = tokio::spawn(crate::listen::serve_http(
        connections,
        app,
        settings,
        shutdown_rx.clone(),
    ));
    tracing::info!(%http_addr, tls = tls.is_some(), "chat API and web page listening");
    Ok(http_task)
}

/// How sign-ins are routed: the key that seals credentials and the callback the agent
/// names; `None` (sign-in answers 503 saying why) without a key or a public URL.
fn sign_in_settings(
    config: &ServerConfig,
    public_url: Option<&PublicUrl>,
) -> Result<Option<SignInSettings>> {
    let read = |path: &Path| {
        SecretsKey::from_file(path)
            .with_context(|| format!("reading the secrets key file {}", path.display()))
    };
    let keyring = match &config.secrets_key {
        SecretsKeySource::Off => {
            tracing::info!("MCP sign-in is off: with --database-url it needs --secrets-key-file");
            return Ok(None);
        }
        SecretsKeySource::DataDir => Keyring::new(
            SecretsKey::load_or_create(&config.data_dir)
                .context("making the secrets key in the data directory")?,
        ),
        SecretsKeySource::File { current, previous } => {
            let keyring = Keyring::new(read(current)?);
            match previous {
                Some(previous) => keyring.with_previous(read(previous)?),
                None => keyring,
            }
        }
    };
    let Some(public) = public_url else {
        tracing::warn!(
            "MCP sign-in is off: it needs --public-url (where browsers reach this server) for its callback"
        );
        return Ok(None);
    };
    let client_metadata_url = config.oauth_client_metadata_url.clone().or_else(|| {
        public
            .as_str()
            .starts_with("https://")
            .then(|| public.join(crate::http::sign_in::CLIENT_METADATA_PATH))
    });
    Ok(Some(SignInSettings {
        keyring,
        redirect_uri: public.join(crate::http::sign_in::CALLBACK_PATH),
        client_metadata_url,
    }))
}

/// Deletes the audit log's rows past `retention` now and every [`AUDIT_PRUNE_INTERVAL`]
/// until shutdown. Every replica runs it: deleting rows another already deleted is a
/// no-op, and each batch commits on its own.
fn prune_audit_log(
    store: Store,
    retention: Duration,
    mut shutdown: watch::Receiver<bool>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let cutoff = chrono::TimeDelta::from_std(retention)
                .ok()
                .and_then(|age| chrono::Utc::now().checked_sub_signed(age));
            if let Some(cutoff) = cutoff {
                match store.prune_tool_call_audit(cutoff).await {
                    Ok(0) => {}
                    Ok(pruned) => {
                        tracing::info!(pruned, "deleted tool-call audit rows past retention")
                    }
                    // The next round retries; until then the log only runs a little long.
                    Err(e) => tracing::warn!(error = %e, "pruning the tool-call audit log failed"),
                }
            }
            tokio::select! {
                () = tokio::time::sleep(AUDIT_PRUNE_INTERVAL) => {}
                _ = shutdown.wait_for(|stop| *stop) => return,
            }
        }
    })
}

/// One warning when a plain-text listener is reachable from other machines: what crosses
/// the network in clear, and how to stop it.
fn warn_if_exposed(grpc_addr: SocketAddr, http_addr: SocketAddr) {
    let exposed: Vec<String> = [
        (grpc_addr, "the agent API (agent tokens, workspace content)"),
        (
            http_addr,
            "the chat API and page (the API token, session cookies, chat context)",
        ),
    ]
    .into_iter()
    .filter(|(addr, _)| !addr.ip().is_loopback())
    .map(|(addr, what)| format!("{what} on {addr}"))
    .collect();
    if !exposed.is_empty() {
        tracing::warn!(
            "serving without TLS on a non-loopback address: {} cross the network unencrypted; give --tls-cert and --tls-key",
            exposed.join(" and ")
        );
    }
}

/// `ctxsync server`: starts the server, prints its addresses and where the API token is,
/// and serves until Ctrl-C or SIGTERM; then drains, and a second signal exits at once.
pub async fn run(args: ServerArgs) -> Result<()> {
    // Listening before the start-up lines: a supervisor that sends SIGTERM as soon as it
    // reads them must get a drain and exit 0, not the signal's default action.
    let mut stop = StopSignal::install();
    let server = start(ServerConfig::from_args(args)?).await?;
    say(&format!("agent API (gRPC): {}", server.agent_url()));
    say(&format!("chat API (HTTP):  {}", server.http_url()));
    if let Some(public) = &server.public_url {
        say(&format!(
            "web page links:   {public}/chats/… (`ctxsync link --chat ID`)"
        ));
    }
    say(&match &server.api_token_source {
        TokenSource::Given => "API token: as given (--api-token / CTXSYNC_API_TOKEN)".to_string(),
        TokenSource::File(path) => format!("API token: in {}", path.display()),
        TokenSource::Generated(path) => format!("API token: generated into {}", path.display()),
    });
    stop.recv().await;
    tracing::info!("stopping: draining in-flight requests (a second signal exits at once)");
    tokio::spawn(async move {
        stop.recv().await;
        tracing::warn!("second stop signal: exiting without draining");
        std::process::exit(1);
    });
    server.shutdown().await;
    tracing::info!("stopped");
    Ok(())
}

/// Answers a request that has not produced its response headers within `timeout` with
/// 503. An event stream's headers come at once, so streams are not cut; a first turn's
/// wait is below the timeout by [`Limits::check`].
fn with_request_timeout(app: axum::Router, timeout: Duration) -> axum::Router {
    app.layer(axum::middleware::from_fn(
        move |request: axum::extract::Request, next: axum::middleware::Next| async move {
            match tokio::time::timeout(timeout, next.run(request)).await {
                Ok(response) => response,
                Err(_) => {
                    use axum::response::IntoResponse;
                    crate::http::ApiError::new(
                        axum::http::StatusCode::SERVICE_UNAVAILABLE,
                        format!("request timed out after {} ms", timeout.as_millis()),
                    )
                    .into_response()
                }
            }
        },
    ))
}

/// Prints a line for the operator on stdout (a JSON object with JSON logs).
fn say(line: &str) {
    crate::logging::operator_line(line);
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn wait_for_stop_signal() {
    StopSignal::install().recv().await;
}

/// Ctrl-C and SIGTERM, caught from the moment it is installed: a signal that arrives
/// before `recv` is kept for it, instead of ending the process as by default.
#[derive(Debug)]
struct StopSignal {
    interrupt: Option<tokio::signal::unix::Signal>,
    terminate: Option<tokio::signal::unix::Signal>,
}

impl StopSignal {
    fn install() -> Self {
        use tokio::signal::unix::{SignalKind, signal};
        Self {
            interrupt: signal(SignalKind::interrupt()).ok(),
            terminate: signal(SignalKind::terminate()).ok(),
        }
    }

    async fn recv(&mut self) {
        async fn next(signal: Option<&mut tokio::signal::unix::Signal>) {
            match signal {
                Some(signal) => {
                    signal.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        }
        tokio::select! {
            () = next(self.interrupt.as_mut()) => {}
            () = next(self.terminate.as_mut()) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        server: ServerArgs,
    }

    #[test]
    fn the_audit_retention_is_days_within_bounds() {
        let parse = |args: &[&str]| {
            Cli::try_parse_from(std::iter::once("server").chain(args.iter().copied()))
        };
        let default = ServerConfig::from_args(parse(&[]).unwrap().server).unwrap();
        assert_eq!(default.tool_call_audit_retention, days(30));
        let most = parse(&["--tool-call-audit-days", "3650"]).unwrap().server;
        assert_eq!(
            ServerConfig::from_args(most)
                .unwrap()
                .tool_call_audit_retention,
            days(3650)
        );
        for bad in ["0", "3651", "a month"] {
            let error = parse(&["--tool-call-audit-days", bad])
                .unwrap_err()
                .to_string();
            assert!(error.contains("--tool-call-audit-days"), "{bad}: {error}");
        }
    }
}
