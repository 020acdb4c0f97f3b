//! The projection: [`project`] turns what the store read into a [`View`] by the phase
//! table and the freshness rule of SPEC §7.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use ctxsync_protocol::{
    DiscoveryPhase, McpConnectTimings, McpServerBody, McpServerInfo, McpTool, McpToolAnnotations,
    Resource, ResourceBody, ResourceStatus, RunId,
};
use serde::Serialize;

use crate::input::{AgentState, Binding, Connection, SnapshotState};
use crate::naming::{EligibleTool, ToolCatalog};

/// Discovery completeness as a chat sees it.
// Not the agent's report phase: a chat also sees `unknown` (no bound agent, a legacy
// one, discovery off). The OpenAPI document has always called it `Phase`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = Phase))]
#[serde(rename_all = "snake_case")]
pub enum ViewPhase {
    /// No completeness guarantee: no bound agent, a legacy agent, or MCP discovery off.
    Unknown,
    /// The agent's initial discovery is still running; more servers may appear.
    Pending,
    /// The agent's initial discovery has reached a result for every declared server.
    Complete,
}

impl ViewPhase {
    /// The lower-case name used in APIs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unknown => "unknown",
            Self::Pending => "pending",
            Self::Complete => "complete",
        }
    }
}

/// What the view was projected from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentPresence {
    /// The chat has no bound agent.
    Unbound,
    /// The bound agent no longer exists.
    Missing,
    /// The agent exists but has not published a snapshot.
    NoSnapshot,
    /// The agent has a stored snapshot (fresh or stale).
    Reported,
}

/// The outcome of one `mcp_server` row, as a chat sees it: what the agent's discovery
/// report said of the server, read back from the stored snapshot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ServerView {
    /// The row's server name, else its source when the name is empty.
    pub name: String,
    /// The server was discovered (status `OK`), with zero tools or more.
    pub ok: bool,
    /// The tools the server listed; 0 when it failed.
    pub tool_count: usize,
    /// Not discovered because the server asks for a person's sign-in (status
    /// `needs_authorization`): a result, not a failure, and no tools until then.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub needs_authorization: bool,
    /// The warning of a discovered server, or the error of a failed one (sanitized
    /// upstream).
    pub diagnostic: Option<String>,
    /// The MCP revision the agent negotiated with it (`2026-07-28`, `2025-11-25`, …);
    /// empty when unknown (not connected, or an older agent).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub protocol_version: String,
    /// What the server said about itself (untrusted text).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_info: Option<McpServerInfo>,
    /// How long each step of its connect took, as the agent measured it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timings: Option<McpConnectTimings>,
}

/// A server of the agent's initial discovery still connecting (while pending).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ConnectingServer {
    /// The server's name as the agent's config declares it (untrusted text).
    pub name: String,
    /// How long it has been connecting as of the projection's `now`: what the agent
    /// reported plus the time since the server stored the snapshot.
    pub elapsed_ms: u64,
}

/// An `mcp_config` row with an error or a warning, as a chat sees it (read back from the
/// stored snapshot, unlike the agent's own config outcome).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ConfigView {
    /// The config file's path (the row's `source_path`, else its `source`).
    pub path: String,
    /// `false` when the file or one of its entries was rejected; `true` for a warning.
    pub ok: bool,
    /// The error or warning (sanitized upstream), or a status note when the row gave none.
    pub diagnostic: String,
}

/// Server and config outcome counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Counts {
    /// Discovered servers with at least one tool.
    pub servers_ok: usize,
    /// Discovered servers with no tools (not a failure).
    pub servers_empty: usize,
    /// Servers whose row is not OK (they failed to connect or to list their tools), other
    /// than those waiting for a sign-in.
    pub servers_failed: usize,
    /// Servers that ask for a person's sign-in before they list tools.
    pub servers_needing_authorization: usize,
    /// Config files with a non-OK status.
    pub config_errors: usize,
}

/// The single read model of an agent's MCP state for one chat turn.
///
/// Completeness ([`Self::phase`]), freshness ([`Self::is_stale`]), outcomes
/// ([`Self::servers`], [`Self::configs`]) and eligibility ([`Self::tools`]) stay separate
/// facts; [`Self::incomplete`] only decides whether the model is told about them.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct View {
    agent: AgentPresence,
    /// The bound agent row's run id; `None` for a legacy, missing or unbound agent.
    #[serde(skip)]
    current_run: Option<RunId>,
    phase: ViewPhase,
    stale: bool,
    incomplete: bool,
    counts: Counts,
    snapshot_error: Option<String>,
    servers: Vec<ServerView>,
    /// While pending (and fresh): the servers still connecting, by name.
    pending_servers: Vec<ConnectingServer>,
    configs: Vec<ConfigView>,
    tools: ToolCatalog,
    /// Every MCP config file of the snapshot, by path, with or without a diagnostic.
    #[serde(skip)]
    config_paths: Vec<String>,
    /// Whether the agent process is connected now (the panel says it in its words).
    #[serde(skip)]
    connection: Connection,
}

impl View {
    /// Whether the chat's agent is bound, still exists, and has published a snapshot.
    pub fn agent(&self) -> AgentPresence {
        self.agent
    }

    /// The projected discovery phase.
    pub fn phase(&self) -> ViewPhase {
        self.phase
    }

    /// The run id of the agent process running now, as its row says (`None` for a
    /// legacy, missing or unbound agent). Keys per-run state above the projection.
    pub fn current_run(&self) -> Option<&RunId> {
        self.current_run.as_ref()
    }

    /// The agent has published a snapshot of the process running now: its phase is
    /// that process's word, not an absence (no snapshot) or an old process's (stale).
    pub fn reports_current_run(&self) -> bool {
        self.agent == AgentPresence::Reported && !self.stale
    }

    /// The stored snapshot is not from the agent process running now (or the agent is
    /// gone). A stale view offers no tools.
    pub fn is_stale(&self) -> bool {
        self.stale
    }

    /// Pending, stale, or any failed server or config error: the model is told (see
    /// [`Self::model_note`]).
    pub fn incomplete(&self) -> bool {
        self.incomplete
    }

    /// Server and config outcome counts.
    pub fn counts(&self) -> Counts {
        self.counts
    }

    /// The snapshot's own error, when it has one.
    pub fn snapshot_error(&self) -> Option<&str> {
        self.snapshot_error.as_deref()
    }

    /// Every `mcp_server` row's outcome, by name.
    pub fn servers(&self) -> &[ServerView] {
        &self.servers
    }

    /// While discovery is pending: the servers of the agent's current run still
    /// connecting, by name, each with how long it has been at it. Empty otherwise (also
    /// when the agent did not report them, and when stale: a previous process's wait is
    /// over).
    pub fn pending_servers(&self) -> &[ConnectingServer] {
        &self.pending_servers
    }

    /// Config files with an error or a warning, by path.
    pub fn configs(&self) -> &[ConfigView] {
        &self.configs
    }

    /// Every MCP config file of the snapshot, by path (sorted), including those
    /// without a diagnostic.
    pub fn config_paths(&self) -> &[String] {
        &self.config_paths
    }

    /// The tools a turn may use; empty when stale.
    pub fn tools(&self) -> &ToolCatalog {
        &self.tools
    }

    /// Whether the agent process is connected to the control plane now, as read with
    /// the agent row ([`Connection::Never`] without an agent). While it is offline its
    /// tools stay listed but a call of one cannot reach it.
    pub fn connection(&self) -> Connection {
        self.connection
    }
}

/// Projects what the store read into the view (SPEC §7) as of now: [`project_at`] with
/// the system clock, which only dates the pending servers' elapsed time.
pub fn project(binding: &Binding) -> View {
    project_at(binding, SystemTime::now())
}

/// Projects what the store read into the view (SPEC §7). Never fails: missing or odd data
/// is projected as unknown, stale or failed, never as an error. `now` (the server's
/// clock, as `received_at` is) only adds the time since the snapshot was stored to each
/// pending server's elapsed time; phase and freshness never depend on it.
pub fn project_at(binding: &Binding, now: SystemTime) -> View {
    let (current_run, connection) = match binding {
        Binding::Agent(agent) => (agent.agent_run_id.clone(), agent.connection),
        _ => (None, Connection::Never),
    };
    let (agent, phase, stale, snapshot) = match binding {
        Binding::NoAgent => (AgentPresence::Unbound, ViewPhase::Unknown, false, None),
        Binding::MissingAgent => (AgentPresence::Missing, ViewPhase::Unknown, true, None),
        Binding::Agent(AgentState {
            agent_run_id,
            snapshot,
            ..
        }) => {
            let decided = snapshot
                .as_ref()
                .map(|s| (s.phase, *agent_run_id == s.agent_run_id));
            let (agent, phase, stale) = classify(agent_run_id.is_none(), decided);
            (agent, phase, stale, snapshot.as_ref())
        }
    };

    let (servers, configs, tools) = snapshot.map_or_else(
        || (Vec::new(), Vec::new(), Vec::new()),
        |s| outcomes(s, !stale),
    );
    let counts = count(&servers, &configs);
    let mut config_paths: Vec<String> = snapshot
        .map(|s| {
            s.resources
                .iter()
                .filter(|r| matches!(r.body, ResourceBody::McpConfig))
                .map(config_path)
                .collect()
        })
        .unwrap_or_default();
    config_paths.sort();
    config_paths.dedup();
    let incomplete = phase == ViewPhase::Pending
        || stale
        || counts.servers_failed > 0
        || counts.servers_needing_authorization > 0
        || counts.config_errors > 0;
    let pending_servers = match snapshot {
        Some(s) if phase == ViewPhase::Pending && !stale => connecting(s, now),
        _ => Vec::new(),
    };
    View {
        agent,
        current_run,
        phase,
        stale,
        incomplete,
        counts,
        snapshot_error: snapshot.and_then(|s| diagnostic(s.snapshot_error.as_deref())),
        servers,
        pending_servers,
        configs,
        tools: ToolCatalog::build(tools),
        config_paths,
        connection,
    }
}

/// The snapshot's pending servers as of `now`, by name, one entry per name (the longest
/// wait). A clock behind `received_at` adds nothing rather than going negative.
fn connecting(snapshot: &SnapshotState, now: SystemTime) -> Vec<ConnectingServer> {
    let since_stored = snapshot
        .received_at
        .and_then(|at| now.duration_since(at).ok())
        .unwrap_or(Duration::ZERO);
    let since_ms = u64::try_from(since_stored.as_millis()).unwrap_or(u64::MAX);
    let mut servers: Vec<ConnectingServer> = snapshot
        .pending_servers
        .iter()
        .filter(|p| !p.server_name.trim().is_empty())
        .map(|p| ConnectingServer {
            name: p.server_name.clone(),
            elapsed_ms: p.elapsed_ms.saturating_add(since_ms),
        })
        .collect();
    servers.sort_by(|a, b| a.name.cmp(&b.name).then(b.elapsed_ms.cmp(&a.elapsed_ms)));
    servers.dedup_by(|later, first| later.name == first.name);
    servers
}

/// A config row's path: its `source_path`, else its `source`.
fn config_path(resource: &Resource) -> String {
    resource
        .source_path
        .clone()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| resource.source.clone())
}

/// Presence, phase and freshness of a bound agent from the facts that decide them:
/// whether its current run id is empty (`legacy`), and its snapshot's phase with whether
/// the snapshot's run id is the current one. [`project`] and the store adapter's aggregate
/// counts (`agent_phase_counts`) both decide through it.
pub fn classify(
    legacy: bool,
    snapshot: Option<(DiscoveryPhase, bool)>,
) -> (AgentPresence, ViewPhase, bool) {
    match snapshot {
        // A legacy agent promises nothing; a current one has not reported yet.
        None if legacy => (AgentPresence::NoSnapshot, ViewPhase::Unknown, false),
        None => (AgentPresence::NoSnapshot, ViewPhase::Pending, false),
        // Run ids, never clocks: two empty ids are fresh with no guarantee.
        Some((phase, same_run)) => (AgentPresence::Reported, phase_of(phase), !same_run),
    }
}

fn phase_of(phase: DiscoveryPhase) -> ViewPhase {
    match phase {
        DiscoveryPhase::Unspecified => ViewPhase::Unknown,
        DiscoveryPhase::Pending => ViewPhase::Pending,
        DiscoveryPhase::Complete => ViewPhase::Complete,
    }
}

/// Outcomes of the snapshot's MCP rows and, when `with_tools`, the tools of its OK server
/// rows. Rows are visited by (server name, source) so the result never depends on row
/// order.
fn outcomes(
    snapshot: &SnapshotState,
    with_tools: bool,
) -> (Vec<ServerView>, Vec<ConfigView>, Vec<EligibleTool>) {
    let mut server_rows: Vec<(&str, &Resource, &McpServerBody)> = Vec::new();
    let mut configs = Vec::new();
    for resource in &snapshot.resources {
        match &resource.body {
            ResourceBody::McpServer(body) => {
                let name = if body.server_name.is_empty() {
                    resource.source.as_str()
                } else {
                    body.server_name.as_str()
                };
                server_rows.push((name, resource, body));
            }
            ResourceBody::McpConfig => {
                let ok = resource.status == ResourceStatus::Ok;
                let text = diagnostic(resource.error.as_deref());
                if ok && text.is_none() {
                    continue;
                }
                configs.push(ConfigView {
                    path: config_path(resource),
                    ok,
                    diagnostic: text.unwrap_or_else(|| no_diagnostic(resource.status)),
                });
            }
            ResourceBody::InstructionFile(_) | ResourceBody::Skill(_) => {}
        }
    }
    server_rows.sort_by(|a, b| (a.0, &a.1.source).cmp(&(b.0, &b.1.source)));
    configs.sort_by(|a, b| (&a.path, !a.ok, &a.diagnostic).cmp(&(&b.path, !b.ok, &b.diagnostic)));

    let mut servers = Vec::with_capacity(server_rows.len());
    let mut tools = Vec::new();
    for (name, resource, body) in server_rows {
        let ok = resource.status == ResourceStatus::Ok;
        let text = diagnostic(resource.error.as_deref());
        servers.push(ServerView {
            name: name.to_owned(),
            ok,
            tool_count: if ok { body.tools.len() } else { 0 },
            needs_authorization: resource.status == ResourceStatus::NeedsAuthorization,
            diagnostic: if ok {
                text
            } else {
                Some(text.unwrap_or_else(|| no_diagnostic(resource.status)))
            },
            protocol_version: body.protocol_version.clone(),
            server_info: body.server_info.clone(),
            timings: body.timings,
        });
        if ok && with_tools {
            // One copy of the instructions per server, shared by its tools.
            let instructions: Arc<str> = body.instructions.as_str().into();
            tools.extend(body.tools.iter().map(|tool| {
                EligibleTool {
                    // Named with the whole catalog, in `ToolCatalog::build`.
                    name: String::new(),
                    server: name.to_owned(),
                    tool: tool.name.clone(),
                    description: tool.description.clone(),
                    input_schema: tool.input_schema.clone(),
                    title: display_title(tool),
                    output_schema: tool.output_schema.clone(),
                    annotations_untrusted: tool
                        .annotations
                        .clone()
                        .filter(|a| *a != McpToolAnnotations::default()),
                    always_load: body.always_load,
                    server_instructions: instructions.clone(),
                }
            }));
        }
    }
    (servers, configs, tools)
}

/// MCP's display-name precedence below the name: `title`, then `annotations.title`.
fn display_title(tool: &McpTool) -> String {
    let title = tool.title.trim();
    if !title.is_empty() {
        return title.to_owned();
    }
    tool.annotations
        .as_ref()
        .map(|a| a.title.trim().to_owned())
        .unwrap_or_default()
}

fn diagnostic(text: Option<&str>) -> Option<String> {
    text.map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
}

/// Said for a non-OK row that carries no error text.
fn no_diagnostic(status: ResourceStatus) -> String {
    format!("status {} with no diagnostic reported", status.as_str())
}

fn count(servers: &[ServerView], configs: &[ConfigView]) -> Counts {
    let mut counts = Counts::default();
    for server in servers {
        match (server.ok, server.tool_count) {
            (false, _) if server.needs_authorization => counts.servers_needing_authorization += 1,
            (false, _) => counts.servers_failed += 1,
            (true, 0) => counts.servers_empty += 1,
            (true, _) => counts.servers_ok += 1,
        }
    }
    counts.config_errors = configs.iter().filter(|c| !c.ok).count();
    counts
}

/// Golden vector: the catalog and model definitions of tools with every field set, so a
/// change in how tools reach the catalog cannot change what chats and models see.
#[cfg(test)]
mod golden {
    use ctxsync_protocol::{McpIcon, McpServerInfo, RunId};
    use serde_json::json;

    use super::*;

    fn server(name: &str, instructions: &str, tools: Vec<McpTool>) -> Resource {
        Resource {
            source: format!("mcp:{name}"),
            source_path: None,
            content_hash: "h".into(),
            size_bytes: 1,
            status: ResourceStatus::Ok,
            error: None,
            body: ResourceBody::McpServer(McpServerBody {
                server_name: name.into(),
                tools,
                server_info: Some(McpServerInfo::default()),
                instructions: instructions.into(),
                always_load: name == "fs",
                ..Default::default()
            }),
        }
    }

    fn binding() -> Binding {
        let full = McpTool {
            name: "read".into(),
            description: "Reads a file.".into(),
            input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
            title: String::new(),
            annotations: Some(McpToolAnnotations {
                title: "Read file".into(),
                read_only_hint: Some(true),
                destructive_hint: Some(false),
                idempotent_hint: None,
                open_world_hint: Some(false),
            }),
            output_schema: Some(json!({"type": "object"})),
            icons: vec![McpIcon {
                src: "data:image/png;base64,AAAA".into(),
                ..Default::default()
            }],
            meta: Some(json!({"ui": {}})),
        };
        let bare = McpTool {
            name: "ping".into(),
            input_schema: json!({"type": "object"}),
            title: "Ping".into(),
            annotations: Some(McpToolAnnotations::default()),
            ..Default::default()
        };
        Binding::Agent(AgentState {
            agent_run_id: RunId::new("run"),
            snapshot: Some(SnapshotState {
                agent_run_id: RunId::new("run"),
                phase: DiscoveryPhase::Complete,
                resources: vec![
                    server("fs", "Read before you write.", vec![full, bare.clone()]),
                    server("net", "", vec![bare]),
                ],
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    #[test]
    fn the_catalog_and_model_definitions_keep_their_form() {
        let view = project(&binding());
        let catalog = serde_json::to_string(view.tools()).unwrap();
        assert_eq!(
            catalog,
            r#"[{"name":"fs__ping","server":"fs","tool":"ping","description":"","input_schema":{"type":"object"},"title":"Ping","output_schema":null,"annotations_untrusted":null,"always_load":true,"server_instructions":"Read before you write."},{"name":"fs__read","server":"fs","tool":"read","description":"Reads a file.","input_schema":{"properties":{"path":{"type":"string"}},"type":"object"},"title":"Read file","output_schema":{"type":"object"},"annotations_untrusted":{"title":"Read file","read_only_hint":true,"destructive_hint":false,"open_world_hint":false},"always_load":true,"server_instructions":"Read before you write."},{"name":"net__ping","server":"net","tool":"ping","description":"","input_schema":{"type":"object"},"title":"Ping","output_schema":null,"annotations_untrusted":null,"always_load":false,"server_instructions":""}]"#
        );
        let definitions: Vec<crate::naming::ModelTool<'_>> = view
            .tools()
            .iter()
            .map(EligibleTool::model_definition)
            .collect();
        assert_eq!(
            serde_json::to_string(&definitions).unwrap(),
            r#"[{"name":"fs__ping","description":"","input_schema":{"type":"object"},"title":"Ping"},{"name":"fs__read","description":"Reads a file.","input_schema":{"properties":{"path":{"type":"string"}},"type":"object"},"title":"Read file","output_schema":{"type":"object"},"annotations_untrusted":{"title":"Read file","read_only_hint":true,"destructive_hint":false,"open_world_hint":false}},{"name":"net__ping","description":"","input_schema":{"type":"object"},"title":"Ping"}]"#
        );
        let instructions: Vec<(&str, &str)> = view
            .tools()
            .iter()
            .map(|t| (t.name.as_str(), &*t.server_instructions))
            .collect();
        assert_eq!(
            instructions,
            [
                ("fs__ping", "Read before you write."),
                ("fs__read", "Read before you write."),
                ("net__ping", "")
            ]
        );
    }
}
