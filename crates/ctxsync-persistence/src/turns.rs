//! A chat's turns as the chat API answered them, and the tools find_tools activated for
//! each (SPEC §11, Replicas): any replica serves a turn's follow-up requests, and a
//! restart loses nothing.
//!
//! A turn's outcome and tools are stored as the JSON the caller gives; this layer only
//! checks their shape (an object and an array). Turns are numbered 1, 2, 3, … per chat in
//! the inserting transaction, so "the latest turn" never depends on a replica's clock.
//! Growth is bounded: recording a turn deletes the chat's turns older than the last
//! [`MAX_TURNS_PER_CHAT`], with their activations and tool calls (a running call is
//! cancelled first, in the same transaction).
//!
//! A turn also records where its tools came from ([`TurnOrigin`]): tool calls resolve
//! against that, never against the agent's current snapshot.

use chrono::{DateTime, Utc};
use ctxsync_protocol::RunId;
use diesel::prelude::*;
use diesel::result::{DatabaseErrorKind, Error as DieselError};

use crate::db::{Tx, on_backend};
use crate::error::StoreError;
use crate::ids::{AgentId, ChatId, TurnId};
use crate::notify::CallChange;
use crate::schema::{chat_turn_activations, chat_turns, chats};
use crate::shared::notify_in_tx;
use crate::sql_types::{DbTime, JsonText};
use crate::store::Store;
use crate::tool_call::admission::{
    ToolCallRecord, ToolOrigin, TurnOrigin, call_event, cancel_calls_of_pruned_turns, origins_json,
    parse_origins,
};

/// Turns kept per chat; recording one more deletes the oldest.
pub const MAX_TURNS_PER_CHAT: u64 = 32;
/// Longest activated tool name (model-facing names are at most 64 characters of
/// `[A-Za-z0-9_-]`).
pub const MAX_TOOL_NAME_BYTES: usize = 64;

/// What kind of turn was prepared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ChatTurnMode {
    /// A normal turn: the first-turn gate may wait (bounded) for the bound agent's
    /// discovery.
    Default,
    /// A planning turn: never waits for discovery.
    Plan,
}

impl ChatTurnMode {
    /// The stored label: `"default"` or `"plan"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Default => "default",
            Self::Plan => "plan",
        }
    }

    /// Parses a [`Self::as_str`] label; `None` for any other text.
    pub fn parse(label: &str) -> Option<Self> {
        match label {
            "default" => Some(Self::Default),
            "plan" => Some(Self::Plan),
            _ => None,
        }
    }
}

/// A turn to record: what the turn's answer said.
#[derive(Clone, Debug, PartialEq)]
pub struct NewTurn {
    /// How the turn was prepared.
    pub mode: ChatTurnMode,
    /// A JSON object: the answer's outcome (its note, discovery outcome and so on).
    pub outcome: serde_json::Value,
    /// A JSON array: the answer's tools, in order.
    pub tools: serde_json::Value,
    /// Where the turn's tools came from; `None` when the chat has no agent or the agent
    /// no run (its calls are refused).
    pub origin: Option<TurnOrigin>,
}

/// A stored turn with its activations.
#[derive(Clone, Debug, PartialEq)]
pub struct TurnRecord {
    /// The turn's id, assigned when it was recorded.
    pub id: TurnId,
    /// The chat the turn belongs to.
    pub chat_id: ChatId,
    /// 1 for the chat's first turn, then one more for each.
    pub number: u64,
    /// How the turn was prepared.
    pub mode: ChatTurnMode,
    /// The JSON object recorded as the answer's outcome.
    pub outcome: serde_json::Value,
    /// The JSON array recorded as the answer's tools, in order.
    pub tools: serde_json::Value,
    /// Tool names find_tools activated for this turn, sorted.
    pub activated: Vec<String>,
    /// Where the turn's tools came from, as recorded.
    pub origin: Option<TurnOrigin>,
    /// When the turn was recorded (the writing replica's clock).
    pub created_at: DateTime<Utc>,
    /// Only from [`Store::record_turn`] (empty when read back): the calls that were
    /// running in the turns it pruned, recorded `canceled` before their turns (and so
    /// they) were deleted. The caller sends each one's cancel to its agent.
    pub canceled_calls: Vec<ToolCallRecord>,
}

/// The tools activated for one turn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TurnActivations {
    /// The turn they belong to: the one asked for, or the chat's latest.
    pub turn_id: TurnId,
    /// Sorted.
    pub activated: Vec<String>,
}

impl Store {
    /// Records a turn of `chat` as its newest, deleting turns past the last
    /// [`MAX_TURNS_PER_CHAT`] with their calls (those still running are first recorded
    /// `canceled` and answered in [`TurnRecord::canceled_calls`]). A new turn has nothing
    /// activated.
    /// [`StoreError::ChatNotFound`] for an unknown chat; [`StoreError::InvalidInput`]
    /// when the outcome is not a JSON object or the tools not an array.
    pub async fn record_turn(
        &self,
        chat: ChatId,
        turn: &NewTurn,
    ) -> Result<TurnRecord, StoreError> {
        if !turn.outcome.is_object() {
            return Err(StoreError::InvalidInput(
                "a turn's outcome must be a JSON object".into(),
            ));
        }
        if !turn.tools.is_array() {
            return Err(StoreError::InvalidInput(
                "a turn's tools must be a JSON array".into(),
            ));
        }
        let id = TurnId::new_random();
        let columns = TurnColumns {
            mode: turn.mode,
            outcome: JsonText(turn.outcome.to_string()),
            tools: JsonText(turn.tools.to_string()),
            origin: StoredOrigin::new(turn.origin.as_ref())?,
        };
        let record = self
            .with_conn(move |conn, origin| {
                conn.write(|tx| {
                    let record = insert_turn(tx, chat, id, &columns, DbTime(Utc::now()))?;
                    for call in &record.canceled_calls {
                        notify_in_tx(tx, origin, &call_event(call, CallChange::Ended))?;
                    }
                    Ok(record)
                })
            })
            .await?;
        for call in &record.canceled_calls {
            self.deliver(&call_event(call, CallChange::Ended));
        }
        Ok(record)
    }

    /// The turn with its activations; `None` when it is unknown, was deleted as one of
    /// the oldest, or belongs to another chat.
    pub async fn get_turn(
        &self,
        chat: ChatId,
        turn: TurnId,
    ) -> Result<Option<TurnRecord>, StoreError> {
        self.with_conn(move |conn, _| {
            conn.read(|tx| {
                let Some(row) = find_turn(tx, chat, turn)? else {
                    return Ok(None);
                };
                let activated = load_activations(tx, turn)?;
                row.into_record(activated).map(Some)
            })
        })
        .await
    }

    /// The tools activated for `turn`, or for the chat's latest turn when `turn` is
    /// `None`; `None` when there is no such turn of this chat.
    pub async fn turn_activations(
        &self,
        chat: ChatId,
        turn: Option<TurnId>,
    ) -> Result<Option<TurnActivations>, StoreError> {
        self.with_conn(move |conn, _| {
            conn.read(|tx| {
                let turn_id = match turn {
                    Some(turn) => turn_of_chat(tx, chat, turn)?,
                    None => latest_turn(tx, chat)?,
                };
                let Some(turn_id) = turn_id else {
                    return Ok(None);
                };
                let activated = load_activations(tx, turn_id)?;
                Ok(Some(TurnActivations { turn_id, activated }))
            })
        })
        .await
    }

    /// Adds `tools` to the turn's activations (names already active stay as they are),
    /// each with its origin in the turn's run (`None` when the turn's run is no longer
    /// current: the name is active, but a call of it is refused `not_in_turn`).
    /// `false` when the turn is not one of this chat's (any more): nothing is written.
    /// [`StoreError::InvalidInput`] for an empty name or one over
    /// [`MAX_TOOL_NAME_BYTES`].
    pub async fn activate_tools(
        &self,
        chat: ChatId,
        turn: TurnId,
        tools: Vec<(String, Option<ToolOrigin>)>,
    ) -> Result<bool, StoreError> {
        if let Some((bad, _)) = tools
            .iter()
            .find(|(n, _)| n.is_empty() || n.len() > MAX_TOOL_NAME_BYTES)
        {
            return Err(StoreError::InvalidInput(format!(
                "tool name must be 1..={MAX_TOOL_NAME_BYTES} bytes, got {} bytes",
                bad.len()
            )));
        }
        self.with_conn(move |conn, _| {
            conn.write(|tx| insert_activations(tx, chat, turn, &tools, DbTime(Utc::now())))
        })
        .await
    }
}

#[derive(Queryable, Selectable)]
#[diesel(table_name = chat_turns)]
#[cfg_attr(
    all(feature = "postgres", feature = "sqlite"),
    diesel(check_for_backend(diesel::pg::Pg, diesel::sqlite::Sqlite))
)]
struct TurnRow {
    id: TurnId,
    chat_id: ChatId,
    seq: i64,
    mode: String,
    outcome: JsonText,
    tools: JsonText,
    created_at: DbTime,
    agent_id: Option<AgentId>,
    agent_run_id: Option<String>,
    origins: JsonText,
}

/// What a new turn stores, prepared before its transaction.
struct TurnColumns {
    mode: ChatTurnMode,
    outcome: JsonText,
    tools: JsonText,
    origin: StoredOrigin,
}

/// A turn's origin in its columns: the agent and run (both or neither) and the tools'
/// origins as JSON.
struct StoredOrigin {
    agent_id: Option<AgentId>,
    agent_run_id: Option<String>,
    origins: JsonText,
}

impl StoredOrigin {
    fn new(origin: Option<&TurnOrigin>) -> Result<Self, StoreError> {
        Ok(match origin {
            Some(origin) => Self {
                agent_id: Some(origin.agent_id),
                agent_run_id: Some(origin.agent_run_id.as_str().to_owned()),
                origins: origins_json(&origin.tools)?,
            },
            None => Self {
                agent_id: None,
                agent_run_id: None,
                origins: JsonText("{}".into()),
            },
        })
    }
}

impl TurnRow {
    fn into_record(self, activated: Vec<String>) -> Result<TurnRecord, StoreError> {
        let corrupt = |what: &str, detail: String| {
            StoreError::Corrupt(format!("turn {}: {what}: {detail}", self.id))
        };
        let mode = ChatTurnMode::parse(&self.mode)
            .ok_or_else(|| corrupt("mode", format!("unknown mode {:?}", self.mode)))?;
        let outcome =
            serde_json::from_str(&self.outcome.0).map_err(|e| corrupt("outcome", e.to_string()))?;
        let tools =
            serde_json::from_str(&self.tools.0).map_err(|e| corrupt("tools", e.to_string()))?;
        let number = u64::try_from(self.seq).map_err(|e| corrupt("number", e.to_string()))?;
        let tools_origins =
            parse_origins(&self.origins).map_err(|e| corrupt("origins", e.to_string()))?;
        let origin = match (self.agent_id, self.agent_run_id.and_then(RunId::new)) {
            (Some(agent_id), Some(agent_run_id)) => Some(TurnOrigin {
                agent_id,
                agent_run_id,
                tools: tools_origins,
            }),
            _ => None,
        };
        Ok(TurnRecord {
            id: self.id,
            chat_id: self.chat_id,
            number,
            mode,
            outcome,
            tools,
            activated,
            origin,
            created_at: self.created_at.0,
            canceled_calls: Vec::new(),
        })
    }
}

fn insert_turn(
    tx: &mut Tx<'_>,
    chat_id: ChatId,
    id: TurnId,
    columns: &TurnColumns,
    now: DbTime,
) -> Result<TurnRecord, StoreError> {
    let TurnColumns {
        mode,
        outcome,
        tools,
        origin,
    } = columns;
    let mode = *mode;
    let chat = chats::table.find(chat_id).select(chats::id);
    let found: Option<ChatId> = on_backend!(tx, |c| chat.first(c).optional())?;
    if found.is_none() {
        return Err(StoreError::ChatNotFound(chat_id));
    }
    let last = chat_turns::table
        .filter(chat_turns::chat_id.eq(chat_id))
        .select(diesel::dsl::max(chat_turns::seq));
    let last: Option<i64> = on_backend!(tx, |c| last.first(c))?;
    let seq = last.unwrap_or(0) + 1;
    let insert = diesel::insert_into(chat_turns::table).values((
        chat_turns::id.eq(id),
        chat_turns::chat_id.eq(chat_id),
        chat_turns::seq.eq(seq),
        chat_turns::mode.eq(mode.as_str()),
        chat_turns::outcome.eq(outcome),
        chat_turns::tools.eq(tools),
        chat_turns::created_at.eq(now),
        chat_turns::agent_id.eq(origin.agent_id),
        chat_turns::agent_run_id.eq(&origin.agent_run_id),
        chat_turns::origins.eq(&origin.origins),
    ));
    match on_backend!(tx, |c| insert.execute(c)) {
        Ok(_) => {}
        // Another replica took this number first (PostgreSQL; SQLite writers queue):
        // a retry reads the new latest turn.
        Err(DieselError::DatabaseError(DatabaseErrorKind::UniqueViolation, info)) => {
            return Err(StoreError::Conflict(info.message().to_owned()));
        }
        Err(e) => return Err(e.into()),
    }
    let keep_from = seq - i64::try_from(MAX_TURNS_PER_CHAT).unwrap_or(i64::MAX) + 1;
    // A pruned turn's running call is ended before the cascade deletes it, so the caller
    // can still cancel it on its agent.
    let canceled_calls = cancel_calls_of_pruned_turns(tx, chat_id, keep_from, now)?;
    let prune = diesel::delete(
        chat_turns::table
            .filter(chat_turns::chat_id.eq(chat_id))
            .filter(chat_turns::seq.lt(keep_from)),
    );
    on_backend!(tx, |c| prune.execute(c))?;
    let mut record = TurnRow {
        id,
        chat_id,
        seq,
        mode: mode.as_str().to_owned(),
        outcome: outcome.clone(),
        tools: tools.clone(),
        created_at: now,
        agent_id: origin.agent_id,
        agent_run_id: origin.agent_run_id.clone(),
        origins: origin.origins.clone(),
    }
    .into_record(Vec::new())?;
    record.canceled_calls = canceled_calls;
    Ok(record)
}

fn find_turn(
    tx: &mut Tx<'_>,
    chat_id: ChatId,
    turn: TurnId,
) -> Result<Option<TurnRow>, StoreError> {
    let query = chat_turns::table
        .find(turn)
        .filter(chat_turns::chat_id.eq(chat_id));
    // `as_select` is per backend, so it is built in each arm.
    Ok(on_backend!(tx, |c| query
        .select(TurnRow::as_select())
        .first(c)
        .optional())?)
}

/// `turn` when it is one of the chat's stored turns.
fn turn_of_chat(
    tx: &mut Tx<'_>,
    chat_id: ChatId,
    turn: TurnId,
) -> Result<Option<TurnId>, StoreError> {
    let query = chat_turns::table
        .find(turn)
        .filter(chat_turns::chat_id.eq(chat_id))
        .select(chat_turns::id);
    Ok(on_backend!(tx, |c| query.first(c).optional())?)
}

fn latest_turn(tx: &mut Tx<'_>, chat_id: ChatId) -> Result<Option<TurnId>, StoreError> {
    let query = chat_turns::table
        .filter(chat_turns::chat_id.eq(chat_id))
        .order(chat_turns::seq.desc())
        .select(chat_turns::id);
    Ok(on_backend!(tx, |c| query.first(c).optional())?)
}

fn load_activations(tx: &mut Tx<'_>, turn: TurnId) -> Result<Vec<String>, StoreError> {
    let query = chat_turn_activations::table
        .filter(chat_turn_activations::turn_id.eq(turn))
        .order(chat_turn_activations::tool)
        .select(chat_turn_activations::tool);
    Ok(on_backend!(tx, |c| query.load(c))?)
}

fn insert_activations(
    tx: &mut Tx<'_>,
    chat_id: ChatId,
    turn: TurnId,
    tools: &[(String, Option<ToolOrigin>)],
    now: DbTime,
) -> Result<bool, StoreError> {
    if turn_of_chat(tx, chat_id, turn)?.is_none() {
        return Ok(false);
    }
    // One row per statement: diesel has no multi-row upsert on SQLite, and find_tools
    // activates at most a few tens of names per call.
    for (name, origin) in tools {
        let insert = diesel::insert_into(chat_turn_activations::table)
            .values((
                chat_turn_activations::turn_id.eq(turn),
                chat_turn_activations::tool.eq(name.as_str()),
                chat_turn_activations::activated_at.eq(now),
                chat_turn_activations::server.eq(origin.as_ref().map(|o| o.server.as_str())),
                chat_turn_activations::tool_name.eq(origin.as_ref().map(|o| o.tool.as_str())),
            ))
            .on_conflict_do_nothing();
        on_backend!(tx, |c| insert.execute(c))?;
    }
    Ok(true)
}
