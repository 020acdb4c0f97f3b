//! A push as the server applies it ([`Push`]) and its conversion from the wire: every
//! limit of SPEC §4 is checked as the field is taken, in one pass over the message, and
//! the first broken one is the [`WireError`]. Cheap top-level checks come first, so an
//! oversized request is refused before its resources are walked.

use std::collections::HashSet;

use crate::digest::BodyDigest;
use crate::domain::{
    DiscoveryPhase, InstructionFileBody, McpConnectTimings, McpIcon, McpServerBody, McpServerInfo,
    McpTool, McpToolAnnotations, Resource, ResourceBody, ResourceStatus, SkillBody, Snapshot,
    SnapshotPendingServer, non_empty, phase_from_wire, status_from_wire,
};
use crate::encoded_size::body_len;
use crate::error::{Problem, WireError, max_counter, max_entries, max_len};
use crate::limits::*;
use crate::run_id::RunId;
use crate::v1;
use crate::v1::context_resource::Body as WireBody;
use crate::v1::push_context_state_request::McpDiscovery;

/// A push as a server applies it: the snapshot with the bodies it carries and their
/// digests, and, for a delta, the resources whose bodies it left out.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Push {
    /// Every resource that carries its body; for a full push, all of them.
    pub snapshot: Snapshot,
    /// The digest of each `snapshot.resources[i]`'s body as sent.
    pub digests: Vec<BodyDigest>,
    /// The resources of a delta whose bodies were left out; empty for a full push.
    pub kept: Vec<KeptResource>,
    /// Sent as a delta (the server checks its base even when `kept` is empty).
    pub delta: bool,
}

/// A resource of a delta push whose body the server must already hold with
/// `body_digest`; every other field is as sent.
#[derive(Clone, Debug, PartialEq)]
pub struct KeptResource {
    /// The resource's position in the request, for error messages.
    pub index: usize,
    /// Unique within the snapshot, as in [`Resource::source`].
    pub source: String,
    /// As in [`Resource::source_path`].
    pub source_path: Option<String>,
    /// As in [`Resource::content_hash`].
    pub content_hash: String,
    /// As in [`Resource::size_bytes`].
    pub size_bytes: u64,
    /// As in [`Resource::status`].
    pub status: ResourceStatus,
    /// As in [`Resource::error`].
    pub error: Option<String>,
    /// The digest of the body the server must already hold for this source and run.
    pub body_digest: BodyDigest,
}

impl From<Snapshot> for Push {
    /// A full push of `snapshot`, its digests computed from the wire form it would be
    /// sent in.
    fn from(snapshot: Snapshot) -> Self {
        let digests = snapshot
            .resources
            .iter()
            .map(|r| BodyDigest::of(&r.body))
            .collect();
        Self {
            snapshot,
            digests,
            kept: Vec::new(),
            delta: false,
        }
    }
}

impl TryFrom<v1::PushContextStateRequest> for Snapshot {
    type Error = WireError;

    /// A full push's snapshot; a delta that omits a body is refused, since only the
    /// server holding its base can complete it (see [`Push`]).
    fn try_from(wire: v1::PushContextStateRequest) -> Result<Self, WireError> {
        let push = Push::try_from(wire)?;
        if let Some(kept) = push.kept.first() {
            return Err(WireError::new(
                format!("resources[{}].body", kept.index),
                Problem::Missing,
            ));
        }
        Ok(push.snapshot)
    }
}

impl TryFrom<v1::PushContextStateRequest> for Push {
    type Error = WireError;

    fn try_from(wire: v1::PushContextStateRequest) -> Result<Self, WireError> {
        let v1::PushContextStateRequest {
            version,
            aggregate_hash,
            resources: wire_resources,
            initial,
            snapshot_error,
            agent_run_id,
            mcp_discovery,
            delta,
        } = wire;
        max_counter(|| "version".into(), version)?;
        max_len(|| "agent_run_id".into(), &agent_run_id, MAX_RUN_ID_BYTES)?;
        max_len(|| "aggregate_hash".into(), &aggregate_hash, MAX_HASH_BYTES)?;
        max_len(|| "snapshot_error".into(), &snapshot_error, MAX_ERROR_BYTES)?;
        let (phase, pending_servers) = match mcp_discovery {
            None => (DiscoveryPhase::Unspecified, Vec::new()),
            Some(discovery) => discovery_from_wire(discovery)?,
        };
        max_entries(|| "resources".into(), wire_resources.len(), MAX_RESOURCES)?;

        let mut rows = Rows::with_capacity(wire_resources.len());
        for (index, resource) in wire_resources.into_iter().enumerate() {
            rows.add(index, resource, delta)?;
        }
        let Rows {
            resources,
            digests,
            kept,
            ..
        } = rows;
        Ok(Self {
            snapshot: Snapshot {
                version,
                aggregate_hash,
                resources,
                initial,
                snapshot_error: non_empty(snapshot_error),
                agent_run_id: RunId::new(agent_run_id),
                phase,
                pending_servers,
            },
            digests,
            kept,
            delta,
        })
    }
}

/// The discovery state of a push: its phase, and the servers still pending (named
/// once each, and only while the phase is pending).
fn discovery_from_wire(
    discovery: McpDiscovery,
) -> Result<(DiscoveryPhase, Vec<SnapshotPendingServer>), WireError> {
    let phase = phase_from_wire(discovery.phase).ok_or_else(|| {
        let problem = Problem::UnknownEnum {
            value: discovery.phase,
        };
        WireError::new("mcp_discovery.phase", problem)
    })?;
    let pending = discovery.pending_servers;
    if pending.is_empty() {
        return Ok((phase, Vec::new()));
    }
    if phase != DiscoveryPhase::Pending {
        return Err(WireError::new(
            "mcp_discovery.pending_servers",
            Problem::Invalid("only allowed while the phase is PHASE_PENDING"),
        ));
    }
    max_entries(
        || "mcp_discovery.pending_servers".into(),
        pending.len(),
        MAX_PENDING_SERVERS,
    )?;
    let mut names = HashSet::with_capacity(pending.len());
    let mut servers = Vec::with_capacity(pending.len());
    for (i, server) in pending.into_iter().enumerate() {
        let field = |name: &str| format!("mcp_discovery.pending_servers[{i}].{name}");
        if server.server_name.is_empty() {
            return Err(WireError::new(field("server_name"), Problem::Empty));
        }
        max_len(
            || field("server_name"),
            &server.server_name,
            MAX_SOURCE_BYTES,
        )?;
        if !names.insert(server.server_name.clone()) {
            return Err(WireError::new(
                field("server_name"),
                Problem::Invalid("names a server listed earlier"),
            ));
        }
        max_counter(|| field("elapsed_ms"), server.elapsed_ms)?;
        servers.push(SnapshotPendingServer {
            server_name: server.server_name,
            elapsed_ms: server.elapsed_ms,
        });
    }
    Ok((phase, servers))
}

/// The resources of a push as they are checked and converted, in order.
struct Rows {
    /// Those sent with their bodies.
    resources: Vec<Resource>,
    /// The digest of each of `resources`' bodies as sent.
    digests: Vec<BodyDigest>,
    /// Those whose bodies a delta left out.
    kept: Vec<KeptResource>,
    /// Every source so far; owned, since each source moves into its row once checked.
    sources: HashSet<String>,
    /// The encoded size of every body so far.
    total_body: usize,
}

impl Rows {
    fn with_capacity(count: usize) -> Self {
        Self {
            resources: Vec::with_capacity(count),
            digests: Vec::with_capacity(count),
            kept: Vec::new(),
            sources: HashSet::with_capacity(count),
            total_body: 0,
        }
    }

    /// Checks and converts resource `index` of a push (a `delta` or not).
    fn add(
        &mut self,
        index: usize,
        wire: v1::ContextResource,
        delta: bool,
    ) -> Result<(), WireError> {
        let field = |name: &str| format!("resources[{index}].{name}");
        let v1::ContextResource {
            source,
            source_path,
            content_hash,
            size_bytes,
            status,
            error,
            body_digest,
            body,
        } = wire;
        if source.is_empty() {
            return Err(WireError::new(field("source"), Problem::Empty));
        }
        max_len(|| field("source"), &source, MAX_SOURCE_BYTES)?;
        if !self.sources.insert(source.clone()) {
            return Err(WireError::new(field("source"), Problem::Duplicate));
        }
        if let Some(path) = &source_path {
            max_len(|| field("source_path"), path, MAX_SOURCE_BYTES)?;
        }
        max_len(|| field("content_hash"), &content_hash, MAX_HASH_BYTES)?;
        max_len(|| field("error"), &error, MAX_ERROR_BYTES)?;
        max_counter(|| field("size_bytes"), size_bytes)?;
        let status = status_from_wire(status).ok_or_else(|| {
            WireError::new(field("status"), Problem::UnknownEnum { value: status })
        })?;
        let Some(body) = body else {
            // A delta may leave a body out, naming the digest the server must hold.
            if !delta {
                return Err(WireError::new(field("body"), Problem::Missing));
            }
            if body_digest.is_empty() {
                return Err(WireError::new(
                    field("body"),
                    Problem::Invalid("must be set, or left out with its body_digest set"),
                ));
            }
            let body_digest = BodyDigest::from_slice(&body_digest).ok_or_else(|| {
                WireError::new(
                    field("body_digest"),
                    Problem::Invalid("must be 32 bytes (a SHA-256 digest)"),
                )
            })?;
            self.kept.push(KeptResource {
                index,
                body_digest,
                source,
                source_path,
                content_hash,
                size_bytes,
                status,
                error: non_empty(error),
            });
            return Ok(());
        };
        if !body_digest.is_empty() {
            return Err(WireError::new(
                field("body_digest"),
                Problem::Invalid("only allowed in a delta push, for a resource without its body"),
            ));
        }
        let body_bytes = body_len(&body);
        if body_bytes > MAX_BODY_BYTES {
            return Err(WireError::new(
                field("body"),
                Problem::TooLong {
                    bytes: body_bytes,
                    max: MAX_BODY_BYTES,
                },
            ));
        }
        // The digest covers the body as sent, so it is taken before the body is converted.
        let digest = BodyDigest::of_wire(&body);
        let body = match body {
            WireBody::InstructionFile(b) => {
                ResourceBody::InstructionFile(InstructionFileBody { content: b.content })
            }
            WireBody::Skill(b) => ResourceBody::Skill(SkillBody {
                meta: b.meta,
                name: b.name,
                description: b.description,
            }),
            WireBody::McpConfig(_) => ResourceBody::McpConfig,
            WireBody::McpServer(server) => {
                ResourceBody::McpServer(server_from_wire(server, &|name| {
                    field(&format!("mcp_server.{name}"))
                })?)
            }
        };
        if status == ResourceStatus::NeedsAuthorization
            && !matches!(body, ResourceBody::McpServer(_))
        {
            return Err(WireError::new(
                field("status"),
                Problem::Invalid("needs_authorization is only for an MCP server's row"),
            ));
        }
        self.total_body += body_bytes;
        if self.total_body > MAX_TOTAL_BODY_BYTES {
            let problem = Problem::TooLong {
                bytes: self.total_body,
                max: MAX_TOTAL_BODY_BYTES,
            };
            return Err(WireError::new("resources[*].body (total)", problem));
        }
        self.resources.push(Resource {
            source,
            source_path,
            content_hash,
            size_bytes,
            status,
            error: non_empty(error),
            body,
        });
        self.digests.push(digest);
        Ok(())
    }
}

/// A server body, its fields bounded beyond its size (SPEC §11, MCP revisions).
fn server_from_wire(
    server: v1::McpServer,
    field: &dyn Fn(&str) -> String,
) -> Result<McpServerBody, WireError> {
    let v1::McpServer {
        server_name,
        description,
        tools,
        protocol_version,
        server_info,
        instructions,
        timings,
        always_load,
    } = server;
    max_len(
        || field("protocol_version"),
        &protocol_version,
        MAX_PROTOCOL_VERSION_BYTES,
    )?;
    if let Some(info) = &server_info {
        for (name, text, max) in [
            ("name", &info.name, MAX_SERVER_INFO_BYTES),
            ("version", &info.version, MAX_SERVER_INFO_BYTES),
            ("title", &info.title, MAX_SERVER_INFO_BYTES),
            (
                "description",
                &info.description,
                MAX_SERVER_DESCRIPTION_BYTES,
            ),
        ] {
            max_len(|| field(&format!("server_info.{name}")), text, max)?;
        }
    }
    max_len(
        || field("instructions"),
        &instructions,
        MAX_INSTRUCTIONS_BYTES,
    )?;
    let tools = tools
        .into_iter()
        .enumerate()
        .map(|(t, tool)| tool_from_wire(tool, &|name| field(&format!("tools[{t}].{name}"))))
        .collect::<Result<_, _>>()?;
    Ok(McpServerBody {
        server_name,
        description,
        tools,
        protocol_version,
        server_info: server_info.map(|i| McpServerInfo {
            name: i.name,
            version: i.version,
            title: i.title,
            description: i.description,
        }),
        instructions,
        timings: timings.map(|t| McpConnectTimings {
            start_ms: t.start_ms,
            handshake_ms: t.handshake_ms,
            tools_ms: t.tools_ms,
        }),
        always_load,
    })
}

/// A tool: its texts and icons bounded, then its JSON fields parsed.
fn tool_from_wire(tool: v1::McpTool, field: &dyn Fn(&str) -> String) -> Result<McpTool, WireError> {
    max_len(|| field("title"), &tool.title, MAX_TOOL_TITLE_BYTES)?;
    if let Some(annotations) = &tool.annotations {
        max_len(
            || field("annotations.title"),
            &annotations.title,
            MAX_TOOL_TITLE_BYTES,
        )?;
    }
    max_len(|| field("meta"), &tool.meta, MAX_TOOL_META_BYTES)?;
    max_entries(|| field("icons"), tool.icons.len(), MAX_ICONS_PER_TOOL)?;
    let icons = tool
        .icons
        .into_iter()
        .enumerate()
        .map(|(n, icon)| icon_from_wire(icon, &|name| field(&format!("icons[{n}].{name}"))))
        .collect::<Result<_, _>>()?;
    let json = |name: &str, text: &str| {
        parse_object(text).map_err(|problem| WireError::new(field(name), problem))
    };
    let input_schema = if tool.input_schema.is_empty() {
        // An empty schema means "no parameters": the agent sends `""` when a server gave none.
        serde_json::json!({ "type": "object" })
    } else {
        json("input_schema", &tool.input_schema)?
    };
    let optional = |name: &str, text: &str| {
        if text.is_empty() {
            Ok(None)
        } else {
            json(name, text).map(Some)
        }
    };
    Ok(McpTool {
        output_schema: optional("output_schema", &tool.output_schema)?,
        meta: optional("meta", &tool.meta)?,
        name: tool.name,
        description: tool.description,
        input_schema,
        title: tool.title,
        annotations: tool.annotations.map(|a| McpToolAnnotations {
            title: a.title,
            read_only_hint: a.read_only_hint,
            destructive_hint: a.destructive_hint,
            idempotent_hint: a.idempotent_hint,
            open_world_hint: a.open_world_hint,
        }),
        icons,
    })
}

fn icon_from_wire(icon: v1::McpIcon, field: &dyn Fn(&str) -> String) -> Result<McpIcon, WireError> {
    if icon.src.is_empty() {
        return Err(WireError::new(field("src"), Problem::Empty));
    }
    max_len(|| field("src"), &icon.src, MAX_ICON_SRC_BYTES)?;
    max_len(|| field("mime_type"), &icon.mime_type, MAX_ICON_FIELD_BYTES)?;
    max_len(|| field("theme"), &icon.theme, MAX_ICON_FIELD_BYTES)?;
    max_entries(|| field("sizes"), icon.sizes.len(), MAX_ICON_SIZES)?;
    for (z, size) in icon.sizes.iter().enumerate() {
        max_len(|| field(&format!("sizes[{z}]")), size, MAX_ICON_FIELD_BYTES)?;
    }
    Ok(McpIcon {
        src: icon.src,
        mime_type: icon.mime_type,
        sizes: icon.sizes,
        theme: icon.theme,
    })
}

fn parse_object(text: &str) -> Result<serde_json::Value, Problem> {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(value) if value.is_object() => Ok(value),
        Ok(_) => Err(Problem::InvalidJson("must be a JSON object".into())),
        Err(e) => Err(Problem::InvalidJson(e.to_string())),
    }
}
