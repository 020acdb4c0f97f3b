//! Helpers several operation files share: the in-transaction NOTIFY, the agent event,
//! the run id length check, the stored JSON form of a body and the statement size.

use ctxsync_protocol::ResourceBody;
use ctxsync_protocol::limits::MAX_RUN_ID_BYTES;

use crate::db::Tx;
use crate::error::StoreError;
use crate::ids::AgentId;
use crate::notify::ChangeEvent;
use crate::sql_types::JsonText;

/// Rows per multi-row statement: well under both backends' bind limits (12 binds a row).
pub(super) const ROWS_PER_STATEMENT: usize = 256;

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

pub(super) fn check_run_id(run_id: &str) -> Result<(), StoreError> {
    if run_id.len() > MAX_RUN_ID_BYTES {
        return Err(StoreError::InvalidInput(format!(
            "agent_run_id is {} bytes, at most {MAX_RUN_ID_BYTES} allowed",
            run_id.len()
        )));
    }
    Ok(())
}

/// The stored JSON form of a body: the variant's fields under their proto names (as
/// [`ResourceBody::to_json`], without building a `Value` first); an MCP config body is
/// always `{}`.
pub(super) fn body_json(body: &ResourceBody) -> JsonText {
    let json = match body {
        ResourceBody::InstructionFile(b) => serde_json::to_string(b),
        ResourceBody::Skill(b) => serde_json::to_string(b),
        ResourceBody::McpConfig => Ok("{}".to_owned()),
        ResourceBody::McpServer(b) => serde_json::to_string(b),
    };
    JsonText(json.expect("a body serializes to JSON"))
}
