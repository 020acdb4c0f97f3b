//! Tool calls across replicas (issue 37), as stored: which replica holds each agent's
//! call stream, and every step of a call as a compare-and-set.
//!
//! An agent's stream is held under a fenced lease: `call_streams` names the replica, the
//! run and a generation that grows with every stream the agent opens anywhere. A call is
//! *pending* (`running`, not delivered) until the holder claims it, which succeeds only
//! while the holder's generation is the row's and its lease has not lapsed; the claim
//! takes the arguments out of the store and records the generation. `agent_unreachable`
//! ends only a pending call, and a call delivered under a generation that is no longer
//! live (the agent reconnected elsewhere, or the holder stopped renewing) ends `unknown`
//! `stream_lost`: on the new stream's registration, or by any replica's sweep.
//!
//! The same row says whether the agent is connected (issue 49, [`agent_connection`]): a
//! stream that ends keeps its row, marked with when this replica saw it end, until the
//! agent opens another; each change of it notifies the agent's topic, so the panel and
//! the gate re-read.
//!
//! Must never: deliver for a replica whose lease lapsed; end a delivered call
//! `agent_unreachable`; read a lease with another clock than milliseconds since the
//! epoch of the replica's own clock (replicas' clocks are assumed NTP-close: a lease is
//! seconds long).

use chrono::Utc;
use ctxsync_mcp_model::{CallEnd, CallReason, CallStatus};
use ctxsync_protocol::RunId;
use diesel::prelude::*;

use crate::agents::{RowLock, lock_agent};
use crate::db::{Tx, on_backend};
use crate::error::StoreError;
use ctxsync_protocol::tool_call::ToolCallId;

use crate::ids::{AgentId, ToolCallKey};
use crate::model::AgentConnection;
use crate::notify::{CallChange, ChangeEvent};
use crate::schema::{call_streams, tool_call_ends, tool_calls, workspace_agents};
use crate::shared::{agent_event, notify_in_tx};
use crate::sql_types::DbTime;
use crate::store::Store;
use crate::tool_call::admission::{
    PreparedEnd, ToolCallRecord, ToolCallRow, end_row, find_call_by_id, load_calls,
};

/// A replica's hold on an agent's stream, as registered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamLease {
    /// The agent.
    pub agent: AgentId,
    /// Its generation: the fence every claim checks.
    pub generation: u64,
}

/// Milliseconds since the Unix epoch on this replica's clock.
pub(crate) fn now_ms() -> i64 {
    Utc::now().timestamp_millis()
}

fn lease_until(lease: std::time::Duration) -> i64 {
    now_ms().saturating_add(i64::try_from(lease.as_millis()).unwrap_or(i64::MAX))
}

fn generation_of(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

impl Store {
    /// Registers a stream of `agent`'s run `run` on `replica` with a lease of `lease`:
    /// the next generation, fencing any older stream of the agent (on any replica). Calls
    /// an older generation delivered end `unknown` `stream_lost` here (their stream is
    /// gone: the agent cancels what a dropped stream held). `None` when `run` is not the
    /// agent's current run (or the agent is gone).
    pub async fn register_call_stream(
        &self,
        agent: AgentId,
        run: &RunId,
        replica: &str,
        lease: std::time::Duration,
    ) -> Result<Option<(StreamLease, Vec<ToolCallRecord>)>, StoreError> {
        let run = run.as_str().to_owned();
        let replica = replica.to_owned();
        let answer = self
            .with_conn(move |conn, origin| {
                conn.write(|tx| {
                    let current = match lock_agent(tx, agent, RowLock::Share) {
                        Ok(row) => row.agent_run_id,
                        Err(StoreError::AgentNotFound(_)) => return Ok(None),
                        Err(e) => return Err(e),
                    };
                    if current != run {
                        return Ok(None);
                    }
                    let previous: Option<i64> = on_backend!(tx, |c| call_streams::table
                        .find(agent)
                        .select(call_streams::generation)
                        .first(c)
                        .optional())?;
                    let generation = previous.unwrap_or(0).saturating_add(1);
                    let row = (
                        call_streams::agent_id.eq(agent),
                        call_streams::agent_run_id.eq(&run),
                        call_streams::generation.eq(generation),
                        call_streams::replica.eq(&replica),
                        call_streams::lease_until_ms.eq(lease_until(lease)),
                        call_streams::ended_at_ms.eq(None::<i64>),
                    );
                    let upsert = diesel::insert_into(call_streams::table)
                        .values(row)
                        .on_conflict(call_streams::agent_id)
                        .do_update()
                        .set(row);
                    on_backend!(tx, |c| upsert.execute(c))?;
                    let mut events = Vec::new();
                    let lost = end_delivered_except(tx, origin, agent, generation, &mut events)?;
                    // The agent is connected now: its chats' panels say so.
                    let online = agent_event(agent, None);
                    notify_in_tx(tx, origin, &online)?;
                    events.push(online);
                    let lease = StreamLease {
                        agent,
                        generation: generation_of(generation),
                    };
                    Ok(Some((lease, lost, events)))
                })
            })
            .await?;
        Ok(answer.map(|(lease, lost, events)| {
            self.deliver_all(&events);
            (lease, lost)
        }))
    }

    /// Renews `replica`'s leases and answers the streams it still holds: one missing
    /// from the answer was taken over (a newer generation) and must stop.
    pub async fn renew_call_streams(
        &self,
        replica: &str,
        lease: std::time::Duration,
    ) -> Result<Vec<StreamLease>, StoreError> {
        let replica = replica.to_owned();
        self.with_conn(move |conn, _| {
            conn.single_statement(|tx| {
                let update = diesel::update(
                    call_streams::table
                        .filter(call_streams::replica.eq(&replica))
                        .filter(call_streams::ended_at_ms.is_null()),
                )
                .set(call_streams::lease_until_ms.eq(lease_until(lease)))
                .returning((call_streams::agent_id, call_streams::generation));
                let held: Vec<(AgentId, i64)> = on_backend!(tx, |c| update.get_results(c))?;
                Ok(held
                    .into_iter()
                    .map(|(agent, generation)| StreamLease {
                        agent,
                        generation: generation_of(generation),
                    })
                    .collect())
            })
        })
        .await
    }

    /// The stream `lease` names is gone: unless a newer stream replaced it, its row is
    /// marked ended now (its lease lapsed with it) and the agent's chats hear the agent
    /// went offline; the calls it delivered end `unknown` `stream_lost`. Answers them as
    /// ended.
    pub async fn release_call_stream(
        &self,
        lease: &StreamLease,
    ) -> Result<Vec<ToolCallRecord>, StoreError> {
        let (agent, generation) = (lease.agent, to_generation(lease.generation)?);
        let (lost, events) = self
            .with_conn(move |conn, origin| {
                conn.write(|tx| {
                    let mut events = Vec::new();
                    let ours = call_streams::table
                        .find(agent)
                        .filter(call_streams::generation.eq(generation))
                        .filter(call_streams::ended_at_ms.is_null());
                    let agent_exists = match lock_agent(tx, agent, RowLock::Share) {
                        Ok(_) => true,
                        Err(StoreError::AgentNotFound(_)) => false,
                        Err(e) => return Err(e),
                    };
                    let changed = if agent_exists {
                        let at = now_ms();
                        let end = diesel::update(ours).set((
                            call_streams::ended_at_ms.eq(Some(at)),
                            call_streams::lease_until_ms.eq(at),
                        ));
                        on_backend!(tx, |c| end.execute(c))?
                    } else {
                        // Nobody will ask whether a deleted agent is online.
                        on_backend!(tx, |c| diesel::delete(ours).execute(c))?
                    };
                    if changed > 0 && agent_exists {
                        let offline = agent_event(agent, None);
                        notify_in_tx(tx, origin, &offline)?;
                        events.push(offline);
                    }
                    let lost = end_delivered_of(tx, origin, agent, generation, &mut events)?;
                    Ok((lost, events))
                })
            })
            .await?;
        self.deliver_all(&events);
        Ok(lost)
    }

    /// Claims pending call `id` for the stream `lease` (held by `replica`): marks it
    /// delivered under the lease's generation and answers it **with its arguments**,
    /// which leave the store here. `None` when the call is not pending, not the agent's
    /// current run's, or the lease is no longer this replica's live one.
    pub async fn claim_tool_call(
        &self,
        id: ToolCallId,
        lease: &StreamLease,
        replica: &str,
    ) -> Result<Option<ToolCallRecord>, StoreError> {
        let (agent, generation) = (lease.agent, to_generation(lease.generation)?);
        let replica = replica.to_owned();
        let claimed = self
            .with_conn(move |conn, origin| {
                conn.write(|tx| {
                    let stream: Option<(String, i64, String, i64)> =
                        on_backend!(tx, |c| call_streams::table
                            .find(agent)
                            .select((
                                call_streams::agent_run_id,
                                call_streams::generation,
                                call_streams::replica,
                                call_streams::lease_until_ms,
                            ))
                            .first(c)
                            .optional())?;
                    let Some((run, held, holder, until)) = stream else {
                        return Ok(None);
                    };
                    if held != generation || holder != replica || until <= now_ms() {
                        return Ok(None);
                    }
                    let Some(row) = find_call_by_id(tx, id)? else {
                        return Ok(None);
                    };
                    if !row.is_pending()
                        || row.agent_id != Some(agent)
                        || row.agent_run_id.as_deref() != Some(run.as_str())
                    {
                        return Ok(None);
                    }
                    let update = diesel::update(
                        tool_call_ends::table
                            .find(ToolCallKey::from(id))
                            .filter(tool_call_ends::status.eq(CallStatus::Running.as_str()))
                            .filter(tool_call_ends::delivered.eq(false)),
                    )
                    .set((
                        tool_call_ends::delivered.eq(true),
                        tool_call_ends::delivered_generation.eq(Some(generation)),
                        tool_call_ends::arguments.eq(None::<String>),
                    ));
                    if on_backend!(tx, |c| update.execute(c))? == 0 {
                        return Ok(None);
                    }
                    let event = row.event(CallChange::Delivered);
                    notify_in_tx(tx, origin, &event)?;
                    let mut record = row.into_record()?;
                    record.delivered = true;
                    Ok(Some((record, event)))
                })
            })
            .await?;
        Ok(claimed.map(|(record, event)| {
            self.deliver(&event);
            record
        }))
    }

    /// The running calls of the agents whose streams `replica` holds that need it: pending
    /// ones (`false`) and delivered ones someone asked to cancel (`true`), oldest first.
    /// The slow re-check for a wake-up that never arrived: one query per replica.
    pub async fn calls_awaiting_replica(
        &self,
        replica: &str,
    ) -> Result<Vec<(ToolCallId, AgentId, bool)>, StoreError> {
        let replica = replica.to_owned();
        self.with_conn(move |conn, _| {
            conn.single_statement(|tx| {
                let held = call_streams::table
                    .filter(call_streams::replica.eq(&replica))
                    .filter(call_streams::ended_at_ms.is_null())
                    .select(call_streams::agent_id.nullable());
                let query = tool_calls::table
                    .filter(tool_calls::status.eq(CallStatus::Running.as_str()))
                    .filter(tool_calls::agent_id.eq_any(held))
                    .filter(diesel::dsl::sql::<diesel::sql_types::Bool>(
                        "(NOT tool_calls.delivered OR tool_calls.cancel_requested)",
                    ))
                    .order((tool_calls::started_at, tool_calls::id))
                    .select((
                        tool_calls::id,
                        tool_calls::agent_id,
                        diesel::dsl::sql::<diesel::sql_types::Bool>("tool_calls.delivered"),
                    ));
                let rows: Vec<(ToolCallKey, Option<AgentId>, bool)> =
                    on_backend!(tx, |c| query.load(c))?;
                Ok(rows
                    .into_iter()
                    .filter_map(|(id, agent, delivered)| Some((id.into(), agent?, delivered)))
                    .collect())
            })
        })
        .await
    }

    /// The pending calls of `agent`, oldest first (for a stream that just opened).
    pub async fn pending_calls_of_agent(
        &self,
        agent: AgentId,
    ) -> Result<Vec<ToolCallId>, StoreError> {
        self.with_conn(move |conn, _| {
            conn.single_statement(|tx| {
                let query = tool_calls::table
                    .filter(tool_calls::agent_id.eq(agent))
                    .filter(tool_calls::status.eq(CallStatus::Running.as_str()))
                    .filter(diesel::dsl::sql::<diesel::sql_types::Bool>(
                        "NOT tool_calls.delivered",
                    ))
                    .order((tool_calls::started_at, tool_calls::id))
                    .select(tool_calls::id);
                let ids: Vec<ToolCallKey> = on_backend!(tx, |c| query.load(c))?;
                Ok(ids.into_iter().map(ToolCallId::from).collect())
            })
        })
        .await
    }

    /// Ends call `id` with `end` only if it is still pending (never delivered): how
    /// `agent_unreachable` and a cancel before delivery are recorded. Answers the call as
    /// stored afterwards (ended by this or not); `None` when there is no such call.
    pub async fn end_pending_tool_call(
        &self,
        id: ToolCallId,
        end: &CallEnd,
    ) -> Result<Option<ToolCallRecord>, StoreError> {
        let end = PreparedEnd::new(end, None)?;
        let answer = self
            .with_conn(move |conn, origin| {
                conn.write(|tx| {
                    let Some(row) = find_call_by_id(tx, id)? else {
                        return Ok(None);
                    };
                    let mut events = Vec::new();
                    let row = if row.is_pending() {
                        end_row(tx, origin, row, &end, DbTime(Utc::now()), &mut events)?
                    } else {
                        row
                    };
                    Ok(Some((row.into_record()?, events)))
                })
            })
            .await?;
        Ok(answer.map(|(record, events)| {
            self.deliver_all(&events);
            record
        }))
    }

    /// Asks the replica holding call `id`'s stream to cancel it (a flag and an event);
    /// answers the call as stored, `None` when there is no such call.
    pub async fn request_tool_call_cancel(
        &self,
        id: ToolCallId,
    ) -> Result<Option<ToolCallRecord>, StoreError> {
        let answer = self
            .with_conn(move |conn, origin| {
                conn.write(|tx| {
                    let Some(mut row) = find_call_by_id(tx, id)? else {
                        return Ok(None);
                    };
                    let mut event = None;
                    if row.status == CallStatus::Running.as_str() && !row.cancel_requested {
                        let update =
                            diesel::update(tool_call_ends::table.find(ToolCallKey::from(id)))
                                .set(tool_call_ends::cancel_requested.eq(true));
                        on_backend!(tx, |c| update.execute(c))?;
                        row.cancel_requested = true;
                        let changed = row.event(CallChange::CancelRequested);
                        notify_in_tx(tx, origin, &changed)?;
                        event = Some(changed);
                    }
                    Ok(Some((row.into_record()?, event)))
                })
            })
            .await?;
        Ok(answer.map(|(record, event)| {
            if let Some(event) = event {
                self.deliver(&event);
            }
            record
        }))
    }

    /// Wakes the subscribers of agents whose stream lease ran out after `after_ms` (up to
    /// now) without being renewed or released — their replica died — so their chats
    /// re-read and say offline without waiting for a slow re-check. Answers the end of
    /// the window, the next call's `after_ms`; `None` only marks it. Every replica's
    /// keeper calls it each round: a second wake-up only costs a re-read.
    pub async fn announce_lapsed_call_streams(
        &self,
        after_ms: Option<i64>,
    ) -> Result<i64, StoreError> {
        let now = now_ms();
        let Some(after_ms) = after_ms else {
            return Ok(now);
        };
        let lapsed = move |tx: &mut Tx<'_>| -> Result<Vec<AgentId>, StoreError> {
            let query = call_streams::table
                .filter(call_streams::ended_at_ms.is_null())
                .filter(call_streams::lease_until_ms.gt(after_ms))
                .filter(call_streams::lease_until_ms.le(now))
                .select(call_streams::agent_id);
            Ok(on_backend!(tx, |c| query.load(c))?)
        };
        // Almost always nothing: look without taking a write lock.
        let found = self
            .with_conn(move |conn, _| conn.single_statement(lapsed))
            .await?;
        if found.is_empty() {
            return Ok(now);
        }
        let events = self
            .with_conn(move |conn, origin| {
                conn.write(|tx| {
                    let mut events = Vec::new();
                    for &agent in &found {
                        let offline = agent_event(agent, None);
                        notify_in_tx(tx, origin, &offline)?;
                        events.push(offline);
                    }
                    Ok(events)
                })
            })
            .await?;
        self.deliver_all(&events);
        Ok(now)
    }

    /// How many agents are connected now ([`AgentConnection::Online`]): an open stream
    /// of the agent's current run under a live lease, on any replica (for `/metrics`).
    pub async fn connected_agents(&self) -> Result<u64, StoreError> {
        self.with_conn(move |conn, _| {
            conn.single_statement(|tx| {
                let query = call_streams::table
                    .inner_join(
                        workspace_agents::table.on(workspace_agents::id
                            .eq(call_streams::agent_id)
                            .and(workspace_agents::agent_run_id.eq(call_streams::agent_run_id))),
                    )
                    .filter(call_streams::ended_at_ms.is_null())
                    .filter(call_streams::lease_until_ms.gt(now_ms()))
                    .count();
                let count: i64 = on_backend!(tx, |c| query.get_result(c))?;
                Ok(u64::try_from(count).unwrap_or(0))
            })
        })
        .await
    }

    /// Any replica's sweep for calls nobody will end otherwise, answered as ended:
    /// delivered under a stream that is no longer live (replaced, released, or its lease
    /// lapsed: its replica died) → `unknown` `stream_lost`; pending for longer than
    /// `pending_limit` (the replica that took it died during the grace) →
    /// `agent_unreachable`.
    pub async fn sweep_tool_calls(
        &self,
        pending_limit: std::time::Duration,
    ) -> Result<Vec<ToolCallRecord>, StoreError> {
        let pending_before = DbTime(
            Utc::now() - chrono::Duration::from_std(pending_limit).unwrap_or(chrono::Duration::MAX),
        );
        // Almost always nothing: look first without taking a write lock.
        let found = self
            .with_conn(move |conn, _| {
                conn.read(|tx| Ok(!sweep_candidates(tx, pending_before)?.is_empty()))
            })
            .await?;
        if !found {
            return Ok(Vec::new());
        }
        let (ended, events) = self
            .with_conn(move |conn, origin| {
                conn.write(|tx| {
                    let lost_end = PreparedEnd::new(
                        &CallEnd::with_reason(CallStatus::Unknown, CallReason::StreamLost),
                        None,
                    )?;
                    let stale_end = PreparedEnd::new(
                        &CallEnd::with_reason(CallStatus::Refused, CallReason::AgentUnreachable),
                        None,
                    )?;
                    let at = DbTime(Utc::now());
                    let mut events = Vec::new();
                    let mut ended = Vec::new();
                    // Looked for again under the write: a candidate may have ended since.
                    for (id, lost) in sweep_candidates(tx, pending_before)? {
                        let end = if lost { &lost_end } else { &stale_end };
                        if let Some(row) = find_call_by_id(tx, id)? {
                            let row = end_row(tx, origin, row, end, at, &mut events)?;
                            ended.push(row.into_record()?);
                        }
                    }
                    Ok((ended, events))
                })
            })
            .await?;
        self.deliver_all(&events);
        Ok(ended)
    }
}

/// The running calls a sweep ends: `(id, true)` for one delivered under a stream that
/// is no longer live, `(id, false)` for one pending since before `pending_before`.
fn sweep_candidates(
    tx: &mut Tx<'_>,
    pending_before: DbTime,
) -> Result<Vec<(ToolCallId, bool)>, StoreError> {
    let lost = tool_calls::table
        .left_join(
            call_streams::table.on(call_streams::agent_id.nullable().eq(tool_calls::agent_id)),
        )
        .filter(tool_calls::status.eq(CallStatus::Running.as_str()))
        .filter(tool_calls::agent_id.is_not_null())
        .filter(
            diesel::dsl::sql::<diesel::sql_types::Bool>(
                "tool_calls.delivered AND (call_streams.generation IS NULL \
                 OR call_streams.generation <> tool_calls.delivered_generation \
                 OR call_streams.lease_until_ms <= ",
            )
            .bind::<diesel::sql_types::BigInt, _>(now_ms())
            .sql(")"),
        )
        .select(tool_calls::id);
    let lost: Vec<ToolCallKey> = on_backend!(tx, |c| lost.load(c))?;
    let stale = tool_calls::table
        .filter(tool_calls::status.eq(CallStatus::Running.as_str()))
        .filter(tool_calls::agent_id.is_not_null())
        .filter(tool_calls::started_at.lt(pending_before))
        .filter(diesel::dsl::sql::<diesel::sql_types::Bool>(
            "NOT tool_calls.delivered",
        ))
        .select(tool_calls::id);
    let stale: Vec<ToolCallKey> = on_backend!(tx, |c| stale.load(c))?;
    Ok(lost
        .into_iter()
        .map(|id| (id.into(), true))
        .chain(stale.into_iter().map(|id| (id.into(), false)))
        .collect())
}

/// Whether `agent`, whose current run is `current_run`, is connected, from its stream
/// row (see [`connection_of`]).
pub(crate) fn agent_connection(
    tx: &mut Tx<'_>,
    agent: AgentId,
    current_run: Option<&RunId>,
) -> Result<AgentConnection, StoreError> {
    if current_run.is_none() {
        // A legacy agent opens no stream.
        return Ok(AgentConnection::Never);
    }
    let row: Option<StreamState> = on_backend!(tx, |c| call_streams::table
        .find(agent)
        .select((
            call_streams::agent_run_id,
            call_streams::lease_until_ms,
            call_streams::ended_at_ms,
        ))
        .first(c)
        .optional())?;
    Ok(connection_of(row.as_ref(), current_run, now_ms()))
}

/// Every agent's stream row, in one read (for a list of agents: one query, not one each).
pub(crate) fn stream_states(
    tx: &mut Tx<'_>,
) -> Result<std::collections::HashMap<AgentId, StreamState>, StoreError> {
    let rows: Vec<(AgentId, String, i64, Option<i64>)> = on_backend!(tx, |c| call_streams::table
        .select((
            call_streams::agent_id,
            call_streams::agent_run_id,
            call_streams::lease_until_ms,
            call_streams::ended_at_ms,
        ))
        .load(c))?;
    Ok(rows
        .into_iter()
        .map(|(agent, run, lease, ended)| (agent, (run, lease, ended)))
        .collect())
}

/// A stream row's run id, lease end and end (milliseconds since the epoch).
pub(crate) type StreamState = (String, i64, Option<i64>);

/// Whether an agent whose current run is `current_run` is connected at `now_ms`, from its
/// stream row: none, or one of another run → never seen; ended, or its lease lapsed (its
/// replica stopped renewing it) → offline since then; otherwise online. Times are the
/// replicas' own clocks, never the agent's.
pub(crate) fn connection_of(
    row: Option<&StreamState>,
    current_run: Option<&RunId>,
    now_ms: i64,
) -> AgentConnection {
    let (Some((run, lease_until_ms, ended_at_ms)), Some(current_run)) = (row, current_run) else {
        return AgentConnection::Never;
    };
    if run != current_run.as_str() {
        return AgentConnection::Never;
    }
    let gone_at = match *ended_at_ms {
        Some(at) => at,
        None if *lease_until_ms <= now_ms => *lease_until_ms,
        None => return AgentConnection::Online,
    };
    let since = chrono::DateTime::from_timestamp_millis(gone_at).unwrap_or_default();
    AgentConnection::Offline { since }
}

fn to_generation(generation: u64) -> Result<i64, StoreError> {
    crate::model::to_i64("stream generation", generation)
}

/// Ends, `unknown` `stream_lost`, the running calls of `agent` delivered under any
/// generation but `keep`.
fn end_delivered_except(
    tx: &mut Tx<'_>,
    origin: u64,
    agent: AgentId,
    keep: i64,
    events: &mut Vec<ChangeEvent>,
) -> Result<Vec<ToolCallRecord>, StoreError> {
    end_delivered(tx, origin, agent, events, |generation| {
        generation != Some(keep)
    })
}

/// Ends, `unknown` `stream_lost`, the running calls of `agent` delivered under
/// `generation`.
fn end_delivered_of(
    tx: &mut Tx<'_>,
    origin: u64,
    agent: AgentId,
    generation: i64,
    events: &mut Vec<ChangeEvent>,
) -> Result<Vec<ToolCallRecord>, StoreError> {
    end_delivered(tx, origin, agent, events, |g| g == Some(generation))
}

fn end_delivered(
    tx: &mut Tx<'_>,
    origin: u64,
    agent: AgentId,
    events: &mut Vec<ChangeEvent>,
    matches: impl Fn(Option<i64>) -> bool,
) -> Result<Vec<ToolCallRecord>, StoreError> {
    let query = tool_calls::table
        .filter(tool_calls::agent_id.eq(agent))
        .filter(tool_calls::status.eq(CallStatus::Running.as_str()))
        .order((tool_calls::started_at, tool_calls::id));
    let rows: Vec<ToolCallRow> = load_calls!(tx, query, load)?
        .into_iter()
        .map(ToolCallRow::from)
        .filter(|row| row.delivered && matches(row.delivered_generation))
        .collect();
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let end = PreparedEnd::new(
        &CallEnd::with_reason(CallStatus::Unknown, CallReason::StreamLost),
        None,
    )?;
    let now = DbTime(Utc::now());
    rows.into_iter()
        .map(|row| end_row(tx, origin, row, &end, now, events)?.into_record())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(run: &str, lease_until_ms: i64, ended_at_ms: Option<i64>) -> StreamState {
        (run.to_owned(), lease_until_ms, ended_at_ms)
    }

    #[test]
    fn a_stream_row_reads_as_its_runs_connection() {
        let run = RunId::new("run-2").expect("a run id");
        let now = 10_000;
        let at = |ms| chrono::DateTime::from_timestamp_millis(ms).expect("a time");
        let cases = [
            (None, Some(&run), AgentConnection::Never),
            (
                Some(row("run-1", 20_000, None)),
                Some(&run),
                AgentConnection::Never,
            ),
            (
                Some(row("run-2", 20_000, None)),
                None,
                AgentConnection::Never,
            ),
            (
                Some(row("run-2", 20_000, None)),
                Some(&run),
                AgentConnection::Online,
            ),
            (
                Some(row("run-2", 20_000, Some(9_000))),
                Some(&run),
                AgentConnection::Offline { since: at(9_000) },
            ),
            // The replica stopped renewing: offline since the lease ran out.
            (
                Some(row("run-2", 8_000, None)),
                Some(&run),
                AgentConnection::Offline { since: at(8_000) },
            ),
        ];
        for (stream, current, expected) in cases {
            assert_eq!(
                connection_of(stream.as_ref(), current, now),
                expected,
                "{stream:?} of {current:?}"
            );
        }
    }
}
