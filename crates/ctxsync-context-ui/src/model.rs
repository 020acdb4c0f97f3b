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
        }
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
    pub name: String,
    pub description: String,
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
