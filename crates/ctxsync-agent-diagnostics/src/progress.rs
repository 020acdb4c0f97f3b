//! Live progress of the engine's current reload, beside its report (the report itself is
//! `ctxsync_mcp_model::Report`, which the engine produces and others read).

use serde::{Deserialize, Serialize};

/// Live progress of the current reload, for "Starting MCP servers (k/n): name".
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    /// Connect attempts the current (or last) reload waits for.
    pub total: usize,
    /// How many of them have a result.
    pub finished: usize,
    /// Servers still connecting, sorted by name.
    pub connecting: Vec<String>,
}
