//! Plain domain types for what an agent reports, and their conversions to and from the
//! wire messages. Wire → domain validates every limit first (see [`crate::WireError`]).

use serde::{Deserialize, Serialize};

use crate::v1;
use crate::v1::context_resource::{Body as WireBody, Status as WireStatus};
use crate::v1::push_context_state_request::McpDiscovery;
use crate::v1::push_context_state_request::mcp_discovery::Phase as WirePhase;
use crate::validate::{self, Problem, WireError};

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

/// The agent process that is running now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Startup {
    pub version: String,
    pub expanded_directory: String,
    /// `None` for a legacy agent, which gives no freshness guarantee.
    pub agent_run_id: Option<String>,
}

/// One context snapshot as an agent pushes it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    pub version: u64,
    pub aggregate_hash: String,
    pub resources: Vec<Resource>,
    /// The first delivered push on a connection; bypasses the server's version gate.
    pub initial: bool,
    pub snapshot_error: Option<String>,
    /// `None` for a legacy agent or one without MCP discovery.
    pub agent_run_id: Option<String>,
    pub phase: DiscoveryPhase,
}

impl Snapshot {
    /// True when the snapshot promises nothing about completeness or freshness: no run id
    /// and no discovery phase, as sent by legacy agents.
    pub fn is_legacy(&self) -> bool {
        self.agent_run_id.is_none() && self.phase == DiscoveryPhase::Unspecified
    }
}

/// The status of one resource row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResourceStatus {
    Ok,
    Oversize,
    Unreadable,
    Invalid,
    Excluded,
}

impl ResourceStatus {
    pub const ALL: [Self; 5] = [
        Self::Ok,
        Self::Oversize,
        Self::Unreadable,
        Self::Invalid,
        Self::Excluded,
    ];

    /// The lower-case name used in storage and APIs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Oversize => "oversize",
            Self::Unreadable => "unreadable",
            Self::Invalid => "invalid",
            Self::Excluded => "excluded",
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
    pub source_path: Option<String>,
    pub content_hash: String,
    pub size_bytes: u64,
    pub status: ResourceStatus,
    /// The failure of a non-OK row, or a warning on an OK row; already sanitized.
    pub error: Option<String>,
    pub body: ResourceBody,
}

/// What kind of resource a row is; set even when its status is not OK.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BodyKind {
    InstructionFile,
    Skill,
    McpConfig,
    McpServer,
}

impl BodyKind {
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
    InstructionFile(InstructionFileBody),
    Skill(SkillBody),
    McpConfig,
    McpServer(McpServerBody),
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstructionFileBody {
    pub content: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkillBody {
    /// The SKILL.md content, front matter included.
    pub meta: String,
    pub name: String,
    pub description: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct McpServerBody {
    pub server_name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub tools: Vec<McpTool>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct McpTool {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// A JSON Schema document.
    pub input_schema: serde_json::Value,
}

/// A stored body whose JSON does not match its kind.
#[derive(Debug, thiserror::Error)]
#[error("stored {kind} body is not valid: {source}")]
pub struct BodyJsonError {
    pub kind: &'static str,
    #[source]
    pub source: serde_json::Error,
}

impl ResourceBody {
    pub fn kind(&self) -> BodyKind {
        match self {
            Self::InstructionFile(_) => BodyKind::InstructionFile,
            Self::Skill(_) => BodyKind::Skill,
            Self::McpConfig => BodyKind::McpConfig,
            Self::McpServer(_) => BodyKind::McpServer,
        }
    }

    /// The storage form: the variant's fields under their proto names.
    pub fn to_json(&self) -> serde_json::Value {
        let value = match self {
            Self::InstructionFile(b) => serde_json::to_value(b),
            Self::Skill(b) => serde_json::to_value(b),
            Self::McpConfig => Ok(serde_json::json!({})),
            Self::McpServer(b) => serde_json::to_value(b),
        };
        value.expect("body types serialize to JSON infallibly")
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
}

// ---- wire → domain -------------------------------------------------------------------

impl TryFrom<v1::Startup> for Startup {
    type Error = WireError;

    fn try_from(wire: v1::Startup) -> Result<Self, WireError> {
        validate::startup(&wire)?;
        Ok(Self {
            version: wire.version,
            expanded_directory: wire.expanded_directory,
            agent_run_id: non_empty(wire.agent_run_id),
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

impl TryFrom<v1::PushContextStateRequest> for Snapshot {
    type Error = WireError;

    fn try_from(wire: v1::PushContextStateRequest) -> Result<Self, WireError> {
        validate::push(&wire)?;
        let phase = wire.mcp_discovery.map_or(DiscoveryPhase::Unspecified, |d| {
            phase_from_wire(d.phase).expect("validated phase")
        });
        let resources = wire
            .resources
            .into_iter()
            .enumerate()
            .map(|(i, r)| resource_from_wire(i, r))
            .collect::<Result<_, _>>()?;
        Ok(Self {
            version: wire.version,
            aggregate_hash: wire.aggregate_hash,
            resources,
            initial: wire.initial,
            snapshot_error: non_empty(wire.snapshot_error),
            agent_run_id: non_empty(wire.agent_run_id),
            phase,
        })
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
    })
}

/// Converts an already validated resource; only the tool schemas can still fail.
fn resource_from_wire(index: usize, wire: v1::ContextResource) -> Result<Resource, WireError> {
    let body = match wire.body.expect("validated body") {
        WireBody::InstructionFile(b) => {
            ResourceBody::InstructionFile(InstructionFileBody { content: b.content })
        }
        WireBody::Skill(b) => ResourceBody::Skill(SkillBody {
            meta: b.meta,
            name: b.name,
            description: b.description,
        }),
        WireBody::McpConfig(_) => ResourceBody::McpConfig,
        WireBody::McpServer(b) => {
            let tools = b
                .tools
                .into_iter()
                .enumerate()
                .map(|(t, tool)| {
                    let input_schema = parse_schema(&tool.input_schema).map_err(|problem| {
                        WireError::new(
                            format!("resources[{index}].mcp_server.tools[{t}].input_schema"),
                            problem,
                        )
                    })?;
                    Ok(McpTool {
                        name: tool.name,
                        description: tool.description,
                        input_schema,
                    })
                })
                .collect::<Result<_, WireError>>()?;
            ResourceBody::McpServer(McpServerBody {
                server_name: b.server_name,
                description: b.description,
                tools,
            })
        }
    };
    Ok(Resource {
        source: wire.source,
        source_path: wire.source_path,
        content_hash: wire.content_hash,
        size_bytes: wire.size_bytes,
        status: status_from_wire(wire.status).expect("validated status"),
        error: non_empty(wire.error),
        body,
    })
}

/// An empty schema means "no parameters": the agent sends `""` when a server gave none.
fn parse_schema(text: &str) -> Result<serde_json::Value, Problem> {
    if text.is_empty() {
        return Ok(serde_json::json!({ "type": "object" }));
    }
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(value) if value.is_object() => Ok(value),
        Ok(_) => Err(Problem::InvalidJson(
            "a JSON Schema must be a JSON object".into(),
        )),
        Err(e) => Err(Problem::InvalidJson(e.to_string())),
    }
}

fn non_empty(text: String) -> Option<String> {
    (!text.is_empty()).then_some(text)
}

// ---- domain → wire -------------------------------------------------------------------

impl From<Startup> for v1::Startup {
    fn from(startup: Startup) -> Self {
        Self {
            version: startup.version,
            expanded_directory: startup.expanded_directory,
            agent_run_id: startup.agent_run_id.unwrap_or_default(),
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
        }
    }
}

impl From<Snapshot> for v1::PushContextStateRequest {
    fn from(snapshot: Snapshot) -> Self {
        // A legacy snapshot leaves the discovery message unset, as legacy agents do.
        let mcp_discovery = (snapshot.phase != DiscoveryPhase::Unspecified).then(|| McpDiscovery {
            phase: WirePhase::from(snapshot.phase) as i32,
        });
        Self {
            version: snapshot.version,
            aggregate_hash: snapshot.aggregate_hash,
            resources: snapshot.resources.into_iter().map(Into::into).collect(),
            initial: snapshot.initial,
            snapshot_error: snapshot.snapshot_error.unwrap_or_default(),
            agent_run_id: snapshot.agent_run_id.unwrap_or_default(),
            mcp_discovery,
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
                tools: b
                    .tools
                    .into_iter()
                    .map(|t| v1::McpTool {
                        name: t.name,
                        description: t.description,
                        input_schema: t.input_schema.to_string(),
                    })
                    .collect(),
            }),
        };
        Self {
            source: resource.source,
            source_path: resource.source_path,
            content_hash: resource.content_hash,
            size_bytes: resource.size_bytes,
            status: WireStatus::from(resource.status) as i32,
            error: resource.error.unwrap_or_default(),
            body: Some(body),
        }
    }
}
