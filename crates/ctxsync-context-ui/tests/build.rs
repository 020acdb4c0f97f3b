//! The panel built from projected chat state: which banner, which servers, which issues.

use ctxsync_chat_projection::{AgentState, Binding, ChatContext, PinnedContext, SnapshotState};
use ctxsync_context_ui::*;
use ctxsync_protocol::*;
use serde_json::json;

fn row(source: &str, status: ResourceStatus, error: Option<&str>, body: ResourceBody) -> Resource {
    Resource {
        source: source.into(),
        source_path: None,
        content_hash: "h".into(),
        size_bytes: 10,
        status,
        error: error.map(Into::into),
        body,
    }
}

fn server(name: &str, tools: &[&str]) -> ResourceBody {
    ResourceBody::McpServer(McpServerBody {
        server_name: name.into(),
        description: String::new(),
        tools: tools
            .iter()
            .map(|t| McpTool {
                name: (*t).into(),
                description: format!("{t} things"),
                input_schema: json!({}),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    })
}

fn resources() -> Vec<Resource> {
    vec![
        row(
            "AGENTS.md",
            ResourceStatus::Ok,
            None,
            ResourceBody::InstructionFile(InstructionFileBody {
                content: "hi".into(),
            }),
        ),
        row(
            "docs/CLAUDE.md",
            ResourceStatus::Oversize,
            None,
            ResourceBody::InstructionFile(InstructionFileBody::default()),
        ),
        row(
            "skills/review/SKILL.md",
            ResourceStatus::Ok,
            None,
            ResourceBody::Skill(SkillBody {
                meta: String::new(),
                name: "review".into(),
                description: "Reviews".into(),
            }),
        ),
        row(
            ".mcp.json",
            ResourceStatus::Invalid,
            Some("entry `bad`: neither command nor url"),
            ResourceBody::McpConfig,
        ),
        row(
            "mcp:fs",
            ResourceStatus::Ok,
            None,
            server("fs", &["read", "write"]),
        ),
        row("mcp:empty", ResourceStatus::Ok, None, server("empty", &[])),
        row(
            "mcp:broken",
            ResourceStatus::Unreadable,
            Some("command not found: nope"),
            server("broken", &[]),
        ),
    ]
}

fn binding(row_run: &str, snapshot: Option<(&str, DiscoveryPhase, Vec<Resource>)>) -> Binding {
    Binding::Agent(AgentState {
        agent_run_id: row_run.into(),
        snapshot: snapshot.map(|(run, phase, resources)| SnapshotState {
            agent_run_id: run.into(),
            phase,
            aggregate_hash: "agg".into(),
            snapshot_error: None,
            resources,
        }),
    })
}

fn panel(live: &Binding) -> Panel {
    build_panel("c1", &ChatContext::new(None, live))
}

#[test]
fn banner_follows_phase_and_freshness() {
    let check = |live: Binding, expect: DiscoveryState, servers_listed: Option<usize>| {
        let panel = panel(&live);
        assert_eq!(panel.discovery.state, expect);
        assert_eq!(
            panel.mcp.servers.as_ref().map(Vec::len),
            servers_listed,
            "{expect:?}"
        );
    };
    check(binding("r1", None), DiscoveryState::Pending, None);
    check(
        binding("r1", Some(("r1", DiscoveryPhase::Pending, vec![]))),
        DiscoveryState::Pending,
        None,
    );
    check(
        binding("r1", Some(("r1", DiscoveryPhase::Pending, resources()))),
        DiscoveryState::Pending,
        Some(3),
    );
    check(
        binding("r1", Some(("r1", DiscoveryPhase::Complete, resources()))),
        DiscoveryState::Complete,
        Some(3),
    );
    check(
        binding("r1", Some(("r1", DiscoveryPhase::Complete, vec![]))),
        DiscoveryState::CompleteNoServers,
        Some(0),
    );
    check(
        binding("r2", Some(("r1", DiscoveryPhase::Complete, resources()))),
        DiscoveryState::Stale,
        None,
    );
    check(
        binding("", Some(("", DiscoveryPhase::Unspecified, resources()))),
        DiscoveryState::Unknown,
        Some(3),
    );
    check(Binding::NoAgent, DiscoveryState::Unknown, None);
    check(Binding::MissingAgent, DiscoveryState::Stale, None);
}

#[test]
fn servers_tools_and_issues() {
    let panel = panel(&binding(
        "r1",
        Some(("r1", DiscoveryPhase::Complete, resources())),
    ));
    let servers = panel.mcp.servers.as_ref().unwrap();
    let summary: Vec<(&str, ServerState, usize)> = servers
        .iter()
        .map(|s| (s.name.as_str(), s.state, s.tools.len()))
        .collect();
    assert!(summary.contains(&("fs", ServerState::Tools, 2)));
    assert!(
        summary.contains(&("empty", ServerState::NoTools, 0)),
        "a zero-tool server is not a failure"
    );
    assert!(summary.contains(&("broken", ServerState::Failed, 0)));
    let fs = servers.iter().find(|s| s.name == "fs").unwrap();
    assert_eq!(
        fs.tools[0].name, "read",
        "the panel shows the server's own tool name"
    );

    let issues: Vec<(IssueKind, &str, Tone)> = panel
        .issues
        .iter()
        .map(|i| (i.kind, i.source.as_str(), i.severity))
        .collect();
    assert_eq!(
        issues,
        [
            (IssueKind::File, "docs/CLAUDE.md", Tone::Warning),
            (IssueKind::McpConfig, ".mcp.json", Tone::Error),
            (IssueKind::McpServer, "broken", Tone::Error),
        ]
    );
    assert_eq!(panel.tone, Tone::Error);
    assert_eq!(
        panel
            .files
            .iter()
            .map(|g| g.directory.as_str())
            .collect::<Vec<_>>(),
        [".", "docs"]
    );
    assert_eq!(panel.skills[0].name, "review");
    assert_eq!(panel.mcp.configs.len(), 1);
    assert!(!panel.mcp.configs[0].ok);
}

#[test]
fn stale_withholds_tools_but_keeps_diagnostics() {
    let panel = panel(&binding(
        "r2",
        Some(("r1", DiscoveryPhase::Complete, resources())),
    ));
    assert_eq!(panel.mcp.servers, None);
    assert!(
        panel
            .issues
            .iter()
            .any(|i| i.kind == IssueKind::McpServer && i.source == "broken")
    );
    assert!(render_fragment(&panel).contains("withheld"));
}

#[test]
fn a_changed_workspace_offers_a_refresh() {
    let live = binding("r1", Some(("r1", DiscoveryPhase::Complete, resources())));
    let old_pin = PinnedContext::from_stored("older".into(), false, vec![]);
    let panel = build_panel("c1", &ChatContext::new(Some(old_pin), &live));
    let dirty = panel.dirty.clone().expect("dirty");
    assert_eq!(dirty.refresh.method, "PUT");
    assert_eq!(dirty.refresh.href, "/api/chats/c1/context");
    assert!(render_text(&panel).contains("Refresh context: PUT /api/chats/c1/context"));
}
