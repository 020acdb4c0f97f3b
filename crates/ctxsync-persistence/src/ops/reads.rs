//! Consistent reads (SPEC §5.6): an agent's row, snapshot and resources, or a chat and
//! its pinned copy, each from the one read transaction the caller opened.

use diesel::prelude::*;

use super::agents::get_agent;
use super::chats::get_chat;
use crate::db::{Tx, on_backend};
use crate::error::StoreError;
use crate::ids::{AgentId, ChatId};
use crate::model::*;
use crate::schema::*;

pub(crate) fn read_agent_context(
    tx: &mut Tx<'_>,
    agent_id: AgentId,
) -> Result<Option<AgentContext>, StoreError> {
    let Some(agent) = get_agent(tx, agent_id)? else {
        return Ok(None);
    };
    let snapshot = {
        on_backend!(tx, |c| workspace_agent_context_snapshots::table
            .find(agent_id)
            .select(SnapshotRow::as_select())
            .first(c)
            .optional())?
    };
    let resources = load_resources(tx, agent_id)?
        .into_iter()
        .map(StoredResource::into_resource)
        .collect::<Result<_, _>>()?;
    Ok(Some(AgentContext {
        agent,
        snapshot: snapshot.map(SnapshotRow::into_record).transpose()?,
        resources,
    }))
}

pub(super) fn load_resources(
    tx: &mut Tx<'_>,
    agent_id: AgentId,
) -> Result<Vec<StoredResource>, StoreError> {
    Ok(on_backend!(tx, |c| {
        workspace_agent_context_resources::table
            .filter(workspace_agent_context_resources::agent_id.eq(agent_id))
            .order(workspace_agent_context_resources::source)
            .select(StoredResource::as_select())
            .load(c)
    })?)
}

pub(crate) fn read_chat_context(
    tx: &mut Tx<'_>,
    chat_id: ChatId,
) -> Result<Option<ChatContext>, StoreError> {
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
    Ok(Some(ChatContext { chat, pinned }))
}
