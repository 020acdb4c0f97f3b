//! The adapter with a real MCP engine: fixture servers as child processes, the engine's
//! reports read through its `subscribe()` channel, published by a real publisher to a recording server.

use crate::support;

use std::time::Duration;

use ctxsync_agent_diagnostics::{Engine, EngineConfig, RetryPolicy};
use ctxsync_agent_publication::{Publisher, ReportSource, SourceClosed};
use ctxsync_protocol::v1;
use ctxsync_protocol::v1::context_resource::{Body, Status};
use ctxsync_protocol::v1::push_context_state_request::mcp_discovery::Phase;
use support::{FakeServer, Recorder, TOKEN, WAIT, Workspace, config};

/// A workspace whose `.mcp.json` declares: two tools, zero tools, a missing command and
/// an invalid entry (both `command` and `url`).
fn workspace() -> Workspace {
    let fixture = ctxsync_mcp_fixture::binary_path().expect("the fixture binary");
    let ws = Workspace::new();
    let config = serde_json::json!({"mcpServers": {
        "two": {"command": fixture, "args": ["--tools", "2"]},
        "none": {"command": fixture, "args": ["--tools", "0"], "env": {"FIXTURE_SECRET": "hush-hush-value"}},
        "missing": {"command": "ctxsync-no-such-command-for-tests"},
        "bad": {"command": "x", "url": "http://127.0.0.1:9/mcp"},
    }});
    ws.write(".mcp.json", config.to_string());
    ws
}

fn engine_config(ws: &Workspace) -> EngineConfig {
    let mut config = EngineConfig::new(ws.path());
    config.connect_timeout = Duration::from_secs(10);
    config.retry = RetryPolicy {
        enabled: false,
        ..RetryPolicy::default()
    };
    config.injected_secrets = vec![TOKEN.to_owned()];
    config
}

fn phase(push: &v1::PushContextStateRequest) -> Option<Phase> {
    push.mcp_discovery
        .as_ref()
        .map(|discovery| Phase::try_from(discovery.phase).unwrap())
}

fn row<'a>(push: &'a v1::PushContextStateRequest, source: &str) -> &'a v1::ContextResource {
    push.resources
        .iter()
        .find(|r| r.source == source)
        .unwrap_or_else(|| panic!("no row {source} in {push:#?}"))
}

fn tool_count(row: &v1::ContextResource) -> usize {
    match &row.body {
        Some(Body::McpServer(server)) => server.tools.len(),
        other => panic!("{} is not a server row: {other:?}", row.source),
    }
}

#[tokio::test]
async fn engine_reports_are_published_until_complete() {
    let server = FakeServer::start(Recorder::new()).await;
    let ws = workspace();
    let engine = Engine::start(engine_config(&ws));
    let publisher = Publisher::new(
        config(&server.url(), &ws.path()),
        Some(Box::new(engine.subscribe())),
    )
    .unwrap();
    let running = tokio::spawn(publisher.run());

    let complete = server
        .recorder
        .wait_for_push("a complete push", |p| phase(p) == Some(Phase::Complete))
        .await;
    // Only the newest snapshot is pushed, so which pending versions arrive depends on
    // timing; the complete one carries the run id registered by Startup.
    let startup = server.recorder.calls()[0]
        .startup()
        .cloned()
        .expect("Startup first");
    assert_eq!(
        Some(complete.agent_run_id.as_str()),
        startup.agent_run_id.as_deref()
    );

    let two = row(&complete, "mcp:two");
    assert_eq!((two.status(), tool_count(two)), (Status::Ok, 2));
    let none = row(&complete, "mcp:none");
    assert_eq!((none.status(), tool_count(none)), (Status::Ok, 0));
    let missing = row(&complete, "mcp:missing");
    assert_eq!(missing.status(), Status::Unreadable);
    let error = &missing.error;
    assert!(
        error.contains("command not found") && error.contains("ctxsync-no-such-command-for-tests"),
        "{error}"
    );
    let config_row = row(&complete, ".mcp.json");
    assert_eq!(config_row.status(), Status::Invalid);
    assert!(config_row.error.contains("bad"), "{config_row:#?}");
    assert!(
        !format!("{complete:?}").contains("hush-hush-value"),
        "an entry's env value must never be sent"
    );

    running.abort();
    engine.close().await;
}

#[tokio::test]
async fn the_source_follows_the_engine_and_closes_with_it() {
    let ws = workspace();
    let engine = Engine::start(engine_config(&ws));
    // The engine's own subscription, read as the publisher reads it.
    let mut source: Box<dyn ReportSource> = Box::new(engine.subscribe());
    let complete = tokio::time::timeout(WAIT, async {
        loop {
            let report = source.sample();
            if report.phase == ctxsync_mcp_model::ReportPhase::Complete {
                return report;
            }
            source.changed().await.expect("the engine is running");
        }
    })
    .await
    .expect("discovery completes");
    let names: Vec<&str> = complete.servers.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["missing", "none", "two"]);
    assert_eq!(complete.config_outcomes.len(), 1);

    engine.close().await;
    // Closing may publish a last report; after it, the source ends.
    let closed = tokio::time::timeout(WAIT, async {
        loop {
            if let Err(closed) = source.changed().await {
                return closed;
            }
            source.sample();
        }
    })
    .await;
    assert_eq!(closed.expect("closing ends the source"), SourceClosed);
}

fn always_load(row: &v1::ContextResource) -> bool {
    match &row.body {
        Some(Body::McpServer(server)) => server.always_load,
        other => panic!("{} is not a server row: {other:?}", row.source),
    }
}

#[tokio::test]
async fn always_load_in_mcp_json_is_published_on_the_server_body() {
    let fixture = ctxsync_mcp_fixture::binary_path().expect("the fixture binary");
    let ws = Workspace::new();
    let servers = |plain: serde_json::Value| {
        serde_json::json!({"mcpServers": {
            "loaded": {"command": fixture, "args": ["--tools", "1"], "alwaysLoad": true},
            "plain": plain,
            "off": {"command": fixture, "args": ["--tools", "1"], "alwaysLoad": false},
        }})
        .to_string()
    };
    let plain = serde_json::json!({"command": fixture, "args": ["--tools", "1"]});
    ws.write(".mcp.json", servers(plain.clone()));
    let server = FakeServer::start(Recorder::new()).await;
    let engine = Engine::start(engine_config(&ws));
    let publisher = Publisher::new(
        config(&server.url(), &ws.path()),
        Some(Box::new(engine.subscribe())),
    )
    .unwrap();
    let running = tokio::spawn(publisher.run());

    let complete = server
        .recorder
        .wait_for_push("a complete push", |p| phase(p) == Some(Phase::Complete))
        .await;
    assert_eq!(row(&complete, ".mcp.json").status(), Status::Ok);
    for (source, expect) in [
        ("mcp:loaded", true),
        ("mcp:plain", false),
        ("mcp:off", false),
    ] {
        let server_row = row(&complete, source);
        assert_eq!(server_row.status(), Status::Ok, "{server_row:#?}");
        assert_eq!(tool_count(server_row), 1, "{source}");
        assert_eq!(always_load(server_row), expect, "{source}");
    }

    // Asking for it later reaches the server too, with the same connection's tools.
    let mut asked = plain;
    asked["alwaysLoad"] = serde_json::json!(true);
    ws.write(".mcp.json", servers(asked));
    engine.reload().await.expect("reload");
    let later = server
        .recorder
        .wait_for_push("plain always loaded", |p| {
            p.resources
                .iter()
                .any(|r| r.source == "mcp:plain" && r.body.is_some() && always_load(r))
        })
        .await;
    assert!(always_load(row(&later, "mcp:loaded")));
    assert!(!always_load(row(&later, "mcp:off")));

    running.abort();
    engine.close().await;
}
