//! `ctxsync agent`: the workspace agent process. It runs the MCP engine on the workspace,
//! publishes the workspace context and the engine's report to the server, and on Ctrl-C or
//! SIGTERM closes the engine so no MCP server outlives it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use ctxsync_agent_diagnostics::{Engine, EngineConfig, SignInUpdate, ToolCaller};
use ctxsync_agent_publication::{
    CallGlob, CallPolicy, CallRunner, DEFAULT_MAX_WATCHED_DIRS, DEFAULT_TOOL_RESULT_MAX_BYTES,
    MIN_TOOL_RESULT_BYTES, Publisher, PublisherConfig, ReportSource, ScanConfig, Timing,
    ToolCallConfig,
};
use ctxsync_mcp_model::{CallEnd, CallProgress, CallSpec, SignInCredential, SignInStart};
use ctxsync_protocol::sign_in::{BeginSignIn, ExchangeSignIn, StoredSignIn};
use ctxsync_protocol::tool_call::MAX_CALL_RESULT_BYTES;
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// The environment variable holding the agent's token (never a flag: flags show in `ps`).
pub const TOKEN_ENV: &str = "CTXSYNC_AGENT_TOKEN";

/// `ctxsync agent --help`'s description. It is set on the subcommand itself: there, the
/// subcommand's one-line doc would override one set on [`AgentArgs`].
pub const LONG_ABOUT: &str = "Run a workspace agent: discover the workspace's MCP servers, \
    resolve its instruction files and skills, and publish both to the server, again on every \
    change. The token comes from the CTXSYNC_AGENT_TOKEN environment variable (see `ctxsync \
    agents create`). Runs until Ctrl-C or SIGTERM.";

/// `ctxsync agent`'s flags.
#[derive(Debug, Args)]
pub struct AgentArgs {
    /// The server's agent API (gRPC): `agent API (gRPC)` in `ctxsync server`'s output,
    /// https://HOST:PORT, or http://127.0.0.1:4770 on one host (plain http to another host
    /// is warned about: the token would cross in clear). Not the chat API's HTTP port
    /// (4780) that the other client commands take.
    #[arg(long, value_name = "URL")]
    pub server: String,
    /// A PEM file of certificate authorities to trust for https, besides the system's
    /// (repeatable).
    #[arg(long = "ca-cert", value_name = "FILE", env = "CTXSYNC_CA_CERT")]
    pub ca_certs: Vec<PathBuf>,
    /// The workspace directory: scanned for context files; MCP servers run in it.
    #[arg(long, value_name = "DIR")]
    pub workspace: PathBuf,
    /// More MCP config files, read after `<workspace>/.mcp.json` (repeatable; relative to
    /// the current directory).
    #[arg(long = "mcp-config", value_name = "PATH")]
    pub mcp_configs: Vec<PathBuf>,
    /// More directories scanned for instruction files and skills (repeatable).
    #[arg(long = "root", value_name = "DIR")]
    pub roots: Vec<PathBuf>,
    /// Do not run MCP discovery: publish context files only, without freshness guarantees.
    #[arg(long)]
    pub no_mcp: bool,
    /// Bound on one MCP server's start, `initialize` and first tool list.
    #[arg(long, value_name = "MS", default_value_t = default_mcp_timeout_ms())]
    pub mcp_timeout_ms: u64,
    /// Most directories watched for context changes at once. Watches (inotify's
    /// max_user_watches on Linux) are shared with editors and IDEs; beyond this budget, or
    /// when the system's limit is reached, the rest is polled and snapshots say so.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_WATCHED_DIRS)]
    pub max_watched_dirs: usize,
    /// Refuse every tool call the server sends (`denied`). The agent still tells the
    /// server it takes calls, so callers learn the refusal at once.
    #[arg(long)]
    pub no_tool_calls: bool,
    /// Run only the tool calls whose SERVER/TOOL one of these globs matches whole
    /// (repeatable; default: every call). `*` matches any run of characters except `/`,
    /// `?` one character except `/`, anything else itself; `**` is refused. A plugin's
    /// server is PLUGIN/SERVER, so its calls read PLUGIN/SERVER/TOOL. Other calls are
    /// refused (`denied`); their tools are still listed. E.g. `github/create_issue`,
    /// `files/*`, `*/read_*`, `*/*/read_*`.
    #[arg(
        long = "allow-tool-calls",
        value_name = "GLOB",
        conflicts_with = "no_tool_calls"
    )]
    pub allow_tool_calls: Vec<CallGlob>,
    /// The cap of one tool call's whole result (structuredContent included), in bytes:
    /// text is cut, structuredContent dropped when it does not fit, a large binary block
    /// replaced by a placeholder, and the result marked truncated.
    #[arg(
        long,
        value_name = "BYTES",
        default_value_t = DEFAULT_TOOL_RESULT_MAX_BYTES as u64,
        value_parser = clap::value_parser!(u64)
            .range(MIN_TOOL_RESULT_BYTES as u64..=MAX_CALL_RESULT_BYTES as u64),
    )]
    pub tool_result_max_bytes: u64,
    /// How often the tool-call stream carries a heartbeat when idle, in milliseconds:
    /// below a load balancer's idle timeout, which HTTP/2 pings do not reset.
    #[arg(long, value_name = "MS", default_value_t = crate::server::DEFAULT_CALL_HEARTBEAT_MS,
        value_parser = clap::value_parser!(u64).range(100..=crate::server::DEFAULT_CALL_HEARTBEAT_MS))]
    pub tool_call_heartbeat_ms: u64,
    /// Where Agent Plugins packages come from.
    #[command(flatten)]
    pub plugins: PluginArgs,
}

/// Where Agent Plugins packages come from (shared by `agent` and `discover`).
#[derive(Debug, Args)]
pub struct PluginArgs {
    /// Another place for Agent Plugins packages, after `<workspace>/.agents/plugins` and
    /// `~/.agents/plugins` (repeatable): one package (it holds `plugin.json`) or a
    /// directory of packages.
    #[arg(long = "plugin-dir", value_name = "DIR")]
    pub plugin_dirs: Vec<PathBuf>,
    /// Load no Agent Plugins package, not even from the default directories.
    #[arg(long, conflicts_with = "plugin_dirs")]
    pub no_plugins: bool,
    /// Where each plugin's persistent data directory (`PLUGIN_DATA`) is created; default
    /// `$XDG_DATA_HOME/ctxsync/plugins`, else `~/.local/share/ctxsync/plugins`.
    #[arg(long, value_name = "DIR")]
    pub plugin_data_dir: Option<PathBuf>,
}

/// The plugin directories and the data directory the engine and the resolver share.
#[derive(Debug, Clone, Default)]
pub(crate) struct PluginSetup {
    pub dirs: Vec<PathBuf>,
    pub data_dir: Option<PathBuf>,
}

impl PluginArgs {
    pub(crate) fn setup(&self, workspace: &Path) -> Result<PluginSetup> {
        if self.no_plugins {
            return Ok(PluginSetup::default());
        }
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let mut dirs = ctxsync_agent_diagnostics::default_plugin_dirs(workspace, home.as_deref());
        dirs.extend(absolute_paths(self.plugin_dirs.clone())?);
        let data_dir = match &self.plugin_data_dir {
            Some(dir) => Some(
                std::path::absolute(dir)
                    .with_context(|| format!("the plugin data directory {}", dir.display()))?,
            ),
            None => None,
        };
        Ok(PluginSetup { dirs, data_dir })
    }
}

pub(crate) fn default_mcp_timeout_ms() -> u64 {
    u64::try_from(ctxsync_agent_diagnostics::DEFAULT_CONNECT_TIMEOUT.as_millis())
        .unwrap_or(u64::MAX)
}

/// Runs the agent until Ctrl-C or SIGTERM, or until a newer process of the same agent
/// supersedes it; then closes the MCP engine. Fails at start without a token in
/// [`TOKEN_ENV`] or with a configuration the publisher refuses.
pub async fn run(args: AgentArgs) -> Result<()> {
    // Before any MCP server starts: a signal during startup must still close them.
    let mut stop = StopSignals::install()?;
    let token = std::env::var(TOKEN_ENV).unwrap_or_default();
    anyhow::ensure!(
        !token.trim().is_empty(),
        "{TOKEN_ENV} is not set: give the agent the token printed by `ctxsync agents create`"
    );
    let workspace = workspace_dir(&args.workspace)?;
    let mcp_configs = absolute_paths(args.mcp_configs)?;
    let roots = absolute_paths(args.roots)?;
    let plugins = args.plugins.setup(&workspace)?;

    // Refreshed sign-in credentials go to the control plane over the call stream.
    let (sign_in_updates, sign_in_updates_rx) = mpsc::unbounded_channel();
    let engine = (!args.no_mcp).then(|| {
        let mut config = engine_config(
            &workspace,
            &mcp_configs,
            &plugins,
            Duration::from_millis(args.mcp_timeout_ms),
            &token,
        );
        config.sign_in_updates = Some(sign_in_updates);
        Arc::new(Engine::start(config))
    });
    let reports = engine
        .as_ref()
        .map(|engine| Box::new(engine.subscribe()) as Box<dyn ReportSource>);
    let server_url = args.server.trim_end_matches('/').to_owned();
    let config = PublisherConfig {
        server_url: args.server,
        ca_cert_files: absolute_paths(args.ca_certs)?,
        token,
        agent_version: env!("CARGO_PKG_VERSION").to_owned(),
        scan: ScanConfig {
            workspace_dir: workspace.clone(),
            extra_roots: roots,
            mcp_config_paths: mcp_configs,
            plugin_dirs: plugins.dirs,
        },
        timing: Timing::default(),
        max_watched_dirs: args.max_watched_dirs,
    };
    let restricted = !args.allow_tool_calls.is_empty();
    let calls = ToolCallConfig {
        deny: args.no_tool_calls,
        policy: if restricted {
            CallPolicy::allow_only(args.allow_tool_calls)
        } else {
            CallPolicy::allow_all()
        },
        // In range: clap checked it against the same bounds.
        max_result_bytes: usize::try_from(args.tool_result_max_bytes).unwrap_or(usize::MAX),
        heartbeat: Duration::from_millis(args.tool_call_heartbeat_ms),
        ..ToolCallConfig::default()
    };
    let publisher = Publisher::new(config, reports).and_then(|publisher| match &engine {
        Some(engine) => publisher.with_tool_calls(
            EngineCalls {
                caller: engine.caller(),
                engine: Arc::clone(engine),
                updates: Arc::new(tokio::sync::Mutex::new(sign_in_updates_rx)),
            },
            calls,
        ),
        // Without discovery there is no run id to route calls by: nothing is declared.
        None => Ok(publisher),
    });
    let result = match publisher {
        Ok(publisher) => {
            tracing::info!(
                workspace = %workspace.display(),
                run_id = publisher.run_id().map_or("(none: --no-mcp)", |run| run.as_str()),
                mcp_discovery = engine.is_some(),
                tool_calls = if !publisher.startup().accepts_tool_calls {
                    "off"
                } else if args.no_tool_calls {
                    "denied"
                } else if restricted {
                    "restricted (--allow-tool-calls)"
                } else {
                    "on"
                },
                "agent started"
            );
            // Logs once if `--server` is the chat API's port; ends with the agent.
            let _port_check = AbortOnDrop(tokio::spawn(crate::wrong_port::check_agent_url(
                server_url.clone(),
                publisher.status(),
            )));
            tokio::select! {
                fatal = publisher.run() => Err(match fatal {
                    Err(error) => anyhow::Error::new(error),
                    Ok(never) => match never {},
                }),
                () = stop.wait() => {
                    tracing::info!("stopping");
                    Ok(())
                }
            }
        }
        Err(error) => Err(anyhow::Error::new(error)),
    };
    if let Some(engine) = engine {
        // Bounded (the engine kills what does not stop in time), so the agent exits within
        // seconds of SIGTERM whatever its MCP servers do.
        engine.close().await;
    }
    result
}

/// The MCP engine as the publisher's call runner: the one place engine and publisher
/// meet for tool calls and sign-ins (a newtype, as both the trait and the engine are
/// another crate's).
#[derive(Clone)]
struct EngineCalls {
    caller: ToolCaller,
    engine: Arc<Engine>,
    /// The engine's refreshed (or lost) credentials, taken one at a time by the wing.
    updates: Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<SignInUpdate>>>,
}

impl CallRunner for EngineCalls {
    fn lists(&self, server: &str, tool: &str) -> bool {
        self.caller.lists(server, tool)
    }

    async fn call(
        &self,
        spec: CallSpec,
        progress: mpsc::Sender<CallProgress>,
        cancel: CancellationToken,
    ) -> CallEnd {
        self.caller.call(spec, progress, cancel).await
    }

    async fn begin_sign_in(&self, begin: BeginSignIn) -> Result<SignInStart, String> {
        self.engine
            .begin_sign_in(
                &begin.server,
                &begin.redirect_uri,
                begin.client_metadata_url.as_deref(),
            )
            .await
    }

    async fn finish_sign_in(&self, exchange: ExchangeSignIn) -> Result<SignInCredential, String> {
        self.engine
            .finish_sign_in(
                &exchange.server,
                &exchange.pending,
                &exchange.code,
                exchange.iss.as_deref(),
            )
            .await
    }

    fn restore_sign_in(&self, stored: StoredSignIn) {
        match stored.credential {
            Some(credential) => self.engine.restore_sign_in(&stored.server, credential),
            None => self.engine.forget_sign_in(&stored.server),
        }
    }

    async fn next_sign_in_update(&self) -> StoredSignIn {
        let mut updates = self.updates.lock().await;
        match updates.recv().await {
            Some(update) => StoredSignIn {
                server: update.server,
                credential: update.credential,
            },
            // The engine is gone, and with it anything to refresh.
            None => std::future::pending().await,
        }
    }
}

/// A task aborted when this is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Ctrl-C and SIGTERM, registered when the agent starts. Until registration, either one
/// would end the process at once and leave its MCP servers running.
struct StopSignals {
    terminate: Signal,
    interrupt: Signal,
}

impl StopSignals {
    fn install() -> Result<Self> {
        Ok(Self {
            terminate: signal(SignalKind::terminate()).context("handling SIGTERM")?,
            interrupt: signal(SignalKind::interrupt()).context("handling Ctrl-C")?,
        })
    }

    async fn wait(&mut self) {
        tokio::select! {
            _ = self.terminate.recv() => {}
            _ = self.interrupt.recv() => {}
        }
    }
}

/// The workspace as an absolute directory, so the engine and the resolver agree on it.
pub(crate) fn workspace_dir(path: &Path) -> Result<PathBuf> {
    let absolute = std::path::absolute(path)
        .with_context(|| format!("workspace directory {}", path.display()))?;
    anyhow::ensure!(
        absolute.is_dir(),
        "workspace directory {} does not exist or is not a directory",
        absolute.display()
    );
    Ok(absolute)
}

/// Command-line paths are relative to the current directory, as a shell user expects.
pub(crate) fn absolute_paths(paths: Vec<PathBuf>) -> Result<Vec<PathBuf>> {
    paths
        .into_iter()
        .map(|path| {
            std::path::absolute(&path).with_context(|| format!("the path {}", path.display()))
        })
        .collect()
}

/// The engine on the workspace: the agent's environment (for `${VAR}` and stdio servers)
/// without the token, which is a secret redacted from every diagnostic instead.
pub(crate) fn engine_config(
    workspace: &Path,
    mcp_configs: &[PathBuf],
    plugins: &PluginSetup,
    connect_timeout: Duration,
    token: &str,
) -> EngineConfig {
    let mut config = EngineConfig::new(workspace);
    config.env.remove(TOKEN_ENV);
    config.config_paths = mcp_configs.to_vec();
    config.plugin_dirs = plugins.dirs.clone();
    if let Some(dir) = &plugins.data_dir {
        config.plugin_data_dir = dir.clone();
    }
    config.connect_timeout = connect_timeout;
    if !token.is_empty() {
        config.injected_secrets.push(token.to_owned());
    }
    config
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Command {
        #[command(flatten)]
        agent: AgentArgs,
    }

    fn parse(extra: &[&str]) -> Result<AgentArgs, clap::Error> {
        let base = [
            "agent",
            "--server",
            "http://127.0.0.1:1",
            "--workspace",
            ".",
        ];
        Command::try_parse_from(base.iter().chain(extra)).map(|c| c.agent)
    }

    #[test]
    fn tool_call_flags_default_and_are_bounded() {
        let args = parse(&[]).unwrap();
        assert!(!args.no_tool_calls);
        assert_eq!(args.tool_result_max_bytes, 262_144);
        let args = parse(&["--no-tool-calls", "--tool-result-max-bytes", "1024"]).unwrap();
        assert!(args.no_tool_calls);
        assert_eq!(args.tool_result_max_bytes, 1024);
        let too_big = (MAX_CALL_RESULT_BYTES + 1).to_string();
        for bad in ["1023", too_big.as_str()] {
            let error = parse(&["--tool-result-max-bytes", bad])
                .unwrap_err()
                .to_string();
            assert!(error.contains("--tool-result-max-bytes"), "{error}");
        }
    }

    #[test]
    fn allow_tool_calls_is_repeatable_checked_and_excludes_no_tool_calls() {
        assert!(parse(&[]).unwrap().allow_tool_calls.is_empty());
        let args = parse(&[
            "--allow-tool-calls",
            "github/create_issue",
            "--allow-tool-calls",
            "*/read_*",
        ])
        .unwrap();
        let globs: Vec<&str> = args.allow_tool_calls.iter().map(CallGlob::as_str).collect();
        assert_eq!(globs, ["github/create_issue", "*/read_*"]);

        let error = parse(&["--allow-tool-calls", "files/**"])
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("--allow-tool-calls") && error.contains("files/**"),
            "{error}"
        );
        assert!(error.contains("`**` is not supported"), "{error}");
        let error = parse(&["--allow-tool-calls", ""]).unwrap_err().to_string();
        assert!(error.contains("--allow-tool-calls"), "{error}");

        let error = parse(&["--no-tool-calls", "--allow-tool-calls", "files/*"]).unwrap_err();
        assert_eq!(error.kind(), clap::error::ErrorKind::ArgumentConflict);
    }
}
