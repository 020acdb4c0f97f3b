//! The discovery report: phase, per-server outcomes and per-config-file outcomes.

use serde::{Deserialize, Serialize};

pub use crate::config::ConfigOutcome;

/// Whether the initial discovery has finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// The initial reload has not yet reached a terminal result for every declared server.
    Pending,
    /// It has; this never changes back for the life of the engine.
    Complete,
}

/// One tool as the server described it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolInfo {
    /// Tool name as offered by the server.
    pub name: String,
    /// Description (empty when the server gave none).
    pub description: String,
    /// JSON schema of the tool's input.
    pub input_schema: serde_json::Value,
}

/// The outcome for one declared server that has reached a result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerReport {
    /// The server's name.
    pub name: String,
    /// Whether tools come from a live connection (possibly retained after a failed reconnect).
    pub connected: bool,
    /// The tools (at most 1000); empty for a failed server or one with no tools.
    pub tools: Vec<ToolInfo>,
    /// Sanitized, bounded failure diagnostic (only when not connected).
    pub error: Option<String>,
    /// Sanitized, bounded warning on a connected server.
    pub warning: Option<String>,
}

/// Everything the engine knows, as one immutable value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Initial discovery completeness.
    pub phase: Phase,
    /// Servers with a result, sorted by name. A server still connecting for the first time is
    /// absent (see [`Progress`]).
    pub servers: Vec<ServerReport>,
    /// Config files with errors or warnings, in configuration order.
    pub config_outcomes: Vec<ConfigOutcome>,
}

impl Report {
    pub(crate) fn initial() -> Self {
        Self {
            phase: Phase::Pending,
            servers: Vec::new(),
            config_outcomes: Vec::new(),
        }
    }

    /// The server named `name`, if it has a result.
    pub fn server(&self, name: &str) -> Option<&ServerReport> {
        self.servers.iter().find(|server| server.name == name)
    }
}

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
