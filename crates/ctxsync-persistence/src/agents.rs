//! Agent rows: creation, tokens, deletion, listing, the phase groups `/metrics` counts,
//! the row lock writers take, UpdateStartup (SPEC §5.3) and the consistent read of an
//! agent's context (SPEC §5.6).

use chrono::Utc;
use ctxsync_protocol::{DiscoveryPhase, RunId, Startup};
use diesel::prelude::*;

use crate::db::{Tx, on_backend};
use crate::error::StoreError;
use crate::ids::AgentId;
use crate::model::*;
use crate::schema::*;
use crate::shared::{agent_event, load_resources, notify_in_tx};
use crate::sql_types::{DbTime, JsonText};
use crate::store::Store;
use crate::token::{self, AgentToken, PresentedToken};
use crate::tool_call::routing::{agent_connection, connection_of, stream_states};

/// Longest agent name.
pub const MAX_AGENT_NAME_BYTES: usize = 256;

impl Store {
    /// Creates an agent and issues its bearer token; only the token's hash is stored.
    pub async fn create_agent(&self, name: &str) -> Result<NewAgent, StoreError> {
        if name.is_empty() || name.len() > MAX_AGENT_NAME_BYTES {
            return Err(StoreError::InvalidInput(format!(
                "agent name must be 1..={MAX_AGENT_NAME_BYTES} bytes"
            )));
        }
        let id = AgentId::new_random();
        let token = AgentToken::issue(id)?;
        let hash = token::digest(token.expose());
        let name = name.to_owned();
        self.with_conn(move |conn, _| {
            conn.write(|tx| insert_agent(tx, id, &name, &hash, DbTime(Utc::now())))
        })
        .await?;
        Ok(NewAgent { id, token })
    }

    /// The agent a bearer token belongs to. Malformed, unknown and wrong tokens all give
    /// [`StoreError::InvalidToken`]; the digest comparison is constant-time.
    pub async fn authenticate(&self, token: &str) -> Result<AgentId, StoreError> {
        self.authenticate_presented(&PresentedToken::parse(token)?)
            .await
    }

    /// [`Self::authenticate`] for a token already parsed: the agent it claims and its
    /// SHA-256, compared with the stored hash on every call.
    pub async fn authenticate_presented(
        &self,
        token: &PresentedToken,
    ) -> Result<AgentId, StoreError> {
        let (claimed, digest) = (token.claimed_agent(), token.digest());
        let stored = self
            .with_conn(move |conn, _| conn.single_statement(|tx| token_hash(tx, claimed)))
            .await?;
        match stored {
            Some(stored) if digest.matches_stored(&stored) => Ok(claimed),
            _ => Err(StoreError::InvalidToken),
        }
    }

    /// Issues the agent a new bearer token in place of its current one: from the
    /// commit on, the old token is refused (every authentication reads the stored
    /// hash). [`StoreError::AgentNotFound`] for an unknown agent. After
    /// [`StoreError::Unavailable`] the rotation may still have committed: rotate again.
    pub async fn rotate_agent_token(&self, id: AgentId) -> Result<NewAgent, StoreError> {
        let token = AgentToken::issue(id)?;
        let hash = token::digest(token.expose());
        let replaced = self
            .with_conn(move |conn, _| {
                conn.write(|tx| replace_token_hash(tx, id, &hash, DbTime(Utc::now())))
            })
            .await?;
        if !replaced {
            return Err(StoreError::AgentNotFound(id));
        }
        Ok(NewAgent { id, token })
    }

    /// Deletes the agent with its snapshot and resources. Its chats stay, bound to the
    /// missing id, so readers report the agent as unknown. [`StoreError::AgentNotFound`]
    /// for an unknown agent.
    pub async fn delete_agent(&self, id: AgentId) -> Result<(), StoreError> {
        let deleted = self
            .with_conn(move |conn, origin| conn.write(|tx| delete_agent(tx, id, origin)))
            .await?;
        if !deleted {
            return Err(StoreError::AgentNotFound(id));
        }
        self.deliver(&agent_event(id, None));
        Ok(())
    }

    /// All agents, oldest first.
    pub async fn list_agents(&self) -> Result<Vec<AgentRecord>, StoreError> {
        self.with_conn(|conn, _| conn.read(list_agents)).await
    }

    /// All agents, oldest first, each with whether its current run is connected now,
    /// read in one transaction.
    pub async fn list_agents_with_connection(
        &self,
    ) -> Result<Vec<(AgentRecord, AgentConnection)>, StoreError> {
        self.with_conn(|conn, _| {
            conn.read(|tx| {
                let agents = list_agents(tx)?;
                let streams = stream_states(tx)?;
                let now = crate::tool_call::routing::now_ms();
                Ok(agents
                    .into_iter()
                    .map(|agent| {
                        let row = streams.get(&agent.id);
                        let connection = connection_of(row, agent.agent_run_id.as_ref(), now);
                        (agent, connection)
                    })
                    .collect())
            })
        })
        .await
    }

    /// Every agent counted by run freshness and snapshot phase, in one aggregate query
    /// that reads no resource (for `/metrics`: never a read of every agent's context).
    pub async fn agent_phase_groups(&self) -> Result<Vec<AgentPhaseGroup>, StoreError> {
        self.with_conn(|conn, _| conn.read(agent_phase_groups))
            .await
    }

    /// The agent row; `None` for an unknown agent.
    pub async fn get_agent(&self, id: AgentId) -> Result<Option<AgentRecord>, StoreError> {
        self.with_conn(move |conn, _| conn.read(|tx| get_agent(tx, id)))
            .await
    }

    /// SPEC §5.3. Refuses a retired run id ([`StoreError::SupersededRun`]), writing
    /// nothing; otherwise overwrites the row's run id (none included) and whether the
    /// process takes tool calls, and notifies when the run id changed. (A run id's length was checked where the request was validated.)
    pub async fn update_startup(
        &self,
        agent: AgentId,
        startup: Startup,
    ) -> Result<StartupOutcome, StoreError> {
        let outcome = self
            .with_conn(move |conn, origin| {
                conn.write(|tx| update_startup(tx, agent, &startup, DbTime(Utc::now()), origin))
            })
            .await?;
        if outcome.run_id_changed() {
            self.deliver(&agent_event(agent, None));
        }
        Ok(outcome)
    }

    /// The agent row, its snapshot and resources from one snapshot-consistent read
    /// transaction; `None` for an unknown agent.
    pub async fn read_agent_context(
        &self,
        agent: AgentId,
    ) -> Result<Option<AgentContext>, StoreError> {
        self.with_conn(move |conn, _| conn.read(|tx| read_agent_context(tx, agent)))
            .await
    }
}

fn insert_agent(
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

fn token_hash(tx: &mut Tx<'_>, id: AgentId) -> Result<Option<Vec<u8>>, StoreError> {
    let query = workspace_agents::table
        .find(id)
        .select(workspace_agents::token_hash);
    Ok(on_backend!(tx, |c| query.first::<Vec<u8>>(c).optional())?)
}

/// Swaps the agent's token hash in one UPDATE; false when there is no such agent.
fn replace_token_hash(
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

fn delete_agent(tx: &mut Tx<'_>, id: AgentId, origin: u64) -> Result<bool, StoreError> {
    // Snapshot and resources cascade; chats deliberately keep pointing at the id.
    let deleted = on_backend!(tx, |c| diesel::delete(workspace_agents::table.find(id))
        .execute(c))?;
    // The stream row has no foreign key (see the call-routing migration): an open
    // stream's row goes when the stream ends, an ended stream's row goes here.
    let ended = call_streams::table
        .find(id)
        .filter(call_streams::ended_at_ms.is_not_null());
    on_backend!(tx, |c| diesel::delete(ended).execute(c))?;
    if deleted > 0 {
        notify_in_tx(tx, origin, &agent_event(id, None))?;
    }
    Ok(deleted > 0)
}

fn list_agents(tx: &mut Tx<'_>) -> Result<Vec<AgentRecord>, StoreError> {
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

fn agent_phase_groups(tx: &mut Tx<'_>) -> Result<Vec<AgentPhaseGroup>, StoreError> {
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

fn get_agent(tx: &mut Tx<'_>, id: AgentId) -> Result<Option<AgentRecord>, StoreError> {
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
pub(crate) enum RowLock {
    /// UpdateStartup rewrites the row.
    Update,
    /// A push only depends on the row's run id: share-lock it so a concurrent
    /// UpdateStartup either waits for the push or makes it retry and see the new run.
    Share,
}

pub(crate) fn lock_agent(
    tx: &mut Tx<'_>,
    id: AgentId,
    lock: RowLock,
) -> Result<AgentRow, StoreError> {
    lock_agent_with_token(tx, id, lock).map(|(row, _)| row)
}

/// [`lock_agent`], with the row's token hash read in the same statement, so a push can
/// check its caller's token where it checks the run.
pub(crate) fn lock_agent_with_token(
    tx: &mut Tx<'_>,
    id: AgentId,
    lock: RowLock,
) -> Result<(AgentRow, Vec<u8>), StoreError> {
    let query = workspace_agents::table.find(id);
    // The selection is typed by its backend, so each arm names it.
    let row = match (tx, lock) {
        #[cfg(feature = "postgres")]
        (Tx::Postgres(c), RowLock::Update) => query
            .select((AgentRow::as_select(), workspace_agents::token_hash))
            .for_update()
            .first(*c)
            .optional()?,
        #[cfg(feature = "postgres")]
        (Tx::Postgres(c), RowLock::Share) => query
            .select((AgentRow::as_select(), workspace_agents::token_hash))
            .for_share()
            .first(*c)
            .optional()?,
        #[cfg(feature = "sqlite")]
        (Tx::Sqlite(c), _) => query
            .select((AgentRow::as_select(), workspace_agents::token_hash))
            .first(*c)
            .optional()?,
    };
    row.ok_or(StoreError::AgentNotFound(id))
}

/// SPEC §5.3: always overwrite the run id (empty included), retiring a replaced
/// non-empty one; refuse a retired one without changing anything.
fn update_startup(
    tx: &mut Tx<'_>,
    id: AgentId,
    startup: &Startup,
    now: DbTime,
    origin: u64,
) -> Result<StartupOutcome, StoreError> {
    let new_run = startup.agent_run_id.clone();
    let row = lock_agent(tx, id, RowLock::Update)?;
    let mut retired = row.retired()?;
    if let Some(run) = new_run.as_ref().filter(|run| retired.contains(run)) {
        return Err(StoreError::SupersededRun {
            run_id: run.clone(),
        });
    }
    let previous_run_id = RunId::new(row.agent_run_id);
    let mut retired_run_id = None;
    if let Some(previous) = previous_run_id
        .as_ref()
        .filter(|p| Some(*p) != new_run.as_ref())
    {
        retired.retain(|r| r != previous);
        retired.push(previous.clone());
        let excess = retired.len().saturating_sub(MAX_RETIRED_RUN_IDS);
        retired.drain(..excess);
        retired_run_id = Some(previous.clone());
    }
    let retired_json = JsonText(serde_json::to_string(&retired).expect("strings serialize"));
    let update = diesel::update(workspace_agents::table.find(id)).set((
        workspace_agents::agent_run_id.eq(RunId::edge(new_run.as_ref())),
        workspace_agents::startup_version.eq(&startup.version),
        workspace_agents::expanded_directory.eq(&startup.expanded_directory),
        workspace_agents::retired_agent_run_ids.eq(&retired_json),
        workspace_agents::started_at.eq(Some(now)),
        workspace_agents::updated_at.eq(now),
        workspace_agents::accepts_tool_calls.eq(startup.accepts_tool_calls),
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

fn read_agent_context(
    tx: &mut Tx<'_>,
    agent_id: AgentId,
) -> Result<Option<AgentContext>, StoreError> {
    let Some(agent) = get_agent(tx, agent_id)? else {
        return Ok(None);
    };
    let snapshot = on_backend!(tx, |c| workspace_agent_context_snapshots::table
        .find(agent_id)
        .select(SnapshotRow::as_select())
        .first(c)
        .optional())?;
    let resources = load_resources(tx, agent_id)?
        .into_iter()
        .map(StoredResource::into_resource)
        .collect::<Result<_, _>>()?;
    let connection = agent_connection(tx, agent_id, agent.agent_run_id.as_ref())?;
    let sign_ins = crate::credentials::summaries_in(tx, agent_id)?;
    Ok(Some(AgentContext {
        agent,
        snapshot: snapshot.map(SnapshotRow::into_record).transpose()?,
        resources,
        connection,
        sign_ins,
    }))
}
