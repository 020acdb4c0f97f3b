//! The chat API's request and response types, and its OpenAPI 3.1 document derived from
//! them and from the handlers' `#[utoipa::path]` attributes: the handlers serialize these
//! types, so the document cannot drift from what is answered. Served at
//! [`OPENAPI_PATH`]; a committed copy (`crates/ctxsync/openapi.json`) is checked by a test.

use ctxsync_chat_projection::{Deferral, FindToolsResponse, ModelTool, ViewPhase};
use ctxsync_context_ui::{ConnectionStatus, DiscoveryWords, Panel};
use ctxsync_first_turn_gate::Outcome;
use ctxsync_persistence::{
    AgentConnection, AgentContext, AgentId, AgentRecord, ChatTurnMode, TurnRecord,
};
use ctxsync_protocol::{
    BodyKind, InstructionFileBody, McpServerBody, ResourceBody, ResourceStatus, RunId, SkillBody,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, RefOr, ResponseBuilder};
use utoipa::{Modify, OpenApi, ToSchema};

/// Where the document is served (without a token: it describes, it holds no data).
pub const OPENAPI_PATH: &str = "/api/openapi.json";

/// The security scheme's name in the document.
const BEARER: &str = "bearer_token";

/// Every error answer: `{"error": message}`, the message naming the problem.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    /// The problem, in words; an internal failure's cause goes to the server's log, not here.
    pub error: String,
}

/// `/healthz` while the database answers.
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    /// Always `ok`.
    pub status: HealthStatus,
}

/// `/healthz`'s status word.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum HealthStatus {
    /// The database answers.
    Ok,
}

/// `POST /api/agents`'s body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateAgent {
    /// A display name; not unique, not blank.
    #[schema(min_length = 1, pattern = r"\S")]
    pub name: String,
}

/// An agent with its token: shown by its creation and each rotation, never again.
#[derive(Debug, Serialize, ToSchema)]
pub struct AgentWithToken {
    /// The agent's id.
    #[schema(format = Uuid)]
    pub id: String,
    /// The agent's bearer token for the agent API.
    pub token: String,
}

/// An agent as every listing shows it: never its token or the token's digest.
#[derive(Debug, Serialize, ToSchema)]
pub struct AgentSummary {
    /// The agent's id.
    #[schema(format = Uuid)]
    pub id: String,
    /// The agent's display name (not unique).
    pub name: String,
    /// The run id of the agent process running now; empty before its first startup.
    pub agent_run_id: String,
    /// The version the agent reported at its last startup; empty before it.
    pub agent_version: String,
    /// The workspace directory the agent reported; empty before its first startup.
    pub expanded_directory: String,
    /// When the last startup was stored (RFC 3339).
    #[schema(format = DateTime)]
    pub started_at: Option<String>,
    /// When the agent was created (RFC 3339).
    #[schema(format = DateTime)]
    pub created_at: String,
    /// When the agent's record last changed (RFC 3339).
    #[schema(format = DateTime)]
    pub updated_at: String,
    /// Whether the process of the agent's current run is connected now, as a chat's
    /// panel header says it.
    pub connection: ConnectionStatus,
    /// While `offline`: when the control plane saw that process's stream end (RFC 3339,
    /// UTC, whole seconds, the control plane's clock); `null` otherwise.
    #[schema(format = DateTime)]
    pub offline_since: Option<String>,
}

impl AgentSummary {
    /// The agent's row, and whether its current run is connected now.
    pub fn of(agent: &AgentRecord, connection: AgentConnection) -> Self {
        let (connection, offline_since) = match connection {
            AgentConnection::Never => (ConnectionStatus::Never, None),
            AgentConnection::Online => (ConnectionStatus::Online, None),
            AgentConnection::Offline { since } => (
                ConnectionStatus::Offline,
                Some(ctxsync_chat_projection::rfc3339_utc(since.into())),
            ),
        };
        Self {
            connection,
            offline_since,
            id: agent.id.to_string(),
            name: agent.name.clone(),
            agent_run_id: RunId::edge(agent.agent_run_id.as_ref()).to_owned(),
            agent_version: agent.startup_version.clone(),
            expanded_directory: agent.expanded_directory.clone(),
            started_at: agent.started_at.map(|t| t.to_rfc3339()),
            created_at: agent.created_at.to_rfc3339(),
            updated_at: agent.updated_at.to_rfc3339(),
        }
    }
}

/// `GET /api/agents`'s answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct AgentList {
    /// Oldest first.
    pub agents: Vec<AgentSummary>,
}

/// The agent's stored rows beside the projection's view of them (one read).
#[derive(Debug, Serialize, ToSchema)]
pub struct AgentContextBody {
    /// The agent's id.
    #[schema(format = Uuid)]
    pub agent_id: String,
    /// The agent's display name.
    pub name: String,
    /// The run id of the agent process running now; empty before its first startup.
    pub agent_run_id: String,
    /// The projection's phase and freshness for this agent.
    pub mcp_discovery: DiscoveryWords,
    /// As `mcp_discovery.stale`: the stored snapshot is not from the agent process running
    /// now.
    pub stale: bool,
    /// `null` before the agent's first snapshot.
    pub snapshot: Option<SnapshotRow>,
    /// Sorted by source.
    pub resources: Vec<ResourceRow>,
}

/// `GET /api/agents/{id}/mcp-servers`'s answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct AgentServersBody {
    /// The agent's id.
    #[schema(format = Uuid)]
    pub agent_id: String,
    /// The servers of the agent's stored snapshot, sorted by name; empty before its first
    /// snapshot.
    pub servers: Vec<ServerSignIn>,
}

/// One MCP server of the agent and whether it waits for a person's sign-in.
#[derive(Debug, Serialize, ToSchema)]
pub struct ServerSignIn {
    /// The server's name as the panel shows it (`<plugin>/<server>` for a plugin's).
    pub name: String,
    /// Whether the server asks for a sign-in.
    pub sign_in: SignInState,
    /// For `needs_authorization`: what the server answered, in words (sanitized by the
    /// agent); for `failed`: why the last sign-in failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// For `signed_in`: the sign-in, never a token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signed_in: Option<SignedInBody>,
}

/// Who signed a server in, as what, and until when; never a token.
#[derive(Debug, Serialize, ToSchema)]
pub struct SignedInBody {
    /// The account the token response named, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    /// The scopes granted.
    pub scopes: Vec<String>,
    /// When the access token expires (RFC 3339), if the server said; the agent refreshes
    /// it before then.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// When the person signed in (RFC 3339).
    pub signed_in_at: String,
    /// Who started the sign-in: `api_token`, or `page` (a chat's page).
    pub signed_in_via: String,
    /// For `page`: the chat whose page it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = Uuid)]
    pub signed_in_chat_id: Option<String>,
}

impl SignedInBody {
    fn of(summary: &ctxsync_persistence::CredentialSummary) -> Self {
        let (via, chat) = match summary.signed_in_via.strip_prefix("chat:") {
            Some(chat) => ("page", Some(chat.to_owned())),
            None => (summary.signed_in_via.as_str(), None),
        };
        Self {
            account: summary.account.clone(),
            scopes: summary
                .scopes
                .split_whitespace()
                .map(str::to_owned)
                .collect(),
            expires_at: summary.access_expires_at.map(|at| at.to_rfc3339()),
            signed_in_at: summary.signed_in_at.to_rfc3339(),
            signed_in_via: via.to_owned(),
            signed_in_chat_id: chat,
        }
    }
}

/// A server's sign-in state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SignInState {
    /// The server did not ask for a sign-in (it connected, or failed for another reason).
    None,
    /// The server refused the agent for want of a sign-in (HTTP 401, or 403
    /// `insufficient_scope`): it has no tools until a person signs in.
    NeedsAuthorization,
    /// A person signed in; the agent connects with the credential.
    SignedIn,
    /// The last sign-in failed (`reason` says why), and the server still needs one.
    Failed,
}

impl AgentServersBody {
    /// The servers of `view`, the projection of `agent`'s stored snapshot, with the
    /// credentials the store keeps for the agent and its servers' failed sign-ins.
    pub fn of(
        agent: AgentId,
        view: &ctxsync_chat_projection::View,
        credentials: &[ctxsync_persistence::CredentialSummary],
        failures: &[(String, String)],
    ) -> Self {
        let servers = view
            .servers()
            .iter()
            .map(|server| {
                let credential = credentials.iter().find(|c| c.server_name == server.name);
                let failure = failures.iter().find(|(name, _)| *name == server.name);
                let (sign_in, reason) = match (server.needs_authorization, credential, failure) {
                    (true, _, Some((_, why))) => (SignInState::Failed, Some(why.clone())),
                    (true, _, None) => (SignInState::NeedsAuthorization, server.diagnostic.clone()),
                    (false, Some(_), _) => (SignInState::SignedIn, None),
                    (false, None, _) => (SignInState::None, None),
                };
                ServerSignIn {
                    name: server.name.clone(),
                    sign_in,
                    reason,
                    signed_in: credential
                        .filter(|_| sign_in == SignInState::SignedIn)
                        .map(SignedInBody::of),
                }
            })
            .collect();
        Self {
            agent_id: agent.to_string(),
            servers,
        }
    }
}

/// The agent's stored snapshot.
#[derive(Debug, Serialize, ToSchema)]
pub struct SnapshotRow {
    /// The run id of the agent process that pushed it; empty for a legacy agent.
    pub agent_run_id: String,
    /// The projected discovery phase, as in `mcp_discovery`.
    pub phase: ViewPhase,
    /// The snapshot's version: a per-process counter, 1 for a process's first snapshot.
    pub version: u64,
    /// The agent's hash over its non-MCP resources.
    pub aggregate_hash: String,
    /// Why the snapshot is incomplete beyond one row's status; `null` when nothing is
    /// missing.
    pub snapshot_error: Option<String>,
    /// The server's clock when it was stored (RFC 3339); never used for freshness.
    #[schema(format = DateTime)]
    pub received_at: String,
    /// As the agent reported them, undated: `mcp_discovery` adds the time since.
    pub pending_servers: Vec<ReportedPendingServer>,
}

/// A server still connecting, as the agent reported it.
#[derive(Debug, Serialize, ToSchema)]
pub struct ReportedPendingServer {
    /// The server's name as the agent's config declares it (untrusted text).
    pub name: String,
    /// How long it had been connecting when the agent built the snapshot, in milliseconds.
    pub elapsed_ms: u64,
}

/// One stored resource of the snapshot.
#[derive(Debug, Serialize, ToSchema)]
pub struct ResourceRow {
    /// Unique within the snapshot: a file's path (relative inside the workspace) or
    /// `mcp:<server>`.
    pub source: String,
    /// The file's path as the agent found it; `null` for an MCP server.
    pub source_path: Option<String>,
    /// What kind of resource the row is, whatever its status.
    pub kind: BodyKind,
    /// Whether the agent read the row and carries its content.
    pub status: ResourceStatus,
    /// The failure of a non-OK row, or a warning on an OK row; sanitized by the agent.
    pub error: Option<String>,
    /// The agent's hash of the row's content.
    pub content_hash: String,
    /// The size the content hash covers, in bytes (for a file, the file's size).
    pub size_bytes: u64,
    /// As stored; left out for a config file, whose body never leaves the agent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<StoredBody>,
}

/// A resource's body by its `kind`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
pub enum StoredBody {
    /// An `instruction_file` row's body.
    InstructionFile(InstructionFileBody),
    /// A `skill` row's body.
    Skill(SkillBody),
    /// An `mcp_server` row's body.
    McpServer(McpServerBody),
}

impl AgentContextBody {
    /// The answer for one agent's stored `context`, beside the projection `view` made from
    /// the same read.
    pub fn of(context: AgentContext, view: &ctxsync_chat_projection::View) -> Self {
        let snapshot = context.snapshot.map(|s| SnapshotRow {
            agent_run_id: RunId::edge(s.agent_run_id.as_ref()).to_owned(),
            phase: view.phase(),
            version: s.version,
            aggregate_hash: s.aggregate_hash,
            snapshot_error: s.snapshot_error,
            received_at: s.received_at.to_rfc3339(),
            pending_servers: s
                .pending_servers
                .into_iter()
                .map(|p| ReportedPendingServer {
                    name: p.server_name,
                    elapsed_ms: p.elapsed_ms,
                })
                .collect(),
        });
        let resources = context
            .resources
            .into_iter()
            .map(|r| ResourceRow {
                kind: r.body.kind(),
                body: match r.body {
                    ResourceBody::InstructionFile(b) => Some(StoredBody::InstructionFile(b)),
                    ResourceBody::Skill(b) => Some(StoredBody::Skill(b)),
                    ResourceBody::McpServer(b) => Some(StoredBody::McpServer(b)),
                    ResourceBody::McpConfig => None,
                },
                source: r.source,
                source_path: r.source_path,
                status: r.status,
                error: r.error,
                content_hash: r.content_hash,
                size_bytes: r.size_bytes,
            })
            .collect();
        Self {
            agent_id: context.agent.id.to_string(),
            name: context.agent.name,
            agent_run_id: RunId::edge(context.agent.agent_run_id.as_ref()).to_owned(),
            mcp_discovery: DiscoveryWords::of(view),
            stale: view.is_stale(),
            snapshot,
            resources,
        }
    }
}

/// `POST /api/chats`'s body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateChat {
    /// The agent the new chat is bound to.
    #[schema(format = Uuid)]
    pub agent_id: String,
}

/// `PUT /api/chats/{id}/agent`'s body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RebindChat {
    /// The agent the chat is bound to from now on.
    #[schema(format = Uuid)]
    pub agent_id: String,
}

/// A chat: its binding, the projection's words and its context panel.
#[derive(Debug, Serialize, ToSchema)]
pub struct ChatBody {
    /// The chat's id.
    #[schema(format = Uuid)]
    pub id: String,
    /// `null` for a chat bound to no agent.
    #[schema(format = Uuid)]
    pub agent_id: Option<String>,
    /// The projection's phase and freshness for this chat.
    pub mcp_discovery: DiscoveryWords,
    /// The chat's context panel.
    pub context: Panel,
}

/// `POST /api/chats/{id}/turns`'s body; `{}` asks for a default turn.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TurnRequest {
    /// `default` waits (bounded) for the bound agent's discovery; `plan` never waits.
    #[serde(default)]
    pub mode: Option<TurnModeName>,
}

/// What kind of turn it is.
// `ValueEnum`: `ctxsync turn --mode` takes the same two names.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, ToSchema, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum TurnModeName {
    /// A normal turn: the first-turn gate may wait (bounded) for the bound agent's
    /// discovery.
    Default,
    /// A planning turn: never waits for discovery and carries no outcome.
    Plan,
}

impl From<ChatTurnMode> for TurnModeName {
    fn from(mode: ChatTurnMode) -> Self {
        match mode {
            ChatTurnMode::Default => Self::Default,
            ChatTurnMode::Plan => Self::Plan,
        }
    }
}

/// What a turn runs with, as stored: what its POST answered, with its id and the tools
/// find_tools activated for it since.
#[derive(Debug, Serialize, ToSchema)]
pub struct TurnBody {
    /// `null` when the turn could not be stored (`turn_error` says why).
    #[schema(format = Uuid)]
    pub turn_id: Option<String>,
    /// What kind of turn it is.
    pub mode: TurnModeName,
    /// The model note when discovery is incomplete.
    pub note: Option<String>,
    /// The wait's outcome; `null` for a plan turn. Held as written (a stored turn's
    /// column), from an `Outcome`.
    #[schema(value_type = Option<Outcome>)]
    pub mcp_discovery: Value,
    /// Why `tools` and `note` are empty when the inventory could not be read.
    pub inventory_error: Option<String>,
    /// The eligible tools, as handed to the model; held as written, from `ModelTool`s.
    #[schema(value_type = Vec<ModelTool<'static>>)]
    pub tools: Value,
    /// Names find_tools has activated for this turn; their definitions follow the ones
    /// the turn started with in `tools`.
    pub active_tools: Vec<String>,
    /// What the turn deferred behind find_tools because its tools were over the
    /// server's budget; `null` when it carries every eligible tool. Held as written.
    #[schema(value_type = Option<Deferral>)]
    pub tool_deferral: Value,
    /// Only when the turn was not stored: why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn_error: Option<String>,
}

/// What a stored turn's outcome column holds (written from a [`TurnBody`]'s fields).
#[derive(Debug, Serialize)]
pub struct StoredOutcome<'a> {
    /// As [`TurnBody::note`].
    pub note: &'a Option<String>,
    /// The wait's outcome; `None` for a plan turn.
    pub mcp_discovery: &'a Option<Outcome>,
    /// As [`TurnBody::inventory_error`].
    pub inventory_error: &'a Option<String>,
    /// As [`TurnBody::tool_deferral`].
    pub tool_deferral: &'a Option<Deferral>,
}

impl TurnBody {
    /// A stored turn: its outcome and tools as they were written (from the same types).
    pub fn of(turn: &TurnRecord) -> Self {
        let field = |name: &str| turn.outcome.get(name).cloned().unwrap_or(Value::Null);
        let text = |name: &str| field(name).as_str().map(str::to_owned);
        Self {
            turn_id: Some(turn.id.to_string()),
            mode: turn.mode.into(),
            note: text("note"),
            mcp_discovery: field("mcp_discovery"),
            inventory_error: text("inventory_error"),
            tools: turn.tools.clone(),
            active_tools: turn.activated.clone(),
            tool_deferral: field("tool_deferral"),
            turn_error: None,
        }
    }
}

/// A find_tools call for one turn: `turn_id` names it; without one, the chat's latest
/// turn. At least one of `queries` and `names`, with a non-empty entry.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FindToolsBody {
    /// The turn to activate tools for; absent for the chat's latest turn.
    #[serde(default)]
    #[schema(format = Uuid)]
    pub turn_id: Option<String>,
    /// Keyword searches, each optionally scoped to one server as `server: terms`.
    #[serde(default)]
    pub queries: Option<Vec<String>>,
    /// Exact model-facing names.
    #[serde(default)]
    pub names: Option<Vec<String>>,
}

/// find_tools' answer, with the turn it activated for.
#[derive(Debug, Serialize, ToSchema)]
pub struct FoundTools<'a> {
    /// The matches, and what this call activated.
    #[serde(flatten)]
    pub found: FindToolsResponse,
    /// The turn the tools were activated for.
    #[schema(format = Uuid)]
    pub turn_id: String,
    /// The definitions of the tools this call activated, to add to the turn's tools.
    pub definitions: Vec<ModelTool<'a>>,
}

/// `POST /api/chats/{id}/turns/{turn}/tool-calls`'s body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolCallRequest {
    /// The caller's id for the call, unique within the turn (a model's tool-use id fits);
    /// a repeat with the same name and arguments answers the one recorded call.
    #[schema(min_length = 1, max_length = 128, pattern = r"^[A-Za-z0-9_.:-]+$")]
    pub call_id: String,
    /// A model-facing name the turn carries (`tools` or `active_tools`), or `find_tools`.
    #[schema(min_length = 1)]
    pub name: String,
    /// The tool's arguments: a JSON object, at most 1 MiB (keys sorted, no whitespace)
    /// and 64 levels deep; default `{}`.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub arguments: Option<Value>,
    /// The call's deadline in milliseconds: default 60000, at most the server's
    /// `--tool-call-max-ms` (default 600000).
    #[serde(default)]
    #[schema(minimum = 1)]
    pub timeout_ms: Option<u64>,
    /// How long this request waits for the call to end: default 30000, at most 55000.
    #[serde(default)]
    #[schema(minimum = 0, maximum = 55000)]
    pub wait_ms: Option<u64>,
}

/// `GET …/tool-calls/{call_id}`'s query.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ToolCallWait {
    /// Wait up to this many milliseconds for the call to end (at most 55000); absent
    /// answers at once.
    #[param(minimum = 0, maximum = 55000)]
    pub wait_ms: Option<u64>,
}

/// A tool call as stored. Never its arguments.
#[derive(Debug, Serialize, ToSchema)]
pub struct ToolCallBody {
    /// The caller's id for the call.
    pub call_id: String,
    /// The turn the call belongs to.
    #[schema(format = Uuid)]
    pub turn_id: String,
    /// The model-facing name called.
    pub name: String,
    /// The MCP server that runs the tool (`ctxsync` for find_tools; empty when the name
    /// resolved to nothing).
    pub server: String,
    /// The tool's own name on that server (empty when the name resolved to nothing).
    pub tool: String,
    /// Where the call stands; every status but `running` is an end.
    pub status: ctxsync_mcp_model::CallStatus,
    /// For `refused` and `unknown`: why.
    pub reason: Option<ctxsync_mcp_model::CallReason>,
    /// For `error`: the JSON-RPC code (0 when there is none) and a sanitized message.
    pub error: Option<ctxsync_mcp_model::CallError>,
    /// For `complete`: the MCP `CallToolResult` (`content`, `structuredContent`,
    /// `isError`), redacted and capped.
    #[schema(value_type = Option<Object>)]
    pub result: Option<Value>,
    /// The result was cut to fit the agent's cap.
    pub truncated: bool,
    /// The latest progress the MCP server reported, kept after the end.
    pub progress: Option<ctxsync_mcp_model::CallProgress>,
    /// What to hand the model, for every status (at most 256 KiB).
    pub model_text: String,
    /// The run of the agent process the turn's tools came from.
    pub agent_run_id: Option<String>,
    /// How long the call ran, in milliseconds; `null` while it runs.
    pub duration_ms: Option<u64>,
    /// When the call was stored (RFC 3339).
    #[schema(format = DateTime)]
    pub started_at: String,
    /// When its end was recorded (RFC 3339); `null` while it runs.
    #[schema(format = DateTime)]
    pub ended_at: Option<String>,
}

/// `GET /api/tool-calls`' query: every filter given must hold.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ToolCallAuditParams {
    /// Only calls that went to this agent.
    #[param(value_type = Option<String>, format = Uuid)]
    pub agent: Option<String>,
    /// Only calls of this chat.
    #[param(value_type = Option<String>, format = Uuid)]
    pub chat: Option<String>,
    /// Only calls that ended at or after this time (RFC 3339).
    #[param(value_type = Option<String>, format = DateTime)]
    pub since: Option<String>,
    /// Rows per page: 1 to 500, default 50.
    #[param(value_type = Option<u32>, minimum = 1, maximum = 500)]
    pub limit: Option<String>,
    /// A previous page's `next_cursor`: answers the page after it.
    pub cursor: Option<String>,
}

/// `GET /api/tool-calls`' answer: a page of the tool-call audit log.
#[derive(Debug, Serialize, ToSchema)]
pub struct ToolCallAuditPage {
    /// Newest first: by end time, then by the call's id.
    pub calls: Vec<ToolCallAuditEntry>,
    /// Give it back as `cursor` for the next page; `null` on the last page.
    pub next_cursor: Option<String>,
}

/// A call's end as the audit log keeps it (for `--tool-call-audit-days`, whatever became
/// of its turn, chat or agent). Never its arguments or result.
#[derive(Debug, Serialize, ToSchema)]
pub struct ToolCallAuditEntry {
    /// The call's server-assigned id.
    #[schema(format = Uuid)]
    pub tool_call_id: String,
    /// The agent the call went to; `null` for find_tools and for a turn without one.
    #[schema(format = Uuid)]
    pub agent_id: Option<String>,
    /// The chat (it may have been deleted since).
    #[schema(format = Uuid)]
    pub chat_id: String,
    /// The turn (it may have been pruned since).
    #[schema(format = Uuid)]
    pub turn_id: String,
    /// The caller's id for the call.
    pub call_id: String,
    /// The model-facing name called.
    pub name: String,
    /// The MCP server (`ctxsync` for find_tools; empty when the name resolved to nothing).
    pub server: String,
    /// The tool's own name on that server (empty when the name resolved to nothing).
    pub tool: String,
    /// How the call ended.
    pub status: ctxsync_mcp_model::CallStatus,
    /// For `refused` and `unknown`: why.
    pub reason: Option<ctxsync_mcp_model::CallReason>,
    /// For `error`: the error's JSON-RPC code (0 when there is none); never its message.
    pub error_code: Option<i64>,
    /// How long the call ran, in milliseconds.
    pub duration_ms: Option<u64>,
    /// HMAC-SHA256 of the canonical arguments under the deployment's secret, lower-case
    /// hex: equal arguments give equal digests on every replica, and the arguments cannot
    /// be read back from it.
    pub arguments_digest: String,
    /// Length of the canonical arguments in bytes.
    pub arguments_size: u64,
    /// Length of the stored result JSON in bytes; `null` without a result.
    pub result_size: Option<u64>,
    /// The result was cut to fit the agent's cap.
    pub truncated: bool,
    /// When the end was recorded (RFC 3339).
    #[schema(format = DateTime)]
    pub ended_at: String,
}

/// `GET /api/audit`'s query: every filter given must hold; `agent`, `chat`, `since`,
/// `limit` and `cursor` as `GET /api/tool-calls` takes them.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AuditParams {
    /// Only entries of this kind; every kind without it.
    #[param(value_type = Option<AuditEntryKind>, inline)]
    pub kind: Option<String>,
    /// Only entries of this agent: the calls that went to it, the sign-ins to its servers.
    #[param(value_type = Option<String>, format = Uuid)]
    pub agent: Option<String>,
    /// Only entries of this chat: its calls, and the sign-ins its page asked for.
    #[param(value_type = Option<String>, format = Uuid)]
    pub chat: Option<String>,
    /// Only entries recorded at or after this time (RFC 3339; a call's at its end).
    #[param(value_type = Option<String>, format = DateTime)]
    pub since: Option<String>,
    /// Entries per page: 1 to 500, default 50.
    #[param(value_type = Option<u32>, minimum = 1, maximum = 500)]
    pub limit: Option<String>,
    /// A previous page's `next_cursor`: answers the page after it.
    pub cursor: Option<String>,
}

/// A kind of audit entry.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AuditEntryKind {
    /// A tool call's end.
    ToolCall,
    /// A step of a person's sign-in to an agent's MCP server, or its credentials forgotten.
    SignIn,
}

/// `GET /api/audit`'s answer: a page of the audit log, every kind together.
#[derive(Debug, Serialize, ToSchema)]
pub struct AuditEntryPage {
    /// Newest first: by `at`, then by the entry's id (a call's `tool_call_id`).
    pub entries: Vec<AuditLogEntry>,
    /// Give it back as `cursor` for the next page; `null` on the last page.
    pub next_cursor: Option<String>,
}

/// An entry of the audit log; `kind` says which.
#[derive(Debug, Serialize, ToSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AuditLogEntry {
    /// A tool call's end.
    ToolCall(ToolCallLogEntry),
    /// A step of a person's sign-in to an agent's MCP server, or its credentials forgotten.
    SignIn(SignInLogEntry),
}

/// Who asked for what an entry records.
#[derive(Clone, Copy, Debug, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AuditEntryVia {
    /// The API token.
    ApiToken,
    /// A chat's page (the entry's `chat_id` says which).
    Page,
    /// The agent itself: it lost a credential.
    Agent,
}

/// A tool call's end, as `GET /api/tool-calls` lists it (never its arguments or result).
#[derive(Debug, Serialize, ToSchema)]
pub struct ToolCallLogEntry {
    /// When the call ended (its `ended_at`), RFC 3339.
    #[schema(format = DateTime)]
    pub at: String,
    /// Always `api_token`: only the API token calls tools.
    pub via: AuditEntryVia,
    /// The call's end, its fields inline.
    #[serde(flatten)]
    pub call: ToolCallAuditEntry,
}

/// What became of a sign-in.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SignInLogStatus {
    /// A person asked for it.
    Started,
    /// The credential is stored: the server is signed in.
    Completed,
    /// It ended without a credential (`reason` says why).
    Failed,
    /// The server's credentials were forgotten: signed out.
    Forgotten,
}

/// A step of a person's sign-in to an agent's MCP server, or its credentials forgotten.
/// Never a token, code, state or verifier.
#[derive(Debug, Serialize, ToSchema)]
pub struct SignInLogEntry {
    /// When the step was stored, RFC 3339.
    #[schema(format = DateTime)]
    pub at: String,
    /// The agent whose server it is (it may have been deleted since).
    #[schema(format = Uuid)]
    pub agent_id: String,
    /// For `via` `page`: the chat whose page asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = Uuid)]
    pub chat_id: Option<String>,
    /// Who asked.
    pub via: AuditEntryVia,
    /// The MCP server's name as the agent reports it.
    pub server: String,
    /// What became of the sign-in.
    pub status: SignInLogStatus,
    /// The sign-in (one id for its `started`, and its `completed` or `failed`); absent
    /// for forgotten credentials.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = Uuid)]
    pub sign_in_id: Option<String>,
    /// For `completed`: the authorization server that issued the credential.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    /// For `failed`, and `forgotten` by the agent: why, in words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A one-time link to the chat's page.
#[derive(Debug, Serialize, ToSchema)]
pub struct PageLink {
    /// A path with a one-time token; opening it sets a session cookie for this chat.
    pub url: String,
    /// The same link as a full URL under the server's public URL (`--public-url`, or its
    /// loopback address); absent when the server does not know where browsers reach it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
}

/// The document: every route but the page's own files, each with its errors.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "ctxsync chat API",
        description = "Whether a workspace agent has finished discovering its MCP servers, \
                       whether the tools a chat sees come from the agent process running \
                       now, and the chat's turns, tools and context panel. Every route but \
                       `/healthz` and this document needs the bearer token (`<data-dir>/api-token`)."
    ),
    paths(
        super::handlers::healthz,
        super::handlers::openapi_json,
        super::metrics::metrics,
        super::handlers::create_agent,
        super::handlers::list_agents,
        super::handlers::delete_agent,
        super::handlers::rotate_agent_token,
        super::handlers::agent_context,
        super::handlers::agent_mcp_servers,
        super::sign_in::start,
        super::sign_in::forget,
        super::handlers::create_chat,
        super::handlers::get_chat,
        super::handlers::rebind_chat,
        super::handlers::turn,
        super::handlers::get_turn,
        super::handlers::find_tools,
        super::tool_call::routes::start_call,
        super::tool_call::routes::get_call,
        super::tool_call::routes::cancel_call,
        super::tool_call::audit::list_calls,
        super::audit::list_entries,
        super::handlers::chat_panel,
        super::handlers::refresh_context,
        super::handlers::context_events,
        super::handlers::page_link,
    ),
    modifiers(&CommonErrors),
    tags(
        (name = "agents", description = "Workspace agents and their tokens"),
        (name = "chats", description = "Chats, their turns and their context"),
        (name = "tool calls", description = "A turn's tools, run by the workspace agent that listed them"),
        (name = "audit", description = "The audit log of every kind: tool calls' ends and sign-ins' steps"),
        (name = "operations", description = "Health, metrics and this document"),
    )
)]
#[derive(Debug)]
pub struct ApiDoc;

/// The document as served and committed: pretty JSON with a final newline.
pub fn openapi_document() -> String {
    let mut text = ApiDoc::openapi()
        .to_pretty_json()
        .expect("the OpenAPI document serializes");
    text.push('\n');
    text
}

/// Adds the bearer scheme, and the answers every protected route can give whatever it
/// does (401 without a valid token, 503 while the database is unreachable, 500 for a
/// failure the log explains), so no route's list can forget them.
struct CommonErrors;

impl Modify for CommonErrors {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            BEARER,
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        let error = |description: &str| {
            RefOr::T(
                ResponseBuilder::new()
                    .description(description)
                    .content(
                        "application/json",
                        ContentBuilder::new()
                            .schema(Some(RefOr::Ref(utoipa::openapi::Ref::from_schema_name(
                                "ErrorBody",
                            ))))
                            .build(),
                    )
                    .build(),
            )
        };
        for (path, item) in openapi.paths.paths.iter_mut() {
            let open = path == "/healthz" || path == OPENAPI_PATH;
            for operation in [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
            ]
            .into_iter()
            .flatten()
            {
                let responses = &mut operation.responses.responses;
                responses.entry("408".into()).or_insert_with(|| {
                    error("The request took longer than the server's request timeout.")
                });
                if open {
                    continue;
                }
                operation.security =
                    Some(vec![utoipa::openapi::security::SecurityRequirement::new::<
                        &str,
                        [&str; 0],
                        &str,
                    >(BEARER, [])]);
                responses
                    .entry("401".into())
                    .or_insert_with(|| error("Missing or invalid bearer token."));
                responses.entry("500".into()).or_insert_with(|| {
                    error("An internal failure; the server's log has the cause.")
                });
                responses.entry("503".into()).or_insert_with(|| {
                    error("The database is unavailable, or a bounded table is full.")
                });
            }
        }
    }
}
