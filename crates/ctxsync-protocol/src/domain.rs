//! Plain domain types for what an agent reports, the conversion of a startup from the
//! wire (its limits checked as its fields are taken), and every conversion to the wire.
//! A push's conversion from the wire, which needs the encoded sizes and digests of these
//! types, sits above them (`push`).

pub use ctxsync_mcp_model::{
    McpConnectTimings, McpIcon, McpServerInfo, McpTool, McpToolAnnotations,
};
use serde::{Deserialize, Serialize};

use crate::error::{Problem, WireError, max_len};
use crate::limits::{MAX_AGENT_VERSION_BYTES, MAX_DIRECTORY_BYTES, MAX_RUN_ID_BYTES};
use crate::run_id::RunId;
use crate::v1;
use crate::v1::context_resource::{Body as WireBody, Status as WireStatus};
use crate::v1::push_context_state_request::McpDiscovery;
use crate::v1::push_context_state_request::mcp_discovery::Phase as WirePhase;

/// How far the agent's initial MCP discovery has got (SPEC §1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DiscoveryPhase {
    /// No completeness guarantee: a legacy agent, or MCP discovery disabled.
    #[default]
    Unspecified,
    /// The initial reload has not reached a terminal result for every server.
    Pending,
    /// The initial reload has finished; it stays complete for the life of the process.
    Complete,
}

impl DiscoveryPhase {
    /// The lower-case name used in storage and APIs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unspecified => "unspecified",
            Self::Pending => "pending",
            Self::Complete => "complete",
        }
    }

    /// Parses [`Self::as_str`]'s output.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "unspecified" => Some(Self::Unspecified),
            "pending" => Some(Self::Pending),
            "complete" => Some(Self::Complete),
            _ => None,
        }
    }
}

/// The agent process that is running now: the generated `v1::Startup`, checked (its run
/// id typed, its strings bounded).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Startup {
    /// The agent's own version string.
    pub version: String,
    /// The workspace directory with variables and `~` expanded.
    pub expanded_directory: String,
    /// `None` for a legacy agent, which gives no freshness guarantee.
    pub agent_run_id: Option<RunId>,
    /// The agent runs tool calls: after `UpdateStartup` it opens the call stream.
    pub accepts_tool_calls: bool,
}

/// One context snapshot as an agent pushes it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    /// Per-process snapshot counter; the first published snapshot is 1 (at most
    /// [`MAX_COUNTER`](crate::limits::MAX_COUNTER)).
    pub version: u64,
    /// sha256 (lower-case hex) over the canonical encoding of the non-MCP resources.
    pub aggregate_hash: String,
    /// Every resource of the snapshot, sources unique; at most
    /// [`MAX_RESOURCES`](crate::limits::MAX_RESOURCES).
    pub resources: Vec<Resource>,
    /// The first delivered push on a connection; bypasses the server's version gate.
    pub initial: bool,
    /// Why the snapshot is incomplete, when the reason is not one row's; already sanitized.
    pub snapshot_error: Option<String>,
    /// `None` for a legacy agent or one without MCP discovery.
    pub agent_run_id: Option<RunId>,
    /// How far MCP discovery had got when the snapshot was built.
    pub phase: DiscoveryPhase,
    /// While pending: the servers still connecting, by name (empty otherwise).
    pub pending_servers: Vec<SnapshotPendingServer>,
}

impl Snapshot {
    /// True when the snapshot promises nothing about completeness or freshness: no run id
    /// and no discovery phase, as sent by legacy agents.
    pub fn is_legacy(&self) -> bool {
        self.agent_run_id.is_none() && self.phase == DiscoveryPhase::Unspecified
    }
}

/// The status of one resource row.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResourceStatus {
    /// Read and usable; `error` may still hold a warning.
    Ok,
    /// Over the agent's size limit for context files: hash and size only, no content.
    Oversize,
    /// Could not be read: missing, a dangling symlink, not a regular file, a read error, or
    /// an MCP server that did not connect.
    Unreadable,
    /// Read but not usable: not UTF-8, invalid skill front matter, a symlink out of the scan
    /// root, a config file with errors, or a source over the wire limit.
    Invalid,
    /// Left out by a cap on the snapshot's content: hash and size kept, content dropped.
    Excluded,
    /// Only an MCP server's row: the server refused the agent for want of a sign-in (HTTP
    /// 401, or 403 `insufficient_scope`). It has no tools until a person signs in, and it is
    /// a result (discovery does not wait for a person).
    NeedsAuthorization,
}

impl ResourceStatus {
    /// Every status, in declaration order.
    pub const ALL: [Self; 6] = [
        Self::Ok,
        Self::Oversize,
        Self::Unreadable,
        Self::Invalid,
        Self::Excluded,
        Self::NeedsAuthorization,
    ];

    /// The lower-case name used in storage and APIs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Oversize => "oversize",
            Self::Unreadable => "unreadable",
            Self::Invalid => "invalid",
            Self::Excluded => "excluded",
            Self::NeedsAuthorization => "needs_authorization",
        }
    }

    /// Parses [`Self::as_str`]'s output.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == name)
    }
}

/// One resource of a snapshot: a file, a skill, an MCP config file or an MCP server.
#[derive(Clone, Debug, PartialEq)]
pub struct Resource {
    /// Unique within a snapshot.
    pub source: String,
    /// The file's path as the agent found it; `None` for rows that are not files (MCP
    /// servers) and when the path is over the wire limit.
    pub source_path: Option<String>,
    /// The agent's hash of the row's content (the ctxsync agent's: sha256, lower-case hex);
    /// at most [`MAX_HASH_BYTES`](crate::limits::MAX_HASH_BYTES).
    pub content_hash: String,
    /// The size of what `content_hash` covers, in bytes (for a file, the file's size).
    pub size_bytes: u64,
    /// Whether the row was read and carries its content.
    pub status: ResourceStatus,
    /// The failure of a non-OK row, or a warning on an OK row; already sanitized.
    pub error: Option<String>,
    /// The row's kind and, for an OK row, its content.
    pub body: ResourceBody,
}

/// What kind of resource a row is; set even when its status is not OK.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BodyKind {
    /// An instruction file at the top of a scan root (e.g. `AGENTS.md`).
    InstructionFile,
    /// A skill's `SKILL.md`.
    Skill,
    /// An `.mcp.json` (or other MCP config) file; its content never leaves the agent.
    McpConfig,
    /// One MCP server the agent declared, and the tools it listed.
    McpServer,
}

impl BodyKind {
    /// Every kind, in declaration order.
    pub const ALL: [Self; 4] = [
        Self::InstructionFile,
        Self::Skill,
        Self::McpConfig,
        Self::McpServer,
    ];

    /// The lower-case name used in storage and APIs (the proto oneof field name).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InstructionFile => "instruction_file",
            Self::Skill => "skill",
            Self::McpConfig => "mcp_config",
            Self::McpServer => "mcp_server",
        }
    }

    /// Parses [`Self::as_str`]'s output.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == name)
    }
}

/// The body of a resource. Its JSON form ([`Self::to_json`]) uses the proto field names;
/// an MCP config body is always `{}` because the file holds secrets.
#[derive(Clone, Debug, PartialEq)]
pub enum ResourceBody {
    /// An instruction file's text.
    InstructionFile(InstructionFileBody),
    /// A skill's `SKILL.md` and its front matter's name and description.
    Skill(SkillBody),
    /// An MCP config file: no content, since the file holds secrets.
    McpConfig,
    /// An MCP server's details and tools.
    McpServer(McpServerBody),
}

/// The body of an instruction file.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstructionFileBody {
    /// The file's text (UTF-8).
    pub content: String,
}

/// The body of a skill.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkillBody {
    /// The SKILL.md content, front matter included.
    pub meta: String,
    /// The front matter's `name` (kebab-case, equal to the skill's directory name).
    pub name: String,
    /// The front matter's `description`; empty when it has none.
    pub description: String,
}

/// An MCP server's row body. Fields added after the first release default when absent,
/// so rows stored before them still read.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct McpServerBody {
    /// The server's name as declared in its config file.
    pub server_name: String,
    /// A description of the server; empty when none (what the server says about itself is
    /// in `server_info`).
    #[serde(default)]
    pub description: String,
    /// The tools the server listed, within the agent's caps; empty when it did not connect.
    #[serde(default)]
    pub tools: Vec<McpTool>,
    /// The negotiated MCP revision; empty when unknown (not connected, or an older agent).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub protocol_version: String,
    /// What the server said about itself (untrusted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_info: Option<McpServerInfo>,
    /// The server's instructions for the model (untrusted); empty when none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub instructions: String,
    /// How long connecting took; `None` when unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timings: Option<McpConnectTimings>,
    /// The server's `.mcp.json` entry asked (`alwaysLoad`) for its tools to stay loaded in
    /// every turn, even one that defers tools behind find_tools; false when it did not, or
    /// from an agent (or a stored row) that predates the field.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub always_load: bool,
}

/// A server of the initial reload still connecting when the snapshot was built, with how
/// long it had been connecting: what a snapshot carries (and the wire's
/// `v1::push_context_state_request::PendingServer` holds), measured from the engine's
/// `ctxsync_mcp_model::PendingServer`, which keeps when the connect started instead.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotPendingServer {
    /// The server's name as declared in its config file.
    pub server_name: String,
    /// How long it had been connecting then.
    pub elapsed_ms: u64,
}

/// A stored body whose JSON does not match its kind.
#[derive(Debug, thiserror::Error)]
#[error("stored {kind} body is not valid: {source}")]
pub struct BodyJsonError {
    /// The row's kind ([`BodyKind::as_str`]).
    pub kind: &'static str,
    /// Why the JSON did not read as that kind's body.
    #[source]
    pub source: serde_json::Error,
}

impl ResourceBody {
    /// The kind of this body.
    pub fn kind(&self) -> BodyKind {
        match self {
            Self::InstructionFile(_) => BodyKind::InstructionFile,
            Self::Skill(_) => BodyKind::Skill,
            Self::McpConfig => BodyKind::McpConfig,
            Self::McpServer(_) => BodyKind::McpServer,
        }
    }

    /// The storage form: the variant's fields under their proto names. `Err` only if a
    /// body held a value JSON cannot represent, which none of today's fields can.
    pub fn to_json(&self) -> Result<serde_json::Value, serde_json::Error> {
        match self {
            Self::InstructionFile(b) => serde_json::to_value(b),
            Self::Skill(b) => serde_json::to_value(b),
            Self::McpConfig => Ok(serde_json::Value::Object(serde_json::Map::new())),
            Self::McpServer(b) => serde_json::to_value(b),
        }
    }

    /// Reads back [`Self::to_json`]'s output for a row of the given kind.
    pub fn from_json(kind: BodyKind, value: serde_json::Value) -> Result<Self, BodyJsonError> {
        let err = |source| BodyJsonError {
            kind: kind.as_str(),
            source,
        };
        Ok(match kind {
            BodyKind::InstructionFile => {
                Self::InstructionFile(serde_json::from_value(value).map_err(err)?)
            }
            BodyKind::Skill => Self::Skill(serde_json::from_value(value).map_err(err)?),
            // Whatever was stored, a config body never carries content.
            BodyKind::McpConfig => Self::McpConfig,
            BodyKind::McpServer => Self::McpServer(serde_json::from_value(value).map_err(err)?),
        })
    }

    /// Reads [`Self::to_json`]'s output from its stored text, parsing the text once,
    /// straight into the kind's body (no intermediate JSON tree). A config body's text
    /// must still be JSON, though it carries nothing.
    pub fn from_json_text(kind: BodyKind, text: &str) -> Result<Self, BodyJsonError> {
        let err = |source| BodyJsonError {
            kind: kind.as_str(),
            source,
        };
        Ok(match kind {
            BodyKind::InstructionFile => {
                Self::InstructionFile(serde_json::from_str(text).map_err(err)?)
            }
            BodyKind::Skill => Self::Skill(serde_json::from_str(text).map_err(err)?),
            BodyKind::McpConfig => {
                serde_json::from_str::<serde::de::IgnoredAny>(text).map_err(err)?;
                Self::McpConfig
            }
            BodyKind::McpServer => Self::McpServer(serde_json::from_str(text).map_err(err)?),
        })
    }
}

// ---- wire → domain -------------------------------------------------------------------

impl TryFrom<v1::Startup> for Startup {
    type Error = WireError;

    fn try_from(wire: v1::Startup) -> Result<Self, WireError> {
        max_len(
            || "startup.agent_run_id".into(),
            &wire.agent_run_id,
            MAX_RUN_ID_BYTES,
        )?;
        max_len(
            || "startup.version".into(),
            &wire.version,
            MAX_AGENT_VERSION_BYTES,
        )?;
        max_len(
            || "startup.expanded_directory".into(),
            &wire.expanded_directory,
            MAX_DIRECTORY_BYTES,
        )?;
        Ok(Self {
            version: wire.version,
            expanded_directory: wire.expanded_directory,
            agent_run_id: RunId::new(wire.agent_run_id),
            accepts_tool_calls: wire.accepts_tool_calls,
        })
    }
}

impl TryFrom<v1::UpdateStartupRequest> for Startup {
    type Error = WireError;

    fn try_from(wire: v1::UpdateStartupRequest) -> Result<Self, WireError> {
        let startup = wire
            .startup
            .ok_or_else(|| WireError::new("startup", Problem::Missing))?;
        startup.try_into()
    }
}

pub(crate) fn phase_from_wire(value: i32) -> Option<DiscoveryPhase> {
    Some(match WirePhase::try_from(value).ok()? {
        WirePhase::Unspecified => DiscoveryPhase::Unspecified,
        WirePhase::Pending => DiscoveryPhase::Pending,
        WirePhase::Complete => DiscoveryPhase::Complete,
    })
}

pub(crate) fn status_from_wire(value: i32) -> Option<ResourceStatus> {
    Some(match WireStatus::try_from(value).ok()? {
        WireStatus::Unspecified => return None,
        WireStatus::Ok => ResourceStatus::Ok,
        WireStatus::Oversize => ResourceStatus::Oversize,
        WireStatus::Unreadable => ResourceStatus::Unreadable,
        WireStatus::Invalid => ResourceStatus::Invalid,
        WireStatus::Excluded => ResourceStatus::Excluded,
        WireStatus::NeedsAuthorization => ResourceStatus::NeedsAuthorization,
    })
}

/// An optional text the wire carries as a proto3 string: empty is absent.
pub(crate) fn non_empty(text: String) -> Option<String> {
    (!text.is_empty()).then_some(text)
}

// ---- domain → wire -------------------------------------------------------------------

impl From<Startup> for v1::Startup {
    fn from(startup: Startup) -> Self {
        Self {
            version: startup.version,
            expanded_directory: startup.expanded_directory,
            agent_run_id: startup
                .agent_run_id
                .map(RunId::into_string)
                .unwrap_or_default(),
            delta_digest_scheme: 0,
            accepts_tool_calls: startup.accepts_tool_calls,
        }
    }
}

impl From<Startup> for v1::UpdateStartupRequest {
    fn from(startup: Startup) -> Self {
        Self {
            startup: Some(startup.into()),
        }
    }
}

impl From<DiscoveryPhase> for WirePhase {
    fn from(phase: DiscoveryPhase) -> Self {
        match phase {
            DiscoveryPhase::Unspecified => Self::Unspecified,
            DiscoveryPhase::Pending => Self::Pending,
            DiscoveryPhase::Complete => Self::Complete,
        }
    }
}

impl From<ResourceStatus> for WireStatus {
    fn from(status: ResourceStatus) -> Self {
        match status {
            ResourceStatus::Ok => Self::Ok,
            ResourceStatus::Oversize => Self::Oversize,
            ResourceStatus::Unreadable => Self::Unreadable,
            ResourceStatus::Invalid => Self::Invalid,
            ResourceStatus::Excluded => Self::Excluded,
            ResourceStatus::NeedsAuthorization => Self::NeedsAuthorization,
        }
    }
}

impl From<Snapshot> for v1::PushContextStateRequest {
    fn from(snapshot: Snapshot) -> Self {
        // A legacy snapshot leaves the discovery message unset, as legacy agents do.
        let mcp_discovery = (snapshot.phase != DiscoveryPhase::Unspecified).then(|| McpDiscovery {
            phase: WirePhase::from(snapshot.phase) as i32,
            pending_servers: snapshot
                .pending_servers
                .into_iter()
                .map(|p| v1::push_context_state_request::PendingServer {
                    server_name: p.server_name,
                    elapsed_ms: p.elapsed_ms,
                })
                .collect(),
        });
        Self {
            version: snapshot.version,
            aggregate_hash: snapshot.aggregate_hash,
            resources: snapshot.resources.into_iter().map(Into::into).collect(),
            initial: snapshot.initial,
            snapshot_error: snapshot.snapshot_error.unwrap_or_default(),
            agent_run_id: snapshot
                .agent_run_id
                .map(RunId::into_string)
                .unwrap_or_default(),
            mcp_discovery,
            delta: false,
        }
    }
}

impl From<Resource> for v1::ContextResource {
    fn from(resource: Resource) -> Self {
        let body = match resource.body {
            ResourceBody::InstructionFile(b) => {
                WireBody::InstructionFile(v1::InstructionFile { content: b.content })
            }
            ResourceBody::Skill(b) => WireBody::Skill(v1::Skill {
                meta: b.meta,
                name: b.name,
                description: b.description,
            }),
            ResourceBody::McpConfig => WireBody::McpConfig(v1::McpConfig {}),
            ResourceBody::McpServer(b) => WireBody::McpServer(v1::McpServer {
                server_name: b.server_name,
                description: b.description,
                tools: b.tools.into_iter().map(Into::into).collect(),
                protocol_version: b.protocol_version,
                server_info: b.server_info.map(|i| v1::McpServerInfo {
                    name: i.name,
                    version: i.version,
                    title: i.title,
                    description: i.description,
                }),
                instructions: b.instructions,
                timings: b.timings.map(|t| v1::McpConnectTimings {
                    start_ms: t.start_ms,
                    handshake_ms: t.handshake_ms,
                    tools_ms: t.tools_ms,
                }),
                always_load: b.always_load,
            }),
        };
        Self {
            source: resource.source,
            source_path: resource.source_path,
            content_hash: resource.content_hash,
            size_bytes: resource.size_bytes,
            status: WireStatus::from(resource.status) as i32,
            error: resource.error.unwrap_or_default(),
            body_digest: Vec::new(),
            body: Some(body),
        }
    }
}

impl From<McpTool> for v1::McpTool {
    fn from(tool: McpTool) -> Self {
        let json =
            |value: Option<serde_json::Value>| value.map(|v| v.to_string()).unwrap_or_default();
        Self {
            name: tool.name,
            description: tool.description,
            input_schema: tool.input_schema.to_string(),
            title: tool.title,
            annotations: tool.annotations.map(|a| v1::McpToolAnnotations {
                title: a.title,
                read_only_hint: a.read_only_hint,
                destructive_hint: a.destructive_hint,
                idempotent_hint: a.idempotent_hint,
                open_world_hint: a.open_world_hint,
            }),
            output_schema: json(tool.output_schema),
            icons: tool
                .icons
                .into_iter()
                .map(|i| v1::McpIcon {
                    src: i.src,
                    mime_type: i.mime_type,
                    sizes: i.sizes,
                    theme: i.theme,
                })
                .collect(),
            meta: json(tool.meta),
        }
    }
}

/// The Agent Plugins package a row belongs to, read from its source: an MCP server
/// `mcp:<plugin>/<server>` (only plugin servers have a `/` in their name) or a skill
/// `<plugin>/skills/<dir>/SKILL.md` (workspace skills live under `skills/`, `.agents/` or
/// `.claude/`, which no plugin name can be). `None` for every other row.
pub fn plugin_of_source(source: &str) -> Option<&str> {
    let plugin = match source.strip_prefix("mcp:") {
        Some(name) => name.split_once('/')?.0,
        None => {
            let parts: Vec<&str> = source.split('/').collect();
            match parts.as_slice() {
                [plugin, "skills", dir, "SKILL.md"] if !dir.is_empty() => *plugin,
                _ => return None,
            }
        }
    };
    let valid = !plugin.is_empty()
        && plugin
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric())
        && plugin
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
    valid.then_some(plugin)
}

#[cfg(test)]
mod plugin_source_tests {
    use super::plugin_of_source;

    #[test]
    fn only_plugin_rows_name_a_plugin() {
        for (source, plugin) in [
            ("mcp:kit/db", Some("kit")),
            ("mcp:acme.tools/x/y", Some("acme.tools")),
            ("kit/skills/deploy/SKILL.md", Some("kit")),
            ("mcp:db", None),
            ("mcp:Kit/db", None),
            ("skills/deploy/SKILL.md", None),
            (".agents/skills/deploy/SKILL.md", None),
            ("/abs/skills/deploy/SKILL.md", None),
            ("kit/skills/deploy/nested/SKILL.md", None),
            ("kit/mcp.json", None),
            ("AGENTS.md", None),
        ] {
            assert_eq!(plugin_of_source(source), plugin, "{source}");
        }
    }
}

/// Bodies with every field set, shared by the tests of the layers that measure and
/// digest them.
#[cfg(test)]
pub(crate) mod fixtures {
    use ctxsync_test_support::golden::tools;

    use super::{McpConnectTimings, McpServerBody, McpServerInfo};

    pub(crate) fn server() -> McpServerBody {
        McpServerBody {
            server_name: "fs".into(),
            description: "files".into(),
            tools: tools(),
            protocol_version: "2025-11-25".into(),
            server_info: Some(McpServerInfo {
                name: "fs-server".into(),
                version: "1.2.3".into(),
                title: "Files".into(),
                description: "Serves files.".into(),
            }),
            instructions: "Read before you write.".into(),
            timings: Some(McpConnectTimings {
                start_ms: Some(12),
                handshake_ms: 34,
                tools_ms: 56,
            }),
            always_load: true,
        }
    }
}
