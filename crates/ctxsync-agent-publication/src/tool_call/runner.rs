//! The seam between the call wing and whatever runs a call: the agent's binary wires the
//! MCP engine's tool caller to it, tests a scripted runner.

use std::future::Future;

use ctxsync_mcp_model::{CallEnd, CallProgress, CallSpec};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// What runs a call: the MCP engine's `ToolCaller` in the agent, a scripted runner in
/// tests.
pub trait CallRunner: Clone + Send + Sync + 'static {
    /// Whether `server` is connected and currently lists `tool`.
    fn lists(&self, server: &str, tool: &str) -> bool;

    /// Runs `spec` to its end (which is never `running` or `unknown`), honouring its
    /// timeout and `cancel`, passing progress to `progress`.
    fn call(
        &self,
        spec: CallSpec,
        progress: mpsc::Sender<CallProgress>,
        cancel: CancellationToken,
    ) -> impl Future<Output = CallEnd> + Send;
}
