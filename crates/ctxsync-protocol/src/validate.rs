//! Wire validation: every limit of SPEC §4, checked before any database access. Each
//! failure names the offending field and maps to gRPC `InvalidArgument`.

use std::collections::HashSet;
use std::fmt;

use prost::Message;

use crate::digest::BODY_DIGEST_BYTES;
use crate::domain::{phase_from_wire, status_from_wire};
use crate::limits::*;
use crate::v1;
use crate::v1::context_resource::Body;

/// A request that breaks a wire limit, naming the field (e.g. `resources[3].source`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid {field}: {problem}")]
pub struct WireError {
    /// The offending field's path in the request, e.g. `resources[3].source`.
    pub field: String,
    /// What is wrong with it.
    pub problem: Problem,
}

/// What is wrong with a field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// A repeated field with more entries than allowed.
    TooMany {
        /// How many entries it has.
        count: usize,
        /// The most allowed.
        max: usize,
    },
    /// A string or body longer than allowed.
    TooLong {
        /// Its length in bytes (for a body, its encoded size).
        bytes: usize,
        /// The most bytes allowed.
        max: usize,
    },
    /// A string that must not be empty is.
    Empty,
    /// A resource's source repeats an earlier resource's.
    Duplicate,
    /// A number above its maximum.
    OutOfRange {
        /// The value sent.
        value: u64,
        /// The largest value allowed.
        max: u64,
    },
    /// An enum value this version of the protocol does not know (or `UNSPECIFIED` where a
    /// value is required).
    UnknownEnum {
        /// The value sent.
        value: i32,
    },
    /// A field that must be set is not.
    Missing,
    /// A JSON-encoded field that is not a JSON object, with the parser's reason.
    InvalidJson(String),
    /// A value this field may not hold, with the reason.
    Invalid(&'static str),
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooMany { count, max } => write!(f, "{count} entries, at most {max} allowed"),
            Self::TooLong { bytes, max } => write!(f, "{bytes} bytes, at most {max} allowed"),
            Self::Empty => f.write_str("must not be empty"),
            Self::Duplicate => f.write_str("duplicates an earlier resource's source"),
            Self::OutOfRange { value, max } => write!(f, "{value} is above the maximum {max}"),
            Self::UnknownEnum { value } => write!(f, "unknown value {value}"),
            Self::Missing => f.write_str("must be set"),
            Self::InvalidJson(reason) => write!(f, "not valid JSON: {reason}"),
            Self::Invalid(reason) => f.write_str(reason),
        }
    }
}

impl WireError {
    /// An error for `field` (its path in the request).
    pub fn new(field: impl Into<String>, problem: Problem) -> Self {
        Self {
            field: field.into(),
            problem,
        }
    }
}

impl From<WireError> for tonic::Status {
    fn from(error: WireError) -> Self {
        tonic::Status::invalid_argument(error.to_string())
    }
}

fn max_len(field: impl FnOnce() -> String, text: &str, max: usize) -> Result<(), WireError> {
    if text.len() > max {
        return Err(WireError::new(
            field(),
            Problem::TooLong {
                bytes: text.len(),
                max,
            },
        ));
    }
    Ok(())
}

fn max_counter(field: &str, value: u64) -> Result<(), WireError> {
    if value > MAX_COUNTER {
        return Err(WireError::new(
            field,
            Problem::OutOfRange {
                value,
                max: MAX_COUNTER,
            },
        ));
    }
    Ok(())
}

/// Checks a `Startup` message.
pub(crate) fn startup(startup: &v1::Startup) -> Result<(), WireError> {
    max_len(
        || "startup.agent_run_id".into(),
        &startup.agent_run_id,
        MAX_RUN_ID_BYTES,
    )?;
    max_len(
        || "startup.version".into(),
        &startup.version,
        MAX_AGENT_VERSION_BYTES,
    )?;
    max_len(
        || "startup.expanded_directory".into(),
        &startup.expanded_directory,
        MAX_DIRECTORY_BYTES,
    )
}

/// Checks a push. Cheap top-level checks come first so an oversized request is refused
/// before its resources are walked.
pub(crate) fn push(push: &v1::PushContextStateRequest) -> Result<(), WireError> {
    max_counter("version", push.version)?;
    max_len(
        || "agent_run_id".into(),
        &push.agent_run_id,
        MAX_RUN_ID_BYTES,
    )?;
    max_len(
        || "aggregate_hash".into(),
        &push.aggregate_hash,
        MAX_HASH_BYTES,
    )?;
    max_len(
        || "snapshot_error".into(),
        &push.snapshot_error,
        MAX_ERROR_BYTES,
    )?;
    if let Some(discovery) = &push.mcp_discovery {
        discovery_message(discovery)?;
    }
    if push.resources.len() > MAX_RESOURCES {
        let problem = Problem::TooMany {
            count: push.resources.len(),
            max: MAX_RESOURCES,
        };
        return Err(WireError::new("resources", problem));
    }

    let mut sources = HashSet::with_capacity(push.resources.len());
    let mut total_body = 0usize;
    for (i, resource) in push.resources.iter().enumerate() {
        let field = |name: &str| format!("resources[{i}].{name}");
        if resource.source.is_empty() {
            return Err(WireError::new(field("source"), Problem::Empty));
        }
        max_len(|| field("source"), &resource.source, MAX_SOURCE_BYTES)?;
        if !sources.insert(resource.source.as_str()) {
            return Err(WireError::new(field("source"), Problem::Duplicate));
        }
        if let Some(path) = &resource.source_path {
            max_len(|| field("source_path"), path, MAX_SOURCE_BYTES)?;
        }
        max_len(
            || field("content_hash"),
            &resource.content_hash,
            MAX_HASH_BYTES,
        )?;
        max_len(|| field("error"), &resource.error, MAX_ERROR_BYTES)?;
        max_counter(&field("size_bytes"), resource.size_bytes)?;
        if status_from_wire(resource.status).is_none() {
            return Err(WireError::new(
                field("status"),
                Problem::UnknownEnum {
                    value: resource.status,
                },
            ));
        }
        let Some(body) = &resource.body else {
            // A delta may leave a body out, naming the digest the server must hold.
            if !push.delta {
                return Err(WireError::new(field("body"), Problem::Missing));
            }
            if resource.body_digest.is_empty() {
                return Err(WireError::new(
                    field("body"),
                    Problem::Invalid("must be set, or left out with its body_digest set"),
                ));
            }
            if resource.body_digest.len() != BODY_DIGEST_BYTES {
                return Err(WireError::new(
                    field("body_digest"),
                    Problem::Invalid("must be 32 bytes (a SHA-256 digest)"),
                ));
            }
            continue;
        };
        if !resource.body_digest.is_empty() {
            return Err(WireError::new(
                field("body_digest"),
                Problem::Invalid("only allowed in a delta push, for a resource without its body"),
            ));
        }
        let body_bytes = body_len(body);
        if body_bytes > MAX_BODY_BYTES {
            return Err(WireError::new(
                field("body"),
                Problem::TooLong {
                    bytes: body_bytes,
                    max: MAX_BODY_BYTES,
                },
            ));
        }
        if let Body::McpServer(server) = body {
            mcp_server(server, &|name: &str| field(&format!("mcp_server.{name}")))?;
        }
        total_body += body_bytes;
        if total_body > MAX_TOTAL_BODY_BYTES {
            let problem = Problem::TooLong {
                bytes: total_body,
                max: MAX_TOTAL_BODY_BYTES,
            };
            return Err(WireError::new("resources[*].body (total)", problem));
        }
    }
    Ok(())
}

fn discovery_message(
    discovery: &v1::push_context_state_request::McpDiscovery,
) -> Result<(), WireError> {
    let phase = phase_from_wire(discovery.phase).ok_or_else(|| {
        let problem = Problem::UnknownEnum {
            value: discovery.phase,
        };
        WireError::new("mcp_discovery.phase", problem)
    })?;
    let pending = &discovery.pending_servers;
    if pending.is_empty() {
        return Ok(());
    }
    if phase != crate::DiscoveryPhase::Pending {
        return Err(WireError::new(
            "mcp_discovery.pending_servers",
            Problem::Invalid("only allowed while the phase is PHASE_PENDING"),
        ));
    }
    if pending.len() > MAX_PENDING_SERVERS {
        let problem = Problem::TooMany {
            count: pending.len(),
            max: MAX_PENDING_SERVERS,
        };
        return Err(WireError::new("mcp_discovery.pending_servers", problem));
    }
    let mut names = HashSet::with_capacity(pending.len());
    for (i, server) in pending.iter().enumerate() {
        let field = |name: &str| format!("mcp_discovery.pending_servers[{i}].{name}");
        if server.server_name.is_empty() {
            return Err(WireError::new(field("server_name"), Problem::Empty));
        }
        max_len(
            || field("server_name"),
            &server.server_name,
            MAX_SOURCE_BYTES,
        )?;
        if !names.insert(server.server_name.as_str()) {
            return Err(WireError::new(
                field("server_name"),
                Problem::Invalid("names a server listed earlier"),
            ));
        }
        max_counter(&field("elapsed_ms"), server.elapsed_ms)?;
    }
    Ok(())
}

/// The bounds of a server body's fields beyond its size (SPEC §11, MCP revisions).
fn mcp_server(server: &v1::McpServer, field: &dyn Fn(&str) -> String) -> Result<(), WireError> {
    max_len(
        || field("protocol_version"),
        &server.protocol_version,
        MAX_PROTOCOL_VERSION_BYTES,
    )?;
    if let Some(info) = &server.server_info {
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
        &server.instructions,
        MAX_INSTRUCTIONS_BYTES,
    )?;
    for (t, tool) in server.tools.iter().enumerate() {
        let field = |name: &str| field(&format!("tools[{t}].{name}"));
        max_len(|| field("title"), &tool.title, MAX_TOOL_TITLE_BYTES)?;
        if let Some(annotations) = &tool.annotations {
            max_len(
                || field("annotations.title"),
                &annotations.title,
                MAX_TOOL_TITLE_BYTES,
            )?;
        }
        max_len(|| field("meta"), &tool.meta, MAX_TOOL_META_BYTES)?;
        if tool.icons.len() > MAX_ICONS_PER_TOOL {
            let problem = Problem::TooMany {
                count: tool.icons.len(),
                max: MAX_ICONS_PER_TOOL,
            };
            return Err(WireError::new(field("icons"), problem));
        }
        for (n, icon) in tool.icons.iter().enumerate() {
            let field = |name: &str| field(&format!("icons[{n}].{name}"));
            if icon.src.is_empty() {
                return Err(WireError::new(field("src"), Problem::Empty));
            }
            max_len(|| field("src"), &icon.src, MAX_ICON_SRC_BYTES)?;
            max_len(|| field("mime_type"), &icon.mime_type, MAX_ICON_FIELD_BYTES)?;
            max_len(|| field("theme"), &icon.theme, MAX_ICON_FIELD_BYTES)?;
            if icon.sizes.len() > MAX_ICON_SIZES {
                let problem = Problem::TooMany {
                    count: icon.sizes.len(),
                    max: MAX_ICON_SIZES,
                };
                return Err(WireError::new(field("sizes"), problem));
            }
            for (z, size) in icon.sizes.iter().enumerate() {
                max_len(|| field(&format!("sizes[{z}]")), size, MAX_ICON_FIELD_BYTES)?;
            }
        }
    }
    Ok(())
}

/// The encoded size of a body variant's message, the measure both sides use.
pub fn body_len(body: &Body) -> usize {
    match body {
        Body::InstructionFile(m) => m.encoded_len(),
        Body::Skill(m) => m.encoded_len(),
        Body::McpConfig(m) => m.encoded_len(),
        Body::McpServer(m) => m.encoded_len(),
    }
}
