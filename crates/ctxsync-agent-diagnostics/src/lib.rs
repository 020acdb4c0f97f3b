//! Agent-side MCP discovery for ctxsync (layer 1).
//!
//! Owns: what is true about MCP in a workspace: parsing `.mcp.json` files
//! ([`load_config_files`], with structural and semantic errors as data), the [`Engine`] that
//! connects to every declared server with rmcp (stdio child processes in their own process
//! groups, or streamable HTTP), lists their tools with a cursor guard and a tool cap, reloads
//! differentially when config files change (a file that cannot be read as a whole keeps the
//! servers it declared before), retries failed servers, and produces one
//! immutable `ctxsync_mcp_model::Report` (phase, per-server and per-file outcomes, servers
//! still connecting) that readers get without blocking, plus live reload [`Progress`].
//! Every diagnostic leaving it is sanitized and bounded ([`sanitize_diagnostic`]), and says
//! in words what failed, where and what to try (rmcp's errors are never shown as they are;
//! an HTTP server's 401 or 403 is also kept as [`AccessRefused`], see
//! [`Engine::refused_access`]). Files a
//! workspace names are opened with [`open_regular_file`] (regular files only, symlinks kept
//! inside the workspace, reads bounded), which the agent's context resolver shares. Agent
//! Plugins packages ([`discover_plugins`]) add their `mcp.json` servers as
//! `<plugin>/<server>`, launched with an allow-listed environment, never the agent's own.
//! [`Engine::caller`] gives a [`ToolCaller`] ([`tool_call`]) that runs a tool call on a
//! connected server (its deadline, `notifications/cancelled`, progress, the whole result
//! capped and sanitized) without touching discovery. A person's sign-in to an HTTP server
//! (OAuth authorization code) goes through the engine too: [`Engine::begin_sign_in`] makes
//! the authorization URL and [`Engine::finish_sign_in`] exchanges the code (every OAuth
//! request through rmcp, from the agent); the credential is held in memory only, sent as
//! the server's bearer, renewed before it expires and after a 401 (each result a
//! [`SignInUpdate`] for the control plane to keep), and given back after a restart with
//! [`Engine::restore_sign_in`].
//!
//! Must never: know about protobuf, gRPC or databases; depend on a ctxsync crate other than
//! `ctxsync-mcp-model` (the records it reports with and the tool call's envelope; tests also
//! use `ctxsync-mcp-fixture` and `ctxsync-test-support`); declare its own copy of a record
//! that crate holds.
//!
//! # Example
//!
//! Start the engine on a workspace and wait until initial discovery is complete; a server
//! that cannot start is a terminal result too, reported as data:
//!
//! ```
//! use ctxsync_agent_diagnostics::{Engine, EngineConfig};
//! use ctxsync_mcp_model::ReportPhase;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let workspace = tempfile::tempdir()?;
//! std::fs::write(
//!     workspace.path().join(".mcp.json"),
//!     r#"{"mcpServers": {"docs": {"command": "no-such-mcp-server-on-this-machine"}}}"#,
//! )?;
//!
//! let engine = Engine::start(EngineConfig::new(workspace.path()));
//! let report = engine.subscribe().wait_for(|r| r.phase == ReportPhase::Complete).await?.clone();
//! let docs = &report.servers[0];
//! assert_eq!(docs.name, "docs");
//! assert!(!docs.connected && docs.error.is_some());
//! engine.close().await;
//! # Ok(())
//! # }
//! ```

#![deny(missing_docs)]

mod config;
mod connection;
mod engine;
mod failure;
mod lifecycle;
mod line_limit;
mod plugin;
mod plugin_launch;
mod process;
mod progress;
mod safe_file;
mod sanitize;
mod sign_in;
pub mod tool_call;
mod watch;

pub use config::{
    ConfigFile, MAX_SERVER_NAME_BYTES, OAuthGrant, PreregisteredClient, ServerEntry,
    TransportConfig, load_config_files, parse_config_bytes, parse_config_file,
};
pub use connection::{
    MAX_INSTRUCTIONS_BYTES, MAX_TOOL_NAME_BYTES, MAX_TOOL_PAGES, MAX_TOOLS_PER_SERVER,
    MIN_TOOLS_TTL,
};
pub use engine::{
    DEFAULT_CONFIG_POLL_INTERVAL, DEFAULT_CONNECT_TIMEOUT, DEFAULT_RETRY_INITIAL,
    DEFAULT_RETRY_MAX, DEFAULT_WATCH_DEBOUNCE, Engine, EngineConfig, EngineError, RetryPolicy,
    default_plugin_data_dir,
};
pub use failure::AccessRefused;
pub use lifecycle::{DEFAULT_DISCOVER_PROBE_TIMEOUT, McpLifecycle};
pub use plugin::{
    MAX_PLUGINS, PLUGIN_MANIFEST, PLUGIN_MCP_CONFIG, PLUGIN_SKILLS_DIR, PLUGINS_DIR, Plugin,
    PluginScan, default_plugin_dirs, discover_plugins, load_plugin_servers, load_plugins,
    parse_plugin_servers, plugin_watch_paths,
};
pub use plugin_launch::{PLUGIN_ENV_ALLOW_LIST, PluginLaunch};
pub use progress::Progress;
pub use safe_file::{
    MAX_CONFIG_FILE_BYTES, RegularFile, SafeFileError, open_regular_file, read_regular_file,
};
pub use sanitize::{MAX_DIAGNOSTIC_BYTES, REDACTED, SecretSet, sanitize_diagnostic};
pub use sign_in::SignInUpdate;
pub use tool_call::{DEFAULT_MAX_RESULT_BYTES, ToolCaller};
