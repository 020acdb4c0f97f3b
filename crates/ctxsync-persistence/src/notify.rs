//! Change notifications (SPEC §5.5): per-agent and per-chat subscriptions, delivered
//! after commit. Events carry ids and versions only; a subscriber re-reads committed
//! state. A lost event costs latency, never correctness: [`ChangeEvent::Resync`] tells
//! subscribers that events may have been missed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::broadcast;

use ctxsync_protocol::tool_call::ToolCallId;

use crate::ids::{AgentId, ChatId};

/// Events buffered per topic before a slow subscriber sees [`ChangeEvent::Resync`].
const TOPIC_CAPACITY: usize = 64;

/// Something committed changed; re-read to learn what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChangeEvent {
    /// The agent's row (run id, startup), snapshot or resources changed, or the agent
    /// was deleted. `snapshot_version` is the stored snapshot version after the change,
    /// when the change was a push.
    AgentContextChanged {
        /// The agent whose context changed.
        agent_id: AgentId,
        /// The stored snapshot version after a push; `None` for an UpdateStartup or a
        /// deletion.
        snapshot_version: Option<u64>,
    },
    /// The chat's own row changed: created, bound to another agent, pinned or re-pinned,
    /// dirty flag set (a push with another aggregate hash) or cleared. `agent_id` is its
    /// binding after the change.
    ChatChanged {
        /// The chat whose row changed.
        chat_id: ChatId,
        /// The agent the chat is bound to after the change; `None` when unbound.
        agent_id: Option<AgentId>,
    },
    /// A tool call changed (issue 37): stored, delivered, progressed, asked to cancel or
    /// ended. Goes to the chat's call subscribers ([`ChatCallSubscription`]) and the
    /// call hubs, never to [`ChatSubscription`]s (a call is not the chat's context).
    ToolCallChanged {
        /// The call (server-assigned id).
        call_id: ToolCallId,
        /// Its chat.
        chat_id: ChatId,
        /// The agent it goes to; `None` for find_tools.
        agent_id: Option<AgentId>,
        /// What happened.
        change: CallChange,
    },
    /// Events may have been lost (the PostgreSQL listener reconnected, or this
    /// subscriber fell behind): re-read everything you watch.
    Resync,
}

/// What happened to a tool call ([`ChangeEvent::ToolCallChanged`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CallChange {
    /// Stored and waiting for the replica holding its agent's stream.
    Pending,
    /// Sent on its agent's stream.
    Delivered,
    /// New progress stored.
    Progress,
    /// Someone asked to cancel it; the replica holding its stream tells the agent.
    CancelRequested,
    /// Its end is stored.
    Ended,
}

impl CallChange {
    /// Every change, in a fixed order.
    pub const ALL: [Self; 5] = [
        Self::Pending,
        Self::Delivered,
        Self::Progress,
        Self::CancelRequested,
        Self::Ended,
    ];

    /// The one-letter wire code in a PostgreSQL NOTIFY payload (the only wire it has).
    #[cfg(feature = "postgres")]
    pub(crate) fn code(self) -> char {
        match self {
            Self::Pending => 'p',
            Self::Delivered => 'd',
            Self::Progress => 'g',
            Self::CancelRequested => 'x',
            Self::Ended => 'e',
        }
    }

    #[cfg(feature = "postgres")]
    pub(crate) fn from_code(code: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|c| code.len() == 1 && code.starts_with(c.code()))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Topic {
    Agent(AgentId),
    Chat(ChatId),
    /// One chat's tool calls.
    ChatCalls(ChatId),
    /// Every tool call (the call hub).
    Calls,
}

impl Topic {
    /// The call hub reads every call's events: room for a burst of concurrent calls
    /// before it has to resync.
    fn capacity(self) -> usize {
        match self {
            Self::Calls => CALLS_CAPACITY,
            _ => TOPIC_CAPACITY,
        }
    }
}

/// Events buffered for the call hub's topic (every call's changes).
const CALLS_CAPACITY: usize = 8192;

/// Fans events out to in-process subscribers, one broadcast channel per watched topic.
#[derive(Debug, Default)]
pub(crate) struct Hub {
    topics: Mutex<HashMap<Topic, broadcast::Sender<ChangeEvent>>>,
}

impl Hub {
    fn subscribe(self: &Arc<Self>, topic: Topic) -> TopicReceiver {
        let mut topics = self.topics.lock().unwrap_or_else(PoisonError::into_inner);
        let receiver = topics
            .entry(topic)
            .or_insert_with(|| broadcast::channel(topic.capacity()).0)
            .subscribe();
        TopicReceiver {
            hub: Arc::clone(self),
            topic,
            receiver,
        }
    }

    /// Delivers `event` to the subscribers of its topic (a no-op for `Resync`).
    pub(crate) fn publish(&self, event: &ChangeEvent) {
        let topic = match event {
            ChangeEvent::AgentContextChanged { agent_id, .. } => Topic::Agent(*agent_id),
            ChangeEvent::ChatChanged { chat_id, .. } => Topic::Chat(*chat_id),
            ChangeEvent::ToolCallChanged { chat_id, .. } => {
                self.send(Topic::ChatCalls(*chat_id), event);
                Topic::Calls
            }
            ChangeEvent::Resync => return self.resync_all(),
        };
        self.send(topic, event);
    }

    fn send(&self, topic: Topic, event: &ChangeEvent) {
        let topics = self.topics.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(sender) = topics.get(&topic) {
            // An error only means nobody listens right now.
            let _ = sender.send(event.clone());
        }
    }

    /// Tells every subscriber that events may have been lost.
    pub(crate) fn resync_all(&self) {
        let topics = self.topics.lock().unwrap_or_else(PoisonError::into_inner);
        for sender in topics.values() {
            let _ = sender.send(ChangeEvent::Resync);
        }
    }

    fn release(&self, topic: Topic) {
        let mut topics = self.topics.lock().unwrap_or_else(PoisonError::into_inner);
        // Called while the releasing receiver still exists: 1 means it was the last.
        if topics.get(&topic).is_some_and(|s| s.receiver_count() <= 1) {
            topics.remove(&topic);
        }
    }

    #[cfg(test)]
    fn topic_count(&self) -> usize {
        self.topics
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

#[derive(Debug)]
struct TopicReceiver {
    hub: Arc<Hub>,
    topic: Topic,
    receiver: broadcast::Receiver<ChangeEvent>,
}

impl TopicReceiver {
    async fn recv(&mut self) -> Option<ChangeEvent> {
        match self.receiver.recv().await {
            Ok(event) => Some(event),
            Err(broadcast::error::RecvError::Lagged(_)) => Some(ChangeEvent::Resync),
            Err(broadcast::error::RecvError::Closed) => None,
        }
    }
}

impl Drop for TopicReceiver {
    fn drop(&mut self) {
        self.hub.release(self.topic);
    }
}

/// Events about one agent, delivered after commit.
#[derive(Debug)]
pub struct AgentSubscription {
    agent_id: AgentId,
    receiver: TopicReceiver,
}

impl AgentSubscription {
    pub(crate) fn new(hub: &Arc<Hub>, agent_id: AgentId) -> Self {
        Self {
            agent_id,
            receiver: hub.subscribe(Topic::Agent(agent_id)),
        }
    }

    /// The agent this subscription watches.
    pub fn agent_id(&self) -> AgentId {
        self.agent_id
    }

    /// The next event; `None` once the store is gone. Cancel-safe.
    pub async fn next(&mut self) -> Option<ChangeEvent> {
        self.receiver.recv().await
    }
}

/// Tool-call events: one chat's ([`crate::Store::subscribe_chat_calls`]) or, for the
/// call hub, every chat's. Only [`ChangeEvent::ToolCallChanged`] and
/// [`ChangeEvent::Resync`] arrive.
#[derive(Debug)]
pub struct ChatCallSubscription {
    receiver: TopicReceiver,
}

impl ChatCallSubscription {
    pub(crate) fn chat(hub: &Arc<Hub>, chat_id: ChatId) -> Self {
        Self {
            receiver: hub.subscribe(Topic::ChatCalls(chat_id)),
        }
    }

    pub(crate) fn all(hub: &Arc<Hub>) -> Self {
        Self {
            receiver: hub.subscribe(Topic::Calls),
        }
    }

    /// The next event; `None` once the store is gone. Cancel-safe.
    pub async fn next(&mut self) -> Option<ChangeEvent> {
        self.receiver.recv().await
    }
}

/// Events about one chat: its own row, and its bound agent's context (which is what a
/// chat's projection reads). Follows rebinding to another agent.
#[derive(Debug)]
pub struct ChatSubscription {
    chat_id: ChatId,
    hub: Arc<Hub>,
    chat: TopicReceiver,
    agent: Option<(AgentId, TopicReceiver)>,
}

impl ChatSubscription {
    /// Subscribe to the chat topic first, then the agent read from the database after
    /// it, so a rebinding in between still arrives as a chat event.
    pub(crate) fn new(hub: &Arc<Hub>, chat_id: ChatId) -> Self {
        Self {
            chat_id,
            hub: Arc::clone(hub),
            chat: hub.subscribe(Topic::Chat(chat_id)),
            agent: None,
        }
    }

    pub(crate) fn follow_agent(&mut self, agent_id: Option<AgentId>) {
        if self.agent.as_ref().map(|(id, _)| *id) == agent_id {
            return;
        }
        self.agent = agent_id.map(|id| (id, self.hub.subscribe(Topic::Agent(id))));
    }

    /// The chat this subscription watches.
    pub fn chat_id(&self) -> ChatId {
        self.chat_id
    }

    /// The agent whose context events this subscription currently follows.
    pub fn agent_id(&self) -> Option<AgentId> {
        self.agent.as_ref().map(|(id, _)| *id)
    }

    /// The next event for the chat or its bound agent; `None` once the store is gone.
    /// Cancel-safe.
    pub async fn next(&mut self) -> Option<ChangeEvent> {
        let event = match &mut self.agent {
            Some((_, agent)) => tokio::select! {
                event = self.chat.recv() => event,
                event = agent.recv() => event,
            },
            None => self.chat.recv().await,
        };
        if let Some(ChangeEvent::ChatChanged { agent_id, .. }) = &event {
            self.follow_agent(*agent_id);
        }
        event
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn events_reach_only_their_topic_and_topics_are_released() {
        let hub = Arc::new(Hub::default());
        let (a, b) = (AgentId::new_random(), AgentId::new_random());
        let mut sub_a = AgentSubscription::new(&hub, a);
        let mut sub_b = AgentSubscription::new(&hub, b);
        hub.publish(&ChangeEvent::AgentContextChanged {
            agent_id: a,
            snapshot_version: Some(3),
        });
        assert_eq!(
            sub_a.next().await,
            Some(ChangeEvent::AgentContextChanged {
                agent_id: a,
                snapshot_version: Some(3)
            })
        );
        hub.resync_all();
        assert_eq!(
            sub_b.next().await,
            Some(ChangeEvent::Resync),
            "b saw a's event"
        );
        assert_eq!(hub.topic_count(), 2);
        drop(sub_a);
        drop(sub_b);
        assert_eq!(hub.topic_count(), 0);
    }

    #[tokio::test]
    async fn a_lagging_subscriber_is_told_to_resync() {
        let hub = Arc::new(Hub::default());
        let agent_id = AgentId::new_random();
        let mut sub = AgentSubscription::new(&hub, agent_id);
        for version in 0..(TOPIC_CAPACITY as u64 + 5) {
            hub.publish(&ChangeEvent::AgentContextChanged {
                agent_id,
                snapshot_version: Some(version),
            });
        }
        assert_eq!(sub.next().await, Some(ChangeEvent::Resync));
    }

    #[tokio::test]
    async fn a_chat_subscription_follows_rebinding() {
        let hub = Arc::new(Hub::default());
        let chat_id = ChatId::new_random();
        let (old, new) = (AgentId::new_random(), AgentId::new_random());
        let mut sub = ChatSubscription::new(&hub, chat_id);
        sub.follow_agent(Some(old));
        let rebound = ChangeEvent::ChatChanged {
            chat_id,
            agent_id: Some(new),
        };
        hub.publish(&rebound);
        assert_eq!(sub.next().await, Some(rebound));
        assert_eq!(sub.agent_id(), Some(new));
        let pushed = ChangeEvent::AgentContextChanged {
            agent_id: new,
            snapshot_version: Some(1),
        };
        hub.publish(&ChangeEvent::AgentContextChanged {
            agent_id: old,
            snapshot_version: Some(9),
        });
        hub.publish(&pushed);
        assert_eq!(
            sub.next().await,
            Some(pushed),
            "the old agent's event leaked"
        );
    }
}
