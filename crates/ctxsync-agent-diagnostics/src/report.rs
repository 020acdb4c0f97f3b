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
    /// What the connected server said about itself (absent for a failed server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<ServerDetails>,
}

/// What a connected server said about itself, and how long connecting took. Its text is the
/// server's, untrusted: bounded, with the server's own secrets redacted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerDetails {
    /// The negotiated MCP revision, e.g. `2026-07-28` (through `server/discover`) or
    /// `2025-11-25` (through `initialize`).
    pub protocol_version: String,
    /// The implementation's name (at most 256 bytes; empty when it gave none).
    pub name: String,
    /// Its version (at most 256 bytes).
    pub version: String,
    /// Its display title (at most 256 bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Its description (at most 1 KiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Its instructions for the model (at most 8 KiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// How long each step of the connect took.
    pub timings: ConnectTimings,
}

/// Milliseconds spent in each step of one successful connect.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectTimings {
    /// Starting the process (stdio); absent for HTTP, whose connect is in the handshake.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_ms: Option<u64>,
    /// The lifecycle handshake (`server/discover` or `initialize`, with any fallback).
    pub handshake_ms: u64,
    /// The first complete tool list.
    pub tools_ms: u64,
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
