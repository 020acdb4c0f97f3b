//! A turn's tool calls as stored (issue 36): admitted against the turn's recorded origin,
//! never the current snapshot; stored before they are sent; arguments kept only until
//! the agent acknowledges delivery, then only their digest and size; the first end
//! recorded wins. Any replica reads and ends any call.
//!
//! Owns the `tool_calls` rows and the name → origin resolution of a call. Must never log
//! or print a call's arguments (they may carry the user's secrets: `Debug` shows their
//! size only), nor resolve a name against anything but the turn's recorded origin.

use std::collections::BTreeMap;

use std::fmt;

use chrono::{DateTime, Utc};
use ctxsync_mcp_model::{CallEnd, CallError, CallProgress, CallReason, CallStatus};
use ctxsync_protocol::RunId;
use diesel::prelude::*;
use diesel::result::{DatabaseErrorKind, Error as DieselError};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::agents::{RowLock, lock_agent};
use crate::db::{Tx, on_backend};
use crate::deployment_secrets::DigestKey;
use crate::error::StoreError;
use ctxsync_protocol::tool_call::ToolCallId;

use crate::ids::{AgentId, ChatId, ToolCallKey, TurnId};
use crate::model::{stored_u64, to_i64};
use crate::notify::{CallChange, ChangeEvent};
use crate::schema::{chat_turn_activations, chat_turns, tool_call_ends, tool_calls};
use crate::shared::notify_in_tx;
use crate::sql_types::{DbTime, JsonText};
use crate::store::Store;

/// Longest caller's `call_id`.
const MAX_CALLER_ID_BYTES: usize = 128;
/// Longest model-facing name a call may name (the channel's limit on names).
const MAX_CALL_NAME_BYTES: usize = ctxsync_protocol::tool_call::MAX_CALL_NAME_BYTES;

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

/// A call to admit. `Debug` shows the arguments' size, never their text.
#[derive(Clone, PartialEq)]
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
    /// The canonical arguments (`ctxsync_protocol::tool_call::CallArguments`' text).
    pub arguments: String,
    /// The call's deadline in milliseconds.
    pub timeout_ms: u64,
}

/// A stored call. `Debug` shows the arguments' size, never their text.
#[derive(Clone, PartialEq)]
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
    /// The agent the call goes to (`None` when the turn recorded none, and for
    /// find_tools, which the server answers itself).
    pub agent_id: Option<AgentId>,
    /// The run the turn's tools came from.
    pub agent_run_id: Option<RunId>,
    /// The canonical arguments, only until the agent acknowledged delivery.
    pub arguments: Option<String>,
    /// HMAC-SHA256 (lower-case hex) of the canonical arguments under the deployment's
    /// key: the same on every replica, and no way back to short arguments.
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

impl fmt::Debug for NewToolCall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NewToolCall")
            .field("chat", &self.chat)
            .field("turn", &self.turn)
            .field("call_id", &self.call_id)
            .field("name", &self.name)
            .field("arguments", &ByteCount(self.arguments.len()))
            .field("timeout_ms", &self.timeout_ms)
            .finish()
    }
}

impl fmt::Debug for ToolCallRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolCallRecord")
            .field("id", &self.id)
            .field("chat_id", &self.chat_id)
            .field("turn_id", &self.turn_id)
            .field("call_id", &self.call_id)
            .field("name", &self.name)
            .field("server", &self.server)
            .field("tool", &self.tool)
            .field("agent_id", &self.agent_id)
            .field("agent_run_id", &self.agent_run_id)
            .field(
                "arguments",
                &self.arguments.as_ref().map(|a| ByteCount(a.len())),
            )
            .field("arguments_digest", &self.arguments_digest)
            .field("arguments_size", &self.arguments_size)
            .field("timeout_ms", &self.timeout_ms)
            .field("status", &self.status)
            .field("reason", &self.reason)
            .field("error", &self.error)
            .field("result", &self.result)
            .field("truncated", &self.truncated)
            .field("progress", &self.progress)
            .field("delivered", &self.delivered)
            .field("started_at", &self.started_at)
            .field("ended_at", &self.ended_at)
            .field("duration_ms", &self.duration_ms)
            .finish()
    }
}

/// Prints `<N bytes>`: how arguments show in `Debug`.
struct ByteCount(usize);

impl fmt::Debug for ByteCount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<{} bytes>", self.0)
    }
}

/// `time` as both backends store it (PostgreSQL keeps microseconds), so a record
/// answered from memory equals the same record read back.
fn stored_precision(time: DbTime) -> DbTime {
    use chrono::SubsecRound;
    DbTime(time.0.trunc_subsecs(6))
}

/// The canonical arguments' digest under the deployment's key, lower-case hex: what a
/// repeated `call_id` is compared by and what the audit log keeps.
fn arguments_digest(key: &DigestKey, arguments: &str) -> String {
    key.hex_digest(arguments)
}

/// Loads the whole rows `query` (a `tool_calls` query without a select) finds.
macro_rules! load_calls {
    ($tx:expr, $query:expr, $method:ident) => {
        on_backend!($tx, |c| $query
            .select((
                $crate::tool_call::admission::HeadRow::as_select(),
                $crate::tool_call::admission::tail(),
            ))
            .$method::<(
                $crate::tool_call::admission::HeadRow,
                $crate::tool_call::admission::TailRow
            )>(c))
    };
}
pub(crate) use load_calls;

impl Store {
    /// Admits a call in one transaction: `None` when the turn is not `chat`'s (or
    /// `chat` is unknown); a repeated `call_id` answers `Existing` or `Conflict`,
    /// a turn holding [`MAX_CALLS_PER_TURN`] refuses more (`LimitReached`), and the name
    /// resolves against the turn's recorded origin and activations.
    /// [`StoreError::InvalidInput`] for a `call_id` or name out of bounds.
    pub async fn admit_tool_call(
        &self,
        call: &NewToolCall,
    ) -> Result<Option<CallAdmission>, StoreError> {
        if call.call_id.is_empty() || call.call_id.len() > MAX_CALLER_ID_BYTES {
            return Err(StoreError::InvalidInput(format!(
                "a call id must be 1..={MAX_CALLER_ID_BYTES} bytes"
            )));
        }
        if call.name.is_empty() || call.name.len() > MAX_CALL_NAME_BYTES {
            return Err(StoreError::InvalidInput(format!(
                "a tool name must be 1..={MAX_CALL_NAME_BYTES} bytes"
            )));
        }
        let prepared = PreparedCall {
            digest: arguments_digest(self.digest_key(), &call.arguments),
            size: to_i64("arguments size", call.arguments.len() as u64)?,
            timeout_ms: to_i64("timeout_ms", call.timeout_ms)?,
            call: call.clone(),
        };
        let admission = self
            .with_conn(move |conn, origin| {
                conn.write(|tx| {
                    let admission = admit(tx, &prepared, DbTime(Utc::now()))?;
                    if let Some(event) = admission.as_ref().and_then(admission_event) {
                        notify_in_tx(tx, origin, &event)?;
                    }
                    Ok(admission)
                })
            })
            .await?;
        if let Some(event) = admission.as_ref().and_then(admission_event) {
            self.deliver(&event);
        }
        Ok(admission)
    }

    /// The call `call_id` of `turn` in `chat`; `None` when there is none.
    pub async fn get_tool_call(
        &self,
        chat: ChatId,
        turn: TurnId,
        call_id: &str,
    ) -> Result<Option<ToolCallRecord>, StoreError> {
        let call_id = call_id.to_owned();
        self.with_conn(move |conn, _| {
            conn.single_statement(|tx| {
                let query = tool_calls::table
                    .filter(tool_calls::chat_id.eq(chat))
                    .filter(tool_calls::turn_id.eq(turn))
                    .filter(tool_calls::call_id.eq(&call_id));
                let row = load_calls!(tx, query, first).optional()?;
                row.map(|row| ToolCallRow::from(row).into_record())
                    .transpose()
            })
        })
        .await
    }

    /// The call with server-assigned `id`.
    pub async fn get_tool_call_by_id(
        &self,
        id: ToolCallId,
    ) -> Result<Option<ToolCallRecord>, StoreError> {
        self.with_conn(move |conn, _| {
            conn.single_statement(|tx| {
                find_call_by_id(tx, id)?
                    .map(ToolCallRow::into_record)
                    .transpose()
            })
        })
        .await
    }

    /// Stores a running call's latest progress (a no-op once it ended).
    pub async fn record_tool_call_progress(
        &self,
        id: ToolCallId,
        progress: &CallProgress,
    ) -> Result<(), StoreError> {
        let progress = json_text("progress", progress)?;
        let event = self
            .with_conn(move |conn, origin| {
                conn.write(|tx| {
                    let update = diesel::update(
                        tool_call_ends::table
                            .find(ToolCallKey::from(id))
                            .filter(tool_call_ends::status.eq(CallStatus::Running.as_str())),
                    )
                    .set(tool_call_ends::progress.eq(Some(&progress)))
                    .returning((tool_call_ends::chat_id, tool_call_ends::agent_id));
                    let changed: Option<(ChatId, Option<AgentId>)> =
                        on_backend!(tx, |c| update.get_result(c).optional())?;
                    let event = changed.map(|(chat_id, agent_id)| ChangeEvent::ToolCallChanged {
                        call_id: id,
                        chat_id,
                        agent_id,
                        change: CallChange::Progress,
                    });
                    if let Some(event) = &event {
                        notify_in_tx(tx, origin, event)?;
                    }
                    Ok(event)
                })
            })
            .await?;
        if let Some(event) = event {
            self.deliver(&event);
        }
        Ok(())
    }

    /// Records `end` unless the call already ended (the first end wins) and answers the
    /// call as stored; after a retryable refusal (`busy`, `agent_unreachable`) a retry
    /// with the same `call_id` replaces it and runs. `None` when there is no such call. Ending drops the
    /// arguments; `duration_ms` defaults to the time since the call was stored.
    /// [`StoreError::InvalidInput`] for a `running` end.
    pub async fn end_tool_call(
        &self,
        id: ToolCallId,
        end: &CallEnd,
        duration_ms: Option<u64>,
    ) -> Result<Option<ToolCallRecord>, StoreError> {
        let end = PreparedEnd::new(end, duration_ms)?;
        let ended = self
            .with_conn(move |conn, origin| {
                conn.write(|tx| {
                    let Some(row) = find_call_by_id(tx, id)? else {
                        return Ok(None);
                    };
                    let mut events = Vec::new();
                    let row = end_row(tx, origin, row, &end, DbTime(Utc::now()), &mut events)?;
                    Ok(Some((row.into_record()?, events)))
                })
            })
            .await?;
        Ok(ended.map(|(record, events)| {
            self.deliver_all(&events);
            record
        }))
    }

    /// The running calls sent to `agent`, oldest first.
    pub async fn running_tool_calls(
        &self,
        agent: AgentId,
    ) -> Result<Vec<ToolCallRecord>, StoreError> {
        self.with_conn(move |conn, _| {
            conn.single_statement(|tx| {
                running_of_agent(tx, agent)?
                    .into_iter()
                    .map(ToolCallRow::into_record)
                    .collect()
            })
        })
        .await
    }

    /// Ends, with `end`, every running call of `agent` whose run is not `keep_run` (every
    /// running call when `None`), and answers them as they ended, oldest first: the call
    /// channel's `unknown` ends when a process restarted or its stream was lost.
    pub async fn end_running_tool_calls(
        &self,
        agent: AgentId,
        keep_run: Option<&RunId>,
        end: &CallEnd,
    ) -> Result<Vec<ToolCallRecord>, StoreError> {
        let end = PreparedEnd::new(end, None)?;
        let keep_run = keep_run.map(|run| run.as_str().to_owned());
        let (ended, events) = self
            .with_conn(move |conn, origin| {
                conn.write(|tx| {
                    let now = DbTime(Utc::now());
                    let mut events = Vec::new();
                    let ended = running_of_agent(tx, agent)?
                        .into_iter()
                        .filter(|row| keep_run.is_none() || row.agent_run_id != keep_run)
                        .map(|row| end_row(tx, origin, row, &end, now, &mut events)?.into_record())
                        .collect::<Result<Vec<_>, _>>()?;
                    Ok((ended, events))
                })
            })
            .await?;
        self.deliver_all(&events);
        Ok(ended)
    }
}

/// The event an admission publishes: a started call is pending for its agent's stream, a
/// refused one ended.
fn admission_event(admission: &CallAdmission) -> Option<ChangeEvent> {
    match admission {
        CallAdmission::Started(record) => Some(call_event(record, CallChange::Pending)),
        CallAdmission::Refused(record) => Some(call_event(record, CallChange::Ended)),
        CallAdmission::Existing(_) | CallAdmission::Conflict(_) => None,
    }
}

/// The change event of a stored call.
pub(crate) fn call_event(record: &ToolCallRecord, change: CallChange) -> ChangeEvent {
    ChangeEvent::ToolCallChanged {
        call_id: record.id,
        chat_id: record.chat_id,
        agent_id: record.agent_id,
        change,
    }
}

/// [`apply_end`] on a row read in this transaction, queueing its `Ended` event (NOTIFY
/// now, `events` for in-process delivery after commit) when the row was still running.
pub(crate) fn end_row(
    tx: &mut Tx<'_>,
    origin: u64,
    row: ToolCallRow,
    end: &PreparedEnd,
    now: DbTime,
    events: &mut Vec<ChangeEvent>,
) -> Result<ToolCallRow, StoreError> {
    let was_running = row.status == CallStatus::Running.as_str();
    let row = apply_end(tx, row, end, now)?;
    if was_running {
        let event = row.event(CallChange::Ended);
        notify_in_tx(tx, origin, &event)?;
        events.push(event);
    }
    Ok(row)
}

/// A call checked and digested before its transaction.
struct PreparedCall {
    call: NewToolCall,
    digest: String,
    size: i64,
    timeout_ms: i64,
}

/// An end checked and serialized before its transaction.
#[derive(Clone)]
pub(crate) struct PreparedEnd {
    status: CallStatus,
    reason: Option<CallReason>,
    error: Option<String>,
    result: Option<String>,
    truncated: bool,
    duration_ms: Option<i64>,
}

impl PreparedEnd {
    pub(crate) fn new(end: &CallEnd, duration_ms: Option<u64>) -> Result<Self, StoreError> {
        if !end.status.is_end() {
            return Err(StoreError::InvalidInput(
                "a call's end cannot be `running`".into(),
            ));
        }
        Ok(Self {
            status: end.status,
            reason: end.reason,
            error: end
                .error
                .as_ref()
                .map(|e| json_text("error", e))
                .transpose()?,
            result: end.result.as_ref().map(Value::to_string),
            truncated: end.truncated,
            duration_ms: duration_ms.map(|d| to_i64("duration_ms", d)).transpose()?,
        })
    }
}

fn json_text(what: &str, value: &impl Serialize) -> Result<String, StoreError> {
    serde_json::to_string(value)
        .map_err(|e| StoreError::InvalidInput(format!("{what} does not serialize: {e}")))
}

/// One stored tool's origin in `chat_turns.origins`.
#[derive(Serialize, Deserialize)]
struct OriginJson {
    server: String,
    tool: String,
}

/// `chat_turns.origins` for a turn's tools.
pub(crate) fn origins_json(tools: &BTreeMap<String, ToolOrigin>) -> Result<JsonText, StoreError> {
    let map: BTreeMap<&str, OriginJson> = tools
        .iter()
        .map(|(name, origin)| {
            (
                name.as_str(),
                OriginJson {
                    server: origin.server.clone(),
                    tool: origin.tool.clone(),
                },
            )
        })
        .collect();
    json_text("origins", &map).map(JsonText)
}

/// Reads `chat_turns.origins` back.
pub(crate) fn parse_origins(
    text: &JsonText,
) -> Result<BTreeMap<String, ToolOrigin>, serde_json::Error> {
    let map: BTreeMap<String, OriginJson> = serde_json::from_str(&text.0)?;
    Ok(map
        .into_iter()
        .map(|(name, o)| {
            (
                name,
                ToolOrigin {
                    server: o.server,
                    tool: o.tool,
                },
            )
        })
        .collect())
}

/// The `tool_calls` columns diesel declares as `tool_calls` (see `schema.rs`).
#[derive(Queryable, Selectable, Insertable)]
#[diesel(table_name = tool_calls)]
#[diesel(treat_none_as_default_value = false)]
#[cfg_attr(
    all(feature = "postgres", feature = "sqlite"),
    diesel(check_for_backend(diesel::pg::Pg, diesel::sqlite::Sqlite))
)]
pub(crate) struct HeadRow {
    id: ToolCallKey,
    turn_id: TurnId,
    chat_id: ChatId,
    call_id: String,
    name: String,
    server: String,
    tool: String,
    agent_id: Option<AgentId>,
    agent_run_id: Option<String>,
    arguments: Option<String>,
    arguments_digest: String,
    arguments_size: i64,
    timeout_ms: i64,
    status: String,
    started_at: DbTime,
    ended_at: Option<DbTime>,
}

/// The rest of a `tool_calls` row, selected by name next to a [`HeadRow`].
type TailSql = (
    diesel::sql_types::Nullable<diesel::sql_types::Text>,
    diesel::sql_types::Nullable<diesel::sql_types::Text>,
    diesel::sql_types::Nullable<diesel::sql_types::Text>,
    diesel::sql_types::Bool,
    diesel::sql_types::Nullable<diesel::sql_types::Text>,
    diesel::sql_types::Bool,
    diesel::sql_types::Nullable<diesel::sql_types::BigInt>,
    diesel::sql_types::Nullable<diesel::sql_types::BigInt>,
    diesel::sql_types::Bool,
);
pub(crate) type TailRow = (
    Option<String>,
    Option<String>,
    Option<String>,
    bool,
    Option<String>,
    bool,
    Option<i64>,
    Option<i64>,
    bool,
);

/// The columns of [`TailRow`], table-qualified so a subquery cannot capture them.
pub(crate) fn tail() -> diesel::expression::SqlLiteral<TailSql> {
    diesel::dsl::sql::<TailSql>(
        "tool_calls.reason, tool_calls.error, tool_calls.result, tool_calls.truncated, \
         tool_calls.progress, tool_calls.delivered, tool_calls.duration_ms, \
         tool_calls.delivered_generation, tool_calls.cancel_requested",
    )
}

/// A whole `tool_calls` row.
pub(crate) struct ToolCallRow {
    pub(crate) id: ToolCallKey,
    pub(crate) turn_id: TurnId,
    pub(crate) chat_id: ChatId,
    pub(crate) call_id: String,
    pub(crate) name: String,
    pub(crate) server: String,
    pub(crate) tool: String,
    pub(crate) agent_id: Option<AgentId>,
    pub(crate) agent_run_id: Option<String>,
    pub(crate) arguments: Option<String>,
    pub(crate) arguments_digest: String,
    pub(crate) arguments_size: i64,
    pub(crate) timeout_ms: i64,
    pub(crate) status: String,
    pub(crate) reason: Option<String>,
    pub(crate) error: Option<String>,
    pub(crate) result: Option<String>,
    pub(crate) truncated: bool,
    pub(crate) progress: Option<String>,
    pub(crate) delivered: bool,
    pub(crate) started_at: DbTime,
    pub(crate) ended_at: Option<DbTime>,
    pub(crate) duration_ms: Option<i64>,
    /// The stream generation that delivered it (`tool_call/routing.rs`).
    pub(crate) delivered_generation: Option<i64>,
    pub(crate) cancel_requested: bool,
}

impl From<(HeadRow, TailRow)> for ToolCallRow {
    fn from((h, t): (HeadRow, TailRow)) -> Self {
        let (
            reason,
            error,
            result,
            truncated,
            progress,
            delivered,
            duration_ms,
            delivered_generation,
            cancel_requested,
        ) = t;
        Self {
            id: h.id,
            turn_id: h.turn_id,
            chat_id: h.chat_id,
            call_id: h.call_id,
            name: h.name,
            server: h.server,
            tool: h.tool,
            agent_id: h.agent_id,
            agent_run_id: h.agent_run_id,
            arguments: h.arguments,
            arguments_digest: h.arguments_digest,
            arguments_size: h.arguments_size,
            timeout_ms: h.timeout_ms,
            status: h.status,
            reason,
            error,
            result,
            truncated,
            progress,
            delivered,
            started_at: h.started_at,
            ended_at: h.ended_at,
            duration_ms,
            delivered_generation,
            cancel_requested,
        }
    }
}

impl ToolCallRow {
    /// Ended `busy` or `agent_unreachable`: the tool never ran, so the `call_id` may run
    /// again.
    pub(crate) fn is_retryable_refusal(&self) -> bool {
        self.status == CallStatus::Refused.as_str()
            && self
                .reason
                .as_deref()
                .and_then(CallReason::parse)
                .is_some_and(CallReason::is_retryable)
    }

    /// Stored, not ended, not yet sent on a stream.
    pub(crate) fn is_pending(&self) -> bool {
        self.status == CallStatus::Running.as_str() && !self.delivered
    }

    /// The change event of this call.
    pub(crate) fn event(&self, change: CallChange) -> ChangeEvent {
        ChangeEvent::ToolCallChanged {
            call_id: self.id.into(),
            chat_id: self.chat_id,
            agent_id: self.agent_id,
            change,
        }
    }

    pub(crate) fn into_record(self) -> Result<ToolCallRecord, StoreError> {
        let id = self.id;
        let corrupt = |what: &str, detail: String| {
            StoreError::Corrupt(format!("tool call {id}: {what}: {detail}"))
        };
        let status = CallStatus::parse(&self.status)
            .ok_or_else(|| corrupt("status", format!("unknown status {:?}", self.status)))?;
        let reason = self
            .reason
            .map(|r| {
                CallReason::parse(&r).ok_or_else(|| corrupt("reason", format!("unknown {r:?}")))
            })
            .transpose()?;
        let error = self
            .error
            .map(|e| serde_json::from_str(&e).map_err(|e| corrupt("error", e.to_string())))
            .transpose()?;
        let result = self
            .result
            .map(|r| serde_json::from_str(&r).map_err(|e| corrupt("result", e.to_string())))
            .transpose()?;
        let progress = self
            .progress
            .map(|p| serde_json::from_str(&p).map_err(|e| corrupt("progress", e.to_string())))
            .transpose()?;
        Ok(ToolCallRecord {
            id: id.into(),
            chat_id: self.chat_id,
            turn_id: self.turn_id,
            call_id: self.call_id,
            name: self.name,
            server: self.server,
            tool: self.tool,
            agent_id: self.agent_id,
            agent_run_id: self.agent_run_id.and_then(RunId::new),
            arguments: self.arguments,
            arguments_digest: self.arguments_digest,
            arguments_size: stored_u64("arguments size", self.arguments_size)?,
            timeout_ms: stored_u64("timeout_ms", self.timeout_ms)?,
            status,
            reason,
            error,
            result,
            truncated: self.truncated,
            progress,
            delivered: self.delivered,
            started_at: self.started_at.0,
            ended_at: self.ended_at.map(|t| t.0),
            duration_ms: self
                .duration_ms
                .map(|d| stored_u64("duration_ms", d))
                .transpose()?,
        })
    }
}

/// The turn columns a call resolves against.
#[derive(Queryable)]
struct TurnOriginRow {
    agent_id: Option<AgentId>,
    agent_run_id: Option<String>,
    origins: JsonText,
}

/// The turn, locked against concurrent admissions (PostgreSQL; SQLite's IMMEDIATE
/// transaction holds the write lock already), so the per-turn limit holds and a turn
/// being pruned waits or makes this retry.
fn lock_turn(
    tx: &mut Tx<'_>,
    chat: ChatId,
    turn: TurnId,
) -> Result<Option<TurnOriginRow>, StoreError> {
    let query = chat_turns::table
        .find(turn)
        .filter(chat_turns::chat_id.eq(chat))
        .select((
            chat_turns::agent_id,
            chat_turns::agent_run_id,
            chat_turns::origins,
        ));
    Ok(match tx {
        #[cfg(feature = "postgres")]
        Tx::Postgres(c) => query.for_no_key_update().first(*c).optional()?,
        #[cfg(feature = "sqlite")]
        Tx::Sqlite(c) => query.first(*c).optional()?,
    })
}

pub(crate) fn find_call_by_id(
    tx: &mut Tx<'_>,
    id: ToolCallId,
) -> Result<Option<ToolCallRow>, StoreError> {
    let query = tool_calls::table.find(ToolCallKey::from(id));
    Ok(load_calls!(tx, query, first)
        .optional()?
        .map(ToolCallRow::from))
}

fn running_of_agent(tx: &mut Tx<'_>, agent: AgentId) -> Result<Vec<ToolCallRow>, StoreError> {
    let query = tool_calls::table
        .filter(tool_calls::agent_id.eq(agent))
        .filter(tool_calls::status.eq(CallStatus::Running.as_str()))
        .order((tool_calls::started_at, tool_calls::id));
    Ok(load_calls!(tx, query, load)?
        .into_iter()
        .map(ToolCallRow::from)
        .collect())
}

/// The origin `name` has in the turn: its recorded tools first, then what find_tools
/// activated for it from the turn's run.
fn resolve(
    tx: &mut Tx<'_>,
    turn: TurnId,
    origins: &BTreeMap<String, ToolOrigin>,
    name: &str,
) -> Result<Option<ToolOrigin>, StoreError> {
    if let Some(origin) = origins.get(name) {
        return Ok(Some(origin.clone()));
    }
    let query = chat_turn_activations::table
        .filter(chat_turn_activations::turn_id.eq(turn))
        .filter(chat_turn_activations::tool.eq(name))
        .select((
            chat_turn_activations::server,
            chat_turn_activations::tool_name,
        ));
    let found: Option<(Option<String>, Option<String>)> =
        on_backend!(tx, |c| query.first(c).optional())?;
    Ok(match found {
        Some((Some(server), Some(tool))) => Some(ToolOrigin { server, tool }),
        _ => None,
    })
}

fn admit(
    tx: &mut Tx<'_>,
    prepared: &PreparedCall,
    now: DbTime,
) -> Result<Option<CallAdmission>, StoreError> {
    let now = stored_precision(now);
    let call = &prepared.call;
    let Some(turn) = lock_turn(tx, call.chat, call.turn)? else {
        return Ok(None);
    };
    let existing = tool_calls::table
        .filter(tool_calls::turn_id.eq(call.turn))
        .filter(tool_calls::call_id.eq(&call.call_id));
    let existing = load_calls!(tx, existing, first).optional()?;
    let existing = existing.map(ToolCallRow::from);
    if let Some(refusal) = existing.as_ref().filter(|row| row.is_retryable_refusal()) {
        // `busy` and `agent_unreachable` say the tool never ran: a retry with the same
        // `call_id` runs, as a new call (the agent remembers ids it has seen).
        on_backend!(tx, |c| diesel::delete(tool_calls::table.find(refusal.id))
            .execute(c))?;
    } else if let Some(existing) = existing {
        let same = existing.name == call.name && existing.arguments_digest == prepared.digest;
        let record = existing.into_record()?;
        return Ok(Some(if same {
            CallAdmission::Existing(record)
        } else {
            CallAdmission::Conflict(record)
        }));
    }
    let held = tool_calls::table
        .filter(tool_calls::turn_id.eq(call.turn))
        .count();
    let held: i64 = on_backend!(tx, |c| held.get_result(c))?;
    if u64::try_from(held).unwrap_or(0) >= MAX_CALLS_PER_TURN {
        return Err(StoreError::LimitReached(format!(
            "a turn holds at most {MAX_CALLS_PER_TURN} tool calls"
        )));
    }

    let mut row = ToolCallRow {
        id: ToolCallKey::new_random(),
        turn_id: call.turn,
        chat_id: call.chat,
        call_id: call.call_id.clone(),
        name: call.name.clone(),
        server: String::new(),
        tool: String::new(),
        agent_id: turn.agent_id,
        agent_run_id: turn.agent_run_id.clone(),
        arguments: Some(call.arguments.clone()),
        arguments_digest: prepared.digest.clone(),
        arguments_size: prepared.size,
        timeout_ms: prepared.timeout_ms,
        status: CallStatus::Running.as_str().to_owned(),
        reason: None,
        error: None,
        result: None,
        truncated: false,
        progress: None,
        delivered: false,
        started_at: now,
        ended_at: None,
        duration_ms: None,
        delivered_generation: None,
        cancel_requested: false,
    };
    if call.name == FIND_TOOLS_NAME {
        // The server answers it itself: no agent holds it.
        row.server = CTXSYNC_SERVER.to_owned();
        row.tool = FIND_TOOLS_NAME.to_owned();
        row.agent_id = None;
        return insert_call(tx, row).map(|r| Some(CallAdmission::Started(r)));
    }
    let origins = parse_origins(&turn.origins)
        .map_err(|e| StoreError::Corrupt(format!("turn {}: origins: {e}", call.turn)))?;
    let Some(origin) = resolve(tx, call.turn, &origins, &call.name)? else {
        return refuse(tx, row, CallReason::NotInTurn, now);
    };
    row.server = origin.server;
    row.tool = origin.tool;
    let (Some(agent), Some(run)) = (turn.agent_id, turn.agent_run_id.as_deref()) else {
        // Without a recorded agent and run nothing can prove which process listed it.
        return refuse(tx, row, CallReason::StaleRun, now);
    };
    // Share-locked so a concurrent UpdateStartup either waits for this admission (and
    // then sees the running call) or makes it retry and see the new run.
    let agent_row = match lock_agent(tx, agent, RowLock::Share) {
        Ok(row) => Some(row),
        Err(StoreError::AgentNotFound(_)) => None,
        Err(e) => return Err(e),
    };
    let Some(agent_row) = agent_row.filter(|a| a.agent_run_id == run) else {
        return refuse(tx, row, CallReason::StaleRun, now);
    };
    if !agent_row.accepts_tool_calls {
        return refuse(tx, row, CallReason::AgentUnsupported, now);
    }
    insert_call(tx, row).map(|r| Some(CallAdmission::Started(r)))
}

/// Stores `row` as ended at once, refused for `reason`.
fn refuse(
    tx: &mut Tx<'_>,
    mut row: ToolCallRow,
    reason: CallReason,
    now: DbTime,
) -> Result<Option<CallAdmission>, StoreError> {
    row.status = CallStatus::Refused.as_str().to_owned();
    row.reason = Some(reason.as_str().to_owned());
    row.arguments = None;
    row.ended_at = Some(now);
    row.duration_ms = Some(0);
    let record = insert_call(tx, row)?;
    crate::audit::record_end(tx, record.id)?;
    Ok(Some(CallAdmission::Refused(record)))
}

/// Inserts `row`: its head, then (for a call ended at once) its end columns.
fn insert_call(tx: &mut Tx<'_>, row: ToolCallRow) -> Result<ToolCallRecord, StoreError> {
    let head = HeadRow {
        id: row.id,
        turn_id: row.turn_id,
        chat_id: row.chat_id,
        call_id: row.call_id.clone(),
        name: row.name.clone(),
        server: row.server.clone(),
        tool: row.tool.clone(),
        agent_id: row.agent_id,
        agent_run_id: row.agent_run_id.clone(),
        arguments: row.arguments.clone(),
        arguments_digest: row.arguments_digest.clone(),
        arguments_size: row.arguments_size,
        timeout_ms: row.timeout_ms,
        status: row.status.clone(),
        started_at: row.started_at,
        ended_at: row.ended_at,
    };
    let insert = diesel::insert_into(tool_calls::table).values(&head);
    match on_backend!(tx, |c| insert.execute(c)) {
        Ok(_) => {
            if row.reason.is_some() || row.duration_ms.is_some() {
                let update = diesel::update(tool_call_ends::table.find(row.id)).set((
                    tool_call_ends::reason.eq(&row.reason),
                    tool_call_ends::duration_ms.eq(row.duration_ms),
                ));
                on_backend!(tx, |c| update.execute(c))?;
            }
            row.into_record()
        }
        // A concurrent admission of the same call id committed first (PostgreSQL): the
        // retry reads it and answers `Existing` or `Conflict`.
        Err(DieselError::DatabaseError(DatabaseErrorKind::UniqueViolation, info)) => {
            Err(StoreError::Conflict(info.message().to_owned()))
        }
        Err(e) => Err(e.into()),
    }
}

/// Records `end` on `row` unless it already ended (the first end wins). Answers the row
/// as it now stands.
pub(crate) fn apply_end(
    tx: &mut Tx<'_>,
    mut row: ToolCallRow,
    end: &PreparedEnd,
    now: DbTime,
) -> Result<ToolCallRow, StoreError> {
    if row.status != CallStatus::Running.as_str() {
        return Ok(row);
    }
    let now = stored_precision(now);
    let running = tool_call_ends::table
        .find(row.id)
        .filter(tool_call_ends::status.eq(CallStatus::Running.as_str()));
    let elapsed = (now.0 - row.started_at.0).num_milliseconds().max(0);
    row.status = end.status.as_str().to_owned();
    row.reason = end.reason.map(|r| r.as_str().to_owned());
    row.error = end.error.clone();
    row.result = end.result.clone();
    row.truncated = end.truncated;
    row.arguments = None;
    row.ended_at = Some(now);
    row.duration_ms = Some(end.duration_ms.unwrap_or(elapsed));
    let changed = {
        let update = diesel::update(running).set((
            tool_call_ends::status.eq(&row.status),
            tool_call_ends::reason.eq(&row.reason),
            tool_call_ends::error.eq(&row.error),
            tool_call_ends::result.eq(&row.result),
            tool_call_ends::truncated.eq(row.truncated),
            tool_call_ends::arguments.eq(None::<String>),
            tool_call_ends::ended_at.eq(row.ended_at),
            tool_call_ends::duration_ms.eq(row.duration_ms),
        ));
        on_backend!(tx, |c| update.execute(c))?
    };
    if changed == 0 {
        // Ended since it was read (SQLite cannot get here; PostgreSQL would have
        // failed the write on serialization): answer what is stored.
        return find_call_by_id(tx, row.id.into())?
            .ok_or_else(|| StoreError::Conflict(format!("tool call {} vanished", row.id)));
    }
    crate::audit::record_end(tx, row.id.into())?;
    Ok(row)
}

/// Cancels the running calls of `chat`'s turns numbered below `keep_from`, before those
/// turns are pruned, and answers them as they ended (oldest first) so the caller can tell
/// their agents.
pub(crate) fn cancel_calls_of_pruned_turns(
    tx: &mut Tx<'_>,
    chat: ChatId,
    keep_from: i64,
    now: DbTime,
) -> Result<Vec<ToolCallRecord>, StoreError> {
    let pruned = chat_turns::table
        .filter(chat_turns::chat_id.eq(chat))
        .filter(chat_turns::seq.lt(keep_from))
        .select(chat_turns::id);
    let query = tool_calls::table
        .filter(tool_calls::turn_id.eq_any(pruned))
        .filter(tool_calls::status.eq(CallStatus::Running.as_str()))
        .order((tool_calls::started_at, tool_calls::id));
    let running = load_calls!(tx, query, load)?;
    let end = PreparedEnd::new(
        &CallEnd {
            status: CallStatus::Canceled,
            reason: None,
            error: None,
            result: None,
            truncated: false,
        },
        None,
    )?;
    running
        .into_iter()
        .map(|row| apply_end(tx, ToolCallRow::from(row), &end, now)?.into_record())
        .collect()
}

/// The most calls [`Store::chat_tool_calls`] answers, whatever the caller asks.
pub const MAX_RECENT_CHAT_CALLS: usize = 50;

impl Store {
    /// `chat`'s most recent calls, newest first: at most `limit`, itself capped at
    /// [`MAX_RECENT_CHAT_CALLS`] (what a person's list shows; the audit log keeps the rest).
    pub async fn chat_tool_calls(
        &self,
        chat: ChatId,
        limit: usize,
    ) -> Result<Vec<ToolCallRecord>, StoreError> {
        let limit = limit.min(MAX_RECENT_CHAT_CALLS) as i64;
        self.with_conn(move |conn, _| {
            conn.single_statement(|tx| {
                let query = tool_calls::table
                    .filter(tool_calls::chat_id.eq(chat))
                    // The id breaks ties between calls stored in the same microsecond.
                    .order((tool_calls::started_at.desc(), tool_calls::id.desc()))
                    .limit(limit);
                load_calls!(tx, query, load)?
                    .into_iter()
                    .map(|row| ToolCallRow::from(row).into_record())
                    .collect()
            })
        })
        .await
    }
}
