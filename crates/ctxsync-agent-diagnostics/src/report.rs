//! The discovery report: phase, per-server outcomes and per-config-file outcomes.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

pub(crate) use crate::config::ConfigOutcome;

/// Whether the initial discovery has finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// The initial reload has not yet reached a terminal result for every declared server.
    Pending,
    /// It has; this never changes back for the life of the engine.
    Complete,
}

/// Milliseconds spent in each step of one successful connect.
pub use ctxsync_mcp_model::McpConnectTimings as ConnectTimings;
/// One icon of a tool: a URL or a `data:` URI.
pub use ctxsync_mcp_model::McpIcon as ToolIcon;
/// One tool as the server described it. Everything but the name is the server's word and
/// untrusted; its own secrets are redacted from all of it. The report prints its meta as
/// MCP spells it, `_meta`.
pub use ctxsync_mcp_model::McpTool as ToolInfo;
/// A tool's behaviour hints as its server states them.
pub use ctxsync_mcp_model::McpToolAnnotations as ToolAnnotations;
pub use ctxsync_mcp_model::{PendingServer, ServerDetails};

/// The outcome for one declared server that has reached a result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerReport {
    /// The server's name.
    pub name: String,
    /// Whether tools come from a live connection (possibly retained after a failed reconnect).
    pub connected: bool,
    /// The tools (at most 1000); empty for a failed server or one with no tools. Shared
    /// with the connection and with every later report that still lists them.
    #[serde(with = "ctxsync_mcp_model::mcp_spelling")]
    pub tools: Arc<[ToolInfo]>,
    /// Sanitized, bounded failure diagnostic (only when not connected).
    pub error: Option<String>,
    /// Sanitized, bounded warning on a connected server.
    pub warning: Option<String>,
    /// What the connected server said about itself (absent for a failed server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<ServerDetails>,
    /// The server's config entry asked (`"alwaysLoad": true`) for its tools to stay loaded
    /// in every turn, even one that defers tools behind a search tool. It is the entry the
    /// config file holds now, also while a retained previous connection serves the tools.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub always_load: bool,
}

impl ServerReport {
    /// The Agent Plugins package that declared the server, for a `<plugin>/<server>` name
    /// (only plugin servers have a `/`).
    pub fn plugin(&self) -> Option<&str> {
        self.name.split_once('/').map(|(plugin, _)| plugin)
    }
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
    /// While the phase is pending: the servers the initial discovery still waits for, sorted
    /// by name. Empty once complete.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<PendingServer>,
}

impl Report {
    pub(crate) fn initial() -> Self {
        Self {
            phase: Phase::Pending,
            servers: Vec::new(),
            config_outcomes: Vec::new(),
            pending: Vec::new(),
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

/// Golden vector: the report's JSON (what `discover --json` prints) with every tool and
/// server field set, so a change in the types behind it cannot change its form.
#[cfg(test)]
mod golden {
    use std::time::{Duration, SystemTime};

    use serde_json::json;

    use super::*;

    fn report() -> Report {
        Report {
            phase: Phase::Pending,
            servers: vec![ServerReport {
                name: "fs".into(),
                connected: true,
                tools: vec![
                    ToolInfo {
                        name: "read".into(),
                        description: "Reads a file.".into(),
                        input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
                        title: "Read".into(),
                        annotations: Some(ToolAnnotations {
                            title: "Read file".into(),
                            read_only_hint: Some(true),
                            destructive_hint: Some(false),
                            idempotent_hint: None,
                            open_world_hint: Some(false),
                        }),
                        output_schema: Some(json!({"type": "object"})),
                        icons: vec![ToolIcon {
                            src: "data:image/png;base64,AAAA".into(),
                            mime_type: "image/png".into(),
                            sizes: vec!["48x48".into()],
                            theme: "dark".into(),
                        }],
                        meta: Some(json!({"ui": {"resourceUri": "ui://read"}})),
                    },
                    ToolInfo {
                        name: "ping".into(),
                        input_schema: json!({}),
                        ..Default::default()
                    },
                ]
                .into(),
                error: None,
                warning: Some("kept".into()),
                details: Some(ServerDetails {
                    protocol_version: "2025-11-25".into(),
                    name: "fs-server".into(),
                    version: "1.2.3".into(),
                    title: Some("Files".into()),
                    description: None,
                    instructions: Some("Read first.".into()),
                    timings: ConnectTimings {
                        start_ms: Some(12),
                        handshake_ms: 34,
                        tools_ms: 56,
                    },
                }),
                always_load: true,
            }],
            config_outcomes: vec![ConfigOutcome {
                path: "/w/.mcp.json".into(),
                error: None,
                warning: Some("duplicate".into()),
            }],
            pending: vec![PendingServer {
                name: "slow".into(),
                since: SystemTime::UNIX_EPOCH + Duration::from_millis(1_500),
            }],
        }
    }

    const JSON: &str = r#"{"phase":"pending","servers":[{"name":"fs","connected":true,"tools":[{"name":"read","description":"Reads a file.","input_schema":{"properties":{"path":{"type":"string"}},"type":"object"},"title":"Read","annotations":{"title":"Read file","read_only_hint":true,"destructive_hint":false,"open_world_hint":false},"output_schema":{"type":"object"},"icons":[{"src":"data:image/png;base64,AAAA","mime_type":"image/png","sizes":["48x48"],"theme":"dark"}],"_meta":{"ui":{"resourceUri":"ui://read"}}},{"name":"ping","description":"","input_schema":{}}],"error":null,"warning":"kept","details":{"protocol_version":"2025-11-25","name":"fs-server","version":"1.2.3","title":"Files","instructions":"Read first.","timings":{"start_ms":12,"handshake_ms":34,"tools_ms":56}},"always_load":true}],"config_outcomes":[{"path":"/w/.mcp.json","error":null,"warning":"duplicate"}],"pending":[{"name":"slow","since":{"secs_since_epoch":1,"nanos_since_epoch":500000000}}]}"#;

    #[test]
    fn the_report_keeps_its_json_form() {
        let report = report();
        assert_eq!(serde_json::to_string(&report).unwrap(), JSON);
        assert_eq!(serde_json::from_str::<Report>(JSON).unwrap(), report);
    }
}
