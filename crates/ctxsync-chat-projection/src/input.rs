//! The plain inputs of the projection: what the store read for one chat or agent, in one
//! consistent transaction, mapped without interpretation.
//!
//! The store adapter ([`Binding::from_read`], used by [`crate::store`]) is a
//! field-by-field mapping of one `read_agent_context` result, never of two reads, so one
//! process's agent row is never paired with another process's snapshot:
//! - chat with no bound agent → [`Binding::NoAgent`];
//! - bound agent id for which the read returns no agent row → [`Binding::MissingAgent`];
//! - otherwise [`Binding::Agent`] with `agent_run_id` = the row's run id (`None` for
//!   the column's `''`) and `snapshot` = the snapshot row, if any: its run id,
//!   `mcp_discovery_phase` as [`DiscoveryPhase`], `aggregate_hash`, `snapshot_error`
//!   (empty → `None`), `received_at` as a [`SystemTime`], `pending_servers` as stored, and
//!   every resource row as a [`Resource`] (with `ResourceBody::from_json`), and
//!   `connection` = the read's [`Connection`] (its `since` as a [`SystemTime`]). A run id
//!   is a [`RunId`] or `None`, never an empty string.

use std::time::SystemTime;

use ctxsync_protocol::{DiscoveryPhase, Resource, RunId, SnapshotPendingServer};

/// What a chat (or an agent-scoped read) is bound to, as read in one transaction.
#[derive(Clone, Debug, PartialEq)]
// One is made per read and moved along, never stored in bulk: boxing the agent's state
// would cost an allocation per read to save bytes on the two unit variants.
#[allow(clippy::large_enum_variant)]
pub enum Binding {
    /// The chat has no bound agent.
    NoAgent,
    /// The chat names an agent that no longer exists (deleted or replaced). Projects as
    /// `unknown` and stale, without tools and without failing the read.
    MissingAgent,
    /// The bound agent's row, with its snapshot if it has published one.
    Agent(AgentState),
}

/// The agent row and its stored snapshot.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AgentState {
    /// The run id of the agent process that is running now (`workspace_agents.agent_run_id`);
    /// `None` for a legacy agent, which gives no freshness guarantee.
    pub agent_run_id: Option<RunId>,
    /// `None` until the agent has published a snapshot.
    pub snapshot: Option<SnapshotState>,
    /// Whether that process is connected to the control plane now.
    pub connection: Connection,
    /// The people's sign-ins the agent holds, by server name: what every chat of it shows
    /// ("signed in as … by …"); never a secret.
    pub sign_ins: Vec<HeldSignIn>,
}

/// A person's sign-in to one of the agent's HTTP servers, as the panel says it. The
/// credential behind it belongs to the agent, so every chat of the agent shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeldSignIn {
    /// The server's name in the agent's report.
    pub server: String,
    /// The account the token response named, if any.
    pub account: Option<String>,
    /// Who started it: `api_token`, or `chat:<chat id>` for a chat's page.
    pub via: String,
}

/// Whether the agent process is connected to the control plane now (issue 49): the
/// control plane's own observation of the process's call stream, read with the agent
/// row. A fact of its own: it never changes the phase, freshness or outcomes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Connection {
    /// No stream of the agent's current run has been seen (not opened yet, or the
    /// process takes no calls).
    #[default]
    Never,
    /// The current run's stream is open.
    Online,
    /// The current run's stream ended at `since` (the control plane's clock): the
    /// process is gone or cut off, and its tools cannot be called until it reconnects.
    Offline {
        /// When the control plane saw the stream end.
        since: SystemTime,
    },
}

impl Connection {
    /// The word every surface uses: `online`, `offline` or `never`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Never => "never",
            Self::Online => "online",
            Self::Offline { .. } => "offline",
        }
    }

    /// When the stream was seen to end, while offline.
    pub fn offline_since(self) -> Option<SystemTime> {
        match self {
            Self::Offline { since } => Some(since),
            Self::Never | Self::Online => None,
        }
    }
}

/// The agent's stored snapshot and its resources.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SnapshotState {
    /// The run id stamped on the snapshot; `None` when a legacy process published it.
    pub agent_run_id: Option<RunId>,
    /// The discovery phase the snapshot was published in.
    pub phase: DiscoveryPhase,
    /// The snapshot's aggregate hash (instruction files and skills only); used for pinning.
    pub aggregate_hash: String,
    /// The snapshot's own error, as stored (the agent's reason the snapshot is not whole).
    pub snapshot_error: Option<String>,
    /// Every stored resource row of the snapshot, of any kind and status.
    pub resources: Vec<Resource>,
    /// When the server stored the snapshot, by its clock. Only ever used to say how long
    /// the pending servers have been connecting, never for phase or freshness; `None`
    /// when unknown (then their elapsed time is as the agent reported it).
    pub received_at: Option<SystemTime>,
    /// While pending: the servers of the agent's initial discovery still connecting, with
    /// how long each had been connecting when the agent built the snapshot. Empty
    /// otherwise, and for snapshots stored before agents reported it.
    pub pending_servers: Vec<SnapshotPendingServer>,
}
