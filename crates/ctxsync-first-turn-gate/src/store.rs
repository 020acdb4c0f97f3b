//! [`StoreSource`]: the gate's [`DiscoverySource`] over persistence and the chat
//! projection, and [`StoreGate`], the gate the server runs.
//!
//! Reads go through the projection (one `read_agent_context` read transaction, projected
//! once), so the gate's counts, the turn's tools and the model note come from the same
//! view the chat API shows. Wake-ups come from `Store::subscribe_agent`: delivered after
//! commit, in-process on SQLite and through LISTEN/NOTIFY on PostgreSQL, so a push
//! committed by another server replica releases this one's waiters.

use ctxsync_chat_projection::store::load_agent_view;
use ctxsync_chat_projection::{Binding, Counts, EligibleTool, project};
use ctxsync_persistence::{AgentId, AgentSubscription, ChatId, Store, StoreError};

use crate::gate::FirstTurnGate;
use crate::source::{
    ChangeSubscription, DiscoveryCounts, DiscoverySource, Observation, SnapshotObservation,
    SourceError, TurnInventory,
};

/// The first-turn gate over the real store.
pub type StoreGate = FirstTurnGate<StoreSource>;

/// Committed discovery state from a [`Store`], read through the chat projection.
#[derive(Clone, Debug)]
pub struct StoreSource {
    store: Store,
}

impl StoreSource {
    pub fn new(store: Store) -> Self {
        Self { store }
    }

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

fn counts(counts: Counts) -> DiscoveryCounts {
    let narrow = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    DiscoveryCounts {
        servers_ok: narrow(counts.servers_ok),
        servers_empty: narrow(counts.servers_empty),
        servers_failed: narrow(counts.servers_failed),
        config_errors: narrow(counts.config_errors),
    }
}

/// The gate's observation of one consistent read: run ids as stored, counts from the
/// projection of that same read.
fn observe(binding: &Binding) -> Observation {
    match binding {
        Binding::NoAgent | Binding::MissingAgent => Observation::AgentMissing,
        Binding::Agent(agent) => Observation::Agent {
            run_id: Some(agent.agent_run_id.clone()),
            snapshot: agent.snapshot.as_ref().map(|snapshot| SnapshotObservation {
                run_id: Some(snapshot.agent_run_id.clone()),
                phase: snapshot.phase,
                counts: counts(project(binding).counts()),
            }),
        },
    }
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

    async fn read_discovery(
        &self,
        _chat: &ChatId,
        agent: &AgentId,
    ) -> Result<Observation, SourceError> {
        let context = self
            .store
            .read_agent_context(*agent)
            .await
            .map_err(unavailable)?;
        Ok(observe(&Binding::from_read(context)))
    }

    /// An unknown chat is bound to nothing.
    async fn bound_agent(&self, chat: &ChatId) -> Result<Option<AgentId>, SourceError> {
        let chat = self.store.get_chat(*chat).await.map_err(unavailable)?;
        Ok(chat.and_then(|chat| chat.agent_id))
    }

    /// The bound agent's live view: its eligible tools (none when stale) and the model
    /// note when discovery is incomplete. An unbound or unknown chat has neither.
    async fn turn_inventory(
        &self,
        chat: &ChatId,
    ) -> Result<TurnInventory<EligibleTool>, SourceError> {
        let agent = self.bound_agent(chat).await?;
        let Some(agent) = agent else {
            return Ok(TurnInventory {
                tools: Vec::new(),
                note: None,
            });
        };
        let view = load_agent_view(&self.store, agent)
            .await
            .map_err(unavailable)?;
        Ok(TurnInventory {
            tools: view.tools().iter().cloned().collect(),
            note: view.model_note(),
        })
    }
}
