//! The workspace agent's publication side (layer 4): it turns the workspace's context and
//! the MCP engine's discovery report into versioned snapshots and delivers the newest one
//! to the control plane.
//!
//! Owns: the per-process run id; the context resolver ([`resolve`], by job: instruction
//! files, skills and their front matter ([`parse_front_matter`]) and `.mcp.json` rows;
//! MCP server rows with tool definitions fitted and shed to the wire's limits; caps and
//! statuses); snapshot versions and the aggregate hash; watching context files (polling,
//! with a snapshot error, whatever cannot be watched); the push loop over gRPC with
//! registration (`UpdateStartup`) on every connection, coalescing, backoff and reconnects
//! ([`Publisher`]); the connection to the server, `http://` or `https://` (rustls inside
//! the one-connection connector; the platform's trusted roots plus
//! [`PublisherConfig::ca_cert_files`]); and the agent's side of tool calls
//! ([`Publisher::with_tool_calls`]): the `ToolCalls` stream opened after each registration
//! that declared `accepts_tool_calls`, and the tool calls it carries, run through a
//! [`CallRunner`]; which of them may run ([`ToolCallConfig`]: `--no-tool-calls`, or the
//! globs of `--allow-tool-calls` as a [`CallPolicy`]).
//!
//! Only one refusal stops the publisher: a newer process of the same agent superseded it
//! ([`PublishError::Superseded`]). Everything else is retried: transient failures with
//! backoff, a refused server certificate with backoff and one log line per attempt naming
//! the host and the reason, and a refused token ([`ConnectionState::TokenRefused`]: said
//! once, with how to get a new one, then retried every [`BackoffPolicy::max`] until the
//! server accepts it again).
//!
//! Must never:
//! - send the content of an `.mcp.json` file (it holds secrets; rows carry hash and size),
//!   the agent token (only in the `authorization` header), or any diagnostic the engine
//!   has not sanitized; send the token in clear to another machine without a warning at
//!   start;
//! - send anything over the wire limits of `ctxsync_protocol::limits`: rows, errors,
//!   sources and bodies are bounded here, so the server never rejects a whole push for one
//!   long error or name;
//! - reuse a run id across processes: a [`Publisher`] generates its own (UUID v4) and
//!   there is one publisher per agent process;
//! - follow a symlink out of its scan root.
//!
//! The MCP engine reaches this crate through two seams, both wired by the agent's binary:
//! [`ReportSource`] hands over the engine's own `ctxsync_mcp_model::Report` (the
//! engine's `subscribe()` channel is one as it is), and [`CallRunner`] runs a call (the
//! binary implements it over the engine's `ToolCaller`). This crate keeps no copy of the
//! engine's report. Without a source (`--no-mcp`) snapshots carry `UNSPECIFIED` and no
//! run id.
//!
//! # Example
//!
//! Publish a workspace, its MCP discovery included, to a `ctxsync server`. Not run here
//! because it needs a server; `examples/publish_workspace.rs` is the complete program, and
//! the binary's tests run it against a real server.
//!
//! ```no_run
//! use ctxsync_agent_diagnostics::{Engine, EngineConfig};
//! use ctxsync_agent_publication::{
//!     DEFAULT_MAX_WATCHED_DIRS, Publisher, PublisherConfig, ScanConfig, Timing,
//! };
//!
//! # async fn publish(token: String) -> Result<(), Box<dyn std::error::Error>> {
//! let workspace = std::path::PathBuf::from("/srv/workspace");
//! let engine = Engine::start(EngineConfig::new(&workspace));
//! let config = PublisherConfig {
//!     server_url: "https://ctxsync.example:7443".into(),
//!     ca_cert_files: Vec::new(),
//!     token,
//!     agent_version: "1.0.0".into(),
//!     scan: ScanConfig {
//!         workspace_dir: workspace,
//!         extra_roots: vec![],
//!         mcp_config_paths: vec![],
//!         plugin_dirs: vec![],
//!     },
//!     timing: Timing::default(),
//!     max_watched_dirs: DEFAULT_MAX_WATCHED_DIRS,
//! };
//! let publisher = Publisher::new(config, Some(Box::new(engine.subscribe())))?;
//! let status = publisher.status(); // versions published, pushes answered, connection
//! // Runs until a newer process of the same agent supersedes this one.
//! let superseded = publisher.run().await.unwrap_err();
//! # drop((status, superseded));
//! # Ok(())
//! # }
//! ```

#![deny(missing_docs)]

mod backoff;
mod connection;
mod error;
mod front_matter;
mod hash;
mod publisher;
mod report_source;
mod resolve;
mod scan;
mod timing;
mod tls;
mod tool_call;
mod watcher;

pub use backoff::{BackoffPolicy, DEFAULT_BACKOFF_INITIAL, DEFAULT_BACKOFF_MAX};
pub use error::PublishError;
pub use front_matter::{FrontMatter, FrontMatterError, parse_front_matter};
pub use publisher::{
    ConnectionState, DEFAULT_MAX_WATCHED_DIRS, Publisher, PublisherConfig, PublisherStatus,
};
pub use report_source::{ChangedFuture, ReportSource, SourceClosed};
pub use resolve::{
    DEFAULT_SERVER_ERROR, MAX_CONTEXT_BYTES, MAX_CONTEXT_RESOURCES, MAX_FILE_BYTES, Resolution,
    SERVER_SOURCE_PREFIX, ScanConfig, resolve,
};
pub use timing::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_KEEPALIVE_INTERVAL, DEFAULT_KEEPALIVE_TIMEOUT,
    DEFAULT_POLL_INTERVAL, DEFAULT_REQUEST_TIMEOUT, Timing,
};
pub use tool_call::{
    CallGlob, CallGlobError, CallPolicy, CallRunner, DEFAULT_TOOL_RESULT_MAX_BYTES,
    MAX_CALL_GLOB_BYTES, MAX_RUNNING_CALLS, MAX_WAITING_CALLS, MIN_TOOL_RESULT_BYTES,
    REMEMBERED_CALL_IDS, ToolCallConfig,
};
pub use watcher::DEFAULT_DEBOUNCE;
