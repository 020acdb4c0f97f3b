//! The discovery report this crate consumes, and the seam through which it arrives.
//!
//! The MCP engine (layer 1) owns the real report; this is the shape the publisher needs,
//! so the engine can be adapted to it in one small function (see the crate docs).

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use ctxsync_protocol::McpTool;
use tokio::sync::watch;

/// How far the engine's initial reload has got. There is no "unspecified" here: a process
/// without MCP discovery has no report source at all.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ReportPhase {
    /// Some declared server has not reached a terminal result in the initial reload.
    #[default]
    Pending,
    /// Every declared server reached success or failure (or none were declared).
    Complete,
}

/// One engine state: the phase, every declared server's outcome and every config file's.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DiscoveryReport {
    /// How far the initial reload has got.
    pub phase: ReportPhase,
    /// Every declared server that has a result, in the engine's order (by name).
    pub servers: Vec<ServerOutcome>,
    /// Every config file with an error or a warning.
    pub config_outcomes: Vec<ConfigOutcome>,
    /// While pending: the servers the initial discovery still waits for, by name.
    pub pending: Vec<PendingOutcome>,
}

/// A server of the initial discovery with no result yet: its name and when its connect
/// started; the snapshot says how long ago that was when it is sent.
pub use ctxsync_mcp_model::PendingServer as PendingOutcome;
/// A connected server's revision, self-description and connect timings, as the engine
/// reported them (the server's text, already bounded and redacted by the engine).
pub use ctxsync_mcp_model::ServerDetails;

/// One declared MCP server as the engine sees it now.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServerOutcome {
    /// The server's name, as declared in its config file.
    pub name: String,
    /// True while a connection (possibly a retained previous one) serves `tools`.
    pub connected: bool,
    /// The tools of the connection; empty for a failed server. Shared with the engine's
    /// report, never copied.
    pub tools: Arc<[McpTool]>,
    /// Why the server failed, already sanitized by the engine.
    pub error: Option<String>,
    /// A note on a connected server (e.g. tools from a retained previous connection).
    pub warning: Option<String>,
    /// What the connected server said about itself and how connecting went (the server's
    /// text, already bounded and redacted by the engine).
    pub details: Option<ServerDetails>,
    /// The server's `.mcp.json` entry asked (`alwaysLoad`) for its tools to stay loaded in
    /// every turn, even one that defers tools; the entry the file holds now, also while a
    /// retained previous connection serves `tools`.
    pub always_load: bool,
}

/// A config file's structural or semantic diagnostics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConfigOutcome {
    /// The file; a relative path is taken relative to the workspace directory.
    pub path: PathBuf,
    /// The file (or some entry of it) was rejected.
    pub error: Option<String>,
    /// Something the user should know that rejected nothing (e.g. an ignored duplicate).
    pub warning: Option<String>,
}

/// The engine's report stream ended for good (the engine was dropped).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the discovery report source was closed")]
pub struct SourceClosed;

/// A future returned by [`ReportSource::changed`].
pub type ChangedFuture<'a> = Pin<Box<dyn Future<Output = Result<(), SourceClosed>> + Send + 'a>>;

/// Where the publisher reads discovery reports from.
///
/// The publisher calls [`sample`](Self::sample) exactly once per resolve, before walking
/// the file system, so the phase, servers and config outcomes of one snapshot describe one
/// engine state; between resolves it awaits [`changed`](Self::changed).
pub trait ReportSource: Send + 'static {
    /// The current report; marks it seen. Must never block on I/O.
    fn sample(&mut self) -> Arc<DiscoveryReport>;

    /// Completes when a report newer than the last sampled one exists (at once if one
    /// already does), or with [`SourceClosed`] when no new report will ever come.
    fn changed(&mut self) -> ChangedFuture<'_>;
}

/// The simplest source: the receiving half of a `watch` channel the engine adapter sends
/// each new report into.
impl ReportSource for watch::Receiver<Arc<DiscoveryReport>> {
    fn sample(&mut self) -> Arc<DiscoveryReport> {
        self.borrow_and_update().clone()
    }

    fn changed(&mut self) -> ChangedFuture<'_> {
        Box::pin(async move {
            watch::Receiver::changed(self)
                .await
                .map_err(|_| SourceClosed)
        })
    }
}
