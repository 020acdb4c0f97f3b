//! A tool call as both wings see it: what the agent's engine is asked to run
//! ([`CallSpec`]), how it ended ([`CallStatus`],
//! [`CallReason`], [`CallError`]), the progress its server last reported
//! ([`CallProgress`]) and the text a model is handed ([`model_text`]).
//!
//! The result itself stays JSON (`serde_json::Value` holding MCP's `CallToolResult`), so
//! MCP's content model is never mirrored here.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One call for the agent's MCP engine to run: what the publisher's call wing hands the
/// engine's caller.
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

/// Where a call stands. Every status but `running` is an end, and the first end recorded
/// wins.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallStatus {
    /// Stored and sent (or about to be); no end yet.
    Running,
    /// The MCP server answered a `CallToolResult`; its `isError` says whether the tool
    /// failed.
    Complete,
    /// A JSON-RPC error, a connection that died during the call, a result over the
    /// transport's frame limit, or a result the agent cannot finish.
    Error,
    /// Never reached the MCP server; [`CallReason`] says why.
    Refused,
    /// The deadline passed; `notifications/cancelled` was sent to the MCP server.
    TimedOut,
    /// Cancelled by the caller; `notifications/cancelled` was sent to the MCP server.
    Canceled,
    /// Delivered, then the agent process or its stream ended: it may or may not have run.
    Unknown,
}

impl CallStatus {
    /// Every status, in the order the API documents them.
    pub const ALL: [CallStatus; 7] = [
        Self::Running,
        Self::Complete,
        Self::Error,
        Self::Refused,
        Self::TimedOut,
        Self::Canceled,
        Self::Unknown,
    ];

    /// The stored and serialized label (`"timed_out"`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Complete => "complete",
            Self::Error => "error",
            Self::Refused => "refused",
            Self::TimedOut => "timed_out",
            Self::Canceled => "canceled",
            Self::Unknown => "unknown",
        }
    }

    /// Parses [`Self::as_str`]'s output; `None` for anything else.
    pub fn parse(label: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == label)
    }

    /// Whether this is an end (anything but `running`).
    pub fn is_end(self) -> bool {
        self != Self::Running
    }
}

/// Why a call was refused, or why its end is unknown.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallReason {
    /// The turn's tools came from an agent process that is no longer the one running.
    StaleRun,
    /// The turn does not carry a tool of that name.
    NotInTurn,
    /// The agent's server no longer lists the tool.
    ToolGone,
    /// The agent runs with `--no-tool-calls`, or its `--allow-tool-calls` does not allow
    /// the call.
    Denied,
    /// The agent declared calls but no replica delivered the call on its stream within
    /// the grace (a retry may run).
    AgentUnreachable,
    /// The agent never declared that it takes calls (an older agent).
    AgentUnsupported,
    /// The agent already runs and queues as many calls as it takes (a retry may run).
    Busy,
    /// `unknown`: the agent process that held the call is gone (a new run started).
    AgentRestarted,
    /// `unknown`: the call stream that carried the call ended.
    StreamLost,
}

impl CallReason {
    /// Every reason.
    pub const ALL: [CallReason; 9] = [
        Self::StaleRun,
        Self::NotInTurn,
        Self::ToolGone,
        Self::Denied,
        Self::AgentUnreachable,
        Self::AgentUnsupported,
        Self::Busy,
        Self::AgentRestarted,
        Self::StreamLost,
    ];

    /// The stored and serialized label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::StaleRun => "stale_run",
            Self::NotInTurn => "not_in_turn",
            Self::ToolGone => "tool_gone",
            Self::Denied => "denied",
            Self::AgentUnreachable => "agent_unreachable",
            Self::AgentUnsupported => "agent_unsupported",
            Self::Busy => "busy",
            Self::AgentRestarted => "agent_restarted",
            Self::StreamLost => "stream_lost",
        }
    }

    /// Parses [`Self::as_str`]'s output; `None` for anything else.
    pub fn parse(label: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.as_str() == label)
    }

    /// Refusals of a call that never ran, so a retry with the same call id may run.
    pub fn is_retryable(self) -> bool {
        matches!(self, Self::Busy | Self::AgentUnreachable)
    }
}

/// A call's `error` end: a JSON-RPC error code (0 when the connection failed or the
/// result could not be finished) and a sanitized message.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallError {
    /// The JSON-RPC error code, or 0.
    pub code: i64,
    /// What went wrong, sanitized of the server's secrets.
    pub message: String,
}

/// The latest progress a call's MCP server reported (`notifications/progress`).
///
/// The tool-call stream carries it as protocol's generated `v1::CallProgress`, which adds
/// the call's id; both sides convert at the edge.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(
    feature = "openapi",
    schema(
        description = "The latest progress a call's MCP server reported (`notifications/progress`)."
    )
)]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CallProgress {
    /// How far along; grows with each report.
    pub progress: f64,
    /// The total, when the server knows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<f64>,
    /// A sanitized message, when the server gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// How a call ended, as the agent reports it and the store keeps it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CallEnd {
    /// Never [`CallStatus::Running`].
    pub status: CallStatus,
    /// For `refused` and `unknown`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<CallReason>,
    /// For `error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<CallError>,
    /// For `complete`: MCP's `CallToolResult` (`content`, `structuredContent`, `isError`),
    /// redacted and capped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// Whether the result was cut to fit the cap.
    #[serde(default)]
    pub truncated: bool,
}

impl CallEnd {
    /// An end with nothing but its status (`canceled`, `timed_out`).
    pub fn bare(status: CallStatus) -> Self {
        Self {
            status,
            reason: None,
            error: None,
            result: None,
            truncated: false,
        }
    }

    /// A refusal (or an `unknown` end) for `reason`.
    pub fn with_reason(status: CallStatus, reason: CallReason) -> Self {
        Self {
            status,
            reason: Some(reason),
            error: None,
            result: None,
            truncated: false,
        }
    }

    /// An `error` end.
    pub fn error(code: i64, message: impl Into<String>) -> Self {
        Self {
            status: CallStatus::Error,
            reason: None,
            error: Some(CallError {
                code,
                message: message.into(),
            }),
            result: None,
            truncated: false,
        }
    }

    /// A `complete` end with `result`.
    pub fn complete(result: Value, truncated: bool) -> Self {
        Self {
            status: CallStatus::Complete,
            reason: None,
            error: None,
            result: Some(result),
            truncated,
        }
    }
}

/// What to hand the model for a call that stands at `status`: a `complete` result's text
/// blocks (a non-text block as a bracketed note, `structuredContent` as JSON when there
/// is no text), else one sentence naming the status, reason or error. At most
/// `max_bytes`, cut on a character boundary.
pub fn model_text(
    status: CallStatus,
    reason: Option<CallReason>,
    error: Option<&CallError>,
    result: Option<&Value>,
    max_bytes: usize,
) -> String {
    let text = match status {
        CallStatus::Complete => result.map(result_text).unwrap_or_default(),
        CallStatus::Running => "The tool call is still running.".to_owned(),
        CallStatus::Error => match error {
            Some(error) => format!("The tool call failed: {}", error.message),
            None => "The tool call failed.".to_owned(),
        },
        CallStatus::Refused => format!(
            "The tool call was refused ({}): {}",
            reason.map_or("refused", CallReason::as_str),
            refusal_text(reason)
        ),
        CallStatus::TimedOut => "The tool call timed out and was cancelled.".to_owned(),
        CallStatus::Canceled => "The tool call was cancelled.".to_owned(),
        CallStatus::Unknown => format!(
            "The tool call's outcome is unknown ({}): it may or may not have run.",
            reason.map_or("unknown", CallReason::as_str)
        ),
    };
    cut_text(text, max_bytes)
}

fn refusal_text(reason: Option<CallReason>) -> &'static str {
    match reason {
        Some(CallReason::StaleRun) => {
            "the workspace agent restarted since this turn listed its tools."
        }
        Some(CallReason::NotInTurn) => "this turn does not offer a tool of that name.",
        Some(CallReason::ToolGone) => "the MCP server no longer offers this tool.",
        // Not "no tool calls": under `--allow-tool-calls` others of the turn may still run.
        Some(CallReason::Denied) => "the workspace agent does not allow this tool call.",
        Some(CallReason::AgentUnreachable) => "the workspace agent is not connected.",
        Some(CallReason::AgentUnsupported) => "the workspace agent is too old to run tool calls.",
        Some(CallReason::Busy) => "the workspace agent is running too many calls; retry.",
        _ => "the call did not run.",
    }
}

/// A `CallToolResult`'s text for the model.
fn result_text(result: &Value) -> String {
    let mut parts: Vec<String> = Vec::new();
    if let Some(content) = result.get("content").and_then(Value::as_array) {
        for block in content {
            match block.get("type").and_then(Value::as_str) {
                Some("text") => {
                    if let Some(text) = block.get("text").and_then(Value::as_str) {
                        parts.push(text.to_owned());
                    }
                }
                Some(kind) => {
                    let mime = block
                        .get("mimeType")
                        .and_then(Value::as_str)
                        .unwrap_or("unknown type");
                    parts.push(format!("[{kind} content: {mime}]"));
                }
                None => {}
            }
        }
    }
    if parts.is_empty()
        && let Some(structured) = result.get("structuredContent")
    {
        parts.push(structured.to_string());
    }
    let mut text = parts.join("\n");
    if result.get("isError").and_then(Value::as_bool) == Some(true) {
        text.insert_str(0, "The tool reported an error: ");
    }
    text
}

/// `text` cut to at most `max_bytes` on a character boundary.
pub fn cut_text(mut text: String, max_bytes: usize) -> String {
    if text.len() > max_bytes {
        let mut end = max_bytes;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn labels_round_trip() {
        for status in CallStatus::ALL {
            assert_eq!(CallStatus::parse(status.as_str()), Some(status));
            assert_eq!(
                serde_json::to_value(status).unwrap(),
                json!(status.as_str())
            );
        }
        for reason in CallReason::ALL {
            assert_eq!(CallReason::parse(reason.as_str()), Some(reason));
            assert_eq!(
                serde_json::to_value(reason).unwrap(),
                json!(reason.as_str())
            );
        }
        assert_eq!(CallStatus::parse("done"), None);
    }

    #[test]
    fn model_text_reads_text_blocks_and_notes_the_rest() {
        let result = json!({"content": [
            {"type": "text", "text": "a"},
            {"type": "image", "data": "AAAA", "mimeType": "image/png"},
            {"type": "text", "text": "b"}
        ], "isError": false});
        let text = model_text(CallStatus::Complete, None, None, Some(&result), 1000);
        assert_eq!(text, "a\n[image content: image/png]\nb");
        let structured = json!({"content": [], "structuredContent": {"n": 1}});
        assert_eq!(
            model_text(CallStatus::Complete, None, None, Some(&structured), 1000),
            r#"{"n":1}"#
        );
        let failed = json!({"content": [{"type": "text", "text": "no"}], "isError": true});
        assert_eq!(
            model_text(CallStatus::Complete, None, None, Some(&failed), 1000),
            "The tool reported an error: no"
        );
    }

    #[test]
    fn model_text_is_bounded_on_a_character_boundary() {
        let result = json!({"content": [{"type": "text", "text": "é".repeat(10)}]});
        let text = model_text(CallStatus::Complete, None, None, Some(&result), 5);
        assert_eq!(text, "éé");
        let refused = model_text(
            CallStatus::Refused,
            Some(CallReason::StaleRun),
            None,
            None,
            1000,
        );
        assert!(refused.contains("stale_run"), "{refused}");
    }
}
