//! A turn's tool calls as stored (issue 36): admitted against the turn's recorded origin,
//! never the current snapshot; stored before they are sent; arguments kept only until
//! the agent acknowledges delivery, then only their digest and size; the first end
//! recorded wins. Any replica reads and ends any call.
//!
//! STUB: the signatures are the contract between the store, the call channel and the
//! HTTP layer; the bodies are being written.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use ctxsync_mcp_model::{CallEnd, CallError, CallProgress, CallReason, CallStatus};
use ctxsync_protocol::RunId;
use serde_json::Value;

use crate::error::StoreError;
use crate::ids::{AgentId, ChatId, ToolCallId, TurnId};
use crate::store::Store;

/// Calls one turn may hold; one more is refused (`StoreError::LimitReached`).
pub const MAX_CALLS_PER_TURN: u64 = 256;
/// The name that runs ctxsync's own find_tools for the turn (server [`CTXSYNC_SERVER`]).
pub const FIND_TOOLS_NAME: &str = "find_tools";
/// The `server` of a find_tools call.
pub const CTXSYNC_SERVER: &str = "ctxsync";

/// Where a turn's tools came from: the agent and run whose snapshot the turn was built
/// from, and each model-facing name's server and own tool name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TurnOrigin {
    /// The agent the chat was bound to.
    pub agent_id: AgentId,
    /// The run of the snapshot the turn's tools came from.
    pub agent_run_id: RunId,
    /// Model-facing name → origin, for the tools the turn listed.
    pub tools: BTreeMap<String, ToolOrigin>,
}

/// One tool's origin: its server as the agent reported it, and its name there.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ToolOrigin {
    /// The MCP server's name.
    pub server: String,
    /// The tool's own name on that server.
    pub tool: String,
}

/// A call to admit.
#[derive(Clone, Debug, PartialEq)]
pub struct NewToolCall {
    /// The chat the turn belongs to.
    pub chat: ChatId,
    /// The turn the call belongs to.
    pub turn: TurnId,
    /// The caller's id, unique within the turn (1–128 of `[A-Za-z0-9_.:-]`, checked by
    /// the caller).
    pub call_id: String,
    /// The model-facing name called.
    pub name: String,
    /// The canonical arguments (`ctxsync_protocol::call::canonical_arguments`).
    pub arguments: String,
    /// The call's deadline in milliseconds.
    pub timeout_ms: u64,
}

/// A stored call.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolCallRecord {
    /// The server-assigned id.
    pub id: ToolCallId,
    /// The chat.
    pub chat_id: ChatId,
    /// The turn.
    pub turn_id: TurnId,
    /// The caller's id.
    pub call_id: String,
    /// The model-facing name.
    pub name: String,
    /// The server (`ctxsync` for find_tools; empty when the name resolved to nothing).
    pub server: String,
    /// The tool's own name on its server (empty when the name resolved to nothing).
    pub tool: String,
    /// The agent the call goes to (`None` when the turn recorded none).
    pub agent_id: Option<AgentId>,
    /// The run the turn's tools came from.
    pub agent_run_id: Option<RunId>,
    /// The canonical arguments, only until the agent acknowledged delivery.
    pub arguments: Option<String>,
    /// sha256 (lower-case hex) of the canonical arguments.
    pub arguments_digest: String,
    /// Length of the canonical arguments in bytes.
    pub arguments_size: u64,
    /// The call's deadline.
    pub timeout_ms: u64,
    /// Where it stands.
    pub status: CallStatus,
    /// For `refused` and `unknown`.
    pub reason: Option<CallReason>,
    /// For `error`.
    pub error: Option<CallError>,
    /// For `complete`: the `CallToolResult` JSON.
    pub result: Option<Value>,
    /// The result was cut to fit the agent's cap.
    pub truncated: bool,
    /// The latest progress reported.
    pub progress: Option<CallProgress>,
    /// The agent acknowledged delivery.
    pub delivered: bool,
    /// When it was stored.
    pub started_at: DateTime<Utc>,
    /// When its end was recorded.
    pub ended_at: Option<DateTime<Utc>>,
    /// How long it ran (the agent's figure for calls that reached it).
    pub duration_ms: Option<u64>,
}

/// What admitting a call did.
#[derive(Clone, Debug, PartialEq)]
pub enum CallAdmission {
    /// A new call, `running`: the caller sends it to the agent (or, for find_tools,
    /// answers it itself).
    Started(ToolCallRecord),
    /// A new call ended at once and recorded: `refused` with `not_in_turn`,
    /// `stale_run` (the turn's run is not the agent's current one) or
    /// `agent_unsupported` (the agent never declared calls).
    Refused(ToolCallRecord),
    /// The turn already holds this `call_id` with the same name and arguments.
    Existing(ToolCallRecord),
    /// The turn already holds this `call_id` with another name or other arguments.
    Conflict(ToolCallRecord),
}

impl Store {
    /// Admits a call in one transaction: `None` when the turn is not `chat`'s (or
    /// `chat` is unknown); a repeated `call_id` answers `Existing` or `Conflict`,
    /// a turn holding [`MAX_CALLS_PER_TURN`] refuses more (`LimitReached`), and the name
    /// resolves against the turn's recorded origin and activations.
    pub async fn admit_tool_call(
        &self,
        call: &NewToolCall,
    ) -> Result<Option<CallAdmission>, StoreError> {
        let _ = call;
        todo!("issue 36: store")
    }

    /// The call `call_id` of `turn` in `chat`; `None` when there is none.
    pub async fn get_tool_call(
        &self,
        chat: ChatId,
        turn: TurnId,
        call_id: &str,
    ) -> Result<Option<ToolCallRecord>, StoreError> {
        let _ = (chat, turn, call_id);
        todo!("issue 36: store")
    }

    /// The call with server-assigned `id`.
    pub async fn get_tool_call_by_id(
        &self,
        id: ToolCallId,
    ) -> Result<Option<ToolCallRecord>, StoreError> {
        let _ = id;
        todo!("issue 36: store")
    }

    /// The agent acknowledged delivery: the arguments are dropped, only their digest and
    /// size stay.
    pub async fn mark_tool_call_delivered(&self, id: ToolCallId) -> Result<(), StoreError> {
        let _ = id;
        todo!("issue 36: store")
    }

    /// Stores a running call's latest progress (a no-op once it ended).
    pub async fn record_tool_call_progress(
        &self,
        id: ToolCallId,
        progress: &CallProgress,
    ) -> Result<(), StoreError> {
        let _ = (id, progress);
        todo!("issue 36: store")
    }

    /// Records `end` unless the call already ended (the first end wins) and answers the
    /// call as stored. A retryable refusal (`busy`, `agent_unreachable`) is not recorded:
    /// the row is deleted, so a retry with the same `call_id` may run, and the answer is
    /// the call as it ended. `None` when there is no such call.
    pub async fn end_tool_call(
        &self,
        id: ToolCallId,
        end: &CallEnd,
        duration_ms: Option<u64>,
    ) -> Result<Option<ToolCallRecord>, StoreError> {
        let _ = (id, end, duration_ms);
        todo!("issue 36: store")
    }

    /// The running calls sent to `agent`, oldest first.
    pub async fn running_tool_calls(
        &self,
        agent: AgentId,
    ) -> Result<Vec<ToolCallRecord>, StoreError> {
        let _ = agent;
        todo!("issue 36: store")
    }

    /// Ends `end` every running call sent to `agent` whose run is not `keep_run` (all of
    /// them for `None`), and answers the calls it ended.
    pub async fn end_running_tool_calls(
        &self,
        agent: AgentId,
        keep_run: Option<&RunId>,
        end: &CallEnd,
    ) -> Result<Vec<ToolCallRecord>, StoreError> {
        let _ = (agent, keep_run, end);
        todo!("issue 36: store")
    }
}
