//! The MCP engine's report as one record: how far the initial discovery has got
//! ([`ReportPhase`]), each declared server's outcome ([`ServerReport`]), each config file's
//! ([`ConfigFileOutcome`]) and the servers still connecting ([`PendingServer`]), gathered in
//! one immutable [`Report`]. The agent's engine produces it, `discover --json` prints it and
//! the agent's publisher reads it; none of them keeps a copy of these types.

use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::{McpTool, ServerDetails};

/// Whether the engine's initial discovery has finished. There is no "unspecified" here: a
/// process without MCP discovery has no report at all (the protocol's `DiscoveryPhase` and
/// the chat view's `Phase` add that case).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReportPhase {
    /// The initial reload has not yet reached a terminal result for every declared server.
    #[default]
    Pending,
    /// It has (or no server was declared); this never changes back for the life of the
    /// engine.
    Complete,
}

/// The outcome for one declared server that has reached a result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerReport {
    /// The server's name, as declared in its config file (`<plugin>/<server>` for a plugin's).
    pub name: String,
    /// Whether tools come from a live connection (possibly retained after a failed reconnect).
    pub connected: bool,
    /// The tools (at most 1000); empty for a failed server or one with no tools. Shared
    /// with the connection and with every later report that still lists them. Everything
    /// but a tool's name is the server's word and untrusted; its own secrets are redacted
    /// from all of it. The report prints a tool's meta as MCP spells it, `_meta`.
    #[serde(with = "crate::mcp_spelling")]
    pub tools: Arc<[McpTool]>,
    /// Sanitized, bounded failure diagnostic (only when not connected).
    pub error: Option<String>,
    /// Sanitized, bounded warning on a connected server (e.g. tools from a retained
    /// previous connection).
    pub warning: Option<String>,
    /// What the connected server said about itself and how connecting went (absent for a
    /// failed server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<ServerDetails>,
    /// The server's config entry asked (`"alwaysLoad": true`) for its tools to stay loaded
    /// in every turn, even one that defers tools behind a search tool. It is the entry the
    /// config file holds now, also while a retained previous connection serves the tools.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub always_load: bool,
    /// The server refused the agent for want of a sign-in (HTTP 401, or 403 with
    /// `insufficient_scope`): a person has to sign in before it has tools. Only on a server
    /// that is not connected; `error` says the same in words.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub needs_authorization: bool,
}

impl ServerReport {
    /// The Agent Plugins package that declared the server, for a `<plugin>/<server>` name
    /// (only plugin servers have a `/`).
    pub fn plugin(&self) -> Option<&str> {
        self.name.split_once('/').map(|(plugin, _)| plugin)
    }
}

/// What went wrong (or deserves a warning) in one config file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigFileOutcome {
    /// The file; a relative path is taken relative to the workspace directory.
    pub path: PathBuf,
    /// A structural error (the whole file was rejected) or the list of rejected entries.
    pub error: Option<String>,
    /// Something that did not reject anything, e.g. an ignored duplicate server name.
    pub warning: Option<String>,
}

/// A server of the initial discovery that has no result yet, with when its connect
/// started. A snapshot carries protocol's `ctxsync_protocol::SnapshotPendingServer`
/// instead (how long it had been connecting), on the wire the generated
/// `v1::push_context_state_request::PendingServer`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingServer {
    /// The server's name, as declared in its config file.
    pub name: String,
    /// When its connect attempt started (wall clock, for "connecting for 4 s"); a snapshot
    /// says how long ago that was when it is sent.
    pub since: std::time::SystemTime,
}

/// Everything the engine knows, as one immutable value. The default is the engine's first
/// report: pending, nothing known yet.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Initial discovery completeness.
    pub phase: ReportPhase,
    /// Servers with a result, sorted by name. A server still connecting for the first time
    /// is absent (it is in `pending` while the phase is pending).
    pub servers: Vec<ServerReport>,
    /// Config files with errors or warnings, in configuration order.
    pub config_outcomes: Vec<ConfigFileOutcome>,
    /// While the phase is pending: the servers the initial discovery still waits for, sorted
    /// by name. Empty once complete.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<PendingServer>,
}

impl Report {
    /// The server named `name`, if it has a result.
    pub fn server(&self, name: &str) -> Option<&ServerReport> {
        self.servers.iter().find(|server| server.name == name)
    }
}

/// Golden vector: the report's JSON (what `discover --json` prints) with every tool and
/// server field set, so a change in the types behind it cannot change its form.
#[cfg(test)]
mod golden {
    use std::time::{Duration, SystemTime};

    use serde_json::json;

    use super::*;
    use crate::{McpConnectTimings, McpIcon, McpToolAnnotations};

    fn report() -> Report {
        Report {
            phase: ReportPhase::Pending,
            servers: vec![ServerReport {
                name: "fs".into(),
                connected: true,
                tools: vec![
                    McpTool {
                        name: "read".into(),
                        description: "Reads a file.".into(),
                        input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
                        title: "Read".into(),
                        annotations: Some(McpToolAnnotations {
                            title: "Read file".into(),
                            read_only_hint: Some(true),
                            destructive_hint: Some(false),
                            idempotent_hint: None,
                            open_world_hint: Some(false),
                        }),
                        output_schema: Some(json!({"type": "object"})),
                        icons: vec![McpIcon {
                            src: "data:image/png;base64,AAAA".into(),
                            mime_type: "image/png".into(),
                            sizes: vec!["48x48".into()],
                            theme: "dark".into(),
                        }],
                        meta: Some(json!({"ui": {"resourceUri": "ui://read"}})),
                    },
                    McpTool {
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
                    timings: McpConnectTimings {
                        start_ms: Some(12),
                        handshake_ms: 34,
                        tools_ms: 56,
                    },
                }),
                always_load: true,
                needs_authorization: false,
            }, ServerReport {
                name: "gh".into(),
                connected: false,
                error: Some("answered 401".into()),
                needs_authorization: true,
                ..ServerReport::default()
            }],
            config_outcomes: vec![ConfigFileOutcome {
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

    const JSON: &str = r#"{"phase":"pending","servers":[{"name":"fs","connected":true,"tools":[{"name":"read","description":"Reads a file.","input_schema":{"properties":{"path":{"type":"string"}},"type":"object"},"title":"Read","annotations":{"title":"Read file","read_only_hint":true,"destructive_hint":false,"open_world_hint":false},"output_schema":{"type":"object"},"icons":[{"src":"data:image/png;base64,AAAA","mime_type":"image/png","sizes":["48x48"],"theme":"dark"}],"_meta":{"ui":{"resourceUri":"ui://read"}}},{"name":"ping","description":"","input_schema":{}}],"error":null,"warning":"kept","details":{"protocol_version":"2025-11-25","name":"fs-server","version":"1.2.3","title":"Files","instructions":"Read first.","timings":{"start_ms":12,"handshake_ms":34,"tools_ms":56}},"always_load":true},{"name":"gh","connected":false,"tools":[],"error":"answered 401","warning":null,"needs_authorization":true}],"config_outcomes":[{"path":"/w/.mcp.json","error":null,"warning":"duplicate"}],"pending":[{"name":"slow","since":{"secs_since_epoch":1,"nanos_since_epoch":500000000}}]}"#;

    #[test]
    fn the_report_keeps_its_json_form() {
        let report = report();
        assert_eq!(serde_json::to_string(&report).unwrap(), JSON);
        assert_eq!(serde_json::from_str::<Report>(JSON).unwrap(), report);
    }

    #[test]
    fn the_first_report_is_pending_and_empty() {
        let first = Report::default();
        assert_eq!(first.phase, ReportPhase::Pending);
        assert_eq!(
            serde_json::to_string(&first).unwrap(),
            r#"{"phase":"pending","servers":[],"config_outcomes":[]}"#
        );
    }

    #[test]
    fn servers_are_found_by_name_and_plugin_servers_name_their_plugin() {
        let report = report();
        assert_eq!(report.server("fs").map(|s| s.tools.len()), Some(2));
        assert!(report.server("slow").is_none());
        let plugin = ServerReport {
            name: "tools/search".into(),
            ..Default::default()
        };
        assert_eq!(plugin.plugin(), Some("tools"));
        assert_eq!(report.servers[0].plugin(), None);
    }
}
