//! The seam between the gate and the layers below it: what the gate reads (committed
//! discovery state, a chat's bound agent, a turn's tools and note) and how it is woken.
//!
//! An adapter over persistence and the chat projection implements [`DiscoverySource`];
//! the gate never sees a database, a notification payload or a projection type.

use std::error::Error;
use std::fmt::Debug;
use std::future::Future;
use std::hash::Hash;

use ctxsync_protocol::DiscoveryPhase;
use serde::Serialize;
use tokio::sync::broadcast;

/// Committed discovery state of one agent, as read in one read transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Observation {
    /// The agent no longer exists (or never did).
    AgentMissing,
    /// The agent row and, when one was committed, its context snapshot.
    Agent {
        /// The agent row's run id: the process running now. `None` (or empty) for a
        /// legacy agent, or one that has not connected yet.
        run_id: Option<String>,
        snapshot: Option<SnapshotObservation>,
    },
}

/// The parts of an agent's stored snapshot the gate decides on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotObservation {
    /// The run id stamped on the snapshot. `None` (or empty) for a legacy snapshot.
    pub run_id: Option<String>,
    pub phase: DiscoveryPhase,
    /// Counted from the snapshot's committed resource rows by the chat projection.
    pub counts: DiscoveryCounts,
}

/// Per-source outcome counts of a snapshot (SPEC §7).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DiscoveryCounts {
    /// `OK` servers with at least one tool.
    pub servers_ok: u32,
    /// `OK` servers with zero tools (not a failure).
    pub servers_empty: u32,
    pub servers_failed: u32,
    /// `.mcp.json` files with a structural or semantic error.
    pub config_errors: u32,
}

/// What a turn may use, as the chat projection says now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TurnInventory<T> {
    /// Eligible tools (none when the snapshot is stale).
    pub tools: Vec<T>,
    /// The `Workspace MCP: …` line for the model when discovery is incomplete.
    pub note: Option<String>,
}

/// A read the gate could not complete. The gate fails open on it: the turn goes on and
/// the outcome carries [`SourceError::message`], so the message must be safe to show to
/// API callers; the detailed cause goes to the log only.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct SourceError {
    message: String,
    #[source]
    cause: Option<Box<dyn Error + Send + Sync>>,
}

impl SourceError {
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            cause: None,
        }
    }

    /// A safe `message` for callers plus the underlying `cause` for the log.
    pub fn with_cause(
        message: impl Into<String>,
        cause: impl Into<Box<dyn Error + Send + Sync>>,
    ) -> Self {
        Self {
            message: message.into(),
            cause: Some(cause.into()),
        }
    }

    pub fn message(&self) -> &str {
        &self.message
    }
}

/// Wakes a waiter when an agent's committed context may have changed.
///
/// A wake-up carries no content: the gate always re-reads committed state, so an
/// adapter may deliver spurious or coalesced wake-ups. Lost ones cost latency only (the
/// gate re-checks on a slow timer).
pub trait ChangeSubscription: Send + 'static {
    /// Resolves with `true` after a change was committed (possibly several), or `false`
    /// once the subscription has ended and will never wake again.
    fn changed(&mut self) -> impl Future<Output = bool> + Send;
}

/// An in-process broadcast (e.g. SQLite's notifier, or PostgreSQL's listener fanning
/// out NOTIFY) as a subscription. The event values are ignored; queued events coalesce
/// into one wake-up, and a lagged receiver counts as a change.
impl<E: Clone + Send + 'static> ChangeSubscription for broadcast::Receiver<E> {
    async fn changed(&mut self) -> bool {
        match self.recv().await {
            Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
            Err(broadcast::error::RecvError::Closed) => return false,
        }
        loop {
            match self.try_recv() {
                Ok(_) | Err(broadcast::error::TryRecvError::Lagged(_)) => {}
                Err(
                    broadcast::error::TryRecvError::Empty | broadcast::error::TryRecvError::Closed,
                ) => {
                    return true;
                }
            }
        }
    }
}

/// Everything the gate needs from persistence and the chat projection.
///
/// Every read must return **committed** state; the gate bounds each read with
/// [`GateConfig::read_timeout`](crate::GateConfig::read_timeout) and fails open on an
/// error or a timeout.
pub trait DiscoverySource: Send + Sync + 'static {
    type ChatId: Clone + Eq + Hash + Debug + Send + Sync + 'static;
    type AgentId: Clone + Eq + Hash + Debug + Send + Sync + 'static;
    /// A tool as the projection hands it to a turn.
    type Tool: Send + 'static;
    type Subscription: ChangeSubscription;

    /// Starts listening for committed changes to `agent`'s context. The gate subscribes
    /// before its first read, so a commit between the read and the wait is never missed.
    /// An error makes the gate rely on its re-check timer alone.
    fn subscribe(
        &self,
        agent: &Self::AgentId,
    ) -> impl Future<Output = Result<Self::Subscription, SourceError>> + Send;

    /// Re-reads the agent row, its snapshot and the snapshot's outcome counts from one
    /// read transaction, so one process's row is never paired with another's snapshot.
    /// `chat` is passed along for adapters that read through the chat's projection.
    fn read_discovery(
        &self,
        chat: &Self::ChatId,
        agent: &Self::AgentId,
    ) -> impl Future<Output = Result<Observation, SourceError>> + Send;

    /// The agent the chat is bound to, if any.
    fn bound_agent(
        &self,
        chat: &Self::ChatId,
    ) -> impl Future<Output = Result<Option<Self::AgentId>, SourceError>> + Send;

    /// The chat's eligible tools and model note, from the projection's current view.
    fn turn_inventory(
        &self,
        chat: &Self::ChatId,
    ) -> impl Future<Output = Result<TurnInventory<Self::Tool>, SourceError>> + Send;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_broadcast_receiver_coalesces_events_counts_lag_as_a_change_and_ends_on_close() {
        let (tx, mut rx) = broadcast::channel::<u32>(2);
        for event in 0..2 {
            tx.send(event).unwrap();
        }
        assert!(rx.changed().await, "two queued events: one wake-up");
        assert!(rx.is_empty(), "the queue was drained");

        for event in 0..5 {
            tx.send(event).unwrap();
        }
        assert!(rx.changed().await, "a lagged receiver still wakes");
        assert!(rx.is_empty());

        drop(tx);
        assert!(!rx.changed().await, "closed: no more wake-ups");
    }
}
