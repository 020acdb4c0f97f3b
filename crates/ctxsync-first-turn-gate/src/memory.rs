//! An in-memory [`DiscoverySource`] for tests, demos and benchmarks: committed state in
//! a map (the projection's own inputs, projected on every read), notifications on a
//! broadcast channel, and switches for lost notifications, failing reads and slow
//! reads. It counts every read.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use ctxsync_chat_projection::{AgentState, Binding, View, project};
use tokio::sync::broadcast;

use crate::source::{ChangeSubscription, DiscoverySource, SourceError, TurnInventory};

/// Chat ids and agent ids of the in-memory source.
pub type MemoryId = u64;

#[derive(Debug, Default)]
struct State {
    agents: HashMap<MemoryId, AgentState>,
    bindings: HashMap<MemoryId, MemoryId>,
    tools: HashMap<MemoryId, Vec<String>>,
    failure: Option<String>,
    subscriptions_fail: bool,
    read_delay: Duration,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    /// Carries the changed agent's id; receivers ignore everything else.
    changes: broadcast::Sender<MemoryId>,
    discovery_reads: AtomicU64,
    inventory_reads: AtomicU64,
    chat_reads: AtomicU64,
}

/// See the module documentation. Clones share state.
#[derive(Clone, Debug)]
pub struct MemorySource {
    shared: Arc<Shared>,
}

impl Default for MemorySource {
    fn default() -> Self {
        Self::new()
    }
}

impl MemorySource {
    /// An empty source: no agents, no chats.
    pub fn new() -> Self {
        Self {
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
                changes: broadcast::channel(64).0,
                discovery_reads: AtomicU64::new(0),
                inventory_reads: AtomicU64::new(0),
                chat_reads: AtomicU64::new(0),
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.shared
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Changes `agent`'s rows (creating them if needed), then notifies its subscribers.
    pub fn commit(&self, agent: MemoryId, change: impl FnOnce(&mut AgentState)) {
        self.commit_silently(agent, change);
        // No subscriber is not an error: nobody is waiting.
        let _ = self.shared.changes.send(agent);
    }

    /// Like [`Self::commit`], but the notification is lost.
    pub fn commit_silently(&self, agent: MemoryId, change: impl FnOnce(&mut AgentState)) {
        change(self.state().agents.entry(agent).or_default());
    }

    /// Forgets `agent`, as if it were deleted; its chats stay bound to it.
    pub fn remove_agent(&self, agent: MemoryId) {
        self.state().agents.remove(&agent);
        let _ = self.shared.changes.send(agent);
    }

    /// Binds `chat` to `agent` (rebinding replaces the previous agent).
    pub fn bind(&self, chat: MemoryId, agent: MemoryId) {
        self.state().bindings.insert(chat, agent);
    }

    /// The tools a turn of `chat` is handed (the view of its bound agent comes from the
    /// agent's rows).
    pub fn set_tools(&self, chat: MemoryId, tools: Vec<String>) {
        self.state().tools.insert(chat, tools);
    }

    /// Makes every read fail with `message` (`None` heals the source).
    pub fn fail_reads(&self, message: Option<&str>) {
        self.state().failure = message.map(str::to_owned);
    }

    /// Makes subscribing fail (as when a notification listener is down).
    pub fn fail_subscriptions(&self, fail: bool) {
        self.state().subscriptions_fail = fail;
    }

    /// Makes every read take `delay` before it answers.
    pub fn delay_reads(&self, delay: Duration) {
        self.state().read_delay = delay;
    }

    /// How many discovery reads the gate made so far.
    pub fn discovery_reads(&self) -> u64 {
        self.shared.discovery_reads.load(Ordering::Relaxed)
    }

    /// How many inventory (tools and note) reads the gate made so far.
    pub fn inventory_reads(&self) -> u64 {
        self.shared.inventory_reads.load(Ordering::Relaxed)
    }

    /// How many reads of a chat's bound agent the gate made so far.
    pub fn chat_reads(&self) -> u64 {
        self.shared.chat_reads.load(Ordering::Relaxed)
    }

    fn binding(&self, agent: Option<MemoryId>) -> Binding {
        let Some(agent) = agent else {
            return Binding::NoAgent;
        };
        match self.state().agents.get(&agent) {
            None => Binding::MissingAgent,
            Some(record) => Binding::Agent(record.clone()),
        }
    }

    /// Waits out the configured delay, then returns the failure, if any.
    async fn before_read(&self) -> Result<(), SourceError> {
        let delay = self.state().read_delay;
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        match &self.state().failure {
            Some(message) => Err(SourceError::new(message.clone())),
            None => Ok(()),
        }
    }
}

/// A subscription to one agent's changes on the shared broadcast channel.
#[derive(Debug)]
pub struct MemorySubscription {
    agent: MemoryId,
    changes: broadcast::Receiver<MemoryId>,
}

impl ChangeSubscription for MemorySubscription {
    async fn changed(&mut self) -> bool {
        loop {
            match self.changes.recv().await {
                Ok(agent) if agent != self.agent => continue,
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => return true,
                Err(broadcast::error::RecvError::Closed) => return false,
            }
        }
    }
}

impl DiscoverySource for MemorySource {
    type ChatId = MemoryId;
    type AgentId = MemoryId;
    type Tool = String;
    type Subscription = MemorySubscription;

    async fn subscribe(&self, agent: &MemoryId) -> Result<MemorySubscription, SourceError> {
        if self.state().subscriptions_fail {
            return Err(SourceError::new("change notifications unavailable"));
        }
        Ok(MemorySubscription {
            agent: *agent,
            changes: self.shared.changes.subscribe(),
        })
    }

    async fn read_discovery(
        &self,
        _chat: &MemoryId,
        agent: &MemoryId,
    ) -> Result<View, SourceError> {
        self.shared.discovery_reads.fetch_add(1, Ordering::Relaxed);
        self.before_read().await?;
        Ok(project(&self.binding(Some(*agent))))
    }

    async fn bound_agent(&self, chat: &MemoryId) -> Result<Option<MemoryId>, SourceError> {
        self.shared.chat_reads.fetch_add(1, Ordering::Relaxed);
        self.before_read().await?;
        Ok(self.state().bindings.get(chat).copied())
    }

    async fn turn_inventory(
        &self,
        chat: &MemoryId,
        agent: Option<&MemoryId>,
    ) -> Result<TurnInventory<String>, SourceError> {
        self.shared.inventory_reads.fetch_add(1, Ordering::Relaxed);
        self.before_read().await?;
        let view = project(&self.binding(agent.copied()));
        // A stale view offers no tools, whatever was set.
        let tools = match view.is_stale() {
            true => Vec::new(),
            false => self.state().tools.get(chat).cloned().unwrap_or_default(),
        };
        Ok(TurnInventory { view, tools })
    }
}
