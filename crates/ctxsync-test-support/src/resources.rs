//! Builders of the resources and snapshots an agent pushes (feature `protocol`): the
//! parts every crate's fixtures share, each fixture keeping its own names and hashes.

use ctxsync_protocol::{
    DiscoveryPhase, McpConnectTimings, McpServerBody, McpServerInfo, McpTool, Resource,
    ResourceBody, ResourceStatus, RunId, Snapshot, SnapshotPendingServer,
};
use serde_json::Value;

/// A tool with its description and input schema.
pub fn mcp_tool(name: &str, description: impl Into<String>, input_schema: Value) -> McpTool {
    McpTool {
        name: name.to_owned(),
        description: description.into(),
        input_schema,
        ..Default::default()
    }
}

/// A readable MCP server resource `mcp:NAME` with `tools`. The content hash is the
/// caller's: fixtures pin their own (a stored fixture or an expected digest names it).
pub fn mcp_server(name: &str, content_hash: impl Into<String>, tools: Vec<McpTool>) -> Resource {
    Resource {
        source: format!("mcp:{name}"),
        source_path: None,
        content_hash: content_hash.into(),
        size_bytes: 0,
        status: ResourceStatus::Ok,
        error: None,
        body: ResourceBody::McpServer(McpServerBody {
            server_name: name.to_owned(),
            description: String::new(),
            tools,
            ..Default::default()
        }),
    }
}

/// The details the MCP-details tests give their `jira` server: the protocol revision it
/// negotiated, its server info and its connect timings.
pub fn jira_details(body: &mut McpServerBody) {
    body.protocol_version = "2026-07-28".into();
    body.server_info = Some(McpServerInfo {
        name: "jira-mcp".into(),
        version: "1.4.2".into(),
        ..Default::default()
    });
    body.timings = Some(McpConnectTimings {
        start_ms: Some(120),
        handshake_ms: 35,
        tools_ms: 4,
    });
}

/// The benchmarks' inventory: `servers` servers `server-I`, each with `tools_each`
/// tools `tool_T` taking `input_schema`; server I's content hash is I in 64 hex digits.
pub fn bench_servers(servers: usize, tools_each: usize, input_schema: &Value) -> Vec<Resource> {
    (0..servers)
        .map(|i| {
            let tools = (0..tools_each)
                .map(|t| {
                    mcp_tool(
                        &format!("tool_{t}"),
                        format!("tool {t} of server {i}"),
                        input_schema.clone(),
                    )
                })
                .collect();
            mcp_server(&format!("server-{i}"), format!("{i:064x}"), tools)
        })
        .collect()
}

/// Snapshot `version` of run `run` (`""`: none) in `phase`: the first one is initial,
/// no snapshot error, aggregate hash `agg` (override it where a test reads it).
pub fn snapshot(
    version: u64,
    run: &str,
    phase: DiscoveryPhase,
    resources: Vec<Resource>,
) -> Snapshot {
    Snapshot {
        version,
        aggregate_hash: "agg".into(),
        resources,
        initial: version == 1,
        snapshot_error: None,
        agent_run_id: RunId::new(run),
        phase,
        ..Default::default()
    }
}

/// Servers still connecting: (name, milliseconds so far).
pub fn pending_servers(pending: &[(&str, u64)]) -> Vec<SnapshotPendingServer> {
    pending
        .iter()
        .map(|(name, ms)| SnapshotPendingServer {
            server_name: (*name).to_owned(),
            elapsed_ms: *ms,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn bench_servers_number_servers_tools_and_hashes() {
        let servers = bench_servers(2, 3, &json!({"type": "object"}));
        assert_eq!(servers.len(), 2);
        assert_eq!(servers[1].source, "mcp:server-1");
        assert_eq!(servers[1].content_hash, format!("{:064x}", 1));
        let ResourceBody::McpServer(body) = &servers[1].body else {
            panic!("an MCP server: {:?}", servers[1].body);
        };
        assert_eq!(body.server_name, "server-1");
        let names: Vec<&str> = body.tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["tool_0", "tool_1", "tool_2"]);
        assert_eq!(body.tools[2].description, "tool 2 of server 1");
    }

    #[test]
    fn only_the_first_snapshot_is_initial() {
        let first = snapshot(1, "run-1", DiscoveryPhase::Pending, vec![]);
        assert!(first.initial);
        assert_eq!(first.agent_run_id, RunId::new("run-1"));
        assert!(!snapshot(2, "", DiscoveryPhase::Complete, vec![]).initial);
        assert_eq!(
            snapshot(2, "", DiscoveryPhase::Complete, vec![]).agent_run_id,
            None
        );
    }
}
