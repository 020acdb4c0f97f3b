//! The panel's view model: plain serializable data, already decided. Renderers only lay it
//! out; every judgement (tone, banner, what counts as an issue) is made here.

use ctxsync_chat_projection::{View, ViewPhase};
use serde::Serialize;

/// Everything the context panel shows for one chat.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Panel {
    /// The chat this panel describes.
    pub chat_id: String,
    /// The overall tone: the worst of the issues, the banner and the snapshot error.
    pub tone: Tone,
    /// The projection's phase and freshness, in the words every surface uses.
    pub mcp_discovery: DiscoveryWords,
    /// The discovery banner: where MCP discovery stands, and its tone.
    pub discovery: Banner,
    /// Set when the agent's context changed after the chat pinned it.
    pub dirty: Option<DirtyNotice>,
    /// The projection's snapshot error, when the last snapshot could not be used.
    pub snapshot_error: Option<String>,
    /// The pinned instruction files, grouped by directory.
    pub files: Vec<FileGroup>,
    /// The pinned skills, in source order.
    pub skills: Vec<SkillItem>,
    /// MCP config files, servers and their tools.
    pub mcp: McpSection,
    /// Every non-OK row and every warning, for the Issues list.
    pub issues: Vec<IssueItem>,
    /// Who reports this context and how recent it is: the header line.
    pub header: PanelHeader,
}

/// Characters of a run id the panel shows (the whole id is in [`PanelHeader::run_id`]).
pub const SHORT_RUN_ID_CHARS: usize = 8;

/// A run id as the panel shows it: its first [`SHORT_RUN_ID_CHARS`] characters.
pub fn short_run_id(run_id: &str) -> String {
    run_id.chars().take(SHORT_RUN_ID_CHARS).collect()
}

/// The panel's header: which agent process reports the chat's context and when its last
/// snapshot arrived. The page shows the snapshot's age counting on in the browser from
/// `last_snapshot_at`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PanelHeader {
    /// Whether the chat has an agent and whether it has published.
    pub agent: AgentStatus,
    /// The run id of the agent process running now; `None` without an agent and for a
    /// legacy agent (which reports no run id).
    pub run_id: Option<String>,
    /// `run_id` shortened to 8 characters (`SHORT_RUN_ID_CHARS`), for display.
    pub run_id_short: Option<String>,
    /// The run id of the agent process that published the stored snapshot; differs from
    /// `run_id` when the snapshot is stale. `None` before the first snapshot, for
    /// a legacy process, and when the caller did not give the stored snapshot.
    pub snapshot_run_id: Option<String>,
    /// `snapshot_run_id` shortened like `run_id_short`.
    pub snapshot_run_id_short: Option<String>,
    /// When the server stored the last snapshot (RFC 3339, UTC, whole seconds); `None`
    /// before the first snapshot and when the caller did not give it.
    pub last_snapshot_at: Option<String>,
    /// The snapshot's age in whole seconds when this panel was built.
    pub last_snapshot_age_s: Option<u64>,
    /// Whether the agent process is connected to the control plane now, as the control
    /// plane saw its call stream (a fact beside the phase: it never changes it).
    pub connection: ConnectionStatus,
    /// While `offline`: when the control plane saw the stream end (RFC 3339, UTC, whole
    /// seconds, the control plane's clock); `None` otherwise.
    pub offline_since: Option<String>,
    /// The header on one line, e.g. `Agent run 1a2b3c4d · last snapshot
    /// 2026-12-03 11:00:00 UTC (12 s ago)`.
    pub text: String,
}

/// Whether a chat has an agent and whether that agent has published a snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum AgentStatus {
    /// The chat is bound to no agent.
    Unbound,
    /// The chat's agent no longer exists.
    Missing,
    /// The agent exists but has not published a snapshot yet.
    NoSnapshot,
    /// The agent has a stored snapshot (of its current process or, when stale, of an
    /// earlier one).
    Reported,
}

/// Whether the chat's agent process is connected now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ConnectionStatus {
    /// The process of the agent's current run holds its call stream open.
    Online,
    /// That process's stream ended (the process stopped, or it or its replica was cut
    /// off): its tools stay listed but cannot be called until it reconnects.
    Offline,
    /// No stream of the current run has been seen: it has not connected yet, takes no
    /// calls, or there is no agent.
    Never,
}

/// What the panel says under the tools of an offline agent.
pub const OFFLINE_TOOLS_NOTE: &str = "The agent is offline: these tools are listed as its \
last process reported them, and cannot be called until it reconnects.";

/// How serious something is; ordered so the worst tone is the greatest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Tone {
    /// Nothing to report.
    Ok,
    /// Something needs attention but still works.
    Warning,
    /// Something failed.
    Error,
}

impl Tone {
    /// The tone's lowercase name (`ok`, `warning`, `error`), for classes and text.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Warning => "warning",
            Self::Error => "error",
        }
    }
}

/// The chat projection's phase and `stale` verdict, as it decided them, in the words
/// every surface uses (the panel, the chat and agent answers).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DiscoveryWords {
    /// The projection's discovery phase.
    pub phase: ViewPhase,
    /// The stored snapshot is not from the agent process running now (or the agent is
    /// gone); a stale view offers no tools.
    pub stale: bool,
    /// While pending: the servers still connecting, with how long each has been at it.
    /// Left out when none is named.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pending_servers: Vec<PendingServerWait>,
}

impl DiscoveryWords {
    /// The words of `view`.
    pub fn of(view: &View) -> Self {
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

/// A server the agent's initial discovery still waits for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PendingServerWait {
    /// The server's name as the agent's config declares it (untrusted text).
    pub name: String,
    /// How long it has been connecting, in milliseconds: what the agent reported plus the
    /// time since the snapshot was stored.
    pub elapsed_ms: u64,
    /// `elapsed_ms` in whole seconds.
    pub elapsed_s: u64,
}

/// Where discovery stands, as the person should read it: the banner's choice among the
/// projection's phase and `stale` verdict (never decided here).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum DiscoveryState {
    /// Discovery is still initializing (also before the agent's first snapshot).
    Pending,
    /// Discovery finished and at least one MCP server is declared.
    Complete,
    /// Discovery finished and found no MCP server: the workspace declares none, or its
    /// config files could not be read (the banner then says so).
    CompleteNoServers,
    /// The stored tools come from a previous agent process and are withheld.
    Stale,
    /// No completeness guarantee: no agent, a legacy agent, or a deleted one.
    Unknown,
}

/// The discovery banner: its state, text and tone, with any waiting list and explanation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Banner {
    /// Where discovery stands.
    pub state: DiscoveryState,
    /// The banner's sentence for `state`.
    pub text: String,
    /// The banner's tone.
    pub tone: Tone,
    /// While pending: the servers still connecting, by name, at most 10
    /// (`MAX_WAITING_LISTED`; the rest counted in `waiting_more`). Empty otherwise, and
    /// when the agent did not say.
    pub waiting_for: Vec<WaitingServer>,
    /// Servers still connecting beyond those listed.
    pub waiting_more: usize,
    /// Why the banner says what it says, in plain words (set when stale: whose tools are
    /// withheld and why); `None` when the text says it all.
    pub reason: Option<String>,
    /// What the person can do about it (set when stale); `None` when nothing is needed.
    pub advice: Option<String>,
    /// A line beside the text, e.g. how many servers of a complete discovery failed.
    pub note: Option<String>,
}

/// Why a stale panel withholds tools, when the run ids are not known.
pub const STALE_REASON: &str = "The tools on record were published by an earlier agent process. \
The agent has restarted since, and its new process has not published its own tools yet.";
/// What to do about a stale panel.
pub const STALE_ADVICE: &str = "Wait a few seconds for the agent to publish its tools. If nothing \
changes, check that the agent is running and can reach the server, or restart it.";
/// Why a panel whose agent is gone withholds tools.
pub const MISSING_AGENT_REASON: &str =
    "The agent this chat is bound to no longer exists, so none of its tools can be offered.";
/// What to do when the chat's agent is gone.
pub const MISSING_AGENT_ADVICE: &str =
    "Bind this chat to a running agent, or start a new chat with one.";

/// Servers named in the banner's waiting list before "and N more".
pub const MAX_WAITING_LISTED: usize = 10;
/// Characters kept of a waiting server's name (untrusted, and only a progress hint).
pub const MAX_WAITING_NAME_CHARS: usize = 40;

/// A server the banner says discovery is waiting for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WaitingServer {
    /// The server's name, shortened to 40 characters (`MAX_WAITING_NAME_CHARS`).
    pub name: String,
    /// How long it has been connecting.
    pub elapsed_ms: u64,
    /// The same in whole seconds as people read it: `<1 s`, `4 s`.
    pub elapsed: String,
}

impl WaitingServer {
    /// The server `name` (shortened) connecting for `elapsed_ms`.
    pub fn new(name: &str, elapsed_ms: u64) -> Self {
        Self {
            name: shorten(name, MAX_WAITING_NAME_CHARS),
            elapsed_ms,
            elapsed: ctxsync_chat_projection::elapsed_in_seconds(elapsed_ms),
        }
    }
}

/// `text` on one line, cut to `max_chars` characters (a cut ends in `…`).
pub(crate) fn shorten(text: &str, max_chars: usize) -> String {
    let folded = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if folded.chars().count() <= max_chars {
        return folded;
    }
    let kept: String = folded.chars().take(max_chars.saturating_sub(1)).collect();
    format!("{}…", kept.trim_end())
}

impl Banner {
    /// The banner for `state`, with its standard text and tone (and reason and advice when stale).
    pub fn new(state: DiscoveryState) -> Self {
        let (text, tone) = match state {
            DiscoveryState::Pending => (
                "MCP discovery is still initializing; more servers may appear.",
                Tone::Warning,
            ),
            DiscoveryState::Complete => ("MCP discovery is complete.", Tone::Ok),
            DiscoveryState::CompleteNoServers => (
                "MCP discovery is complete: no MCP servers are declared in this workspace.",
                Tone::Ok,
            ),
            DiscoveryState::Stale => (
                "Tools from a previous agent process are withheld until the current process reports.",
                Tone::Warning,
            ),
            DiscoveryState::Unknown => (
                "MCP discovery state is unknown: the agent gives no completeness guarantee.",
                Tone::Warning,
            ),
        };
        let (reason, advice) = match state {
            DiscoveryState::Stale => (Some(STALE_REASON.into()), Some(STALE_ADVICE.into())),
            _ => (None, None),
        };
        Self {
            state,
            text: text.into(),
            tone,
            waiting_for: Vec::new(),
            waiting_more: 0,
            reason,
            advice,
            note: None,
        }
    }

    /// A complete discovery's banner when `broken` config files have errors: the headline
    /// says the config is broken, never that nothing is declared. Other states keep theirs.
    pub fn config_broken(mut self, broken: usize) -> Self {
        let files = match broken {
            0 => return self,
            1 => "an MCP config file is broken; its error is shown below".to_owned(),
            n => format!("{n} MCP config files are broken; their errors are shown below"),
        };
        let (text, tone) = match self.state {
            DiscoveryState::CompleteNoServers => (
                format!("MCP discovery found no servers: {files}."),
                Tone::Error,
            ),
            DiscoveryState::Complete => (
                format!("MCP discovery is complete, but {files}."),
                Tone::Warning,
            ),
            DiscoveryState::Pending | DiscoveryState::Stale | DiscoveryState::Unknown => {
                return self;
            }
        };
        self.text = text;
        self.tone = tone;
        self
    }

    /// The banner with its [`Self::reason`] and [`Self::advice`] replaced.
    pub fn explained(mut self, reason: Option<String>, advice: Option<String>) -> Self {
        self.reason = reason;
        self.advice = advice;
        self
    }

    /// The banner naming the servers discovery is waiting for (bounded as
    /// [`Self::waiting_for`] says), in the given order.
    pub fn waiting(mut self, servers: impl IntoIterator<Item = WaitingServer>) -> Self {
        self.waiting_for.clear();
        self.waiting_more = 0;
        for server in servers {
            if self.waiting_for.len() < MAX_WAITING_LISTED {
                self.waiting_for.push(server);
            } else {
                self.waiting_more += 1;
            }
        }
        self
    }

    /// "Waiting for: github (4 s), jira (12 s), and 3 more." — `None` when nobody is
    /// named.
    pub fn waiting_text(&self) -> Option<String> {
        if self.waiting_for.is_empty() {
            return None;
        }
        let listed: Vec<String> = self
            .waiting_for
            .iter()
            .map(|s| format!("{} ({})", s.name, s.elapsed))
            .collect();
        let more = match self.waiting_more {
            0 => String::new(),
            n => format!(", and {n} more"),
        };
        Some(format!("Waiting for: {}{more}.", listed.join(", ")))
    }
}

/// The notice that the agent's context changed since the chat pinned it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DirtyNotice {
    /// The notice's sentence.
    pub text: String,
    /// The request that re-pins the chat's context.
    pub refresh: Action,
}

/// A request the page can make, e.g. a button's.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Action {
    /// The button's text.
    pub label: String,
    /// The HTTP method, e.g. `PUT`.
    pub method: String,
    /// The URL path to request.
    pub href: String,
}

/// Context files of one directory, in source order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FileGroup {
    /// The directory relative to the workspace ("." for the top level).
    pub directory: String,
    /// The group's files.
    pub files: Vec<FileItem>,
}

/// A pinned instruction file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FileItem {
    /// The file name, without its directory.
    pub name: String,
    /// The path relative to the workspace.
    pub source: String,
    /// Its size in bytes.
    pub size_bytes: u64,
    /// Its resource status, e.g. `ok` or `oversize`.
    pub status: String,
}

/// A pinned skill.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SkillItem {
    /// The skill's name, or its directory's name when it gives none.
    pub name: String,
    /// The skill's description.
    pub description: String,
    /// The path of its skill file, relative to the workspace, or `<plugin>/skills/…` for a
    /// plugin's skill.
    pub source: String,
    /// Its resource status, e.g. `ok` or `invalid`.
    pub status: String,
    /// The Agent Plugins package it comes from; `None` for the workspace's own skills.
    pub plugin: Option<String>,
}

/// The panel's MCP section.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct McpSection {
    /// The MCP config files of the live snapshot.
    pub configs: Vec<ConfigItem>,
    /// `None` while the server list is not known yet (pending with nothing found, or
    /// withheld): the panel then shows the banner, never an empty list.
    pub servers: Option<Vec<ServerItem>>,
    /// Tool and server counts of `servers`; `None` exactly when it is `None`.
    pub summary: Option<McpSummary>,
}

impl McpSection {
    /// How the text panel and the summary say that no server is listed: none declared,
    /// or none readable.
    pub fn no_servers_text(&self) -> &'static str {
        if self.configs.iter().any(|config| !config.ok) {
            "none found: an MCP config file has errors"
        } else {
            "none declared"
        }
    }
}

/// How many tools and servers the panel lists, by outcome.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct McpSummary {
    /// Tools of every listed server.
    pub tools: usize,
    /// Servers listed.
    pub servers: usize,
    /// Servers discovered with at least one tool.
    pub servers_with_tools: usize,
    /// Servers discovered with zero tools (not a failure).
    pub servers_without_tools: usize,
    /// Servers whose discovery failed.
    pub servers_failed: usize,
    /// Servers that ask for a person's sign-in before they list tools.
    pub servers_needing_authorization: usize,
    /// The counts as people read them: `3 tools from 2 servers (1 failed)`, or `none
    /// declared` when the workspace declares no MCP server (`none found: …` when a config
    /// file has errors).
    pub text: String,
}

impl McpSummary {
    /// The counts of `servers`.
    pub fn of(servers: &[ServerItem]) -> Self {
        let count = |state: ServerState| servers.iter().filter(|s| s.state == state).count();
        let tools = servers.iter().map(|s| s.tools.len()).sum();
        let (with_tools, without_tools, failed, sign_in) = (
            count(ServerState::Tools),
            count(ServerState::NoTools),
            count(ServerState::Failed),
            count(ServerState::NeedsAuthorization),
        );
        let text = if servers.is_empty() {
            "none declared".to_owned()
        } else {
            let mut notes = Vec::new();
            if failed > 0 {
                notes.push(format!("{failed} failed"));
            }
            if sign_in > 0 {
                notes.push(format!("{sign_in} not signed in"));
            }
            if without_tools > 0 {
                notes.push(format!("{without_tools} with no tools"));
            }
            let notes = if notes.is_empty() {
                String::new()
            } else {
                format!(" ({})", notes.join(", "))
            };
            format!(
                "{} from {}{notes}",
                counted(tools, "tool", "tools"),
                counted(servers.len(), "server", "servers")
            )
        };
        Self {
            tools,
            servers: servers.len(),
            servers_with_tools: with_tools,
            servers_without_tools: without_tools,
            servers_failed: failed,
            servers_needing_authorization: sign_in,
            text,
        }
    }
}

/// `1 tool`, `3 tools`.
pub(crate) fn counted(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// An MCP config file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ConfigItem {
    /// The config file's path.
    pub path: String,
    /// Whether it was read without error.
    pub ok: bool,
    /// Its diagnostic (error or warning), when it has one.
    pub diagnostic: Option<String>,
}

/// An MCP server and its tools.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ServerItem {
    /// The server's name (`<plugin>/<server>` for a plugin's server).
    pub name: String,
    /// The Agent Plugins package that declared it; `None` for a config file's server.
    pub plugin: Option<String>,
    /// How its discovery went.
    pub state: ServerState,
    /// Its tools, as the panel lists them.
    pub tools: Vec<ToolItem>,
    /// How many tools it lists (0 when it failed or has none).
    pub tool_count: usize,
    /// The failure of a failed server, or a warning on a working one.
    pub diagnostic: Option<String>,
    /// The MCP revision the agent negotiated with the server, when known.
    pub protocol_version: Option<String>,
    /// The server's implementation name and version as it gave them (untrusted),
    /// e.g. `jira-mcp 1.4.2`.
    pub implementation: Option<String>,
    /// How long each step of the connect took.
    pub timings: Option<Timings>,
    /// The revision, implementation and timings on one line, e.g.
    /// `MCP 2026-07-28 · jira-mcp 1.4.2 · start 120 ms · handshake 35 ms · tools 4 ms`;
    /// `None` when none is known.
    pub connection: Option<String>,
    /// The whole connect (start, handshake and tool listing) in milliseconds, when the
    /// agent measured it.
    pub total_ms: Option<u64>,
    /// A working server a person signed in to: as whom and by what ("signed in as ada with
    /// the API token"); never a token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signed_in: Option<String>,
}

/// Milliseconds of each step of a server's connect, as the agent measured them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Timings {
    /// Starting the process; `None` for a server reached over HTTP.
    pub start_ms: Option<u64>,
    /// The MCP handshake.
    pub handshake_ms: u64,
    /// Listing the tools.
    pub tools_ms: u64,
}

impl Timings {
    /// Every step together.
    pub fn total_ms(self) -> u64 {
        self.start_ms
            .unwrap_or(0)
            .saturating_add(self.handshake_ms)
            .saturating_add(self.tools_ms)
    }
}

/// Characters kept of a server's implementation name and version.
pub const MAX_IMPLEMENTATION_CHARS: usize = 60;

impl ServerItem {
    /// The [`Self::connection`] line for these facts.
    pub fn connection_line(
        protocol_version: Option<&str>,
        implementation: Option<&str>,
        timings: Option<Timings>,
    ) -> Option<String> {
        let mut parts = Vec::new();
        if let Some(revision) = protocol_version {
            parts.push(format!("MCP {revision}"));
        }
        if let Some(implementation) = implementation {
            parts.push(implementation.to_owned());
        }
        if let Some(t) = timings {
            if let Some(start) = t.start_ms {
                parts.push(format!("start {start} ms"));
            }
            parts.push(format!("handshake {} ms", t.handshake_ms));
            parts.push(format!("tools {} ms", t.tools_ms));
        }
        (!parts.is_empty()).then(|| parts.join(" · "))
    }
}

/// How a server's discovery went.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ServerState {
    /// Discovered with at least one tool.
    Tools,
    /// Discovered with zero tools: shown as "no tools", not as a failure.
    NoTools,
    /// Discovery failed.
    Failed,
    /// The server asks for a person's sign-in (HTTP 401, or 403 `insufficient_scope`): no
    /// tools until someone signs in. A result, not a failure; nothing waits for it.
    NeedsAuthorization,
}

/// A tool as the panel lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ToolItem {
    /// The tool's name on its server (always shown).
    pub name: String,
    /// Its display title, when the server gave one (shown beside the name).
    pub title: Option<String>,
    /// What the tool does, as the server describes it.
    pub description: String,
    /// Behaviour hints the server claims for the tool, shown as badges labelled as the
    /// server's unverified hints.
    pub hints: Vec<ToolHint>,
}

/// A behaviour the server claims for a tool (its MCP annotations). Only explicit claims
/// are shown; nothing here is verified.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ToolHint {
    /// `readOnlyHint: true`.
    ReadOnly,
    /// `destructiveHint: true` on a tool not claimed read-only.
    Destructive,
    /// `openWorldHint: true`: it reaches beyond the workspace (the web, other systems).
    OpenWorld,
}

impl ToolHint {
    /// The badge's text.
    pub fn label(self) -> &'static str {
        match self {
            Self::ReadOnly => "read-only",
            Self::Destructive => "destructive",
            Self::OpenWorld => "open world",
        }
    }

    /// The CSS class suffix.
    pub fn class(self) -> &'static str {
        match self {
            Self::ReadOnly => "read-only",
            Self::Destructive => "destructive",
            Self::OpenWorld => "open-world",
        }
    }

    /// What the badge means, for its accessible label and tooltip.
    pub fn description(self) -> String {
        format!("{}: a hint from the MCP server, not verified", self.label())
    }
}

/// One entry of the Issues list: a non-OK row or a warning on an OK row.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct IssueItem {
    /// What kind of row the issue is about.
    pub kind: IssueKind,
    /// The file, skill or config path, or the server's name.
    pub source: String,
    /// How serious it is.
    pub severity: Tone,
    /// The diagnostic.
    pub text: String,
}

/// What kind of row an issue is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum IssueKind {
    /// An instruction file.
    File,
    /// A skill.
    Skill,
    /// An MCP config file.
    McpConfig,
    /// An MCP server.
    McpServer,
}

impl IssueKind {
    /// The kind as the Issues list names it, e.g. `MCP config`.
    pub fn label(self) -> &'static str {
        match self {
            Self::File => "file",
            Self::Skill => "skill",
            Self::McpConfig => "MCP config",
            Self::McpServer => "MCP server",
        }
    }
}

impl Panel {
    /// The worst tone among the banner, the issues and the snapshot error; a dirty context
    /// or an offline agent is at least a warning.
    pub fn compute_tone(&self) -> Tone {
        let mut tone = self.discovery.tone;
        for issue in &self.issues {
            tone = tone.max(issue.severity);
        }
        if self.dirty.is_some() {
            tone = tone.max(Tone::Warning);
        }
        if self.snapshot_error.is_some() {
            tone = tone.max(Tone::Error);
        }
        if self.header.connection == ConnectionStatus::Offline {
            tone = tone.max(Tone::Warning);
        }
        tone
    }
}
