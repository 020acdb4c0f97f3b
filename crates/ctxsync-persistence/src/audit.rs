//! The audit log, one for every kind (issues 37 and 50): a table per kind, each row
//! appended in the transaction that stores what it records, deleted only by age, so it
//! outlives turn pruning and the deletion of its chat or agent (the rows keep their ids
//! as plain values). Here the tool-call log — one row per call end, the arguments only as
//! their keyed digest (`deployment_secrets`) — and what every kind shares: the page
//! bounds, the cursor (a position in the newest-first order by time, then id) and
//! pruning. The sign-in entries are [`sign_in`]'s; one listing of every kind is
//! [`listing`]'s.
//!
//! Must never: hold a call's arguments or result (only the keyed digest and sizes), a
//! token, code, state or verifier, or tie a row to anything by a foreign key.

mod listing;
pub(crate) mod sign_in;

use std::fmt;
use std::str::FromStr;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::{DateTime, Utc};
use ctxsync_mcp_model::{CallReason, CallStatus};
use diesel::prelude::*;

use crate::db::{Tx, on_backend};
use crate::error::StoreError;
use ctxsync_protocol::tool_call::ToolCallId;

pub use listing::{AuditEntry, AuditKind, AuditLogPage, AuditLogQuery};
pub use sign_in::{AuditVia, SignInAuditRecord, SignInAuditStatus};

use crate::ids::{AgentId, ChatId, ToolCallKey, TurnId};
use crate::model::stored_u64;
use crate::schema::tool_call_audit;
use crate::sql_types::DbTime;
use crate::store::Store;

/// Rows a page holds when the query names no limit.
pub const DEFAULT_AUDIT_PAGE: u32 = 50;
/// The most rows one page holds.
pub const MAX_AUDIT_PAGE: u32 = 500;
/// Rows one pruning statement deletes, so no prune holds a long transaction or lock.
const PRUNE_BATCH: i64 = 1000;
/// PostgreSQL: the audit row of call `$1` as `tool_calls` now holds it.
#[cfg(feature = "postgres")]
const RECORD_END_POSTGRES: &str = "\
    INSERT INTO tool_call_audit (tool_call_id, agent_id, chat_id, turn_id, call_id, name, \
        server, tool, status, reason, error_code, duration_ms, arguments_digest, \
        arguments_size, result_size, truncated, ended_at) \
    SELECT id, agent_id, chat_id, turn_id, call_id, name, server, tool, status, reason, \
        (error::json ->> 'code')::bigint, duration_ms, arguments_digest, arguments_size, \
        octet_length(result), truncated, ended_at \
    FROM tool_calls WHERE id = $1 AND status <> 'running' \
    ON CONFLICT (tool_call_id) DO NOTHING";

/// SQLite: as [`RECORD_END_POSTGRES`].
#[cfg(feature = "sqlite")]
const RECORD_END_SQLITE: &str = "\
    INSERT INTO tool_call_audit (tool_call_id, agent_id, chat_id, turn_id, call_id, name, \
        server, tool, status, reason, error_code, duration_ms, arguments_digest, \
        arguments_size, result_size, truncated, ended_at) \
    SELECT id, agent_id, chat_id, turn_id, call_id, name, server, tool, status, reason, \
        json_extract(error, '$.code'), duration_ms, arguments_digest, arguments_size, \
        length(CAST(result AS BLOB)), truncated, ended_at \
    FROM tool_calls WHERE id = ? AND status <> 'running' \
    ON CONFLICT (tool_call_id) DO NOTHING";

/// Appends the audit row of `call`, whose end this transaction has just stored. Copied
/// from the stored row in one statement, so the row is what was stored, sizes included.
/// A retryable refusal gets its row too (its retry is a call of its own, with its own
/// id). The primary key keeps it to one row per call should a second end ever get this
/// far.
pub(crate) fn record_end(tx: &mut Tx<'_>, call: ToolCallId) -> Result<(), StoreError> {
    use crate::sql_types::UuidSql;
    match tx {
        #[cfg(feature = "postgres")]
        Tx::Postgres(c) => diesel::sql_query(RECORD_END_POSTGRES)
            .bind::<UuidSql, _>(ToolCallKey::from(call))
            .execute(*c)?,
        #[cfg(feature = "sqlite")]
        Tx::Sqlite(c) => diesel::sql_query(RECORD_END_SQLITE)
            .bind::<UuidSql, _>(ToolCallKey::from(call))
            .execute(*c)?,
    };
    Ok(())
}

/// Which audit rows to list: every filter given must hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuditQuery {
    /// Only calls that went to this agent (sign-ins: of its servers).
    pub agent: Option<AgentId>,
    /// Only calls of this chat (sign-ins: asked for from its page).
    pub chat: Option<ChatId>,
    /// Only calls that ended (entries recorded) at or after this time.
    pub since: Option<DateTime<Utc>>,
    /// Rows per page: 1..=[`MAX_AUDIT_PAGE`], default [`DEFAULT_AUDIT_PAGE`].
    pub limit: Option<u32>,
    /// Continue after this page's end (a previous page's `next_cursor`).
    pub cursor: Option<AuditCursor>,
}

/// Where a page of the audit log ended: the last entry's time and id (a tool call's, or
/// another entry's own), the log's newest-first order, which every kind shares. Its text
/// form is opaque: give back what a page answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct AuditCursor {
    at: DateTime<Utc>,
    id: uuid::Uuid,
}

impl fmt::Display for AuditCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = format!("{}/{}", self.at.timestamp_micros(), self.id.hyphenated());
        f.write_str(&URL_SAFE_NO_PAD.encode(text))
    }
}

impl FromStr for AuditCursor {
    type Err = StoreError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = || StoreError::InvalidInput("cursor: not one this server answered".into());
        // A cursor is about 70 characters; anything much longer is not one.
        if text.len() > 128 {
            return Err(invalid());
        }
        let decoded = URL_SAFE_NO_PAD.decode(text).map_err(|_| invalid())?;
        let decoded = String::from_utf8(decoded).map_err(|_| invalid())?;
        let (micros, id) = decoded.split_once('/').ok_or_else(invalid)?;
        let at = micros
            .parse::<i64>()
            .ok()
            .and_then(DateTime::from_timestamp_micros)
            .ok_or_else(invalid)?;
        let id = uuid::Uuid::parse_str(id).map_err(|_| invalid())?;
        Ok(Self { at, id })
    }
}

/// One page of the audit log, newest first.
#[derive(Clone, Debug, PartialEq)]
pub struct AuditPage {
    /// The rows, newest first (by end time, then by the call's id).
    pub rows: Vec<AuditRecord>,
    /// Where the next page starts; `None` when this page is the last.
    pub next_cursor: Option<AuditCursor>,
}

/// A call's end as the audit log keeps it: never its arguments or result.
#[derive(Clone, Debug, PartialEq)]
pub struct AuditRecord {
    /// The call's server-assigned id.
    pub tool_call_id: ToolCallId,
    /// The agent the call went to (`None` for find_tools and a turn without one).
    pub agent_id: Option<AgentId>,
    /// The chat.
    pub chat_id: ChatId,
    /// The turn.
    pub turn_id: TurnId,
    /// The caller's id.
    pub call_id: String,
    /// The model-facing name called.
    pub name: String,
    /// The server (`ctxsync` for find_tools; empty when the name resolved to nothing).
    pub server: String,
    /// The tool's own name on its server (empty when the name resolved to nothing).
    pub tool: String,
    /// How the call ended.
    pub status: CallStatus,
    /// For `refused` and `unknown`.
    pub reason: Option<CallReason>,
    /// For `error`: the error's code.
    pub error_code: Option<i64>,
    /// How long it ran.
    pub duration_ms: Option<u64>,
    /// The arguments' HMAC-SHA256 under the deployment's key, lower-case hex.
    pub arguments_digest: String,
    /// Length of the canonical arguments in bytes.
    pub arguments_size: u64,
    /// Length of the stored result JSON in bytes (`None` without a result).
    pub result_size: Option<u64>,
    /// The result was cut to fit the agent's cap.
    pub truncated: bool,
    /// When the end was recorded.
    pub ended_at: DateTime<Utc>,
}

/// The declared columns of a `tool_call_audit` row (see `schema.rs`).
#[derive(Queryable, Selectable)]
#[diesel(table_name = tool_call_audit)]
#[cfg_attr(
    all(feature = "postgres", feature = "sqlite"),
    diesel(check_for_backend(diesel::pg::Pg, diesel::sqlite::Sqlite))
)]
struct AuditRow {
    tool_call_id: ToolCallKey,
    agent_id: Option<AgentId>,
    chat_id: ChatId,
    turn_id: TurnId,
    call_id: String,
    name: String,
    server: String,
    tool: String,
    status: String,
    reason: Option<String>,
    error_code: Option<i64>,
    duration_ms: Option<i64>,
    arguments_digest: String,
    arguments_size: i64,
    result_size: Option<i64>,
    ended_at: DbTime,
}

/// The column past diesel's 16, table-qualified.
fn truncated() -> diesel::expression::SqlLiteral<diesel::sql_types::Bool> {
    diesel::dsl::sql::<diesel::sql_types::Bool>("tool_call_audit.truncated")
}

impl AuditRecord {
    /// The row's place in the log's order.
    fn position(&self) -> AuditCursor {
        AuditCursor {
            at: self.ended_at,
            id: self.tool_call_id.as_uuid(),
        }
    }
}

impl AuditRow {
    fn into_record(self, truncated: bool) -> Result<AuditRecord, StoreError> {
        let id = ToolCallId::from(self.tool_call_id);
        let corrupt = |what: &str, value: &str| {
            StoreError::Corrupt(format!("audit of tool call {id}: unknown {what} {value:?}"))
        };
        Ok(AuditRecord {
            tool_call_id: id,
            agent_id: self.agent_id,
            chat_id: self.chat_id,
            turn_id: self.turn_id,
            status: CallStatus::parse(&self.status)
                .ok_or_else(|| corrupt("status", &self.status))?,
            reason: self
                .reason
                .map(|r| CallReason::parse(&r).ok_or_else(|| corrupt("reason", &r)))
                .transpose()?,
            call_id: self.call_id,
            name: self.name,
            server: self.server,
            tool: self.tool,
            error_code: self.error_code,
            duration_ms: self
                .duration_ms
                .map(|d| stored_u64("duration_ms", d))
                .transpose()?,
            arguments_digest: self.arguments_digest,
            arguments_size: stored_u64("arguments size", self.arguments_size)?,
            result_size: self
                .result_size
                .map(|s| stored_u64("result size", s))
                .transpose()?,
            truncated,
            ended_at: self.ended_at.0,
        })
    }
}

impl Store {
    /// A page of the audit log, newest first. [`StoreError::InvalidInput`] naming `limit`
    /// for a limit outside 1..=[`MAX_AUDIT_PAGE`].
    pub async fn list_tool_call_audit(&self, query: &AuditQuery) -> Result<AuditPage, StoreError> {
        let limit = page_limit(query)?;
        let query = query.clone();
        let rows = self
            .with_conn(move |conn, _| {
                conn.single_statement(|tx| tool_call_rows(tx, &query, fetch(limit)))
            })
            .await?;
        let (rows, next_cursor) = paged(rows, limit, AuditRecord::position);
        Ok(AuditPage { rows, next_cursor })
    }

    /// Deletes the audit log's entries of every kind recorded before `older_than` (a
    /// call's at its end), a batch per statement, and answers how many went.
    pub async fn prune_tool_call_audit(
        &self,
        older_than: DateTime<Utc>,
    ) -> Result<u64, StoreError> {
        let mut pruned = 0;
        for prune in [prune_batch, sign_in::prune_batch] {
            loop {
                let deleted = self
                    .with_conn(move |conn, _| conn.single_statement(|tx| prune(tx, older_than)))
                    .await?;
                pruned += deleted as u64;
                if (deleted as i64) < PRUNE_BATCH {
                    break;
                }
            }
        }
        Ok(pruned)
    }
}

/// The query's page size, checked: [`StoreError::InvalidInput`] naming `limit` outside
/// 1..=[`MAX_AUDIT_PAGE`].
fn page_limit(query: &AuditQuery) -> Result<u32, StoreError> {
    let limit = query.limit.unwrap_or(DEFAULT_AUDIT_PAGE);
    if !(1..=MAX_AUDIT_PAGE).contains(&limit) {
        return Err(StoreError::InvalidInput(format!(
            "limit: {limit} is outside 1..={MAX_AUDIT_PAGE}"
        )));
    }
    Ok(limit)
}

/// Rows to read for a page of `limit`: one more than asked, which says whether a next
/// page exists.
fn fetch(limit: u32) -> i64 {
    i64::from(limit) + 1
}

/// The first `limit` of `rows` (newest first, [`fetch`] of them at most), and the cursor
/// after the last of them when more were read.
fn paged<T>(
    mut rows: Vec<T>,
    limit: u32,
    position: impl Fn(&T) -> AuditCursor,
) -> (Vec<T>, Option<AuditCursor>) {
    let more = rows.len() > limit as usize;
    rows.truncate(limit as usize);
    let next_cursor = more.then(|| rows.last().map(position)).flatten();
    (rows, next_cursor)
}

/// Up to `fetch` tool-call rows `query` finds (its limit aside), newest first.
fn tool_call_rows(
    tx: &mut Tx<'_>,
    query: &AuditQuery,
    fetch: i64,
) -> Result<Vec<AuditRecord>, StoreError> {
    use tool_call_audit::dsl as a;
    let rows: Vec<(AuditRow, bool)> = on_backend!(tx, |c| {
        let mut select = a::tool_call_audit
            .select((AuditRow::as_select(), truncated()))
            .order((a::ended_at.desc(), a::tool_call_id.desc()))
            .limit(fetch)
            .into_boxed();
        if let Some(agent) = query.agent {
            select = select.filter(a::agent_id.eq(agent));
        }
        if let Some(chat) = query.chat {
            select = select.filter(a::chat_id.eq(chat));
        }
        if let Some(since) = query.since {
            select = select.filter(a::ended_at.ge(DbTime(since)));
        }
        if let Some(AuditCursor { at, id }) = query.cursor {
            let (at, id) = (DbTime(at), ToolCallKey::from_uuid(id));
            select = select.filter(
                a::ended_at
                    .lt(at)
                    .or(a::ended_at.eq(at).and(a::tool_call_id.lt(id))),
            );
        }
        select.load(c)
    })?;
    rows.into_iter()
        .map(|(row, truncated)| row.into_record(truncated))
        .collect()
}

/// Deletes up to [`PRUNE_BATCH`] rows that ended before `older_than`, oldest first. The
/// batch is chosen over an alias (diesel refuses a subquery over the table a DELETE
/// targets).
fn prune_batch(tx: &mut Tx<'_>, older_than: DateTime<Utc>) -> Result<usize, StoreError> {
    let old = diesel::alias!(tool_call_audit as old);
    let batch = old
        .filter(old.field(tool_call_audit::ended_at).lt(DbTime(older_than)))
        .order(old.field(tool_call_audit::ended_at))
        .select(old.field(tool_call_audit::tool_call_id))
        .limit(PRUNE_BATCH);
    let delete =
        diesel::delete(tool_call_audit::table.filter(tool_call_audit::tool_call_id.eq_any(batch)));
    Ok(on_backend!(tx, |c| delete.execute(c))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_read_back_and_refuse_what_no_page_answered() {
        let cursor = AuditCursor {
            at: DateTime::from_timestamp_micros(1_780_000_000_123_456).unwrap(),
            id: uuid::Uuid::new_v4(),
        };
        assert_eq!(cursor.to_string().parse::<AuditCursor>().unwrap(), cursor);
        let forged = URL_SAFE_NO_PAD.encode("12/not-a-uuid");
        for bad in ["", "!!", "bm9wZQ", forged.as_str(), &"A".repeat(200)] {
            let error = bad.parse::<AuditCursor>().unwrap_err();
            assert!(error.to_string().contains("cursor"), "{bad:?}: {error}");
        }
    }
}
