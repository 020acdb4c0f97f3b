//! The chat API's request and response types, and its OpenAPI 3.1 document derived from
//! them and from the handlers' `#[utoipa::path]` attributes: the handlers serialize these
//! types, so the document cannot drift from what is answered. Served at
//! [`OPENAPI_PATH`]; a committed copy (`crates/ctxsync/openapi.json`) is checked by a test.

use ctxsync_chat_projection::{FindToolsResponse, ModelTool, Phase};
use ctxsync_context_ui::Panel;
use ctxsync_first_turn_gate::Outcome;
use ctxsync_persistence::{AgentContext, AgentRecord, ChatTurnMode, TurnRecord};
use ctxsync_protocol::{
    BodyKind, InstructionFileBody, McpServerBody, ResourceBody, ResourceStatus, SkillBody,
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
    pub error: String,
}

/// `/healthz` while the database answers.
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    /// Always `ok`.
    pub status: HealthStatus,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum HealthStatus {
    Ok,
}

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
    #[schema(format = Uuid)]
    pub id: String,
    /// The agent's bearer token for the agent API.
    pub token: String,
}

/// An agent as every listing shows it: never its token or the token's digest.
#[derive(Debug, Serialize, ToSchema)]
pub struct AgentSummary {
    #[schema(format = Uuid)]
    pub id: String,
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
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub updated_at: String,
}

impl From<&AgentRecord> for AgentSummary {
    fn from(agent: &AgentRecord) -> Self {
        Self {
            id: agent.id.to_string(),
            name: agent.name.clone(),
            agent_run_id: agent.agent_run_id.clone(),
            agent_version: agent.startup_version.clone(),
            expanded_directory: agent.expanded_directory.clone(),
            started_at: agent.started_at.map(|t| t.to_rfc3339()),
            created_at: agent.created_at.to_rfc3339(),
            updated_at: agent.updated_at.to_rfc3339(),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AgentList {
    /// Oldest first.
    pub agents: Vec<AgentSummary>,
}

/// The projection's phase and freshness, in the words every surface uses.
#[derive(Debug, Serialize, ToSchema)]
pub struct DiscoveryWords {
    pub phase: Phase,
    pub stale: bool,
    /// While pending: the servers still connecting, with how long each has been at it.
    /// Left out when none is named.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pending_servers: Vec<PendingServerWait>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PendingServerWait {
    pub name: String,
    pub elapsed_ms: u64,
    /// `elapsed_ms` in whole seconds.
    pub elapsed_s: u64,
}

impl DiscoveryWords {
    pub fn of(view: &ctxsync_chat_projection::View) -> Self {
        Self {
            phase: view.phase(),
            stale: view.is_stale(),
            pending_servers: view
                .pending_servers()
                .iter()
                .map(|s| PendingServerWait {
                    name: s.name.clone(),
                    elapsed_ms: s.elapsed_ms,
                    elapsed_s: s.elapsed_ms / 1000,
                })
                .collect(),
        }
    }
}

/// The agent's stored rows beside the projection's view of them (one read).
#[derive(Debug, Serialize, ToSchema)]
pub struct AgentContextBody {
    #[schema(format = Uuid)]
    pub agent_id: String,
    pub name: String,
    pub agent_run_id: String,
    pub mcp_discovery: DiscoveryWords,
    pub stale: bool,
    /// `null` before the agent's first snapshot.
    pub snapshot: Option<SnapshotRow>,
    /// Sorted by source.
    pub resources: Vec<ResourceRow>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SnapshotRow {
    pub agent_run_id: String,
    pub phase: Phase,
    pub version: u64,
    pub aggregate_hash: String,
    pub snapshot_error: Option<String>,
    /// The server's clock when it was stored (RFC 3339); never used for freshness.
    #[schema(format = DateTime)]
    pub received_at: String,
    /// As the agent reported them, undated: `mcp_discovery` adds the time since.
    pub pending_servers: Vec<ReportedPendingServer>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ReportedPendingServer {
    pub name: String,
    pub elapsed_ms: u64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ResourceRow {
    pub source: String,
    pub source_path: Option<String>,
    pub kind: BodyKind,
    pub status: ResourceStatus,
    pub error: Option<String>,
    pub content_hash: String,
    pub size_bytes: u64,
    /// As stored; left out for a config file, whose body never leaves the agent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<StoredBody>,
}

/// A resource's body by its `kind`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
pub enum StoredBody {
    InstructionFile(InstructionFileBody),
    Skill(SkillBody),
    McpServer(McpServerBody),
}

impl AgentContextBody {
    pub fn of(context: AgentContext, view: &ctxsync_chat_projection::View) -> Self {
        let snapshot = context.snapshot.map(|s| SnapshotRow {
            agent_run_id: s.agent_run_id,
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
            agent_run_id: context.agent.agent_run_id,
            mcp_discovery: DiscoveryWords::of(view),
            stale: view.is_stale(),
            snapshot,
            resources,
        }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateChat {
    #[schema(format = Uuid)]
    pub agent_id: String,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RebindChat {
    #[schema(format = Uuid)]
    pub agent_id: String,
}

/// A chat: its binding, the projection's words and its context panel.
#[derive(Debug, Serialize, ToSchema)]
pub struct ChatBody {
    #[schema(format = Uuid)]
    pub id: String,
    /// `null` for a chat bound to no agent.
    #[schema(format = Uuid)]
    pub agent_id: Option<String>,
    pub mcp_discovery: DiscoveryWords,
    pub context: Panel,
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TurnRequest {
    /// `default` waits (bounded) for the bound agent's discovery; `plan` never waits.
    #[serde(default)]
    pub mode: Option<TurnModeName>,
}

#[derive(Clone, Copy, Debug, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TurnModeName {
    Default,
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
    pub mode: TurnModeName,
    /// The model note when discovery is incomplete.
    pub note: Option<String>,
    /// The wait's outcome; `null` for a plan turn. Held as written (a stored turn's
    /// column), from an [`Outcome`].
    #[schema(value_type = Option<Outcome>)]
    pub mcp_discovery: Value,
    /// Why `tools` and `note` are empty when the inventory could not be read.
    pub inventory_error: Option<String>,
    /// The eligible tools, as handed to the model; held as written, from [`ModelTool`]s.
    #[schema(value_type = Vec<ModelTool>)]
    pub tools: Value,
    /// Names find_tools has activated for this turn.
    pub active_tools: Vec<String>,
    /// Only when the turn was not stored: why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn_error: Option<String>,
}

/// What a stored turn's outcome column holds (written from a [`TurnBody`]'s fields).
#[derive(Debug, Serialize)]
pub struct StoredOutcome<'a> {
    pub note: &'a Option<String>,
    pub mcp_discovery: &'a Option<Outcome>,
    pub inventory_error: &'a Option<String>,
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
            turn_error: None,
        }
    }
}

/// A find_tools call for one turn: `turn_id` names it; without one, the chat's latest
/// turn. At least one of `queries` and `names`, with a non-empty entry.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FindToolsBody {
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
pub struct FoundTools {
    #[serde(flatten)]
    pub found: FindToolsResponse,
    #[schema(format = Uuid)]
    pub turn_id: String,
}

/// A one-time link to the chat's page.
#[derive(Debug, Serialize, ToSchema)]
pub struct PageLink {
    /// A path with a one-time token; opening it sets a session cookie for this chat.
    pub url: String,
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
        super::handlers::create_chat,
        super::handlers::get_chat,
        super::handlers::rebind_chat,
        super::handlers::turn,
        super::handlers::get_turn,
        super::handlers::find_tools,
        super::handlers::chat_panel,
        super::handlers::refresh_context,
        super::handlers::context_events,
        super::handlers::page_link,
    ),
    modifiers(&CommonErrors),
    tags(
        (name = "agents", description = "Workspace agents and their tokens"),
        (name = "chats", description = "Chats, their turns and their context"),
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
