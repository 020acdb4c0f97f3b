//! [`StoreSource`]: the gate's [`DiscoverySource`] over persistence and the chat
//! projection; [`StoreAttemptLog`], its attempts in the store; and [`StoreGate`], the
//! gate the server runs over both.
//!
//! Reads go through the projection (one `read_agent_context` read transaction, projected
//! once), so the gate's counts, the turn's tools and the model note come from the same
//! view the chat API shows. Wake-ups come from `Store::subscribe_agent`: delivered after
//! commit, in-process on SQLite and through LISTEN/NOTIFY on PostgreSQL, so a push
//! committed by another server replica releases this one's waiters. Attempts are rows
//! of persistence's gate attempt log, so any replica knows a run already waited.

use std::time::{Duration, SystemTime};

use ctxsync_chat_projection::store::load_agent_view;
use ctxsync_chat_projection::{Binding, EligibleTool, View, project};
use ctxsync_persistence::{
    AgentId, AgentSubscription, ChatId, GateAttemptRecord, Store, StoreError,
};
use ctxsync_protocol::RunId;

use crate::attempt_log::{AttemptLog, AttemptRecord, AttemptResult, RecordedEnd};
use crate::config::GateConfig;
use crate::gate::FirstTurnGate;
use crate::source::{ChangeSubscription, DiscoverySource, SourceError, TurnInventory};

/// The first-turn gate over the real store, its attempts recorded there too.
pub type StoreGate = FirstTurnGate<StoreSource, StoreAttemptLog>;

impl FirstTurnGate<StoreSource, StoreAttemptLog> {
    /// The gate a server replica runs: reads, wake-ups and the attempt log all from
    /// `store`.
    pub fn over_store(store: Store, config: GateConfig) -> Self {
        Self::with_attempt_log(
            StoreSource::new(store.clone()),
            StoreAttemptLog::new(store),
            config,
        )
    }
}

/// The gate's attempts as rows of the store (`gate_attempts`), shared by every replica
/// on the database and kept across restarts. Ages are measured on this replica's clock
/// against the writer's, so clock skew between replicas shifts a budget or a retention
/// by the skew, never more.
#[derive(Clone, Debug)]
pub struct StoreAttemptLog {
    store: Store,
}

impl StoreAttemptLog {
    /// The attempt log in `store`'s `gate_attempts` table.
    pub fn new(store: Store) -> Self {
        Self { store }
    }
}

/// How long before `now` the stored time `then` was; zero for a writer's clock ahead.
fn age(now: SystemTime, then: impl Into<SystemTime>) -> Duration {
    now.duration_since(then.into()).unwrap_or_default()
}

fn record(stored: GateAttemptRecord) -> AttemptRecord {
    let now = SystemTime::now();
    AttemptRecord {
        started_ago: age(now, stored.started_at),
        wait_limit: stored.wait_limit,
        end: stored.ended_at.map(|ended_at| RecordedEnd {
            ago: age(now, ended_at),
            result: if stored.timed_out {
                AttemptResult::TimedOut
            } else {
                AttemptResult::Completed
            },
        }),
    }
}

impl AttemptLog<ChatId, AgentId> for StoreAttemptLog {
    async fn read(
        &self,
        chat: &ChatId,
        agent: &AgentId,
        run: Option<&RunId>,
    ) -> Result<Option<AttemptRecord>, SourceError> {
        let stored = self
            .store
            .read_gate_attempt(*chat, *agent, run)
            .await
            .map_err(unavailable)?;
        Ok(stored.map(record))
    }

    async fn record_start(
        &self,
        chat: &ChatId,
        agent: &AgentId,
        run: Option<&RunId>,
        wait_limit: Duration,
        forget_after: Duration,
    ) -> Result<(), SourceError> {
        self.store
            .start_gate_attempt(*chat, *agent, run, wait_limit, forget_after)
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    async fn record_end(
        &self,
        chat: &ChatId,
        agent: &AgentId,
        run: Option<&RunId>,
        result: AttemptResult,
    ) -> Result<(), SourceError> {
        let timed_out = result == AttemptResult::TimedOut;
        self.store
            .end_gate_attempt(*chat, *agent, run, timed_out)
            .await
            .map_err(unavailable)?;
        Ok(())
    }
}

/// Committed discovery state from a [`Store`], read through the chat projection.
#[derive(Clone, Debug)]
pub struct StoreSource {
    store: Store,
}

impl StoreSource {
    /// Reads and wake-ups from `store`, through the chat projection.
    pub fn new(store: Store) -> Self {
        Self { store }
    }

    /// The store this source reads.
    pub fn store(&self) -> &Store {
        &self.store
    }
}

/// Wakes on every committed change event for one agent (and on `Resync`, when events
/// may have been lost); the event's content is ignored.
#[derive(Debug)]
pub struct StoreSubscription {
    events: AgentSubscription,
}

impl ChangeSubscription for StoreSubscription {
    async fn changed(&mut self) -> bool {
        self.events.next().await.is_some()
    }
}

/// The message callers see; the cause goes to the gate's log only.
fn unavailable(error: StoreError) -> SourceError {
    let message = match &error {
        StoreError::Unavailable(_) | StoreError::Conflict(_) | StoreError::Database(_) => {
            "database unavailable"
        }
        StoreError::Corrupt(_) => "stored agent context could not be read",
        _ => "reading agent context failed",
    };
    SourceError::with_cause(message, error)
}

impl DiscoverySource for StoreSource {
    type ChatId = ChatId;
    type AgentId = AgentId;
    type Tool = EligibleTool;
    type Subscription = StoreSubscription;

    async fn subscribe(&self, agent: &AgentId) -> Result<StoreSubscription, SourceError> {
        Ok(StoreSubscription {
            events: self.store.subscribe_agent(*agent),
        })
    }

    async fn read_discovery(&self, _chat: &ChatId, agent: &AgentId) -> Result<View, SourceError> {
        load_agent_view(&self.store, *agent)
            .await
            .map_err(unavailable)
    }

    /// An unknown chat is bound to nothing.
    async fn bound_agent(&self, chat: &ChatId) -> Result<Option<AgentId>, SourceError> {
        let chat = self.store.get_chat(*chat).await.map_err(unavailable)?;
        Ok(chat.and_then(|chat| chat.agent_id))
    }

    /// The bound agent's view from one read, with its eligible tools (none when stale).
    /// An unbound chat has the unbound view: unknown, nothing to offer.
    async fn turn_inventory(
        &self,
        _chat: &ChatId,
        agent: Option<&AgentId>,
    ) -> Result<TurnInventory<EligibleTool>, SourceError> {
        let view = match agent {
            Some(agent) => load_agent_view(&self.store, *agent)
                .await
                .map_err(unavailable)?,
            None => project(&Binding::NoAgent),
        };
        Ok(TurnInventory {
            tools: view.tools().iter().cloned().collect(),
            view,
        })
    }
}
