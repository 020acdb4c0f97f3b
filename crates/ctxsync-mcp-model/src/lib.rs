//! The MCP records both wings of ctxsync share (layer 0).
//!
//! Owns: one declaration of an MCP tool as a server describes it ([`McpTool`], with its
//! [`McpToolAnnotations`] and [`McpIcon`]s), what a connected server said about itself
//! ([`ServerDetails`], and [`McpServerInfo`] as a snapshot stores it) and how long
//! connecting took ([`McpConnectTimings`]); the engine's report as one record ([`Report`]:
//! its [`ReportPhase`], each [`ServerReport`], each [`ConfigFileOutcome`] and each
//! [`PendingServer`]); and a tool call as both wings see it: the call the engine is asked
//! to run ([`CallSpec`]) and its envelope ([`CallStatus`], [`CallReason`], [`CallEnd`],
//! [`CallProgress`], [`model_text`]); and a person's sign-in to an HTTP server as both
//! wings see it ([`SignInStart`], [`SignInCredential`]). The agent's MCP engine produces
//! these records, its publisher and `discover --json` read them as they are, the protocol
//! re-exports the tool and server records beside its wire conversions, and the control
//! plane reads them back from storage, so each is written down once.
//!
//! Must never: depend on a runtime, a wire format or a database (no tokio, rmcp, prost,
//! tonic, diesel or axum); validate, bound or redact (the engine redacts, the protocol
//! bounds); change a serialized form, since stored rows, the HTTP API and
//! `discover --json` all print these records.
//!
//! Two spellings of a tool's `_meta` exist: stored rows and the HTTP API say `meta` (the
//! `Serialize` of [`McpTool`]), while the engine's report says `_meta` as MCP does
//! ([`mcp_spelling`]). Both read either.
//!
//! # Example
//!
//! ```
//! use ctxsync_mcp_model::{McpTool, McpToolAnnotations};
//! use serde_json::json;
//!
//! let tool = McpTool {
//!     name: "read".into(),
//!     input_schema: json!({"type": "object"}),
//!     annotations: Some(McpToolAnnotations {
//!         read_only_hint: Some(true),
//!         ..Default::default()
//!     }),
//!     meta: Some(json!({"ui": {}})),
//!     ..Default::default()
//! };
//! let stored = serde_json::to_string(&tool).unwrap();
//! assert_eq!(
//!     stored,
//!     r#"{"name":"read","description":"","input_schema":{"type":"object"},"annotations":{"read_only_hint":true},"meta":{"ui":{}}}"#
//! );
//! assert_eq!(serde_json::from_str::<McpTool>(&stored).unwrap(), tool);
//!
//! // The engine's report spells it as MCP does.
//! let reported = serde_json::to_value(ctxsync_mcp_model::McpSpelling(&tool)).unwrap();
//! assert_eq!(reported["_meta"], json!({"ui": {}}));
//! ```

#![deny(missing_docs)]

mod report;
mod sign_in;
mod tool;
mod tool_call;

pub use report::{ConfigFileOutcome, PendingServer, Report, ReportPhase, ServerReport};
pub use sign_in::{SignInCredential, SignInStart};
pub use tool::{McpIcon, McpSpelling, McpTool, McpToolAnnotations, mcp_spelling};
pub use tool_call::{
    CallEnd, CallError, CallProgress, CallReason, CallSpec, CallStatus, cut_text, model_text,
};

use serde::{Deserialize, Serialize};

/// A server's implementation info; empty strings where it gave none.
///
/// Its wire form is protocol's generated `v1::McpServerInfo`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(
    feature = "openapi",
    schema(description = "A server's implementation info; empty strings where it gave none.")
)]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct McpServerInfo {
    /// The implementation's name.
    pub name: String,
    /// The implementation's version string.
    pub version: String,
    /// A display name.
    pub title: String,
    /// What the server says it does.
    pub description: String,
}

/// Milliseconds spent in each step of a server's connect.
///
/// Its wire form is protocol's generated `v1::McpConnectTimings`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(
    feature = "openapi",
    schema(description = "Milliseconds spent in each step of a server's connect.")
)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpConnectTimings {
    /// Starting the process (stdio); `None` for HTTP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_ms: Option<u64>,
    /// The lifecycle handshake (`server/discover` or `initialize`).
    #[serde(default)]
    pub handshake_ms: u64,
    /// The first complete tool list.
    #[serde(default)]
    pub tools_ms: u64,
}

/// What a connected server said about itself, and how long connecting took. Its text is the
/// server's, untrusted: bounded, with the server's own secrets redacted by the engine.
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
    pub timings: McpConnectTimings,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_records_keep_their_serialized_forms() {
        let details = ServerDetails {
            protocol_version: "2025-11-25".into(),
            name: "srv".into(),
            version: "1.0".into(),
            title: Some("Server".into()),
            description: None,
            instructions: Some("Use it.".into()),
            timings: McpConnectTimings {
                start_ms: None,
                handshake_ms: 3,
                tools_ms: 4,
            },
        };
        assert_eq!(
            serde_json::to_string(&details).unwrap(),
            r#"{"protocol_version":"2025-11-25","name":"srv","version":"1.0","title":"Server","instructions":"Use it.","timings":{"handshake_ms":3,"tools_ms":4}}"#
        );
        let info = McpServerInfo {
            name: details.name,
            version: details.version,
            title: details.title.unwrap_or_default(),
            description: details.description.unwrap_or_default(),
        };
        assert_eq!(
            serde_json::to_string(&info).unwrap(),
            r#"{"name":"srv","version":"1.0","title":"Server","description":""}"#
        );
        // Stored before a field existed: defaults.
        let info: McpServerInfo = serde_json::from_str(r#"{"name":"srv"}"#).unwrap();
        assert_eq!(info.version, "");
        let timings: McpConnectTimings = serde_json::from_str("{}").unwrap();
        assert_eq!(timings, McpConnectTimings::default());
    }
}
