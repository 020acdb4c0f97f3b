//! The panel built from projected chat state: which banner, which servers, which issues.

use ctxsync_chat_projection::{
    AgentState, Binding, ChatContext, Connection, HeldSignIn, PinnedContext, SnapshotState,
};
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
        agent_run_id: RunId::new(row_run),
        snapshot: snapshot.map(|(run, phase, resources)| SnapshotState {
            agent_run_id: RunId::new(run),
            phase,
            aggregate_hash: "agg".into(),
            snapshot_error: None,
            resources,
            ..SnapshotState::default()
        }),
        ..Default::default()
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

/// Issue 49: a config file that cannot be read is the headline, never "nothing is
/// declared": alone (no server found) or beside the servers kept from before its error.
#[test]
fn a_broken_config_file_is_the_headline_not_an_empty_workspace() {
    let error = "invalid JSON at line 4, column 5: expected `,` or `}`; kept the servers it \
                 declared before, as they were, until it is fixed: \"docs\"";
    let broken = row(
        ".mcp.json",
        ResourceStatus::Invalid,
        Some(error),
        ResourceBody::McpConfig,
    );
    let complete = |resources| binding("r1", Some(("r1", DiscoveryPhase::Complete, resources)));

    let alone = panel(&complete(vec![broken.clone()]));
    assert_eq!(alone.discovery.state, DiscoveryState::CompleteNoServers);
    assert_eq!(
        alone.discovery.text,
        "MCP discovery found no servers: an MCP config file is broken; its error is shown below."
    );
    assert_eq!(alone.discovery.tone, Tone::Error);
    assert_eq!(alone.tone, Tone::Error);
    assert_eq!(
        alone.mcp.summary.as_ref().map(|s| s.text.as_str()),
        Some("none found: an MCP config file has errors")
    );
    assert_eq!(alone.mcp.configs[0].diagnostic.as_deref(), Some(error));
    let text = render_text(&alone);
    assert!(
        text.contains("MCP servers: none found: an MCP config file has errors"),
        "{text}"
    );
    assert!(!text.contains("none declared"), "{text}");
    let html = render_fragment(&alone);
    assert!(html.contains("No MCP servers could be read"), "{html}");
    assert!(!html.contains("No MCP servers are declared"), "{html}");

    let mut kept = row(
        "mcp:docs",
        ResourceStatus::Ok,
        None,
        server("docs", &["search"]),
    );
    kept.error = Some(
        "its config file could not be read; tools are from the previous connection until the \
         file is fixed: /w/.mcp.json: invalid JSON at line 4, column 5: expected `,` or `}`"
            .into(),
    );
    let beside = panel(&complete(vec![broken, kept]));
    assert_eq!(beside.discovery.state, DiscoveryState::Complete);
    assert_eq!(
        beside.discovery.text,
        "MCP discovery is complete, but an MCP config file is broken; its error is shown below."
    );
    let servers = beside.mcp.servers.as_deref().unwrap_or_default();
    assert_eq!(
        servers[0].tool_count, 1,
        "the kept server's tools are listed"
    );
    assert!(
        beside
            .issues
            .iter()
            .any(|i| i.kind == IssueKind::McpServer && i.text.contains("line 4, column 5")),
        "{:?}",
        beside.issues
    );
    for panel in [&alone, &beside] {
        ctxsync_test_support::assert_in_words(&panel.discovery.text);
        for issue in &panel.issues {
            ctxsync_test_support::assert_in_words(&issue.text);
        }
    }

    // Two broken files, and a complete discovery without any keeps its own words.
    let two = panel(&complete(vec![
        row(
            ".mcp.json",
            ResourceStatus::Invalid,
            Some("x"),
            ResourceBody::McpConfig,
        ),
        row(
            "extra.json",
            ResourceStatus::Invalid,
            Some("y"),
            ResourceBody::McpConfig,
        ),
    ]));
    assert_eq!(
        two.discovery.text,
        "MCP discovery found no servers: 2 MCP config files are broken; their errors are shown below."
    );
    let fine = panel(&complete(vec![]));
    assert_eq!(
        fine.discovery.text,
        "MCP discovery is complete: no MCP servers are declared in this workspace."
    );
    assert_eq!(
        fine.mcp.summary.as_ref().map(|s| s.text.as_str()),
        Some("none declared")
    );
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

/// A server with everything MCP 2026-07-28 reports: revision, implementation, timings,
/// and tools with titles and annotations.
fn rich_server(tool_title: &str) -> Resource {
    let annotated = |name: &str, title: &str, annotations: McpToolAnnotations| McpTool {
        name: name.into(),
        description: format!("{name} things"),
        input_schema: json!({}),
        title: title.into(),
        annotations: Some(annotations),
        ..Default::default()
    };
    row(
        "mcp:jira",
        ResourceStatus::Ok,
        None,
        ResourceBody::McpServer(McpServerBody {
            server_name: "jira".into(),
            tools: vec![
                annotated(
                    "create_issue",
                    tool_title,
                    McpToolAnnotations {
                        destructive_hint: Some(true),
                        open_world_hint: Some(true),
                        ..Default::default()
                    },
                ),
                // Read-only wins over a destructive claim, as MCP defines the hints.
                annotated(
                    "search",
                    "",
                    McpToolAnnotations {
                        read_only_hint: Some(true),
                        destructive_hint: Some(true),
                        open_world_hint: Some(false),
                        ..Default::default()
                    },
                ),
            ],
            protocol_version: "2026-07-28".into(),
            server_info: Some(McpServerInfo {
                name: "jira-mcp".into(),
                version: "1.4.2".into(),
                ..Default::default()
            }),
            timings: Some(McpConnectTimings {
                start_ms: Some(120),
                handshake_ms: 35,
                tools_ms: 4,
            }),
            ..Default::default()
        }),
    )
}

#[test]
fn tools_show_title_and_hint_badges_and_servers_their_connection() {
    let panel = panel(&binding(
        "r1",
        Some((
            "r1",
            DiscoveryPhase::Complete,
            vec![rich_server("Create Issue")],
        )),
    ));
    let jira = &panel.mcp.servers.as_ref().unwrap()[0];
    let line = "MCP 2026-07-28 · jira-mcp 1.4.2 · start 120 ms · handshake 35 ms · tools 4 ms";
    assert_eq!(jira.connection.as_deref(), Some(line));
    let tools: Vec<(&str, Option<&str>, &[ToolHint])> = jira
        .tools
        .iter()
        .map(|t| (t.name.as_str(), t.title.as_deref(), t.hints.as_slice()))
        .collect();
    assert_eq!(
        tools,
        [
            (
                "create_issue",
                Some("Create Issue"),
                &[ToolHint::Destructive, ToolHint::OpenWorld][..]
            ),
            ("search", None, &[ToolHint::ReadOnly][..]),
        ]
    );

    let json = render_json(&panel);
    let server = &json["mcp"]["servers"][0];
    assert_eq!(server["protocol_version"], "2026-07-28");
    assert_eq!(
        server["timings"],
        json!({"start_ms": 120, "handshake_ms": 35, "tools_ms": 4})
    );
    assert_eq!(server["connection"], line);
    assert_eq!(server["tools"][0]["title"], "Create Issue");
    assert_eq!(
        server["tools"][0]["hints"],
        json!(["destructive", "open_world"])
    );

    let html = render_fragment(&panel);
    assert!(
        html.contains(&format!(r#"<span class="connection">{line}</span>"#)),
        "{html}"
    );
    assert!(
        html.contains(
            r#"<code class="tool-name">create_issue</code> <span class="tool-title wrap">Create Issue</span>"#
        ),
        "{html}"
    );
    assert!(html.contains(r#"aria-label="Hints from the server, not verified""#));
    assert!(html.contains(r#"<span class="badge badge-hint hint-destructive" role="listitem" title="destructive: a hint from the MCP server, not verified" aria-label="destructive: a hint from the MCP server, not verified">destructive</span>"#), "{html}");
    assert!(html.contains(">read-only</span>") && html.contains(">open world</span>"));
    assert!(
        !html.contains("<img"),
        "no icon is loaded from a server's URL"
    );

    let text = render_text(&panel);
    assert!(text.contains(&format!("    {line}\n")), "{text}");
    assert!(
        text.contains(
            "create_issue “Create Issue” [server hints: destructive, open world] — create_issue things"
        ),
        "{text}"
    );
    assert!(
        text.contains("search [server hints: read-only] — search things"),
        "{text}"
    );
}

#[test]
fn hostile_titles_are_escaped() {
    let hostile = r#"<img src=x onerror="alert(1)"> & 'q'"#;
    let panel = panel(&binding(
        "r1",
        Some(("r1", DiscoveryPhase::Complete, vec![rich_server(hostile)])),
    ));
    let html = render_page(&panel);
    assert!(!html.contains("<img"), "{html}");
    assert!(html.contains("&lt;img src=x onerror=&quot;alert(1)&quot;&gt; &amp; &#39;q&#39;"));
    assert!(!html.contains(" style=") && !html.contains("<style"));
    assert_eq!(html.matches("<script").count(), 1);
}

fn pending_with(servers: &[(&str, u64)]) -> Binding {
    Binding::Agent(AgentState {
        agent_run_id: RunId::new("r1"),
        snapshot: Some(SnapshotState {
            agent_run_id: RunId::new("r1"),
            phase: DiscoveryPhase::Pending,
            resources: resources(),
            // No stored time: the elapsed times are the agent's, exactly.
            received_at: None,
            pending_servers: servers
                .iter()
                .map(|(name, ms)| SnapshotPendingServer {
                    server_name: (*name).into(),
                    elapsed_ms: *ms,
                })
                .collect(),
            ..SnapshotState::default()
        }),
        ..Default::default()
    })
}

#[test]
fn the_pending_banner_names_the_servers_it_waits_for() {
    let two = panel(&pending_with(&[("jira", 12_400), ("github", 4_000)]));
    let banner = &two.discovery;
    assert_eq!(banner.state, DiscoveryState::Pending);
    assert_eq!(
        banner.waiting_text().as_deref(),
        Some("Waiting for: github (4 s), jira (12 s).")
    );
    assert_eq!(
        render_json(&two)["discovery"]["waiting_for"],
        json!([
            {"name": "github", "elapsed_ms": 4000, "elapsed": "4 s"},
            {"name": "jira", "elapsed_ms": 12400, "elapsed": "12 s"},
        ])
    );
    let html = render_fragment(&two);
    assert!(html.contains(r#"role="status" aria-live="polite"><p class="banner-text">MCP discovery is still initializing; more servers may appear. <span class="waiting">Waiting for: <span class="waiting-server"><code>github</code> (<span class="elapsed" data-elapsed-s="4">4 s</span>)</span>, <span class="waiting-server"><code>jira</code> (<span class="elapsed" data-elapsed-s="12">12 s</span>)</span>.</span></p><p class="banner-note">1 of 3 servers failed; its error is shown below.</p></div>"#), "{html}");
    assert!(render_text(&two).contains("\n  Waiting for: github (4 s), jira (12 s).\n"));

    // Bounded: ten names, the rest counted; long and hostile names shortened and escaped.
    let names: Vec<String> = (0..12).map(|i| format!("s{i:02}")).collect();
    let mut many: Vec<(&str, u64)> = names.iter().map(|n| (n.as_str(), 500)).collect();
    let long = format!("<b>{}", "x".repeat(100));
    many.insert(0, (&long, 1_000));
    let bounded = panel(&pending_with(&many));
    assert_eq!(bounded.discovery.waiting_for.len(), 10);
    assert_eq!(bounded.discovery.waiting_more, 3);
    assert_eq!(bounded.discovery.waiting_for[0].name.chars().count(), 40);
    let html = render_fragment(&bounded);
    assert!(
        !html.contains("<b>") && html.contains("<code>&lt;b&gt;xxx"),
        "{html}"
    );
    assert!(html.contains(", and 3 more.</span>"));

    // Complete: nobody is waited for.
    let done = panel(&binding(
        "r1",
        Some(("r1", DiscoveryPhase::Complete, resources())),
    ));
    assert!(done.discovery.waiting_for.is_empty());
    assert!(!render_fragment(&done).contains("Waiting for"));
}

fn at(unix_s: u64) -> std::time::SystemTime {
    std::time::UNIX_EPOCH + std::time::Duration::from_secs(unix_s)
}

/// `binding` with the snapshot stored at `received` (Unix seconds).
fn stored_at(row_run: &str, run: &str, phase: DiscoveryPhase, received: u64) -> Binding {
    let mut live = binding(row_run, Some((run, phase, resources())));
    if let Binding::Agent(agent) = &mut live {
        agent.snapshot.as_mut().unwrap().received_at = Some(at(received));
    }
    live
}

#[test]
fn the_header_names_the_run_and_dates_the_last_snapshot() {
    let run = "7f3c9a1e-5b2d-4e8f-9a6c-1d2e3f4a5b6c";
    let live = stored_at(run, run, DiscoveryPhase::Complete, 1_796_295_600);
    let context = ChatContext::new(None, &live);
    let panel = build_chat_panel_at("c1", &context, &live, at(1_796_295_612));
    let header = &panel.header;
    assert_eq!(header.agent, AgentStatus::Reported);
    assert_eq!(header.run_id.as_deref(), Some(run));
    assert_eq!(header.run_id_short.as_deref(), Some("7f3c9a1e"));
    assert_eq!(header.snapshot_run_id_short.as_deref(), Some("7f3c9a1e"));
    assert_eq!(
        header.last_snapshot_at.as_deref(),
        Some("2026-12-03T11:00:00Z")
    );
    assert_eq!(header.last_snapshot_age_s, Some(12));
    assert_eq!(
        header.text,
        "Agent run 7f3c9a1e · last snapshot 2026-12-03 11:00:00 UTC (12 s ago)"
    );
    let html = render_fragment(&panel);
    assert!(
        html.contains(
            r#"<code class="run-id" title="7f3c9a1e-5b2d-4e8f-9a6c-1d2e3f4a5b6c">7f3c9a1e</code>"#
        ),
        "{html}"
    );
    assert!(html.contains(r#"<time class="relative" datetime="2026-12-03T11:00:00Z" title="2026-12-03 11:00:00 UTC">"#), "{html}");
    assert!(
        !html.contains("12 s ago"),
        "the fragment carries no age of its own (the page counts it), so an unchanged panel renders the same"
    );
    assert!(
        render_text(&panel)
            .contains("\nAgent run 7f3c9a1e · last snapshot 2026-12-03 11:00:00 UTC (12 s ago)\n")
    );

    // Counts: two tools from three servers, one failed and one empty.
    let summary = panel.mcp.summary.as_ref().expect("servers are listed");
    assert_eq!(
        (
            summary.tools,
            summary.servers,
            summary.servers_with_tools,
            summary.servers_without_tools,
            summary.servers_failed
        ),
        (2, 3, 1, 1, 1)
    );
    assert_eq!(
        summary.text,
        "2 tools from 3 servers (1 failed, 1 with no tools)"
    );
    let servers = panel.mcp.servers.as_ref().unwrap();
    let fs = servers.iter().find(|s| s.name == "fs").unwrap();
    assert_eq!((fs.name.as_str(), fs.tool_count), ("fs", 2));

    // The plain builder knows the run but not the stored snapshot.
    let plain = build_panel("c1", &context);
    assert_eq!(plain.header.run_id_short.as_deref(), Some("7f3c9a1e"));
    assert_eq!(plain.header.last_snapshot_at, None);
    assert_eq!(
        render_json(&plain)["header"]["last_snapshot_at"],
        json!(null)
    );

    // Before the first snapshot, and with no agent at all.
    let waiting = binding(run, None);
    let first = build_chat_panel("c1", &ChatContext::new(None, &waiting), &waiting);
    assert_eq!(first.header.agent, AgentStatus::NoSnapshot);
    assert_eq!(first.header.text, "Agent run 7f3c9a1e · no snapshot yet");
    let unbound = build_chat_panel(
        "c1",
        &ChatContext::new(None, &Binding::NoAgent),
        &Binding::NoAgent,
    );
    assert_eq!(unbound.header.text, "No agent is bound to this chat.");
    assert_eq!(unbound.header.run_id, None);
}

#[test]
fn a_stale_banner_says_why_tools_are_withheld_and_what_to_do() {
    let old = "7f3c9a1e-5b2d-4e8f-9a6c-1d2e3f4a5b6c";
    let new = "2b8d4f60-0c1a-4b7e-8d3f-5e6a7b8c9d0e";
    let live = stored_at(new, old, DiscoveryPhase::Complete, 1_796_295_600);
    let panel = build_chat_panel("c1", &ChatContext::new(None, &live), &live);
    assert_eq!(panel.discovery.state, DiscoveryState::Stale);
    assert_eq!(
        panel.discovery.reason.as_deref(),
        Some(
            "The tools on record were published by an earlier agent process (run 7f3c9a1e). \
             The agent has restarted since as run 2b8d4f60, which has not published its own tools yet."
        )
    );
    assert_eq!(panel.discovery.advice.as_deref(), Some(STALE_ADVICE));
    assert_eq!(
        panel.header.snapshot_run_id_short.as_deref(),
        Some("7f3c9a1e")
    );
    let html = render_fragment(&panel);
    assert!(
        html.contains(r#"<p class="banner-reason"><strong>Why:</strong> The tools on record"#),
        "{html}"
    );
    assert!(
        html.contains(
            r#"<p class="banner-advice"><strong>What to do:</strong> Wait a few seconds"#
        ),
        "{html}"
    );
    assert!(html.contains(r#"<dt>Snapshot from run</dt><dd><code class="run-id" title="7f3c9a1e-5b2d-4e8f-9a6c-1d2e3f4a5b6c">7f3c9a1e</code>"#), "{html}");
    assert!(
        !html.contains("tool-filter"),
        "no filter over withheld tools"
    );
    let text = render_text(&panel);
    assert!(
        text.contains("Snapshot from run 7f3c9a1e (an earlier process)"),
        "{text}"
    );
    assert!(
        text.contains(
            "  Why: The tools on record were published by an earlier agent process (run 7f3c9a1e)."
        ),
        "{text}"
    );

    // The fresh run's snapshot clears it: no reason, no advice, tools listed.
    let fresh = stored_at(new, new, DiscoveryPhase::Complete, 1_796_295_700);
    let panel = build_chat_panel("c1", &ChatContext::new(None, &fresh), &fresh);
    assert_eq!(panel.discovery.state, DiscoveryState::Complete);
    assert_eq!(
        (
            panel.discovery.reason.as_ref(),
            panel.discovery.advice.as_ref()
        ),
        (None, None)
    );
    assert!(render_fragment(&panel).contains(r#"<input id="tool-filter" type="search""#));

    // A deleted agent: withheld too, with its own reason.
    let gone = build_chat_panel(
        "c1",
        &ChatContext::new(None, &Binding::MissingAgent),
        &Binding::MissingAgent,
    );
    assert_eq!(gone.discovery.state, DiscoveryState::Stale);
    assert_eq!(gone.discovery.reason.as_deref(), Some(MISSING_AGENT_REASON));
    assert_eq!(gone.header.agent, AgentStatus::Missing);
}

#[test]
fn snapshot_times_are_rfc3339_utc() {
    for (unix, expect) in [
        (0, "1970-01-01T00:00:00Z"),
        (951_782_400, "2000-02-29T00:00:00Z"),
        (1_796_295_600, "2026-12-03T11:00:00Z"),
        (4_107_542_399, "2100-02-28T23:59:59Z"),
    ] {
        let live = stored_at("r1", "r1", DiscoveryPhase::Complete, unix);
        let panel = build_chat_panel_at("c1", &ChatContext::new(None, &live), &live, at(unix));
        assert_eq!(panel.header.last_snapshot_at.as_deref(), Some(expect));
        assert_eq!(panel.header.last_snapshot_age_s, Some(0));
    }
}

#[test]
fn an_offline_agent_is_said_beside_the_phase_and_its_tools_are_marked() {
    let run = "7f3c9a1e-5b2d-4e8f-9a6c-1d2e3f4a5b6c";
    let mut live = stored_at(run, run, DiscoveryPhase::Complete, 1_796_295_600);
    let Binding::Agent(agent) = &mut live else {
        unreachable!("an agent binding");
    };
    agent.connection = Connection::Online;
    let context = ChatContext::new(None, &live);
    let online = build_chat_panel_at("c1", &context, &live, at(1_796_295_612));
    assert_eq!(online.header.connection, ConnectionStatus::Online);
    assert_eq!(online.header.offline_since, None);
    assert!(!online.header.text.contains("offline"));
    assert!(render_fragment(&online).contains(r#"<span class="badge badge-online">online</span>"#));

    if let Binding::Agent(agent) = &mut live {
        agent.connection = Connection::Offline {
            since: at(1_796_295_630),
        };
    }
    let context = ChatContext::new(None, &live);
    let panel = build_chat_panel_at("c1", &context, &live, at(1_796_295_642));
    let header = &panel.header;
    assert_eq!(header.connection, ConnectionStatus::Offline);
    assert_eq!(
        header.offline_since.as_deref(),
        Some("2026-12-03T11:00:30Z")
    );
    assert_eq!(
        header.text,
        "Agent run 7f3c9a1e · last snapshot 2026-12-03 11:00:00 UTC (42 s ago) · agent offline since 2026-12-03 11:00:30 UTC (12 s ago)"
    );
    // The phase and the banner stay what discovery said; the tone warns at least.
    assert_eq!(panel.discovery.state, DiscoveryState::Complete);
    assert!(panel.tone >= Tone::Warning, "{:?}", panel.tone);
    let json = render_json(&panel);
    assert_eq!(json["header"]["connection"], "offline");
    assert_eq!(json["header"]["offline_since"], "2026-12-03T11:00:30Z");
    assert_eq!(json["mcp_discovery"]["phase"], "complete");

    // The tools stay listed, marked as not callable.
    let servers = panel.mcp.servers.as_ref().expect("the tools stay listed");
    assert_eq!(servers.iter().map(|s| s.tool_count).sum::<usize>(), 2);
    let html = render_fragment(&panel);
    assert!(html.contains(r#"<span class="badge badge-offline">offline</span> since <time datetime="2026-12-03T11:00:30Z">2026-12-03 11:00:30 UTC</time> (<time class="relative" datetime="2026-12-03T11:00:30Z""#), "{html}");
    assert!(
        html.contains(r#"<p class="tools-offline" role="note">"#),
        "{html}"
    );
    assert_eq!(
        html.matches("not callable: agent offline").count(),
        1,
        "one server with tools: {html}"
    );
    // Long lines wrap: compare the words.
    let text = render_text(&panel)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        text.contains("agent offline since 2026-12-03 11:00:30 UTC"),
        "{text}"
    );
    assert!(
        text.contains("cannot be called until it reconnects"),
        "{text}"
    );

    // Never connected: said in the JSON, no alarm.
    if let Binding::Agent(agent) = &mut live {
        agent.connection = Connection::Never;
    }
    let context = ChatContext::new(None, &live);
    let never = build_chat_panel_at("c1", &context, &live, at(1_796_295_642));
    assert_eq!(never.header.connection, ConnectionStatus::Never);
    assert_eq!(never.tone, online.tone);
    assert_eq!(render_json(&never)["header"]["connection"], "never");
    assert!(render_fragment(&never).contains(
        r#"<dt>Agent connection</dt><dd>not connected yet (no call stream from this run)</dd>"#
    ));
    // A legacy agent (no run id) opens no stream: not something to wait for.
    let legacy = binding("", Some(("", DiscoveryPhase::Unspecified, resources())));
    let legacy = build_chat_panel("c1", &ChatContext::new(None, &legacy), &legacy);
    assert!(
        render_fragment(&legacy)
            .contains(r#"<dt>Agent connection</dt><dd>not reported (an older agent)</dd>"#)
    );
}

#[test]
fn a_server_that_needs_a_sign_in_is_its_own_state_not_a_failure() {
    let panel = panel(&binding(
        "r1",
        Some((
            "r1",
            DiscoveryPhase::Complete,
            vec![
                row("mcp:fs", ResourceStatus::Ok, None, server("fs", &["read"])),
                row(
                    "mcp:github",
                    ResourceStatus::NeedsAuthorization,
                    Some("the server at https://gh.example/mcp answered 401 Unauthorized"),
                    server("github", &[]),
                ),
            ],
        )),
    ));
    let servers = panel.mcp.servers.as_ref().unwrap();
    let github = servers.iter().find(|s| s.name == "github").unwrap();
    assert_eq!(github.state, ServerState::NeedsAuthorization);
    assert!(github.tools.is_empty());
    let json = render_json(&panel);
    assert!(
        json.to_string()
            .contains(r#""state":"needs_authorization""#),
        "{json}"
    );
    let summary = panel.mcp.summary.as_ref().unwrap();
    assert_eq!(
        (
            summary.servers_failed,
            summary.servers_needing_authorization
        ),
        (0, 1)
    );
    assert_eq!(summary.text, "1 tool from 2 servers (1 not signed in)");
    // A person's action, not an error: a warning, and the banner says what is missing.
    assert!(
        panel
            .issues
            .iter()
            .any(|i| i.source == "github" && i.severity == Tone::Warning),
        "{:?}",
        panel.issues
    );
    assert_eq!(
        panel.discovery.note.as_deref(),
        Some("1 server needs a person to sign in; it has no tools until then.")
    );
    let html = render_fragment(&panel);
    assert!(
        html.contains("badge-needs-authorization\">needs sign-in</span>"),
        "{html}"
    );
    // The page offers the sign-in for that server only, naming it for screen readers; the
    // page's root names the agent the script's request goes to.
    assert_eq!(html.matches("class=\"sign-in\"").count(), 1, "{html}");
    assert!(
        html.contains(r#"data-server="github" aria-label="Sign in to github">Sign in</button>"#),
        "{html}"
    );
    let page = render_page_with_calls(
        &panel,
        Some(PageAgent {
            id: "agent-1",
            name: "box",
        }),
        &[],
    );
    assert!(page.contains(r#"data-agent="agent-1""#), "{page}");
    assert!(!render_page(&panel).contains("data-agent"));
    let text = render_text(&panel);
    assert!(text.contains("github [needs sign-in]"), "{text}");
}

#[test]
fn a_signed_in_server_says_as_whom_and_by_what_but_only_while_it_works() {
    let mut live = binding(
        "r1",
        Some((
            "r1",
            DiscoveryPhase::Complete,
            vec![
                row("mcp:fs", ResourceStatus::Ok, None, server("fs", &["read"])),
                row(
                    "mcp:github",
                    ResourceStatus::NeedsAuthorization,
                    Some("the server answered 401 Unauthorized"),
                    server("github", &[]),
                ),
                row(
                    "mcp:docs",
                    ResourceStatus::Ok,
                    None,
                    server("docs", &["find"]),
                ),
            ],
        )),
    );
    if let Binding::Agent(agent) = &mut live {
        agent.sign_ins = vec![
            HeldSignIn {
                server: "fs".into(),
                account: Some("ada".into()),
                via: "api_token".into(),
            },
            // Its token was refused since: the server asks for a person again.
            HeldSignIn {
                server: "github".into(),
                account: None,
                via: "chat:c9".into(),
            },
            HeldSignIn {
                server: "docs".into(),
                account: None,
                via: "chat:c9".into(),
            },
        ];
    }
    let panel = build_chat_panel("c1", &ChatContext::new(None, &live), &live);
    let servers = panel.mcp.servers.as_ref().unwrap();
    let said = |name: &str| {
        servers
            .iter()
            .find(|s| s.name == name)
            .and_then(|s| s.signed_in.clone())
    };
    assert_eq!(
        said("fs").as_deref(),
        Some("signed in as ada with the API token")
    );
    assert_eq!(said("github"), None);
    assert_eq!(
        said("docs").as_deref(),
        Some("signed in from the page of chat c9")
    );
    let html = render_fragment(&panel);
    assert!(
        html.contains(r#"<span class="signed-in">signed in as ada with the API token</span>"#),
        "{html}"
    );
    assert!(render_text(&panel).contains("signed in as ada with the API token"));
    // A panel without sign-ins serializes as before (no `signed_in` key).
    let plain = panel_json_without_sign_ins();
    assert!(!plain.contains("signed_in"), "{plain}");
}

fn panel_json_without_sign_ins() -> String {
    let live = binding(
        "r1",
        Some((
            "r1",
            DiscoveryPhase::Complete,
            vec![row(
                "mcp:fs",
                ResourceStatus::Ok,
                None,
                server("fs", &["read"]),
            )],
        )),
    );
    render_json(&build_chat_panel(
        "c1",
        &ChatContext::new(None, &live),
        &live,
    ))
    .to_string()
}
