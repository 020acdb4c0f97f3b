//! Chats and their pins: creating, binding, refreshing and clearing a chat, storing a
//! first pin the projection decided on, and the consistent read of a chat with its pin.
//!
//! A pin is written on one path, [`pin_stored_snapshot`]: a copy of the bound agent's
//! stored instruction files and skills under its stored aggregate hash. Creating,
//! binding and refreshing a chat, a push adopting a first pin for chats that had none,
//! and [`Store::store_first_pin`] all go through it.

use chrono::Utc;
use diesel::prelude::*;

use crate::db::{Tx, on_backend};
use crate::error::StoreError;
use crate::ids::{AgentId, ChatId};
use crate::model::*;
use crate::schema::*;
use crate::shared::{ROWS_PER_STATEMENT, chat_event, load_resources, notify_in_tx};
use crate::sql_types::DbTime;
use crate::store::Store;

impl Store {
    /// Creates a chat, bound to `agent` (which must exist) or unbound, pinning the
    /// agent's current instruction files and skills if it has a snapshot.
    pub async fn create_chat(&self, agent: Option<AgentId>) -> Result<ChatRecord, StoreError> {
        let id = ChatId::new_random();
        self.write_chat(move |tx, now, origin| create_chat(tx, id, agent, now, origin))
            .await
    }

    /// The chat row, without its pins; `None` for an unknown chat.
    pub async fn get_chat(&self, chat: ChatId) -> Result<Option<ChatRecord>, StoreError> {
        self.with_conn(move |conn, _| conn.read(|tx| get_chat(tx, chat)))
            .await
    }

    /// Binds the chat to another agent (or none) and pins that agent's current snapshot.
    pub async fn bind_chat(
        &self,
        chat: ChatId,
        agent: Option<AgentId>,
    ) -> Result<ChatRecord, StoreError> {
        self.write_chat(move |tx, now, origin| bind_chat(tx, chat, agent, now, origin))
            .await
    }

    /// Re-pins the bound agent's current instruction files and skills; clears dirty.
    pub async fn refresh_chat(&self, chat: ChatId) -> Result<ChatRecord, StoreError> {
        self.write_chat(move |tx, now, origin| refresh_chat(tx, chat, now, origin))
            .await
    }

    /// Clears the dirty flag without re-pinning.
    pub async fn clear_chat_dirty(&self, chat: ChatId) -> Result<ChatRecord, StoreError> {
        self.write_chat(move |tx, now, origin| clear_chat_dirty(tx, chat, now, origin))
            .await
    }

    /// Stores the first pin the projection decided on for a chat that has none: the
    /// bound agent's stored snapshot, when its aggregate hash is still `aggregate_hash`.
    /// Answers the chat row as it is afterwards (pinned by this call, by another writer
    /// meanwhile, or still unpinned when the agent's snapshot moved on: the next read
    /// decides again); `None` for an unknown chat.
    pub async fn store_first_pin(
        &self,
        chat: ChatId,
        aggregate_hash: String,
    ) -> Result<Option<ChatRecord>, StoreError> {
        let stored = self
            .with_conn(move |conn, origin| {
                conn.write(|tx| {
                    store_first_pin(tx, chat, &aggregate_hash, DbTime(Utc::now()), origin)
                })
            })
            .await?;
        if let Some((chat, true)) = &stored {
            self.deliver(&chat_event(chat));
        }
        Ok(stored.map(|(chat, _)| chat))
    }

    /// The chat row and its pinned resources, read together; `None` for an unknown chat.
    pub async fn read_chat_context(&self, chat: ChatId) -> Result<Option<StoredChat>, StoreError> {
        self.with_conn(move |conn, _| conn.read(|tx| read_chat_context(tx, chat)))
            .await
    }

    /// Runs one chat write and tells this process's subscribers after commit.
    async fn write_chat(
        &self,
        mut write: impl FnMut(&mut Tx<'_>, DbTime, u64) -> Result<ChatRecord, StoreError>
        + Send
        + 'static,
    ) -> Result<ChatRecord, StoreError> {
        let chat = self
            .with_conn(move |conn, origin| {
                let now = DbTime(Utc::now());
                conn.write(|tx| write(tx, now, origin))
            })
            .await?;
        self.deliver(&chat_event(&chat));
        Ok(chat)
    }
}

/// Pins `agent_id`'s stored snapshot into each of `chat_ids`, replacing what they had and
/// clearing dirty; with no agent or no stored snapshot, clears their pins. The one path
/// a pin is written on.
pub(crate) fn pin_stored_snapshot(
    tx: &mut Tx<'_>,
    chat_ids: &[ChatId],
    agent_id: Option<AgentId>,
    now: DbTime,
) -> Result<(), StoreError> {
    if chat_ids.is_empty() {
        return Ok(());
    }
    let snapshot = match agent_id {
        Some(agent_id) => on_backend!(tx, |c| workspace_agent_context_snapshots::table
            .find(agent_id)
            .select(SnapshotRow::as_select())
            .first(c)
            .optional())?,
        None => None,
    };
    let pinned: Vec<StoredResource> = match &snapshot {
        Some(snapshot) => load_resources(tx, snapshot.agent_id)?
            .into_iter()
            .filter(|r| is_pinned_kind(r.body_kind))
            .collect(),
        None => Vec::new(),
    };
    for &chat_id in chat_ids {
        let delete = diesel::delete(
            chat_context_resources::table.filter(chat_context_resources::chat_id.eq(chat_id)),
        );
        on_backend!(tx, |c| delete.execute(c))?;
        let rows: Vec<ChatResourceRow> = pinned
            .iter()
            .map(|r| ChatResourceRow {
                chat_id,
                source: r.source.clone(),
                source_path: r.source_path.clone(),
                body_kind: r.body_kind,
                body: r.body.clone(),
                content_hash: r.content_hash.clone(),
                size_bytes: r.size_bytes,
                status: r.status,
                error: r.error.clone(),
                pinned_at: now,
            })
            .collect();
        for chunk in rows.chunks(ROWS_PER_STATEMENT) {
            let insert = diesel::insert_into(chat_context_resources::table).values(chunk);
            on_backend!(tx, |c| insert.execute(c))?;
        }
        let update = diesel::update(chats::table.find(chat_id)).set((
            chats::pinned_aggregate_hash.eq(snapshot.as_ref().map(|s| &s.aggregate_hash)),
            chats::pinned_at.eq(snapshot.as_ref().map(|_| now)),
            chats::context_error.eq(snapshot.as_ref().and_then(|s| s.snapshot_error.as_ref())),
            chats::dirty_since.eq(None::<DbTime>),
            chats::updated_at.eq(now),
        ));
        on_backend!(tx, |c| update.execute(c))?;
    }
    Ok(())
}

fn ensure_agent_exists(tx: &mut Tx<'_>, agent_id: AgentId) -> Result<(), StoreError> {
    let query = workspace_agents::table
        .find(agent_id)
        .select(workspace_agents::id);
    let found: Option<AgentId> = on_backend!(tx, |c| query.first(c).optional())?;
    found.map(drop).ok_or(StoreError::AgentNotFound(agent_id))
}

fn get_chat(tx: &mut Tx<'_>, chat_id: ChatId) -> Result<Option<ChatRecord>, StoreError> {
    let row = on_backend!(tx, |c| chats::table
        .find(chat_id)
        .select(ChatRow::as_select())
        .first(c)
        .optional())?;
    Ok(row.map(ChatRecord::from))
}

fn require_chat(tx: &mut Tx<'_>, chat_id: ChatId) -> Result<ChatRecord, StoreError> {
    get_chat(tx, chat_id)?.ok_or(StoreError::ChatNotFound(chat_id))
}

fn create_chat(
    tx: &mut Tx<'_>,
    chat_id: ChatId,
    agent_id: Option<AgentId>,
    now: DbTime,
    origin: u64,
) -> Result<ChatRecord, StoreError> {
    if let Some(agent_id) = agent_id {
        ensure_agent_exists(tx, agent_id)?;
    }
    let insert = diesel::insert_into(chats::table).values((
        chats::id.eq(chat_id),
        chats::agent_id.eq(agent_id),
        chats::created_at.eq(now),
        chats::updated_at.eq(now),
    ));
    on_backend!(tx, |c| insert.execute(c))?;
    pin_stored_snapshot(tx, &[chat_id], agent_id, now)?;
    let chat = require_chat(tx, chat_id)?;
    notify_in_tx(tx, origin, &chat_event(&chat))?;
    Ok(chat)
}

/// Binds the chat to `agent_id` (or unbinds it) and pins that agent's current snapshot.
fn bind_chat(
    tx: &mut Tx<'_>,
    chat_id: ChatId,
    agent_id: Option<AgentId>,
    now: DbTime,
    origin: u64,
) -> Result<ChatRecord, StoreError> {
    require_chat(tx, chat_id)?;
    if let Some(agent_id) = agent_id {
        ensure_agent_exists(tx, agent_id)?;
    }
    let update = diesel::update(chats::table.find(chat_id))
        .set((chats::agent_id.eq(agent_id), chats::updated_at.eq(now)));
    on_backend!(tx, |c| update.execute(c))?;
    pin_stored_snapshot(tx, &[chat_id], agent_id, now)?;
    let chat = require_chat(tx, chat_id)?;
    notify_in_tx(tx, origin, &chat_event(&chat))?;
    Ok(chat)
}

/// Re-pins the bound agent's current snapshot and clears dirty ("refresh").
fn refresh_chat(
    tx: &mut Tx<'_>,
    chat_id: ChatId,
    now: DbTime,
    origin: u64,
) -> Result<ChatRecord, StoreError> {
    let chat = require_chat(tx, chat_id)?;
    pin_stored_snapshot(tx, &[chat_id], chat.agent_id, now)?;
    let chat = require_chat(tx, chat_id)?;
    notify_in_tx(tx, origin, &chat_event(&chat))?;
    Ok(chat)
}

fn clear_chat_dirty(
    tx: &mut Tx<'_>,
    chat_id: ChatId,
    now: DbTime,
    origin: u64,
) -> Result<ChatRecord, StoreError> {
    let chat = require_chat(tx, chat_id)?;
    if !chat.is_dirty() {
        return Ok(chat);
    }
    let update = diesel::update(chats::table.find(chat_id)).set((
        chats::dirty_since.eq(None::<DbTime>),
        chats::updated_at.eq(now),
    ));
    on_backend!(tx, |c| update.execute(c))?;
    let chat = require_chat(tx, chat_id)?;
    notify_in_tx(tx, origin, &chat_event(&chat))?;
    Ok(chat)
}

/// [`Store::store_first_pin`]: `(chat, whether this call pinned it)`.
fn store_first_pin(
    tx: &mut Tx<'_>,
    chat_id: ChatId,
    aggregate_hash: &str,
    now: DbTime,
    origin: u64,
) -> Result<Option<(ChatRecord, bool)>, StoreError> {
    let Some(chat) = get_chat(tx, chat_id)? else {
        return Ok(None);
    };
    let Some(agent_id) = chat
        .agent_id
        .filter(|_| chat.pinned_aggregate_hash.is_none())
    else {
        return Ok(Some((chat, false)));
    };
    let stored_hash: Option<String> =
        on_backend!(tx, |c| workspace_agent_context_snapshots::table
            .find(agent_id)
            .select(workspace_agent_context_snapshots::aggregate_hash)
            .first(c)
            .optional())?;
    if stored_hash.as_deref() != Some(aggregate_hash) {
        return Ok(Some((chat, false)));
    }
    pin_stored_snapshot(tx, &[chat_id], Some(agent_id), now)?;
    let chat = require_chat(tx, chat_id)?;
    notify_in_tx(tx, origin, &chat_event(&chat))?;
    Ok(Some((chat, true)))
}

fn read_chat_context(tx: &mut Tx<'_>, chat_id: ChatId) -> Result<Option<StoredChat>, StoreError> {
    let Some(chat) = get_chat(tx, chat_id)? else {
        return Ok(None);
    };
    let rows = on_backend!(tx, |c| chat_context_resources::table
        .filter(chat_context_resources::chat_id.eq(chat_id))
        .order(chat_context_resources::source)
        .select(StoredChatResource::as_select())
        .load(c))?;
    let pinned = rows
        .into_iter()
        .map(|r| StoredResource::from(r).into_resource())
        .collect::<Result<_, _>>()?;
    Ok(Some(StoredChat { chat, pinned }))
}
