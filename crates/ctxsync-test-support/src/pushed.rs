//! Resources and snapshots as an agent pushes them, with real content hashes and the
//! aggregate hash the agent computes: what the store's and the agent API's suites push and
//! read back.

use ctxsync_protocol::{
    DiscoveryPhase, InstructionFileBody, McpTool, Resource, ResourceBody, ResourceStatus, RunId,
    SkillBody, Snapshot,
};
use sha2::{Digest, Sha256};

/// Lower-case hex SHA-256 over each part with its length before it.
pub fn hex_sha256(parts: &[&str]) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update((part.len() as u64).to_le_bytes());
        hasher.update(part.as_bytes());
    }
    hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// An instruction file at `source` in `/workspace`, hashed as the agent hashes it.
pub fn instruction(source: &str, content: &str) -> Resource {
    Resource {
        source: source.into(),
        source_path: Some(format!("/workspace/{source}")),
        content_hash: hex_sha256(&[content]),
        size_bytes: content.len() as u64,
        status: ResourceStatus::Ok,
        error: None,
        body: ResourceBody::InstructionFile(InstructionFileBody {
            content: content.into(),
        }),
    }
}

/// A skill `skills/NAME/SKILL.md` with its front matter.
pub fn skill(name: &str, description: &str) -> Resource {
    let meta = format!("---\nname: {name}\ndescription: {description}\n---\n");
    Resource {
        source: format!("skills/{name}/SKILL.md"),
        source_path: Some(format!("/workspace/skills/{name}/SKILL.md")),
        content_hash: hex_sha256(&[&meta]),
        size_bytes: meta.len() as u64,
        status: ResourceStatus::Ok,
        error: None,
        body: ResourceBody::Skill(SkillBody {
            meta,
            name: name.into(),
            description: description.into(),
        }),
    }
}

/// A config file's row (hash and size only, as the agent sends it).
pub fn mcp_config(path: &str) -> Resource {
    Resource {
        source: path.into(),
        source_path: Some(format!("/workspace/{path}")),
        content_hash: hex_sha256(&[path]),
        size_bytes: 10,
        status: ResourceStatus::Ok,
        error: None,
        body: ResourceBody::McpConfig,
    }
}

/// A connected server listing `tools`, its content hash over its name and tools.
pub fn mcp_server(name: &str, tools: &[&str]) -> Resource {
    let schema = serde_json::json!({"type": "object", "properties": {"path": {"type": "string"}}});
    let tools: Vec<McpTool> = tools
        .iter()
        .map(|t| crate::mcp_tool(t, format!("the {t} tool"), schema.clone()))
        .collect();
    let mut hash_parts = vec![name];
    hash_parts.extend(tools.iter().map(|t| t.name.as_str()));
    let content_hash = hex_sha256(&hash_parts);
    crate::mcp_server(name, content_hash, tools)
}

/// A server whose connect failed with `error`.
pub fn failed_server(name: &str, error: &str) -> Resource {
    Resource {
        status: ResourceStatus::Unreadable,
        error: Some(error.into()),
        ..mcp_server(name, &[])
    }
}

/// A snapshot whose aggregate hash covers the non-MCP resources, as the agent computes.
pub fn snapshot(
    version: u64,
    run: Option<&str>,
    phase: DiscoveryPhase,
    resources: Vec<Resource>,
) -> Snapshot {
    let mut hashed: Vec<(&str, &str)> = resources
        .iter()
        .filter(|r| !matches!(r.body, ResourceBody::McpConfig | ResourceBody::McpServer(_)))
        .map(|r| (r.source.as_str(), r.content_hash.as_str()))
        .collect();
    hashed.sort();
    let parts: Vec<&str> = hashed.iter().flat_map(|(s, h)| [*s, *h]).collect();
    Snapshot {
        version,
        aggregate_hash: hex_sha256(&parts),
        resources,
        initial: version == 1,
        snapshot_error: None,
        agent_run_id: run.and_then(RunId::new),
        phase,
        ..Default::default()
    }
}

/// `resources` sorted by source, as the store returns them.
pub fn sorted(mut resources: Vec<Resource>) -> Vec<Resource> {
    resources.sort_by(|a, b| a.source.cmp(&b.source));
    resources
}

/// A typical workspace: an instruction file, a skill, a config file and a server.
pub fn workspace() -> Vec<Resource> {
    vec![
        instruction("AGENTS.md", "Be brief."),
        skill("pdf-tools", "Work with PDF files"),
        mcp_config(".mcp.json"),
        mcp_server("fs", &["read", "write"]),
    ]
}
