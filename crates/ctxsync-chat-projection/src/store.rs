//! The store adapter: loads the projection's inputs from persistence's consistent reads
//! and projects them. The only module of this crate that does I/O.
//!
//! Every [`Binding::Agent`] comes from one `read_agent_context` (agent row, snapshot and
//! resources in one read transaction), mapped field by field as `input.rs` documents, so
//! one process's agent row is never paired with another process's snapshot.

use ctxsync_persistence::{
    AgentConnection, AgentContext, AgentId, ChatId, ChatRecord, Store, StoreError,
};

use crate::input::{AgentState, Binding, Connection, HeldSignIn, SnapshotState};
use crate::pin::{ChatContext, PinnedContext};
use crate::view::{View, ViewPhase, classify, project};

impl Binding {
    /// The binding for one `read_agent_context` result; `None` (no agent row) is
    /// [`Binding::MissingAgent`]. A field-by-field mapping: run ids stay as read (`None`
    /// for none), an empty snapshot error is `None`, `received_at` becomes a `SystemTime`.
    pub fn from_read(context: Option<AgentContext>) -> Self {
        let Some(context) = context else {
            return Self::MissingAgent;
        };
        Self::Agent(AgentState {
            agent_run_id: context.agent.agent_run_id,
            snapshot: context.snapshot.map(|snapshot| SnapshotState {
                agent_run_id: snapshot.agent_run_id,
                phase: snapshot.phase,
                aggregate_hash: snapshot.aggregate_hash,
                snapshot_error: snapshot.snapshot_error.filter(|e| !e.is_empty()),
                resources: context.resources,
                received_at: Some(snapshot.received_at.into()),
                pending_servers: snapshot.pending_servers,
            }),
            connection: match context.connection {
                AgentConnection::Never => Connection::Never,
                AgentConnection::Online => Connection::Online,
                AgentConnection::Offline { since } => Connection::Offline {
                    since: since.into(),
                },
            },
            sign_ins: context
                .sign_ins
                .into_iter()
                .map(|summary| HeldSignIn {
                    server: summary.server_name,
                    account: summary.account,
                    via: summary.signed_in_via,
                })
                .collect(),
        })
    }
}

/// Every agent counted by the phase and freshness [`project`] would give it, from one
/// aggregate query that reads no context (for `/metrics`); sorted, zero counts left out.
pub async fn agent_phase_counts(store: &Store) -> Result<Vec<(ViewPhase, bool, u64)>, StoreError> {
    let mut counts: Vec<(ViewPhase, bool, u64)> = Vec::new();
    for group in store.agent_phase_groups().await? {
        let (_, phase, stale) = classify(group.legacy, group.snapshot);
        let agents = group.agents;
        match counts
            .iter_mut()
            .find(|(p, s, _)| *p == phase && *s == stale)
        {
            Some((_, _, count)) => *count += agents,
            None => counts.push((phase, stale, agents)),
        }
    }
    counts.retain(|(_, _, count)| *count > 0);
    counts.sort_by_key(|(phase, stale, _)| (phase.as_str(), *stale));
    Ok(counts)
}

/// A chat as a turn or the chat API sees it: its row, its bound agent's live state, and
/// the chat context (pinned files and skills, live MCP view).
#[derive(Clone, Debug, PartialEq)]
pub struct LoadedChat {
    /// The chat row.
    pub chat: ChatRecord,
    /// The bound agent's state from one read ([`Binding::NoAgent`] when unbound,
    /// [`Binding::MissingAgent`] when the agent is gone).
    pub binding: Binding,
    /// The chat's pin combined with the live binding.
    pub context: ChatContext,
}

/// The projected view of `agent` from one consistent read. A missing agent projects as
/// [`Binding::MissingAgent`] (unknown and stale), never as an error.
pub async fn load_agent_view(store: &Store, agent: AgentId) -> Result<View, StoreError> {
    let binding = read_binding(store, Some(agent)).await?;
    Ok(project(&binding))
}

/// `agent`'s stored rows and their projected view, from one consistent read; `None`
/// when the agent does not exist. For callers that show the rows beside the view (the
/// agent-context API): the rows are data, the view says what they mean.
pub async fn load_agent_context(
    store: &Store,
    agent: AgentId,
) -> Result<Option<(AgentContext, View)>, StoreError> {
    let Some(context) = store.read_agent_context(agent).await? else {
        return Ok(None);
    };
    let view = project(&Binding::from_read(Some(context.clone())));
    Ok(Some((context, view)))
}

/// The chat with its pin and its bound agent's live state; `None` for an unknown chat.
///
/// Persistence pins a chat's first snapshot itself (when the chat is created or bound,
/// and on every accepted push for chats still unpinned). One gap remains on PostgreSQL:
/// a chat created while its agent's first push commits, each transaction not seeing the
/// other's row (REPEATABLE READ), stays unpinned although a snapshot exists. When this
/// load finds that, the pin [`ChatContext::new`] decided on is stored through
/// `store_first_pin` (only while the chat is still unpinned and the agent still holds
/// that snapshot), so later loads see the same stored pin.
pub async fn load_chat(store: &Store, chat: ChatId) -> Result<Option<LoadedChat>, StoreError> {
    let Some(mut loaded) = read_chat(store, chat).await? else {
        return Ok(None);
    };
    let Some(pin) = loaded.context.newly_pinned() else {
        return Ok(Some(loaded));
    };
    let decided = pin.aggregate_hash().to_owned();
    match store.store_first_pin(chat, decided).await? {
        Some(row) => {
            loaded.chat = row;
            Ok(Some(loaded))
        }
        // Deleted between the read and the write: as if the read had not found it.
        None => Ok(None),
    }
}

/// One read of the chat and its pin, then one consistent read of its bound agent.
async fn read_chat(store: &Store, chat: ChatId) -> Result<Option<LoadedChat>, StoreError> {
    let Some(stored) = store.read_chat_context(chat).await? else {
        return Ok(None);
    };
    let binding = read_binding(store, stored.chat.agent_id).await?;
    let pin = stored
        .chat
        .pinned_aggregate_hash
        .clone()
        .map(|hash| PinnedContext::from_stored(hash, stored.chat.is_dirty(), stored.pinned));
    let context = ChatContext::new(pin, &binding);
    Ok(Some(LoadedChat {
        chat: stored.chat,
        binding,
        context,
    }))
}

async fn read_binding(store: &Store, agent: Option<AgentId>) -> Result<Binding, StoreError> {
    match agent {
        None => Ok(Binding::NoAgent),
        Some(agent) => Ok(Binding::from_read(store.read_agent_context(agent).await?)),
    }
}
