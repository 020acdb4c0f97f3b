//! Builders shared by the integration tests: resource rows and bindings as the store
//! would hand them over.

use ctxsync_chat_projection::{AgentState, Binding, SnapshotState};
use ctxsync_protocol::{
    DiscoveryPhase, InstructionFileBody, McpServerBody, McpTool, Resource, ResourceBody,
    ResourceStatus, RunId, SkillBody,
};
use serde_json::json;

pub(crate) fn tool(name: &str, description: &str, params: &[&str]) -> McpTool {
    let properties: serde_json::Map<String, serde_json::Value> = params
        .iter()
        .map(|p| ((*p).to_owned(), json!({"type": "string"})))
        .collect();
    McpTool {
        name: name.to_owned(),
        description: description.to_owned(),
        input_schema: json!({"type": "object", "properties": properties}),
        ..Default::default()
    }
}

fn row(source: &str, status: ResourceStatus, error: Option<&str>, body: ResourceBody) -> Resource {
    Resource {
        source: source.to_owned(),
        source_path: None,
        content_hash: format!("hash-of-{source}"),
        size_bytes: 1,
        status,
        error: error.map(str::to_owned),
        body,
    }
}

/// An OK `mcp_server` row with these tools and an optional warning.
pub(crate) fn server_with(name: &str, tools: Vec<McpTool>, warning: Option<&str>) -> Resource {
    row(
        &format!("mcp_server:{name}"),
        ResourceStatus::Ok,
        warning,
        ResourceBody::McpServer(McpServerBody {
            server_name: name.to_owned(),
            description: String::new(),
            tools,
            ..Default::default()
        }),
    )
}

/// An OK `mcp_server` row whose tools have only names.
pub(crate) fn server(name: &str, tools: &[&str]) -> Resource {
    server_with(
        name,
        tools
            .iter()
            .map(|t| tool(t, &format!("{t} tool"), &[]))
            .collect(),
        None,
    )
}

/// A failed `mcp_server` row.
pub(crate) fn failed(name: &str, error: Option<&str>) -> Resource {
    row(
        &format!("mcp_server:{name}"),
        ResourceStatus::Unreadable,
        error,
        ResourceBody::McpServer(McpServerBody {
            server_name: name.to_owned(),
            ..McpServerBody::default()
        }),
    )
}

/// An `mcp_config` row for `path`.
pub(crate) fn config(path: &str, status: ResourceStatus, error: Option<&str>) -> Resource {
    let mut resource = row(path, status, error, ResourceBody::McpConfig);
    resource.source_path = Some(format!("/ws/{path}"));
    resource
}

pub(crate) fn instruction_file(path: &str, content: &str) -> Resource {
    row(
        path,
        ResourceStatus::Ok,
        None,
        ResourceBody::InstructionFile(InstructionFileBody {
            content: content.to_owned(),
        }),
    )
}

pub(crate) fn skill(name: &str) -> Resource {
    row(
        &format!("skills/{name}/SKILL.md"),
        ResourceStatus::Ok,
        None,
        ResourceBody::Skill(SkillBody {
            meta: format!("---\nname: {name}\n---\n"),
            name: name.to_owned(),
            description: format!("the {name} skill"),
        }),
    )
}

pub(crate) fn snapshot(
    run: &str,
    phase: DiscoveryPhase,
    resources: Vec<Resource>,
) -> SnapshotState {
    SnapshotState {
        agent_run_id: RunId::new(run),
        phase,
        aggregate_hash: "agg-1".to_owned(),
        snapshot_error: None,
        resources,
        ..SnapshotState::default()
    }
}

/// An agent whose row carries `row_run` and whose stored snapshot is `snapshot`.
pub(crate) fn agent(row_run: &str, snapshot: Option<SnapshotState>) -> Binding {
    Binding::Agent(AgentState {
        agent_run_id: RunId::new(row_run),
        snapshot,
        ..Default::default()
    })
}

/// The mix of SPEC's tests: fs (2 tools), empty (0 tools), warned (1 tool and a
/// warning), broken (failed) and one invalid config file, plus a file row that the MCP
/// view ignores.
pub(crate) fn mix() -> Vec<Resource> {
    vec![
        instruction_file("AGENTS.md", "be kind"),
        server("fs", &["read", "write"]),
        server("empty", &[]),
        server_with(
            "warned",
            vec![tool("ping", "Ping", &[])],
            Some(
                "reconnect with the updated configuration failed; tools are from the previous connection: exit status 1",
            ),
        ),
        failed("broken", Some("command not found: brokend")),
        config(
            ".mcp.json",
            ResourceStatus::Invalid,
            Some("mcpServers.bad: neither command nor url"),
        ),
    ]
}
