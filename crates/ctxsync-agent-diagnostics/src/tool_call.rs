//! Runs a tool call on a connected MCP server (issue 36): the one place the agent's
//! engine calls tools. It asks for progress, honours the call's deadline and its
//! cancellation (sending `notifications/cancelled`), caps the whole result and passes
//! every text and JSON value through the server's sanitizer before it leaves.
//!
//! Must never: change discovery (a call touches no report, phase or outcome), let a
//! server's request to the client (sampling, elicitation, roots, input) hang a call, or
//! let a result past the cap reach the caller.
//!
//! STUB: the signatures are the contract with the agent's call wing; the bodies are
//! being written.

use std::time::Duration;

use ctxsync_mcp_model::{CallEnd, CallProgress};
use serde_json::{Map, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// The default cap of a call's whole result, `structuredContent` included.
pub const DEFAULT_MAX_RESULT_BYTES: usize = 256 * 1024;

/// One call to run.
#[derive(Clone, Debug, PartialEq)]
pub struct CallSpec {
    /// The server's name as the engine reports it.
    pub server: String,
    /// The tool's own name on that server.
    pub tool: String,
    /// The call's arguments.
    pub arguments: Map<String, Value>,
    /// The call's deadline, from now.
    pub timeout: Duration,
    /// The cap of the whole result in bytes (text cut on a character boundary,
    /// `structuredContent` dropped when it does not fit, a binary block over it replaced
    /// by a placeholder naming its type and size).
    pub max_result_bytes: usize,
}

/// Calls tools on the engine's connected servers. Cheap to clone; lives as long as any
/// clone, but calls only servers the engine holds connected.
#[derive(Clone, Debug, Default)]
pub struct ToolCaller {}

impl ToolCaller {
    /// Whether `server` is connected and its current listing has `tool`.
    pub fn lists(&self, server: &str, tool: &str) -> bool {
        let _ = (server, tool);
        todo!("issue 36: tool calls in the engine")
    }

    /// Runs `spec`: `refused`/`tool_gone` when the server is not connected or does not
    /// list the tool, `timed_out` or `canceled` (after `notifications/cancelled`) when
    /// the deadline passes or `cancel` fires, `error` for a JSON-RPC error or a
    /// connection that died, else `complete` with the capped, sanitized result. Each
    /// `notifications/progress` the server sends is passed to `progress` (sanitized;
    /// dropped when the receiver lags).
    pub async fn call(
        &self,
        spec: CallSpec,
        progress: mpsc::Sender<CallProgress>,
        cancel: CancellationToken,
    ) -> CallEnd {
        let _ = (spec, progress, cancel);
        todo!("issue 36: tool calls in the engine")
    }
}
