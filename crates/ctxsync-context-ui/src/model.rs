//! The panel's view model: plain serializable data, already decided. Renderers only lay it
//! out; every judgement (tone, banner, what counts as an issue) is made here.

use ctxsync_chat_projection::Phase;
use serde::Serialize;

/// Everything the context panel shows for one chat.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Panel {
    pub chat_id: String,
    /// The overall tone: the worst of the issues, the banner and the snapshot error.
    pub tone: Tone,
    /// The projection's phase and freshness, in the words every surface uses.
    pub mcp_discovery: DiscoveryWords,
    pub discovery: Banner,
    /// Set when the agent's context changed after the chat pinned it.
    pub dirty: Option<DirtyNotice>,
    pub snapshot_error: Option<String>,
    pub files: Vec<FileGroup>,
    pub skills: Vec<SkillItem>,
    pub mcp: McpSection,
    pub issues: Vec<IssueItem>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Tone {
    Ok,
    Warning,
    Error,
}

impl Tone {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Warning => "warning",
            Self::Error => "error",
        }
    }
}

/// The chat projection's phase and `stale` verdict, as it decided them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct DiscoveryWords {
    pub phase: Phase,
    pub stale: bool,
}

/// Where discovery stands, as the person should read it: the banner's choice among the
/// projection's phase and `stale` verdict (never decided here).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DiscoveryState {
    /// Discovery is still initializing (also before the agent's first snapshot).
    Pending,
    /// Discovery finished and at least one MCP server is declared.
    Complete,
    /// Discovery finished and the workspace declares no MCP server.
    CompleteNoServers,
    /// The stored tools come from a previous agent process and are withheld.
    Stale,
    /// No completeness guarantee: no agent, a legacy agent, or a deleted one.
    Unknown,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Banner {
    pub state: DiscoveryState,
    pub text: String,
    pub tone: Tone,
    /// While pending: the servers still connecting, by name, at most
    /// [`MAX_WAITING_LISTED`] (the rest counted in [`Self::waiting_more`]). Empty
    /// otherwise, and when the agent did not say.
    pub waiting_for: Vec<WaitingServer>,
    /// Servers still connecting beyond those listed.
    pub waiting_more: usize,
}

/// Servers named in the banner's waiting list before "and N more".
pub const MAX_WAITING_LISTED: usize = 10;
/// Characters kept of a waiting server's name (untrusted, and only a progress hint).
pub const MAX_WAITING_NAME_CHARS: usize = 40;

/// A server the banner says discovery is waiting for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct WaitingServer {
    /// The server's name, shortened to [`MAX_WAITING_NAME_CHARS`].
    pub name: String,
    /// How long it has been connecting.
    pub elapsed_ms: u64,
    /// The same in whole seconds as people read it: `<1 s`, `4 s`.
    pub elapsed: String,
}

impl WaitingServer {
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
        Self {
            state,
            text: text.into(),
            tone,
            waiting_for: Vec::new(),
            waiting_more: 0,
        }
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

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DirtyNotice {
    pub text: String,
    /// The request that re-pins the chat's context.
    pub refresh: Action,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Action {
    pub label: String,
    pub method: String,
    pub href: String,
}

/// Context files of one directory, in source order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FileGroup {
    /// The directory relative to the workspace ("." for the top level).
    pub directory: String,
    pub files: Vec<FileItem>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FileItem {
    pub name: String,
    pub source: String,
    pub size_bytes: u64,
    pub status: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SkillItem {
    pub name: String,
    pub description: String,
    pub source: String,
    pub status: String,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct McpSection {
    pub configs: Vec<ConfigItem>,
    /// `None` while the server list is not known yet (pending with nothing found, or
    /// withheld): the panel then shows the banner, never an empty list.
    pub servers: Option<Vec<ServerItem>>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ConfigItem {
    pub path: String,
    pub ok: bool,
    pub diagnostic: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ServerItem {
    pub name: String,
    pub state: ServerState,
    pub tools: Vec<ToolItem>,
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
}

/// Milliseconds of each step of a server's connect, as the agent measured them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Timings {
    /// Starting the process; `None` for a server reached over HTTP.
    pub start_ms: Option<u64>,
    pub handshake_ms: u64,
    pub tools_ms: u64,
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

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerState {
    /// Discovered with at least one tool.
    Tools,
    /// Discovered with zero tools: shown as "no tools", not as a failure.
    NoTools,
    Failed,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ToolItem {
    /// The tool's name on its server (always shown).
    pub name: String,
    /// Its display title, when the server gave one (shown beside the name).
    pub title: Option<String>,
    pub description: String,
    /// Behaviour hints the server claims for the tool, shown as badges labelled as the
    /// server's unverified hints.
    pub hints: Vec<ToolHint>,
}

/// A behaviour the server claims for a tool (its MCP annotations). Only explicit claims
/// are shown; nothing here is verified.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
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
pub struct IssueItem {
    pub kind: IssueKind,
    pub source: String,
    pub severity: Tone,
    pub text: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IssueKind {
    File,
    Skill,
    McpConfig,
    McpServer,
}

impl IssueKind {
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
    /// is at least a warning.
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
        tone
    }
}
