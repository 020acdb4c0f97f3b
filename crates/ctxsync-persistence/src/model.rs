//! What the store hands out (plain records and outcomes) and the diesel row types they
//! are read from and written as.

use chrono::{DateTime, Utc};
use ctxsync_protocol::{
    BodyKind, DiscoveryPhase, McpConnectTimings, Resource, ResourceBody, RunId,
    SnapshotPendingServer,
};
use diesel::prelude::*;

use crate::error::StoreError;
use crate::ids::{AgentId, ChatId};
use crate::schema::*;
use crate::sql_types::{DbBodyKind, DbPhase, DbStatus, DbTime, JsonText};
use crate::token::AgentToken;

// ---- public records ------------------------------------------------------------------

/// An agent and its newly issued bearer token, from [`Store::create_agent`] or
/// [`Store::rotate_agent_token`] (shown once, never stored).
///
/// [`Store::create_agent`]: crate::Store::create_agent
/// [`Store::rotate_agent_token`]: crate::Store::rotate_agent_token
#[derive(Clone, Debug)]
pub struct NewAgent {
    /// The agent's id (unchanged by a rotation).
    pub id: AgentId,
    /// Its new bearer token: the only copy, since the store keeps just its sha256.
    pub token: AgentToken,
}

/// A `workspace_agents` row, without its token hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentRecord {
    /// The agent's id, also the part of its token before the `.`.
    pub id: AgentId,
    /// The name given at creation (1..=[`MAX_AGENT_NAME_BYTES`] bytes).
    ///
    /// [`MAX_AGENT_NAME_BYTES`]: crate::MAX_AGENT_NAME_BYTES
    pub name: String,
    /// The run id of the agent process that is running now; `None` for a legacy agent
    /// or before the first UpdateStartup (the column's `''`).
    pub agent_run_id: Option<RunId>,
    /// `Startup.version` of the last UpdateStartup.
    pub startup_version: String,
    /// `Startup.expanded_directory` of the last UpdateStartup.
    pub expanded_directory: String,
    /// Run ids this agent replaced, oldest first (at most [`MAX_RETIRED_RUN_IDS`]).
    pub retired_agent_run_ids: Vec<RunId>,
    /// When the last UpdateStartup was stored.
    pub started_at: Option<DateTime<Utc>>,
    /// When the agent was created.
    pub created_at: DateTime<Utc>,
    /// When the row last changed: creation, an UpdateStartup or a token rotation.
    pub updated_at: DateTime<Utc>,
    /// `Startup.accepts_tool_calls` of the last UpdateStartup: the running process takes
    /// tool calls (false before the first UpdateStartup).
    pub accepts_tool_calls: bool,
}

/// Retired run ids kept per agent (SPEC §5.3).
pub const MAX_RETIRED_RUN_IDS: usize = 16;

/// The stored snapshot header (`workspace_agent_context_snapshots`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotRecord {
    /// The run id of the process that pushed it (`None`: a legacy agent's); fresh iff
    /// equal to the agent row's.
    pub agent_run_id: Option<RunId>,
    /// How far MCP discovery had got when the agent built the snapshot.
    pub phase: DiscoveryPhase,
    /// The pushing process's snapshot counter (its first snapshot is 1).
    pub version: u64,
    /// sha256 (lower-case hex) the agent computed over the non-MCP resources; what
    /// chats pin.
    pub aggregate_hash: String,
    /// Why the snapshot is incomplete, when the reason is not one resource's.
    pub snapshot_error: Option<String>,
    /// Server clock; never used for freshness.
    pub received_at: DateTime<Utc>,
    /// While pending: the servers still connecting, with how long each had been at it when
    /// the agent built the snapshot (add the time since `received_at` for "now").
    pub pending_servers: Vec<SnapshotPendingServer>,
}

/// An agent's row, snapshot and resources, read in one consistent transaction.
#[derive(Clone, Debug, PartialEq)]
pub struct AgentContext {
    /// The agent's row.
    pub agent: AgentRecord,
    /// The stored snapshot header; `None` until a push of the agent is accepted.
    pub snapshot: Option<SnapshotRecord>,
    /// Sorted by source.
    pub resources: Vec<Resource>,
    /// Whether the agent's current run is connected now, read in the same transaction.
    pub connection: AgentConnection,
    /// The plaintext part of the sign-ins the agent holds, by server name (never a
    /// secret), read in the same transaction.
    pub sign_ins: Vec<crate::credentials::CredentialSummary>,
}

/// Whether the agent process is connected to the control plane now (issue 49): what a
/// replica saw of the call stream of the agent's current run, never the agent's clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AgentConnection {
    /// No call stream of the agent's current run has been seen (the process has not
    /// opened one yet, or takes no calls).
    #[default]
    Never,
    /// A stream of the current run is open on some replica, under a live lease.
    Online,
    /// The current run's stream ended, or the replica holding it stopped renewing its
    /// lease: `since` is when a replica saw it end, or when the lease ran out, by that
    /// replica's clock.
    Offline {
        /// When the stream was seen to end.
        since: DateTime<Utc>,
    },
}

/// What an UpdateStartup stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartupOutcome {
    /// The row's run id before the update.
    pub previous_run_id: Option<RunId>,
    /// The row's run id now (`None` for a legacy agent).
    pub agent_run_id: Option<RunId>,
    /// The run id this update retired, if it replaced one.
    pub retired_run_id: Option<RunId>,
    /// `Startup.version` as stored.
    pub startup_version: String,
    /// `Startup.expanded_directory` as stored.
    pub expanded_directory: String,
}

impl StartupOutcome {
    /// True when the row's run id changed (to or from none included); only then were
    /// subscribers notified.
    pub fn run_id_changed(&self) -> bool {
        self.previous_run_id != self.agent_run_id
    }
}

/// The result of a PushContextState.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PushOutcome {
    /// Stored; says what changed.
    Accepted(PushChanges),
    /// The push came from another process than the agent row's current run: nothing
    /// written, nobody notified.
    DroppedStaleRun,
    /// A replayed or out-of-order version: nothing written, nobody notified. An `initial`
    /// push is dropped only when it is of the stored snapshot's (non-empty) run and below
    /// its version.
    DroppedStaleVersion {
        /// The version of the snapshot that stays stored.
        stored_version: u64,
    },
    /// A delta whose base the server does not hold: the stored snapshot is another
    /// run's, or a body it left out is not stored with the digest it named. Nothing
    /// written, nobody notified; the agent sends a full push.
    DeltaBaseMissing,
}

impl PushOutcome {
    /// True for [`PushOutcome::Accepted`], whether or not the push changed anything.
    pub fn accepted(&self) -> bool {
        matches!(self, Self::Accepted(_))
    }
}

/// What an accepted push changed. Any change notifies subscribers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PushChanges {
    /// There was no snapshot before this push (every `*_changed` flag is then true).
    pub snapshot_created: bool,
    /// The discovery phase differs from the previous snapshot's.
    pub phase_changed: bool,
    /// The previous snapshot's run id differs from this push's (an empty one included).
    pub run_id_changed: bool,
    /// The aggregate hash differs from the previous snapshot's.
    pub aggregate_hash_changed: bool,
    /// The snapshot error was set, cleared or reworded.
    pub snapshot_error_changed: bool,
    /// Another set of servers is still connecting (their times alone are no change).
    pub pending_changed: bool,
    /// How the agent's resource rows were written.
    pub resources: ResourceChanges,
    /// Chats newly marked dirty because they pin another aggregate hash.
    pub chats_marked_dirty: usize,
    /// Connect timings of the MCP servers this push reports for the first time in its
    /// run, for `/metrics` (each server once per connect, not once per push).
    pub server_timings: Vec<McpConnectTimings>,
}

impl PushChanges {
    /// True when readers would see something different (a version-only push is not).
    pub fn is_change(&self) -> bool {
        self.snapshot_created
            || self.phase_changed
            || self.run_id_changed
            || self.aggregate_hash_changed
            || self.snapshot_error_changed
            || self.pending_changed
            || self.resources.any()
    }
}

/// Resource rows written by a push. Unchanged rows are not rewritten.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ResourceChanges {
    /// Rows added for sources the agent had no row for.
    pub inserted: usize,
    /// Rows rewritten because something a reader sees changed (kept delta rows included).
    pub updated: usize,
    /// Rows removed because the push no longer lists their source.
    pub deleted: usize,
    /// Rows left as they were, sent in full or kept by a delta.
    pub unchanged: usize,
}

impl ResourceChanges {
    /// True when any row was inserted, updated or deleted.
    pub fn any(&self) -> bool {
        self.inserted + self.updated + self.deleted > 0
    }
}

/// A `chats` row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChatRecord {
    /// The chat's id.
    pub id: ChatId,
    /// May name an agent that no longer exists (agents are deleted without their chats).
    pub agent_id: Option<AgentId>,
    /// The aggregate hash of the pinned snapshot; `None` until the chat pins one.
    pub pinned_aggregate_hash: Option<String>,
    /// When the current pin was written; `None` while nothing is pinned.
    pub pinned_at: Option<DateTime<Utc>>,
    /// Set when the agent's aggregate hash moved away from the pinned one.
    pub dirty_since: Option<DateTime<Utc>>,
    /// The pinned snapshot's error, if it had one.
    pub context_error: Option<String>,
    /// When the chat was created.
    pub created_at: DateTime<Utc>,
    /// When the row last changed: binding, pinning or the dirty flag.
    pub updated_at: DateTime<Utc>,
}

impl ChatRecord {
    /// True while `dirty_since` is set: the agent's hash moved away from the pin.
    pub fn is_dirty(&self) -> bool {
        self.dirty_since.is_some()
    }
}

/// A chat and its pinned instruction files and skills (sorted by source), as stored; the
/// chat projection combines them with the live view into a turn's context.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredChat {
    /// The chat's row.
    pub chat: ChatRecord,
    /// The pinned copies, sorted by source; empty while nothing is pinned.
    pub pinned: Vec<Resource>,
}

// ---- rows ----------------------------------------------------------------------------

#[derive(Queryable, Selectable)]
#[diesel(table_name = workspace_agents)]
#[cfg_attr(
    all(feature = "postgres", feature = "sqlite"),
    diesel(check_for_backend(diesel::pg::Pg, diesel::sqlite::Sqlite))
)]
pub(crate) struct AgentRow {
    pub id: AgentId,
    pub name: String,
    pub agent_run_id: String,
    pub startup_version: String,
    pub expanded_directory: String,
    pub retired_agent_run_ids: JsonText,
    pub started_at: Option<DbTime>,
    pub created_at: DbTime,
    pub updated_at: DbTime,
    pub accepts_tool_calls: bool,
}

impl AgentRow {
    /// The retired run ids (a JSON array of non-empty strings in the column).
    pub(crate) fn retired(&self) -> Result<Vec<RunId>, StoreError> {
        serde_json::from_str(&self.retired_agent_run_ids.0)
            .map_err(|e| StoreError::Corrupt(format!("agent {}: retired run ids: {e}", self.id)))
    }

    pub(crate) fn into_record(self) -> Result<AgentRecord, StoreError> {
        let retired_agent_run_ids = self.retired()?;
        Ok(AgentRecord {
            id: self.id,
            name: self.name,
            agent_run_id: RunId::new(self.agent_run_id),
            startup_version: self.startup_version,
            expanded_directory: self.expanded_directory,
            retired_agent_run_ids,
            started_at: self.started_at.map(|t| t.0),
            created_at: self.created_at.0,
            updated_at: self.updated_at.0,
            accepts_tool_calls: self.accepts_tool_calls,
        })
    }
}

#[derive(Insertable)]
#[diesel(table_name = workspace_agents)]
pub(crate) struct NewAgentRow<'a> {
    pub id: AgentId,
    pub name: &'a str,
    pub token_hash: &'a [u8],
    pub agent_run_id: &'a str,
    pub startup_version: &'a str,
    pub expanded_directory: &'a str,
    pub retired_agent_run_ids: JsonText,
    pub created_at: DbTime,
    pub updated_at: DbTime,
}

#[derive(Queryable, Selectable, Insertable)]
#[diesel(table_name = workspace_agent_context_snapshots)]
#[cfg_attr(
    all(feature = "postgres", feature = "sqlite"),
    diesel(check_for_backend(diesel::pg::Pg, diesel::sqlite::Sqlite))
)]
#[diesel(treat_none_as_default_value = false)]
pub(crate) struct SnapshotRow {
    pub agent_id: AgentId,
    pub agent_run_id: String,
    pub mcp_discovery_phase: DbPhase,
    pub version: i64,
    pub aggregate_hash: String,
    pub snapshot_error: Option<String>,
    pub received_at: DbTime,
    pub created_at: DbTime,
    pub pending_servers: JsonText,
    /// SHA-256 of the stored resources' fingerprints (see `push`); `None` when unknown.
    pub resources_digest: Option<Vec<u8>>,
}

impl SnapshotRow {
    pub(crate) fn into_record(self) -> Result<SnapshotRecord, StoreError> {
        Ok(SnapshotRecord {
            agent_run_id: RunId::new(self.agent_run_id),
            phase: self.mcp_discovery_phase.0,
            version: stored_u64("snapshot version", self.version)?,
            aggregate_hash: self.aggregate_hash,
            snapshot_error: self.snapshot_error,
            received_at: self.received_at.0,
            pending_servers: serde_json::from_str(&self.pending_servers.0).map_err(|e| {
                StoreError::Corrupt(format!("stored pending servers are not valid: {e}"))
            })?,
        })
    }
}

#[derive(Queryable, Selectable)]
#[diesel(table_name = chats)]
#[cfg_attr(
    all(feature = "postgres", feature = "sqlite"),
    diesel(check_for_backend(diesel::pg::Pg, diesel::sqlite::Sqlite))
)]
pub(crate) struct ChatRow {
    pub id: ChatId,
    pub agent_id: Option<AgentId>,
    pub pinned_aggregate_hash: Option<String>,
    pub pinned_at: Option<DbTime>,
    pub dirty_since: Option<DbTime>,
    pub context_error: Option<String>,
    pub created_at: DbTime,
    pub updated_at: DbTime,
}

impl From<ChatRow> for ChatRecord {
    fn from(row: ChatRow) -> Self {
        Self {
            id: row.id,
            agent_id: row.agent_id,
            pinned_aggregate_hash: row.pinned_aggregate_hash,
            pinned_at: row.pinned_at.map(|t| t.0),
            dirty_since: row.dirty_since.map(|t| t.0),
            context_error: row.context_error,
            created_at: row.created_at.0,
            updated_at: row.updated_at.0,
        }
    }
}

/// The columns a push compares to decide whether a stored resource changed.
#[derive(Queryable, Selectable)]
#[diesel(table_name = workspace_agent_context_resources)]
#[cfg_attr(
    all(feature = "postgres", feature = "sqlite"),
    diesel(check_for_backend(diesel::pg::Pg, diesel::sqlite::Sqlite))
)]
pub(crate) struct ResourceFingerprint {
    pub source: String,
    pub source_path: Option<String>,
    pub body_kind: DbBodyKind,
    pub body_digest: Vec<u8>,
    pub content_hash: String,
    pub size_bytes: i64,
    pub status: DbStatus,
    pub error: Option<String>,
}

#[derive(Insertable)]
#[diesel(table_name = workspace_agent_context_resources)]
#[diesel(treat_none_as_default_value = false)]
pub(crate) struct ResourceRow {
    pub agent_id: AgentId,
    pub source: String,
    pub source_path: Option<String>,
    pub body_kind: DbBodyKind,
    pub body: JsonText,
    pub body_digest: Vec<u8>,
    pub content_hash: String,
    pub size_bytes: i64,
    pub status: DbStatus,
    pub error: Option<String>,
    pub created_at: DbTime,
    pub updated_at: DbTime,
}

/// A resource as stored (agent resources and chat pins share this shape).
#[derive(Queryable, Selectable)]
#[diesel(table_name = workspace_agent_context_resources)]
#[cfg_attr(
    all(feature = "postgres", feature = "sqlite"),
    diesel(check_for_backend(diesel::pg::Pg, diesel::sqlite::Sqlite))
)]
pub(crate) struct StoredResource {
    pub source: String,
    pub source_path: Option<String>,
    pub body_kind: DbBodyKind,
    pub body: JsonText,
    pub content_hash: String,
    pub size_bytes: i64,
    pub status: DbStatus,
    pub error: Option<String>,
}

impl StoredResource {
    pub(crate) fn into_resource(self) -> Result<Resource, StoreError> {
        let corrupt =
            |what: String| StoreError::Corrupt(format!("resource {:?}: {what}", self.source));
        let value: serde_json::Value =
            serde_json::from_str(&self.body.0).map_err(|e| corrupt(e.to_string()))?;
        let body =
            ResourceBody::from_json(self.body_kind.0, value).map_err(|e| corrupt(e.to_string()))?;
        let size_bytes = stored_u64("size_bytes", self.size_bytes)?;
        Ok(Resource {
            source: self.source,
            source_path: self.source_path,
            content_hash: self.content_hash,
            size_bytes,
            status: self.status.0,
            error: self.error,
            body,
        })
    }
}

#[derive(Queryable, Selectable)]
#[diesel(table_name = chat_context_resources)]
#[cfg_attr(
    all(feature = "postgres", feature = "sqlite"),
    diesel(check_for_backend(diesel::pg::Pg, diesel::sqlite::Sqlite))
)]
pub(crate) struct StoredChatResource {
    pub source: String,
    pub source_path: Option<String>,
    pub body_kind: DbBodyKind,
    pub body: JsonText,
    pub content_hash: String,
    pub size_bytes: i64,
    pub status: DbStatus,
    pub error: Option<String>,
}

impl From<StoredChatResource> for StoredResource {
    fn from(r: StoredChatResource) -> Self {
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

#[derive(Insertable)]
#[diesel(table_name = chat_context_resources)]
#[diesel(treat_none_as_default_value = false)]
pub(crate) struct ChatResourceRow {
    pub chat_id: ChatId,
    pub source: String,
    pub source_path: Option<String>,
    pub body_kind: DbBodyKind,
    pub body: JsonText,
    pub content_hash: String,
    pub size_bytes: i64,
    pub status: DbStatus,
    pub error: Option<String>,
    pub pinned_at: DbTime,
}

/// True for the kinds a chat pins (SPEC §7): instruction files and skills. MCP rows are
/// runtime capabilities, read from the agent's latest snapshot, never pinned.
pub(crate) fn is_pinned_kind(kind: DbBodyKind) -> bool {
    matches!(kind.0, BodyKind::InstructionFile | BodyKind::Skill)
}

/// Converts a stored non-negative BIGINT back to `u64`.
pub(crate) fn stored_u64(what: &str, value: i64) -> Result<u64, StoreError> {
    u64::try_from(value).map_err(|_| StoreError::Corrupt(format!("negative {what}: {value}")))
}

/// Converts a caller's `u64` for a BIGINT column.
pub(crate) fn to_i64(what: &str, value: u64) -> Result<i64, StoreError> {
    i64::try_from(value)
        .map_err(|_| StoreError::InvalidInput(format!("{what} {value} does not fit in i64")))
}

/// Agents counted by what decides their phase and freshness, without their context: one
/// row of [`crate::Store::agent_phase_groups`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AgentPhaseGroup {
    /// The agents' current run id is empty (a legacy agent: no freshness guarantee).
    pub legacy: bool,
    /// The stored snapshot's phase and whether its run id equals the agents' current
    /// one; `None` for agents without a snapshot.
    pub snapshot: Option<(DiscoveryPhase, bool)>,
    /// How many agents are in this group.
    pub agents: u64,
}
