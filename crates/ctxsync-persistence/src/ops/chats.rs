//! Chats and their pins: creating, binding, refreshing and clearing a chat, each pinning
//! (a copy of) the bound agent's current instruction files and skills.

use diesel::prelude::*;

use super::reads::load_resources;
use super::shared::{ROWS_PER_STATEMENT, notify_in_tx};
use crate::db::{Tx, on_backend};
use crate::error::StoreError;
use crate::ids::{AgentId, ChatId};
use crate::model::*;
use crate::notify::ChangeEvent;
use crate::schema::*;
use crate::sql_types::{DbBodyKind, DbStatus, DbTime, JsonText};

/// One resource as a chat pins it.
pub(super) struct PinnedCopy {
    source: String,
    source_path: Option<String>,
    body_kind: DbBodyKind,
    body: JsonText,
    content_hash: String,
    size_bytes: i64,
    status: DbStatus,
    error: Option<String>,
}

impl PinnedCopy {
    pub(super) fn from_stored(r: StoredResource) -> Self {
        Self {
            source: r.source,
            source_path: r.source_path,
            body_kind: r.body_kind,
            body: r.body,
            content_hash: r.content_hash,
            size_bytes: r.size_bytes,
            status: r.status,
            error: r.error,
        }
    }
}

/// What a chat pins: a snapshot's hash, error and pinnable resources.
pub(super) struct PinSource<'a> {
    pub(super) aggregate_hash: &'a str,
    pub(super) snapshot_error: Option<&'a str>,
    pub(super) resources: &'a [PinnedCopy],
}

/// Replaces the chat's pin with `source` (or clears it for `None`) and clears dirty.
pub(super) fn write_pin(
    tx: &mut Tx<'_>,
    chat_id: ChatId,
    source: Option<PinSource<'_>>,
    now: DbTime,
) -> Result<(), StoreError> {
    let delete = diesel::delete(
        chat_context_resources::table.filter(chat_context_resources::chat_id.eq(chat_id)),
    );
    on_backend!(tx, |c| delete.execute(c))?;
    let rows: Vec<ChatResourceRow> = source
        .as_ref()
        .map(|s| {
            s.resources
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
                .collect()
        })
        .unwrap_or_default();
    for chunk in rows.chunks(ROWS_PER_STATEMENT) {
        let insert = diesel::insert_into(chat_context_resources::table).values(chunk);
        on_backend!(tx, |c| insert.execute(c))?;
    }
    let update = diesel::update(chats::table.find(chat_id)).set((
        chats::pinned_aggregate_hash.eq(source.as_ref().map(|s| s.aggregate_hash)),
        chats::pinned_at.eq(source.as_ref().map(|_| now)),
        chats::context_error.eq(source.as_ref().and_then(|s| s.snapshot_error)),
        chats::dirty_since.eq(None::<DbTime>),
        chats::updated_at.eq(now),
    ));
    on_backend!(tx, |c| update.execute(c))?;
    Ok(())
}

/// Pins the agent's current snapshot (if it has one) into the chat.
fn pin_current(
    tx: &mut Tx<'_>,
    chat_id: ChatId,
    agent_id: Option<AgentId>,
    now: DbTime,
) -> Result<(), StoreError> {
    let snapshot = match agent_id {
        Some(agent_id) => on_backend!(tx, |c| workspace_agent_context_snapshots::table
            .find(agent_id)
            .select(SnapshotRow::as_select())
            .first(c)
            .optional())?,
        None => None,
    };
    let Some(snapshot) = snapshot else {
        return write_pin(tx, chat_id, None, now);
    };
    let pinnable: Vec<PinnedCopy> = load_resources(tx, snapshot.agent_id)?
        .into_iter()
        .filter(|r| is_pinned_kind(r.body_kind))
        .map(PinnedCopy::from_stored)
        .collect();
    write_pin(
        tx,
        chat_id,
        Some(PinSource {
            aggregate_hash: &snapshot.aggregate_hash,
            snapshot_error: snapshot.snapshot_error.as_deref(),
            resources: &pinnable,
        }),
        now,
    )
}

fn ensure_agent_exists(tx: &mut Tx<'_>, agent_id: AgentId) -> Result<(), StoreError> {
    let query = workspace_agents::table
        .find(agent_id)
        .select(workspace_agents::id);
    let found: Option<AgentId> = on_backend!(tx, |c| query.first(c).optional())?;
    found.map(drop).ok_or(StoreError::AgentNotFound(agent_id))
}

pub(crate) fn get_chat(tx: &mut Tx<'_>, chat_id: ChatId) -> Result<Option<ChatRecord>, StoreError> {
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

fn chat_event(chat: &ChatRecord) -> ChangeEvent {
    ChangeEvent::ChatChanged {
        chat_id: chat.id,
        agent_id: chat.agent_id,
    }
}

pub(crate) fn create_chat(
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
    pin_current(tx, chat_id, agent_id, now)?;
    let chat = require_chat(tx, chat_id)?;
    notify_in_tx(tx, origin, &chat_event(&chat))?;
    Ok(chat)
}

/// Binds the chat to `agent_id` (or unbinds it) and pins that agent's current snapshot.
pub(crate) fn bind_chat(
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
    pin_current(tx, chat_id, agent_id, now)?;
    let chat = require_chat(tx, chat_id)?;
    notify_in_tx(tx, origin, &chat_event(&chat))?;
    Ok(chat)
}

/// Re-pins the bound agent's current snapshot and clears dirty ("refresh").
pub(crate) fn refresh_chat(
    tx: &mut Tx<'_>,
    chat_id: ChatId,
    now: DbTime,
    origin: u64,
) -> Result<ChatRecord, StoreError> {
    let chat = require_chat(tx, chat_id)?;
    pin_current(tx, chat_id, chat.agent_id, now)?;
    let chat = require_chat(tx, chat_id)?;
    notify_in_tx(tx, origin, &chat_event(&chat))?;
    Ok(chat)
}

pub(crate) fn clear_chat_dirty(
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
