//! The seam between the gate and the layers below it: what the gate reads (committed
//! discovery state, a chat's bound agent, a turn's tools and note) and how it is woken.
//!
//! An adapter over persistence implements [`DiscoverySource`]; what it reads reaches the
//! gate as the chat projection's [`View`], so the gate never decides phase or
//! staleness itself, and never sees a database or a notification payload.

use std::error::Error;
use std::fmt::Debug;
use std::future::Future;
use std::hash::Hash;

use ctxsync_chat_projection::View;
use tokio::sync::broadcast;

/// What a turn may use: the view of the chat's bound agent from one read, and the tools
/// of that same view as the source hands them to a turn.
#[derive(Clone, Debug, PartialEq)]
pub struct TurnInventory<T> {
    /// The projection's view (unbound: unknown and fresh, with nothing to offer).
    pub view: View,
    /// The view's eligible tools (none when stale).
    pub tools: Vec<T>,
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
    /// An error with a message safe to show callers (no database detail).
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

    /// The caller-safe message.
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
    /// Identifies a chat.
    type ChatId: Clone + Eq + Hash + Debug + Send + Sync + 'static;
    /// Identifies an agent.
    type AgentId: Clone + Eq + Hash + Debug + Send + Sync + 'static;
    /// A tool as the projection hands it to a turn.
    type Tool: Send + 'static;
    /// What [`DiscoverySource::subscribe`] returns: wake-ups after commits.
    type Subscription: ChangeSubscription;

    /// Starts listening for committed changes to `agent`'s context. The gate subscribes
    /// before its first read, so a commit between the read and the wait is never missed.
    /// An error makes the gate rely on its re-check timer alone.
    fn subscribe(
        &self,
        agent: &Self::AgentId,
    ) -> impl Future<Output = Result<Self::Subscription, SourceError>> + Send;

    /// The projection's view of the agent from one read transaction (agent row,
    /// snapshot and resources), so one process's row is never paired with another's
    /// snapshot. `chat` is passed along for adapters that read through the chat.
    fn read_discovery(
        &self,
        chat: &Self::ChatId,
        agent: &Self::AgentId,
    ) -> impl Future<Output = Result<View, SourceError>> + Send;

    /// The agent the chat is bound to, if any.
    fn bound_agent(
        &self,
        chat: &Self::ChatId,
    ) -> impl Future<Output = Result<Option<Self::AgentId>, SourceError>> + Send;

    /// The view of `agent` (the chat's bound agent as the turn read it; `None` when
    /// unbound) and its eligible tools, from one read: the turn's outcome, tools and note
    /// all come from it.
    fn turn_inventory(
        &self,
        chat: &Self::ChatId,
        agent: Option<&Self::AgentId>,
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
