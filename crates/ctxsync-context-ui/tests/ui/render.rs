//! Snapshot-style tests of the three renderers for every discovery state. Expected output
//! lives in `tests/golden/`; run with `CTXSYNC_BLESS=1` to rewrite it after a deliberate
//! change, then review the diff.

use std::path::PathBuf;

use ctxsync_chat_projection::ViewPhase;
use ctxsync_context_ui::*;

fn golden(name: &str, actual: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("CTXSYNC_BLESS").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|_| {
        panic!(
            "missing {}; run with CTXSYNC_BLESS=1 to create it",
            path.display()
        )
    });
    assert_eq!(actual, expected, "{name} differs from its golden file");
}

fn base(state: DiscoveryState) -> Panel {
    let mut panel = Panel {
        chat_id: "chat-1".into(),
        tone: Tone::Ok,
        // What the projection would have said for a view shown with this banner.
        mcp_discovery: DiscoveryWords {
            phase: match state {
                DiscoveryState::Pending => ViewPhase::Pending,
                DiscoveryState::Complete
                | DiscoveryState::CompleteNoServers
                | DiscoveryState::Stale => ViewPhase::Complete,
                DiscoveryState::Unknown => ViewPhase::Unknown,
            },
            stale: state == DiscoveryState::Stale,
            pending_servers: Vec::new(),
        },
        discovery: Banner::new(state),
        dirty: None,
        snapshot_error: None,
        files: vec![
            FileGroup {
                directory: ".".into(),
                files: vec![FileItem {
                    name: "AGENTS.md".into(),
                    source: "AGENTS.md".into(),
                    size_bytes: 120,
                    status: "ok".into(),
                }],
            },
            FileGroup {
                directory: "docs".into(),
                files: vec![FileItem {
                    name: "CLAUDE.md".into(),
                    source: "docs/CLAUDE.md".into(),
                    size_bytes: 70000,
                    status: "oversize".into(),
                }],
            },
        ],
        skills: vec![SkillItem {
            name: "code-review".into(),
            description: "Reviews a change for bugs".into(),
            source: "skills/code-review/SKILL.md".into(),
            status: "ok".into(),
            plugin: None,
        }],
        mcp: McpSection {
            configs: vec![ConfigItem {
                path: ".mcp.json".into(),
                ok: true,
                diagnostic: None,
            }],
            servers: None,
            summary: None,
        },
        issues: vec![IssueItem {
            kind: IssueKind::File,
            source: "docs/CLAUDE.md".into(),
            severity: Tone::Warning,
            text: "file is 70000 bytes, over the 65536-byte limit".into(),
        }],
        header: PanelHeader {
            agent: AgentStatus::Reported,
            run_id: Some("7f3c9a1e-5b2d-4e8f-9a6c-1d2e3f4a5b6c".into()),
            run_id_short: Some("7f3c9a1e".into()),
            snapshot_run_id: Some("7f3c9a1e-5b2d-4e8f-9a6c-1d2e3f4a5b6c".into()),
            snapshot_run_id_short: Some("7f3c9a1e".into()),
            last_snapshot_at: Some("2026-12-03T11:00:00Z".into()),
            last_snapshot_age_s: Some(12),
            connection: ConnectionStatus::Online,
            offline_since: None,
            text: "Agent run 7f3c9a1e · last snapshot 2026-12-03 11:00:00 UTC (12 s ago)".into(),
        },
    };
    panel.tone = panel.compute_tone();
    panel
}

fn mixed_servers() -> Vec<ServerItem> {
    vec![
        ServerItem {
            name: "fs".into(),
            plugin: None,
            state: ServerState::Tools,
            tools: vec![
                ToolItem {
                    name: "read".into(),
                    title: Some("Read File".into()),
                    description: "Read a file".into(),
                    hints: vec![ToolHint::ReadOnly],
                },
                ToolItem {
                    name: "write".into(),
                    title: None,
                    description: "Write a file".into(),
                    hints: vec![ToolHint::Destructive, ToolHint::OpenWorld],
                },
            ],
            tool_count: 2,
            total_ms: Some(159),
            signed_in: None,
            diagnostic: None,
            protocol_version: Some("2026-07-28".into()),
            implementation: Some("fs-mcp 0.9.1".into()),
            timings: Some(Timings {
                start_ms: Some(120),
                handshake_ms: 35,
                tools_ms: 4,
            }),
            connection: ServerItem::connection_line(
                Some("2026-07-28"),
                Some("fs-mcp 0.9.1"),
                Some(Timings {
                    start_ms: Some(120),
                    handshake_ms: 35,
                    tools_ms: 4,
                }),
            ),
        },
        ServerItem {
            name: "empty".into(),
            plugin: None,
            state: ServerState::NoTools,
            tools: vec![],
            tool_count: 0,
            total_ms: None,
            signed_in: None,
            diagnostic: None,
            protocol_version: Some("2025-11-25".into()),
            implementation: None,
            timings: None,
            connection: ServerItem::connection_line(Some("2025-11-25"), None, None),
        },
        ServerItem {
            name: "kit/db".into(),
            plugin: Some("kit".into()),
            state: ServerState::Tools,
            tools: vec![ToolItem {
                name: "query".into(),
                title: None,
                description: "Run a query".into(),
                hints: vec![],
            }],
            tool_count: 1,
            total_ms: None,
            signed_in: None,
            diagnostic: None,
            protocol_version: None,
            implementation: None,
            timings: None,
            connection: None,
        },
        ServerItem {
            name: "broken".into(),
            plugin: None,
            state: ServerState::Failed,
            tools: vec![],
            tool_count: 0,
            total_ms: None,
            signed_in: None,
            diagnostic: Some(
                "command not found: mcp-broken (check that it is installed and on PATH)".into(),
            ),
            protocol_version: None,
            implementation: None,
            timings: None,
            connection: None,
        },
    ]
}

fn states() -> Vec<(&'static str, Panel)> {
    let mut pending = base(DiscoveryState::Pending);
    pending.discovery = Banner::new(DiscoveryState::Pending).waiting([
        WaitingServer::new("github", 4_000),
        WaitingServer::new("jira", 12_400),
    ]);

    let mut complete = base(DiscoveryState::Complete);
    complete.skills.push(SkillItem {
        name: "deploy".into(),
        description: "Ships a release".into(),
        source: "kit/skills/deploy/SKILL.md".into(),
        status: "ok".into(),
        plugin: Some("kit".into()),
    });
    complete.mcp.servers = Some(mixed_servers());
    complete.mcp.summary = Some(McpSummary::of(&mixed_servers()));
    complete.mcp.configs.push(ConfigItem {
        path: "tools/.mcp.json".into(),
        ok: false,
        diagnostic: Some("invalid JSON at line 3 column 1".into()),
    });
    complete.issues.push(IssueItem {
        kind: IssueKind::McpConfig,
        source: "tools/.mcp.json".into(),
        severity: Tone::Error,
        text: "invalid JSON at line 3 column 1".into(),
    });
    complete.issues.push(IssueItem {
        kind: IssueKind::McpServer,
        source: "broken".into(),
        severity: Tone::Error,
        text: "command not found: mcp-broken (check that it is installed and on PATH)".into(),
    });
    complete.dirty = Some(DirtyNotice {
        text: "The workspace context changed since this chat pinned it.".into(),
        refresh: Action {
            label: "Refresh context".into(),
            method: "PUT".into(),
            href: "/api/chats/chat-1/context".into(),
        },
    });
    complete.tone = complete.compute_tone();

    let mut none = base(DiscoveryState::CompleteNoServers);
    none.mcp.configs.clear();
    none.mcp.servers = Some(vec![]);
    none.mcp.summary = Some(McpSummary::of(&[]));
    none.tone = none.compute_tone();

    // A new process (run 2b8d…) runs; the snapshot on record is the old one's.
    let mut stale = base(DiscoveryState::Stale);
    stale.header.run_id = Some("2b8d4f60-0c1a-4b7e-8d3f-5e6a7b8c9d0e".into());
    stale.header.run_id_short = Some("2b8d4f60".into());
    stale.header.text =
        "Agent run 2b8d4f60 · last snapshot 2026-12-03 11:00:00 UTC (12 s ago)".into();

    let mut unknown = base(DiscoveryState::Unknown);
    unknown.snapshot_error = Some("500 resources reached; 12 files excluded".into());
    unknown.tone = unknown.compute_tone();

    vec![
        ("pending", pending),
        ("complete", complete),
        ("none", none),
        ("stale", stale),
        ("unknown", unknown),
    ]
}

#[test]
fn every_state_renders_as_json_html_and_text() {
    for (name, panel) in states() {
        golden(
            &format!("{name}.json"),
            &(serde_json::to_string_pretty(&render_json(&panel)).unwrap() + "\n"),
        );
        golden(&format!("{name}.html"), &render_fragment(&panel));
        golden(&format!("{name}.txt"), &render_text(&panel));
    }
}

#[test]
fn tone_is_the_worst_of_banner_issues_and_errors() {
    let by_name: Vec<(&str, Tone)> = states().iter().map(|(n, p)| (*n, p.tone)).collect();
    assert_eq!(
        by_name,
        [
            ("pending", Tone::Warning),
            ("complete", Tone::Error),
            ("none", Tone::Warning), // the oversize file is a warning
            ("stale", Tone::Warning),
            ("unknown", Tone::Error), // the snapshot error
        ]
    );
}

#[test]
fn pending_and_stale_never_show_an_empty_server_list() {
    for (name, panel) in states() {
        let html = render_fragment(&panel);
        let text = render_text(&panel);
        match panel.discovery.state {
            DiscoveryState::Pending | DiscoveryState::Stale => {
                assert!(html.contains(r#"class="servers-unavailable""#), "{name}");
                assert!(!html.contains("No MCP servers are declared"), "{name}");
                assert!(text.contains("MCP servers: not available yet"), "{name}");
            }
            DiscoveryState::CompleteNoServers => {
                assert!(html.contains("No MCP servers are declared"), "{name}");
                assert!(
                    html.contains(r#"id="section-mcp""#),
                    "the MCP section stays: {name}"
                );
            }
            _ => {}
        }
        assert!(
            !html.to_lowercase().contains("healthy") && !text.to_lowercase().contains("connected"),
            "{name}"
        );
    }
}

#[test]
fn hostile_text_is_escaped_everywhere() {
    let mut panel = states().remove(1).1;
    let hostile = r#"<script>alert("x")</script> & 'quotes'"#;
    panel.chat_id = hostile.into();
    let servers = panel.mcp.servers.as_mut().unwrap();
    servers[0].name = hostile.into();
    servers[0].tools[0].name = hostile.into();
    servers[0].tools[0].description = hostile.into();
    servers[0].tools[0].title = Some(hostile.into());
    servers[0].connection = Some(hostile.into());
    panel.issues[0].text = hostile.into();
    panel.skills[0].description = hostile.into();
    panel.discovery = panel
        .discovery
        .clone()
        .waiting([WaitingServer::new(hostile, 1_000)]);
    let page = render_page(&panel);
    assert!(
        !page.contains("<script>alert"),
        "raw script tag leaked into the page"
    );
    assert!(
        page.contains("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;quotes&#39;")
    );
    // The page's own script, a same-origin file, is the only one; nothing inline.
    assert_eq!(page.matches("<script").count(), 1);
    assert!(page.contains(&format!(
        r#"<script src="{PAGE_SCRIPT_PATH}" defer></script>"#
    )));
    assert!(!page.contains("<style") && !page.contains(" style="));
}

#[test]
fn long_errors_wrap_instead_of_scrolling() {
    let mut panel = states().remove(1).1;
    let long = "x".repeat(500);
    panel.issues[0].text = format!("word {long} end");
    let html = render_fragment(&panel);
    assert!(html.contains(r#"<span class="issue-text wrap">"#));
    assert!(PAGE_STYLE.contains(".wrap { white-space: pre-wrap; overflow-wrap: anywhere;"));
    assert!(render_page(&panel).contains(&format!(
        r#"<link rel="stylesheet" href="{PAGE_STYLE_PATH}">"#
    )));
    let text = render_text(&panel);
    assert!(
        text.lines().all(|l| l.chars().count() <= 100),
        "a terminal line is over 100 columns"
    );
    assert!(
        text.contains(&"x".repeat(98)),
        "the long word is broken, not dropped"
    );
}

#[test]
fn the_page_has_one_h1_landmarks_and_the_agent_name_escaped() {
    let (_, panel) = states().remove(1);
    let page = render_page_for(&panel, Some("<b>build-box</b>"));
    assert_eq!(page.matches("<h1>").count(), 1);
    assert!(page.contains(r#"<header class="page-header">"#) && page.contains("<main>"));
    assert!(
        page.contains(r#"Agent <strong class="agent-name">&lt;b&gt;build-box&lt;/b&gt;</strong>"#)
    );
    assert!(page.contains("<title>&lt;b&gt;build-box&lt;/b&gt; · chat context · ctxsync</title>"));
    // The filter is labelled, a search field, and announces its count politely.
    assert!(page.contains(
        r#"<label for="tool-filter">Filter tools</label> <input id="tool-filter" type="search""#
    ));
    assert!(
        page.contains(r#"<span id="tool-filter-count" class="filter-count" aria-live="polite">"#)
    );
    // The page's script counts the age on from the absolute time, and keeps the filter
    // across swaps.
    assert!(PAGE_SCRIPT.contains("time.relative[datetime]"));
    assert!(PAGE_SCRIPT.contains("input.value = filterText"));
    assert!(render_page(&panel).contains("Chat <code>chat-1</code>"));
}
