//! The first-turn gate's attempt log: per (chat, agent, run id), when the gate's wait
//! started and how it ended, so every replica — and a restarted one — knows that a run's
//! first turn already spent its wait (SPEC §8, §11).
//!
//! The rows are the gate's bookkeeping, not context: writing them notifies nobody. A
//! chat or agent that does not exist (any more) has no attempts; recording one for it
//! is a no-op rather than an error, since the gate also waits for chats it never saw.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use ctxsync_protocol::RunId;
use diesel::prelude::*;

use crate::db::{Tx, on_backend};
use crate::error::StoreError;
use crate::ids::{AgentId, ChatId};
use crate::schema::{chats, gate_attempts, workspace_agents};
use crate::sql_types::DbTime;
use crate::store::Store;

/// One gate attempt as stored. Times are the writing replica's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GateAttemptRecord {
    /// When the attempt started; for an end recorded without a start, when it ended.
    pub started_at: DateTime<Utc>,
    /// The longest the attempt may wait from `started_at`.
    pub wait_limit: Duration,
    /// `None` while the attempt waits, or when the replica waiting died first.
    pub ended_at: Option<DateTime<Utc>>,
    /// The attempt ended because its budget (or grace) ran out.
    pub timed_out: bool,
}

#[derive(Queryable, Selectable)]
#[diesel(table_name = gate_attempts)]
#[cfg_attr(
    all(feature = "postgres", feature = "sqlite"),
    diesel(check_for_backend(diesel::pg::Pg, diesel::sqlite::Sqlite))
)]
struct GateAttemptRow {
    started_at: DbTime,
    wait_limit_ms: i64,
    ended_at: Option<DbTime>,
    timed_out: bool,
}

impl From<GateAttemptRow> for GateAttemptRecord {
    fn from(row: GateAttemptRow) -> Self {
        Self {
            started_at: row.started_at.0,
            wait_limit: Duration::from_millis(u64::try_from(row.wait_limit_ms).unwrap_or(0)),
            ended_at: row.ended_at.map(|t| t.0),
            timed_out: row.timed_out,
        }
    }
}

#[derive(Insertable)]
#[diesel(table_name = gate_attempts)]
struct NewGateAttempt<'a> {
    chat_id: ChatId,
    agent_id: AgentId,
    agent_run_id: &'a str,
    started_at: DbTime,
    wait_limit_ms: i64,
    ended_at: Option<DbTime>,
    timed_out: bool,
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// Whether both ends of the attempt's foreign keys exist.
fn chat_and_agent_exist(tx: &mut Tx<'_>, chat: ChatId, agent: AgentId) -> Result<bool, StoreError> {
    let chat_exists: bool = on_backend!(tx, |c| diesel::select(diesel::dsl::exists(
        chats::table.find(chat)
    ))
    .get_result(c))?;
    if !chat_exists {
        return Ok(false);
    }
    let agent_exists: bool = on_backend!(tx, |c| diesel::select(diesel::dsl::exists(
        workspace_agents::table.find(agent)
    ))
    .get_result(c))?;
    Ok(agent_exists)
}

pub(crate) fn read(
    tx: &mut Tx<'_>,
    chat: ChatId,
    agent: AgentId,
    run: &str,
) -> Result<Option<GateAttemptRecord>, StoreError> {
    let row = on_backend!(tx, |c| gate_attempts::table
        .find((chat, agent, run))
        .select(GateAttemptRow::as_select())
        .first(c)
        .optional())?;
    Ok(row.map(GateAttemptRecord::from))
}

pub(crate) fn start(
    tx: &mut Tx<'_>,
    chat: ChatId,
    agent: AgentId,
    run: &str,
    now: DbTime,
    wait_limit: Duration,
    forget_before: DbTime,
) -> Result<bool, StoreError> {
    use gate_attempts::dsl as g;
    if !chat_and_agent_exist(tx, chat, agent)? {
        return Ok(false);
    }
    // The pair's other runs, once long over, can no longer spare anyone a wait.
    let forgotten = diesel::delete(
        g::gate_attempts
            .filter(g::chat_id.eq(chat))
            .filter(g::agent_id.eq(agent))
            .filter(g::agent_run_id.ne(run))
            .filter(g::started_at.lt(forget_before))
            .filter(
                g::ended_at
                    .is_null()
                    .or(g::ended_at.assume_not_null().lt(forget_before)),
            ),
    );
    on_backend!(tx, |c| forgotten.execute(c))?;
    let row = NewGateAttempt {
        chat_id: chat,
        agent_id: agent,
        agent_run_id: run,
        started_at: now,
        wait_limit_ms: millis(wait_limit),
        ended_at: None,
        timed_out: false,
    };
    let upsert = diesel::insert_into(g::gate_attempts)
        .values(&row)
        .on_conflict((g::chat_id, g::agent_id, g::agent_run_id))
        .do_update()
        .set((
            g::started_at.eq(now),
            g::wait_limit_ms.eq(millis(wait_limit)),
            g::ended_at.eq(None::<DbTime>),
            g::timed_out.eq(false),
        ));
    on_backend!(tx, |c| upsert.execute(c))?;
    Ok(true)
}

pub(crate) fn end(
    tx: &mut Tx<'_>,
    chat: ChatId,
    agent: AgentId,
    run: &str,
    now: DbTime,
    timed_out: bool,
) -> Result<bool, StoreError> {
    use gate_attempts::dsl as g;
    if !chat_and_agent_exist(tx, chat, agent)? {
        return Ok(false);
    }
    // An end without a start (a wait re-keyed to the run it observed) starts and ends now.
    let row = NewGateAttempt {
        chat_id: chat,
        agent_id: agent,
        agent_run_id: run,
        started_at: now,
        wait_limit_ms: 0,
        ended_at: Some(now),
        timed_out,
    };
    let upsert = diesel::insert_into(g::gate_attempts)
        .values(&row)
        .on_conflict((g::chat_id, g::agent_id, g::agent_run_id))
        .do_update()
        .set((g::ended_at.eq(Some(now)), g::timed_out.eq(timed_out)));
    on_backend!(tx, |c| upsert.execute(c))?;
    Ok(true)
}

impl Store {
    /// The gate attempt recorded for (chat, agent, run); `run` is `None` for a legacy
    /// agent (stored under the column's `''`).
    pub async fn read_gate_attempt(
        &self,
        chat: ChatId,
        agent: AgentId,
        run: Option<&RunId>,
    ) -> Result<Option<GateAttemptRecord>, StoreError> {
        let run = RunId::edge(run).to_owned();
        self.with_conn(move |conn, _| conn.read(|tx| read(tx, chat, agent, &run)))
            .await
    }

    /// Records that a gate attempt for (chat, agent, run) starts now and may wait up to
    /// `wait_limit`, replacing any earlier record of that run, and forgets the pair's other runs whose attempts
    /// ended (or, never ended, started) more than `forget_after` ago. Returns `false`,
    /// with nothing written, when the chat or the agent does not exist.
    pub async fn start_gate_attempt(
        &self,
        chat: ChatId,
        agent: AgentId,
        run: Option<&RunId>,
        wait_limit: Duration,
        forget_after: Duration,
    ) -> Result<bool, StoreError> {
        let run = RunId::edge(run).to_owned();
        self.with_conn(move |conn, _| {
            let now = Utc::now();
            let forget_before = TimeDelta::from_std(forget_after)
                .ok()
                .and_then(|age| now.checked_sub_signed(age))
                .unwrap_or_default();
            conn.write(|tx| {
                start(
                    tx,
                    chat,
                    agent,
                    &run,
                    DbTime(now),
                    wait_limit,
                    DbTime(forget_before),
                )
            })
        })
        .await
    }

    /// Records that the gate attempt for (chat, agent, run) ended now, completed or
    /// timed out; without a recorded start, it is recorded as starting now. Returns
    /// `false`, with nothing written, when the chat or the agent does not exist.
    pub async fn end_gate_attempt(
        &self,
        chat: ChatId,
        agent: AgentId,
        run: Option<&RunId>,
        timed_out: bool,
    ) -> Result<bool, StoreError> {
        let run = RunId::edge(run).to_owned();
        self.with_conn(move |conn, _| {
            conn.write(|tx| end(tx, chat, agent, &run, DbTime(Utc::now()), timed_out))
        })
        .await
    }
}
