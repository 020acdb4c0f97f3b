//! What several concerns' transactions share: the in-transaction NOTIFY, the change
//! events, an agent's stored resources, the stored JSON form
//! of a body and the statement size.

use ctxsync_protocol::ResourceBody;

use diesel::prelude::*;

use crate::db::{Tx, on_backend};
use crate::error::StoreError;
use crate::ids::AgentId;
use crate::model::{ChatRecord, StoredResource};
use crate::notify::ChangeEvent;
use crate::schema::workspace_agent_context_resources;
use crate::sql_types::JsonText;

/// Rows per multi-row statement: well under both backends' bind limits (12 binds a row).
pub(crate) const ROWS_PER_STATEMENT: usize = 256;

/// Queues a NOTIFY inside the transaction (PostgreSQL delivers it at commit, and only if
/// the transaction commits). SQLite has no other processes to tell: the store delivers
/// in-process after commit.
pub(crate) fn notify_in_tx(
    tx: &mut Tx<'_>,
    origin: u64,
    event: &ChangeEvent,
) -> Result<(), StoreError> {
    // Irrefutable in a PostgreSQL-only build.
    #[cfg(feature = "postgres")]
    #[allow(irrefutable_let_patterns)]
    if let (Tx::Postgres(conn), Some(payload)) = (tx, crate::pg_listener::encode(origin, event)) {
        use diesel::RunQueryDsl;
        diesel::sql_query("SELECT pg_notify($1, $2)")
            .bind::<diesel::sql_types::Text, _>(crate::pg_listener::CHANNEL)
            .bind::<diesel::sql_types::Text, _>(payload)
            .execute(*conn)?;
    }
    #[cfg(not(feature = "postgres"))]
    let _ = (tx, origin, event);
    Ok(())
}

pub(crate) fn agent_event(agent_id: AgentId, snapshot_version: Option<u64>) -> ChangeEvent {
    ChangeEvent::AgentContextChanged {
        agent_id,
        snapshot_version,
    }
}

pub(crate) fn chat_event(chat: &ChatRecord) -> ChangeEvent {
    ChangeEvent::ChatChanged {
        chat_id: chat.id,
        agent_id: chat.agent_id,
    }
}

/// The agent's stored resources, sorted by source.
pub(crate) fn load_resources(
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

/// The stored JSON form of a body: the variant's fields under their proto names (as
/// [`ResourceBody::to_json`], without building a `Value` first); an MCP config body is
/// always `{}`.
pub(crate) fn body_json(body: &ResourceBody) -> JsonText {
    let json = match body {
        ResourceBody::InstructionFile(b) => serde_json::to_string(b),
        ResourceBody::Skill(b) => serde_json::to_string(b),
        ResourceBody::McpConfig => Ok("{}".to_owned()),
        ResourceBody::McpServer(b) => serde_json::to_string(b),
    };
    JsonText(json.expect("a body serializes to JSON"))
}
