//! Agent rows: creation, tokens, deletion, listing, the phase groups `/metrics` counts,
//! the row lock writers take, and UpdateStartup (SPEC §5.3).

use ctxsync_protocol::{DiscoveryPhase, Startup};
use diesel::prelude::*;

use super::shared::{agent_event, check_run_id, notify_in_tx};
use crate::db::{Tx, on_backend};
use crate::error::StoreError;
use crate::ids::AgentId;
use crate::model::*;
use crate::schema::*;
use crate::sql_types::{DbTime, JsonText};

pub(crate) fn insert_agent(
    tx: &mut Tx<'_>,
    id: AgentId,
    name: &str,
    token_hash: &[u8],
    now: DbTime,
) -> Result<(), StoreError> {
    let row = NewAgentRow {
        id,
        name,
        token_hash,
        agent_run_id: "",
        startup_version: "",
        expanded_directory: "",
        retired_agent_run_ids: JsonText("[]".into()),
        created_at: now,
        updated_at: now,
    };
    on_backend!(tx, |c| diesel::insert_into(workspace_agents::table)
        .values(&row)
        .execute(c))?;
    Ok(())
}

pub(crate) fn token_hash(tx: &mut Tx<'_>, id: AgentId) -> Result<Option<Vec<u8>>, StoreError> {
    let query = workspace_agents::table
        .find(id)
        .select(workspace_agents::token_hash);
    Ok(on_backend!(tx, |c| query.first::<Vec<u8>>(c).optional())?)
}

/// Swaps the agent's token hash in one UPDATE; false when there is no such agent.
pub(crate) fn replace_token_hash(
    tx: &mut Tx<'_>,
    id: AgentId,
    token_hash: &[u8],
    now: DbTime,
) -> Result<bool, StoreError> {
    let update = diesel::update(workspace_agents::table.find(id)).set((
        workspace_agents::token_hash.eq(token_hash),
        workspace_agents::updated_at.eq(now),
    ));
    Ok(on_backend!(tx, |c| update.execute(c))? > 0)
}

pub(crate) fn delete_agent(tx: &mut Tx<'_>, id: AgentId, origin: u64) -> Result<bool, StoreError> {
    // Snapshot and resources cascade; chats deliberately keep pointing at the id.
    let deleted = on_backend!(tx, |c| diesel::delete(workspace_agents::table.find(id))
        .execute(c))?;
    if deleted > 0 {
        notify_in_tx(tx, origin, &agent_event(id, None))?;
    }
    Ok(deleted > 0)
}

pub(crate) fn list_agents(tx: &mut Tx<'_>) -> Result<Vec<AgentRecord>, StoreError> {
    let rows = on_backend!(tx, |c| workspace_agents::table
        .select(AgentRow::as_select())
        .order((workspace_agents::created_at, workspace_agents::id))
        .load(c))?;
    rows.into_iter().map(AgentRow::into_record).collect()
}

/// One row of [`agent_phase_groups`]'s query.
#[derive(QueryableByName)]
struct PhaseGroupRow {
    #[diesel(sql_type = diesel::sql_types::Integer)]
    legacy: i32,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Text>)]
    phase: Option<String>,
    #[diesel(sql_type = diesel::sql_types::Integer)]
    same_run: i32,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    agents: i64,
}

/// Every agent counted in one aggregate query: at most 2 × 4 × 2 rows however many agents
/// there are, and no resource is read. Plain SQL both backends accept (the enum is cast
/// to text; booleans are spelled as integers).
const PHASE_GROUPS_SQL: &str = "\
SELECT CASE WHEN a.agent_run_id = '' THEN 1 ELSE 0 END AS legacy, \
       CAST(s.mcp_discovery_phase AS TEXT) AS phase, \
       CASE WHEN s.agent_run_id = a.agent_run_id THEN 1 ELSE 0 END AS same_run, \
       COUNT(*) AS agents \
FROM workspace_agents a \
LEFT JOIN workspace_agent_context_snapshots s ON s.agent_id = a.id \
GROUP BY 1, 2, 3";

pub(crate) fn agent_phase_groups(tx: &mut Tx<'_>) -> Result<Vec<AgentPhaseGroup>, StoreError> {
    let rows: Vec<PhaseGroupRow> =
        on_backend!(tx, |c| diesel::sql_query(PHASE_GROUPS_SQL).load(c))?;
    rows.into_iter()
        .map(|row| {
            let snapshot = match row.phase.as_deref() {
                None => None,
                Some(phase) => Some((phase_from_text(phase)?, row.same_run != 0)),
            };
            Ok(AgentPhaseGroup {
                legacy: row.legacy != 0,
                snapshot,
                agents: u64::try_from(row.agents).unwrap_or(0),
            })
        })
        .collect()
}

fn phase_from_text(phase: &str) -> Result<DiscoveryPhase, StoreError> {
    match phase {
        "unspecified" => Ok(DiscoveryPhase::Unspecified),
        "pending" => Ok(DiscoveryPhase::Pending),
        "complete" => Ok(DiscoveryPhase::Complete),
        other => Err(StoreError::Corrupt(format!(
            "unknown stored discovery phase {other:?}"
        ))),
    }
}

pub(crate) fn get_agent(tx: &mut Tx<'_>, id: AgentId) -> Result<Option<AgentRecord>, StoreError> {
    on_backend!(tx, |c| workspace_agents::table
        .find(id)
        .select(AgentRow::as_select())
        .first(c)
        .optional())?
    .map(AgentRow::into_record)
    .transpose()
}

/// How a write transaction locks the agent row it depends on (PostgreSQL only; SQLite's
/// IMMEDIATE transaction already holds the database write lock).
#[derive(Clone, Copy)]
pub(super) enum RowLock {
    /// UpdateStartup rewrites the row.
    Update,
    /// A push only depends on the row's run id: share-lock it so a concurrent
    /// UpdateStartup either waits for the push or makes it retry and see the new run.
    Share,
}

pub(super) fn lock_agent(
    tx: &mut Tx<'_>,
    id: AgentId,
    lock: RowLock,
) -> Result<AgentRow, StoreError> {
    let query = workspace_agents::table.find(id);
    let row = match (tx, lock) {
        #[cfg(feature = "postgres")]
        (Tx::Postgres(c), RowLock::Update) => query
            .select(AgentRow::as_select())
            .for_update()
            .first(*c)
            .optional()?,
        #[cfg(feature = "postgres")]
        (Tx::Postgres(c), RowLock::Share) => query
            .select(AgentRow::as_select())
            .for_share()
            .first(*c)
            .optional()?,
        #[cfg(feature = "sqlite")]
        (Tx::Sqlite(c), _) => query.select(AgentRow::as_select()).first(*c).optional()?,
    };
    row.ok_or(StoreError::AgentNotFound(id))
}

/// SPEC §5.3: always overwrite the run id (empty included), retiring a replaced
/// non-empty one; refuse a retired one without changing anything.
pub(crate) fn update_startup(
    tx: &mut Tx<'_>,
    id: AgentId,
    startup: &Startup,
    now: DbTime,
    origin: u64,
) -> Result<StartupOutcome, StoreError> {
    let new_run = startup.agent_run_id.clone().unwrap_or_default();
    check_run_id(&new_run)?;
    let row = lock_agent(tx, id, RowLock::Update)?;
    let mut retired = row.retired()?;
    if !new_run.is_empty() && retired.contains(&new_run) {
        return Err(StoreError::SupersededRun { run_id: new_run });
    }
    let previous_run_id = row.agent_run_id;
    let mut retired_run_id = None;
    if !previous_run_id.is_empty() && previous_run_id != new_run {
        retired.retain(|r| *r != previous_run_id);
        retired.push(previous_run_id.clone());
        let excess = retired.len().saturating_sub(MAX_RETIRED_RUN_IDS);
        retired.drain(..excess);
        retired_run_id = Some(previous_run_id.clone());
    }
    let retired_json = JsonText(serde_json::to_string(&retired).expect("strings serialize"));
    let update = diesel::update(workspace_agents::table.find(id)).set((
        workspace_agents::agent_run_id.eq(&new_run),
        workspace_agents::startup_version.eq(&startup.version),
        workspace_agents::expanded_directory.eq(&startup.expanded_directory),
        workspace_agents::retired_agent_run_ids.eq(&retired_json),
        workspace_agents::started_at.eq(Some(now)),
        workspace_agents::updated_at.eq(now),
    ));
    on_backend!(tx, |c| update.execute(c))?;
    let outcome = StartupOutcome {
        previous_run_id,
        agent_run_id: new_run,
        retired_run_id,
        startup_version: startup.version.clone(),
        expanded_directory: startup.expanded_directory.clone(),
    };
    if outcome.run_id_changed() {
        notify_in_tx(tx, origin, &agent_event(id, None))?;
    }
    Ok(outcome)
}
