//! The store's operations, each run inside one transaction opened by the caller
//! ([`crate::db::PooledConn::write`] / [`crate::db::PooledConn::read`]). Written once;
//! `on_backend!` type-checks every query against both backends.

use std::collections::HashMap;

use ctxsync_protocol::limits::MAX_RUN_ID_BYTES;

use ctxsync_protocol::{
    DiscoveryPhase, InstructionFileBody, McpServerBody, McpTool, Resource, ResourceBody, SkillBody,
    Snapshot, Startup,
};
use diesel::prelude::*;
use diesel::upsert::excluded;
use sha2::{Digest, Sha256};

use crate::db::{Tx, on_backend};
use crate::error::StoreError;
use crate::ids::{AgentId, ChatId};
use crate::model::*;
use crate::notify::ChangeEvent;
use crate::pg_listener;
use crate::schema::*;
use crate::sql_types::{DbBodyKind, DbPhase, DbStatus, DbTime, JsonText};

/// Rows per multi-row statement: well under both backends' bind limits (12 binds a row).
const ROWS_PER_STATEMENT: usize = 256;

// ---- notifications -------------------------------------------------------------------

/// Queues a NOTIFY inside the transaction (PostgreSQL delivers it at commit, and only if
/// the transaction commits). SQLite has no other processes to tell: the store delivers
/// in-process after commit.
pub(crate) fn notify_in_tx(
    tx: &mut Tx<'_>,
    origin: u64,
    event: &ChangeEvent,
) -> Result<(), StoreError> {
    let (Tx::Postgres(conn), Some(payload)) = (tx, pg_listener::encode(origin, event)) else {
        return Ok(());
    };
    diesel::sql_query("SELECT pg_notify($1, $2)")
        .bind::<diesel::sql_types::Text, _>(pg_listener::CHANNEL)
        .bind::<diesel::sql_types::Text, _>(payload)
        .execute(*conn)?;
    Ok(())
}

// ---- agents --------------------------------------------------------------------------

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
enum RowLock {
    /// UpdateStartup rewrites the row.
    Update,
    /// A push only depends on the row's run id: share-lock it so a concurrent
    /// UpdateStartup either waits for the push or makes it retry and see the new run.
    Share,
}

fn lock_agent(tx: &mut Tx<'_>, id: AgentId, lock: RowLock) -> Result<AgentRow, StoreError> {
    let query = workspace_agents::table.find(id);
    let row = match (tx, lock) {
        (Tx::Postgres(c), RowLock::Update) => query
            .select(AgentRow::as_select())
            .for_update()
            .first(*c)
            .optional()?,
        (Tx::Postgres(c), RowLock::Share) => query
            .select(AgentRow::as_select())
            .for_share()
            .first(*c)
            .optional()?,
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

fn check_run_id(run_id: &str) -> Result<(), StoreError> {
    if run_id.len() > MAX_RUN_ID_BYTES {
        return Err(StoreError::InvalidInput(format!(
            "agent_run_id is {} bytes, at most {MAX_RUN_ID_BYTES} allowed",
            run_id.len()
        )));
    }
    Ok(())
}

pub(crate) fn agent_event(agent_id: AgentId, snapshot_version: Option<u64>) -> ChangeEvent {
    ChangeEvent::AgentContextChanged {
        agent_id,
        snapshot_version,
    }
}

// ---- push ----------------------------------------------------------------------------

/// A push checked and fingerprinted before the transaction starts, so hashing happens
/// once, outside any retry and outside the write lock.
pub(crate) struct PreparedPush {
    run_id: String,
    version: i64,
    snapshot: Snapshot,
    /// Per resource: the server-computed digest of its stored body, and its size.
    digests: Vec<Vec<u8>>,
    sizes: Vec<i64>,
}

pub(crate) fn prepare_push(snapshot: Snapshot) -> Result<PreparedPush, StoreError> {
    let run_id = snapshot.agent_run_id.clone().unwrap_or_default();
    check_run_id(&run_id)?;
    let version = to_i64("version", snapshot.version)?;
    let sizes = snapshot
        .resources
        .iter()
        .map(|r| to_i64("size_bytes", r.size_bytes))
        .collect::<Result<_, _>>()?;
    let digests = snapshot
        .resources
        .iter()
        .map(|r| body_digest(&r.body))
        .collect();
    Ok(PreparedPush {
        run_id,
        version,
        snapshot,
        digests,
        sizes,
    })
}

/// The stored JSON form of a body: the variant's fields under their proto names (as
/// [`ResourceBody::to_json`], without building a `Value` first); an MCP config body is
/// always `{}`.
fn body_json(body: &ResourceBody) -> JsonText {
    let json = match body {
        ResourceBody::InstructionFile(b) => serde_json::to_string(b),
        ResourceBody::Skill(b) => serde_json::to_string(b),
        ResourceBody::McpConfig => Ok("{}".to_owned()),
        ResourceBody::McpServer(b) => serde_json::to_string(b),
    };
    JsonText(json.expect("a body serializes to JSON"))
}

/// sha256 of a canonical encoding of the body: a kind tag, then every field as its
/// length and bytes. Hashing the fields directly (not the JSON form) skips JSON escaping,
/// which was the largest cost of a push whose bodies did not change. The destructuring
/// is exhaustive, so a new body field cannot be left out of the digest unnoticed.
/// Digests are only compared with digests this function stored.
fn body_digest(body: &ResourceBody) -> Vec<u8> {
    struct Fields(Sha256);
    impl Fields {
        fn field(&mut self, bytes: &[u8]) {
            self.0.update((bytes.len() as u64).to_le_bytes());
            self.0.update(bytes);
        }
    }
    let mut h = Fields(Sha256::new());
    h.0.update(body.kind().as_str().as_bytes());
    match body {
        ResourceBody::InstructionFile(InstructionFileBody { content }) => {
            h.field(content.as_bytes())
        }
        ResourceBody::Skill(SkillBody {
            meta,
            name,
            description,
        }) => {
            h.field(meta.as_bytes());
            h.field(name.as_bytes());
            h.field(description.as_bytes());
        }
        ResourceBody::McpConfig => {}
        ResourceBody::McpServer(McpServerBody {
            server_name,
            description,
            tools,
        }) => {
            h.field(server_name.as_bytes());
            h.field(description.as_bytes());
            h.0.update((tools.len() as u64).to_le_bytes());
            for McpTool {
                name,
                description,
                input_schema,
            } in tools
            {
                h.field(name.as_bytes());
                h.field(description.as_bytes());
                // Schemas are small; their JSON text is what is stored and compared.
                h.field(input_schema.to_string().as_bytes());
            }
        }
    }
    h.0.finalize().to_vec()
}

/// SPEC §5.4 steps 1–4; the caller commits and then notifies in-process.
pub(crate) fn push(
    tx: &mut Tx<'_>,
    agent_id: AgentId,
    push: &PreparedPush,
    now: DbTime,
    origin: u64,
) -> Result<PushOutcome, StoreError> {
    // 1. The run gate: only the agent row's current run may write.
    let agent = lock_agent(tx, agent_id, RowLock::Share)?;
    if (!agent.agent_run_id.is_empty() && agent.agent_run_id != push.run_id)
        || (!push.run_id.is_empty() && agent.retired()?.contains(&push.run_id))
    {
        return Ok(PushOutcome::DroppedStaleRun);
    }

    // 2. The version gate, bypassed by the first push of a connection.
    let previous = {
        on_backend!(tx, |c| workspace_agent_context_snapshots::table
            .find(agent_id)
            .select(SnapshotRow::as_select())
            .first(c)
            .optional())?
    };
    if let Some(previous) = &previous
        && !push.snapshot.initial
        && push.version <= previous.version
    {
        return Ok(PushOutcome::DroppedStaleVersion {
            stored_version: stored_u64("snapshot version", previous.version)?,
        });
    }

    // 3. Snapshot header and resources.
    let snapshot = &push.snapshot;
    let mut changes = PushChanges {
        snapshot_created: previous.is_none(),
        phase_changed: previous
            .as_ref()
            .is_none_or(|p| p.mcp_discovery_phase.0 != snapshot.phase),
        run_id_changed: previous
            .as_ref()
            .is_none_or(|p| p.agent_run_id != push.run_id),
        aggregate_hash_changed: previous
            .as_ref()
            .is_none_or(|p| p.aggregate_hash != snapshot.aggregate_hash),
        snapshot_error_changed: previous
            .as_ref()
            .is_none_or(|p| p.snapshot_error != snapshot.snapshot_error),
        ..PushChanges::default()
    };
    let header = SnapshotRow {
        agent_id,
        agent_run_id: push.run_id.clone(),
        mcp_discovery_phase: DbPhase(snapshot.phase),
        version: push.version,
        aggregate_hash: snapshot.aggregate_hash.clone(),
        snapshot_error: snapshot.snapshot_error.clone(),
        received_at: now,
        created_at: now,
    };
    let upsert = diesel::insert_into(workspace_agent_context_snapshots::table)
        .values(&header)
        .on_conflict(workspace_agent_context_snapshots::agent_id)
        .do_update()
        .set((
            workspace_agent_context_snapshots::agent_run_id.eq(&header.agent_run_id),
            workspace_agent_context_snapshots::mcp_discovery_phase.eq(header.mcp_discovery_phase),
            workspace_agent_context_snapshots::version.eq(header.version),
            workspace_agent_context_snapshots::aggregate_hash.eq(&header.aggregate_hash),
            workspace_agent_context_snapshots::snapshot_error.eq(&header.snapshot_error),
            workspace_agent_context_snapshots::received_at.eq(header.received_at),
        ));
    on_backend!(tx, |c| upsert.execute(c))?;
    changes.resources = write_resources(tx, agent_id, push, now)?;

    // 4. Chats: adopt a first pin, then mark or clear dirty against the new hash.
    adopt_first_pin(tx, agent_id, snapshot, now)?;
    if changes.aggregate_hash_changed {
        changes.chats_marked_dirty = mark_chats_dirty(tx, agent_id, &snapshot.aggregate_hash, now)?;
    }

    if changes.is_change() {
        notify_in_tx(tx, origin, &agent_event(agent_id, Some(snapshot.version)))?;
    }
    Ok(PushOutcome::Accepted(changes))
}

/// Upserts changed and new rows, leaves unchanged rows alone, deletes absent sources.
fn write_resources(
    tx: &mut Tx<'_>,
    agent_id: AgentId,
    push: &PreparedPush,
    now: DbTime,
) -> Result<ResourceChanges, StoreError> {
    let stored: Vec<ResourceFingerprint> = {
        on_backend!(tx, |c| workspace_agent_context_resources::table
            .filter(workspace_agent_context_resources::agent_id.eq(agent_id))
            .select(ResourceFingerprint::as_select())
            .load(c))?
    };
    let mut stored: HashMap<&str, &ResourceFingerprint> =
        stored.iter().map(|r| (r.source.as_str(), r)).collect();
    let mut changes = ResourceChanges::default();
    let mut to_write = Vec::new();
    let resources = push.snapshot.resources.iter();
    for ((resource, digest), size) in resources.zip(&push.digests).zip(&push.sizes) {
        let candidate = ResourceCandidate {
            resource,
            body_digest: digest,
            size_bytes: *size,
        };
        match stored.remove(resource.source.as_str()) {
            None => changes.inserted += 1,
            Some(old) if candidate.matches(old) => {
                changes.unchanged += 1;
                continue;
            }
            Some(_) => changes.updated += 1,
        }
        to_write.push(candidate.into_row(agent_id, now));
    }
    for chunk in to_write.chunks(ROWS_PER_STATEMENT) {
        use workspace_agent_context_resources::dsl as r;
        let upsert = diesel::insert_into(r::workspace_agent_context_resources)
            .values(chunk)
            .on_conflict((r::agent_id, r::source))
            .do_update()
            .set((
                r::source_path.eq(excluded(r::source_path)),
                r::body_kind.eq(excluded(r::body_kind)),
                r::body.eq(excluded(r::body)),
                r::body_digest.eq(excluded(r::body_digest)),
                r::content_hash.eq(excluded(r::content_hash)),
                r::size_bytes.eq(excluded(r::size_bytes)),
                r::status.eq(excluded(r::status)),
                r::error.eq(excluded(r::error)),
                r::updated_at.eq(excluded(r::updated_at)),
            ));
        on_backend!(tx, |c| upsert.execute(c))?;
    }
    let absent: Vec<&str> = stored.into_keys().collect();
    changes.deleted = absent.len();
    for chunk in absent.chunks(ROWS_PER_STATEMENT) {
        use workspace_agent_context_resources::dsl as r;
        let delete = diesel::delete(
            r::workspace_agent_context_resources
                .filter(r::agent_id.eq(agent_id))
                .filter(r::source.eq_any(chunk)),
        );
        on_backend!(tx, |c| delete.execute(c))?;
    }
    Ok(changes)
}

/// A pushed resource with its server-computed body digest.
struct ResourceCandidate<'a> {
    resource: &'a Resource,
    body_digest: &'a [u8],
    size_bytes: i64,
}

impl ResourceCandidate<'_> {
    /// True when nothing a reader sees differs from the stored row.
    fn matches(&self, stored: &ResourceFingerprint) -> bool {
        let r = self.resource;
        r.source_path == stored.source_path
            && r.body.kind() == stored.body_kind.0
            && self.body_digest == stored.body_digest.as_slice()
            && r.content_hash == stored.content_hash
            && self.size_bytes == stored.size_bytes
            && r.status == stored.status.0
            && r.error == stored.error
    }

    fn into_row(self, agent_id: AgentId, now: DbTime) -> ResourceRow {
        let r = self.resource;
        ResourceRow {
            agent_id,
            source: r.source.clone(),
            source_path: r.source_path.clone(),
            body_kind: DbBodyKind(r.body.kind()),
            body: body_json(&r.body),
            body_digest: self.body_digest.to_vec(),
            content_hash: r.content_hash.clone(),
            size_bytes: self.size_bytes,
            status: DbStatus(r.status),
            error: r.error.clone(),
            created_at: now,
            updated_at: now,
        }
    }
}

/// Chats bound to this agent that have never pinned anything pin this snapshot: the
/// snapshot a chat "first sees" (SPEC §7).
fn adopt_first_pin(
    tx: &mut Tx<'_>,
    agent_id: AgentId,
    snapshot: &Snapshot,
    now: DbTime,
) -> Result<(), StoreError> {
    let unpinned: Vec<ChatId> = {
        let query = chats::table
            .filter(chats::agent_id.eq(agent_id))
            .filter(chats::pinned_aggregate_hash.is_null())
            .select(chats::id);
        on_backend!(tx, |c| query.load(c))?
    };
    if unpinned.is_empty() {
        return Ok(());
    }
    let pinnable: Vec<PinnedCopy> = snapshot
        .resources
        .iter()
        .filter(|r| is_pinned_kind(DbBodyKind(r.body.kind())))
        .map(PinnedCopy::from_resource)
        .collect::<Result<_, _>>()?;
    for chat_id in unpinned {
        write_pin(
            tx,
            chat_id,
            Some(PinSource {
                aggregate_hash: &snapshot.aggregate_hash,
                snapshot_error: snapshot.snapshot_error.as_deref(),
                resources: &pinnable,
            }),
            now,
        )?;
    }
    Ok(())
}

/// Marks chats pinned to another hash dirty (keeping an earlier `dirty_since`) and
/// clears chats whose pin equals the new hash again. Returns how many became dirty.
fn mark_chats_dirty(
    tx: &mut Tx<'_>,
    agent_id: AgentId,
    aggregate_hash: &str,
    now: DbTime,
) -> Result<usize, StoreError> {
    let mark = diesel::update(
        chats::table
            .filter(chats::agent_id.eq(agent_id))
            .filter(chats::pinned_aggregate_hash.ne(aggregate_hash))
            .filter(chats::dirty_since.is_null()),
    )
    .set((chats::dirty_since.eq(Some(now)), chats::updated_at.eq(now)));
    let marked = on_backend!(tx, |c| mark.execute(c))?;
    let clear = diesel::update(
        chats::table
            .filter(chats::agent_id.eq(agent_id))
            .filter(chats::pinned_aggregate_hash.eq(aggregate_hash))
            .filter(chats::dirty_since.is_not_null()),
    )
    .set((
        chats::dirty_since.eq(None::<DbTime>),
        chats::updated_at.eq(now),
    ));
    on_backend!(tx, |c| clear.execute(c))?;
    Ok(marked)
}

// ---- reads ---------------------------------------------------------------------------

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

fn load_resources(tx: &mut Tx<'_>, agent_id: AgentId) -> Result<Vec<StoredResource>, StoreError> {
    Ok(on_backend!(tx, |c| {
        workspace_agent_context_resources::table
            .filter(workspace_agent_context_resources::agent_id.eq(agent_id))
            .order(workspace_agent_context_resources::source)
            .select(StoredResource::as_select())
            .load(c)
    })?)
}

// ---- chats ---------------------------------------------------------------------------

/// One resource as a chat pins it.
struct PinnedCopy {
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
    fn from_resource(r: &Resource) -> Result<Self, StoreError> {
        Ok(Self {
            source: r.source.clone(),
            source_path: r.source_path.clone(),
            body_kind: DbBodyKind(r.body.kind()),
            body: body_json(&r.body),
            content_hash: r.content_hash.clone(),
            size_bytes: to_i64("size_bytes", r.size_bytes)?,
            status: DbStatus(r.status),
            error: r.error.clone(),
        })
    }

    fn from_stored(r: StoredResource) -> Self {
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
struct PinSource<'a> {
    aggregate_hash: &'a str,
    snapshot_error: Option<&'a str>,
    resources: &'a [PinnedCopy],
}

/// Replaces the chat's pin with `source` (or clears it for `None`) and clears dirty.
fn write_pin(
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

#[cfg(test)]
mod tests {
    use super::*;

    fn server(name: &str, tools: &[(&str, &str, serde_json::Value)]) -> ResourceBody {
        ResourceBody::McpServer(McpServerBody {
            server_name: name.into(),
            description: String::new(),
            tools: tools
                .iter()
                .map(|(name, description, schema)| McpTool {
                    name: (*name).into(),
                    description: (*description).into(),
                    input_schema: schema.clone(),
                })
                .collect(),
        })
    }

    fn skill(meta: &str, name: &str, description: &str) -> ResourceBody {
        ResourceBody::Skill(SkillBody {
            meta: meta.into(),
            name: name.into(),
            description: description.into(),
        })
    }

    #[test]
    fn a_change_in_any_body_field_changes_the_digest() {
        let object = serde_json::json!({"type": "object"});
        let string = serde_json::json!({"type": "string"});
        let bodies = [
            ResourceBody::McpConfig,
            ResourceBody::InstructionFile(InstructionFileBody::default()),
            ResourceBody::InstructionFile(InstructionFileBody {
                content: "a".into(),
            }),
            skill("", "", ""),
            skill("m", "", ""),
            skill("", "m", ""),
            skill("", "", "m"),
            // Field boundaries are part of the digest.
            skill("ab", "c", ""),
            skill("a", "bc", ""),
            server("", &[]),
            server("fs", &[]),
            server("fs", &[("read", "", object.clone())]),
            server("fs", &[("read", "d", object.clone())]),
            server("fs", &[("read", "", string.clone())]),
            server("fs", &[("read", "", object.clone()), ("write", "", object)]),
        ];
        let digests: Vec<Vec<u8>> = bodies.iter().map(body_digest).collect();
        for (i, a) in digests.iter().enumerate() {
            assert_eq!(a, &body_digest(&bodies[i].clone()), "{:?}", bodies[i]);
            for (j, b) in digests.iter().enumerate().skip(i + 1) {
                assert_ne!(a, b, "{:?} and {:?}", bodies[i], bodies[j]);
            }
        }
    }
}
