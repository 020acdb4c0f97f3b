//! Lifecycle negotiation: `server/discover` (2026-07-28) where the server has it, a quick
//! fallback to `initialize` where it does not, over stdio and streamable HTTP; and what
//! each server said about itself.

use crate::support;

use std::time::Duration;

use ctxsync_agent_diagnostics::{Engine, EngineConfig, McpLifecycle};
use ctxsync_mcp_fixture::{FixtureConfig, FixtureLifecycle, serve_http};
use ctxsync_mcp_model::{Report, ServerDetails};
use serde_json::{Value, json};
use support::*;

const MODERN: &str = "2026-07-28";
const LEGACY: &str = "2025-11-25";

/// A probe bound far above what an answering server needs, so that a modern server's
/// answer is never mistaken for silence on a loaded machine.
const PATIENT_PROBE: Duration = Duration::from_secs(8);

fn fixture(lifecycle: FixtureLifecycle) -> FixtureConfig {
    FixtureConfig::new()
        .tools(2)
        .nonce("n-42")
        .lifecycle(lifecycle)
}

async fn discover(ws: &Workspace, servers: Value, tune: impl FnOnce(&mut EngineConfig)) -> Report {
    ws.write_servers(servers);
    let mut config = ws.engine_config();
    config.discover_probe_timeout = PATIENT_PROBE;
    tune(&mut config);
    let engine = Engine::start(config);
    let report = complete(&engine).await;
    engine.close().await;
    (*report).clone()
}

fn details<'a>(report: &'a Report, name: &str) -> &'a ServerDetails {
    let server = server(report, name);
    assert!(server.connected, "{server:#?}");
    assert_eq!(tool_names(server), ["tool_0", "tool_1"]);
    server
        .details
        .as_ref()
        .expect("a connected server has details")
}

#[tokio::test]
async fn stdio_negotiates_the_current_revision_or_falls_back() {
    let ws = Workspace::new();
    let report = discover(
        &ws,
        json!({
            "modern": fixture_entry(&fixture(FixtureLifecycle::Modern)),
            "legacy": fixture_entry(&fixture(FixtureLifecycle::Legacy)),
        }),
        |_| {},
    )
    .await;
    let modern = details(&report, "modern");
    assert_eq!(modern.protocol_version, MODERN);
    assert_eq!(modern.name, "ctxsync-mcp-fixture");
    assert!(!modern.version.is_empty());
    assert_eq!(modern.description.as_deref(), Some("nonce n-42"));
    let instructions = modern.instructions.as_deref().unwrap_or_default();
    assert!(
        instructions.starts_with("nonce=n-42 pid="),
        "{instructions}"
    );
    assert!(modern.timings.start_ms.is_some(), "{modern:#?}");

    let legacy = details(&report, "legacy");
    assert_eq!(legacy.protocol_version, LEGACY);
    assert_eq!(legacy.name, "ctxsync-mcp-fixture");
    assert!(legacy.instructions.is_some());
}

#[tokio::test]
async fn http_negotiates_the_current_revision_or_falls_back() {
    let modern = serve_http(fixture(FixtureLifecycle::Modern).http())
        .await
        .expect("serve");
    let legacy = serve_http(fixture(FixtureLifecycle::Legacy).http())
        .await
        .expect("serve");
    let ws = Workspace::new();
    let report = discover(
        &ws,
        json!({
            "modern": {"type": "http", "url": modern.url()},
            "legacy": {"type": "http", "url": legacy.url()},
        }),
        |_| {},
    )
    .await;
    let details_modern = details(&report, "modern");
    assert_eq!(details_modern.protocol_version, MODERN);
    // An HTTP connect happens inside the handshake.
    assert_eq!(details_modern.timings.start_ms, None);
    assert_eq!(details(&report, "legacy").protocol_version, LEGACY);
    modern.shutdown().await;
    legacy.shutdown().await;
}

#[tokio::test]
async fn a_server_that_ignores_discover_falls_back_after_the_probe_timeout() {
    let ws = Workspace::new();
    let probe = Duration::from_millis(300);
    let report = discover(
        &ws,
        json!({"silent": fixture_entry(&fixture(FixtureLifecycle::Silent))}),
        |config| config.discover_probe_timeout = probe,
    )
    .await;
    let silent = details(&report, "silent");
    assert_eq!(silent.protocol_version, LEGACY);
    let handshake = Duration::from_millis(silent.timings.handshake_ms);
    assert!(handshake >= probe, "the probe waited: {silent:#?}");
    // Far below the 10 s connect timeout of these tests, which rmcp's own 10 s probe
    // would have used up.
    assert!(handshake < Duration::from_secs(5), "{silent:#?}");
}

/// A server on the 2026-07-28 revision only (it refuses `initialize`, as servers on the
/// Python SDK 2.x do) that answers `server/discover` only after the probe timeout.
fn slow_modern_only() -> FixtureConfig {
    fixture(FixtureLifecycle::Modern)
        .modern_only()
        .init_delay(Duration::from_millis(600))
}

/// Short enough that [`slow_modern_only`] misses it on any machine.
const HASTY_PROBE: Duration = Duration::from_millis(100);

#[tokio::test]
async fn a_modern_server_too_slow_for_the_probe_is_connected_with_discover() {
    let ws = Workspace::new();
    let report = discover(
        &ws,
        json!({"slow": fixture_entry(&slow_modern_only())}),
        |config| config.discover_probe_timeout = HASTY_PROBE,
    )
    .await;
    let slow = details(&report, "slow");
    assert_eq!(slow.protocol_version, MODERN, "{slow:#?}");
    assert_eq!(slow.description.as_deref(), Some("nonce n-42"));
    assert!(slow.timings.start_ms.is_some(), "{slow:#?}");
}

#[tokio::test]
async fn a_modern_server_too_slow_for_the_probe_is_connected_with_discover_over_http() {
    let slow = serve_http(slow_modern_only().http()).await.expect("serve");
    let ws = Workspace::new();
    let report = discover(
        &ws,
        json!({"slow": {"type": "http", "url": slow.url()}}),
        |config| config.discover_probe_timeout = HASTY_PROBE,
    )
    .await;
    assert_eq!(details(&report, "slow").protocol_version, MODERN);
    slow.shutdown().await;
}

#[tokio::test]
async fn a_legacy_server_that_refuses_initialize_after_ignoring_the_probe_is_not_retried() {
    let ws = Workspace::new();
    let refusing = fixture(FixtureLifecycle::Silent).fail_initialize("no thanks");
    let report = discover(
        &ws,
        json!({"refusing": fixture_entry(&refusing)}),
        |config| config.discover_probe_timeout = HASTY_PROBE,
    )
    .await;
    let refusing = server(&report, "refusing");
    assert!(!refusing.connected, "{refusing:#?}");
    // The initialize refusal is the diagnostic, not a discover attempt that timed out.
    let error = refusing.error.as_deref().unwrap_or_default();
    assert!(error.contains("no thanks"), "{error}");
    assert!(!error.contains("no response within"), "{error}");
}

#[tokio::test]
async fn the_lifecycle_can_be_forced_either_way() {
    let ws = Workspace::new();
    let report = discover(
        &ws,
        json!({"modern": fixture_entry(&fixture(FixtureLifecycle::Modern))}),
        |config| config.lifecycle = McpLifecycle::Initialize,
    )
    .await;
    assert_eq!(details(&report, "modern").protocol_version, LEGACY);

    let report = discover(
        &ws,
        json!({
            "modern": fixture_entry(&fixture(FixtureLifecycle::Modern)),
            "legacy": fixture_entry(&fixture(FixtureLifecycle::Legacy)),
        }),
        |config| config.lifecycle = McpLifecycle::Discover,
    )
    .await;
    assert_eq!(details(&report, "modern").protocol_version, MODERN);
    let legacy = server(&report, "legacy");
    assert!(!legacy.connected, "{legacy:#?}");
    let error = legacy.error.as_deref().unwrap_or_default();
    assert!(error.contains("initialize failed"), "{error}");
}

#[tokio::test]
async fn tool_changes_arrive_through_listen_on_the_current_revision() {
    let ws = Workspace::new();
    let config =
        fixture(FixtureLifecycle::Modern).change_tools_after(Duration::from_millis(300), 3);
    ws.write_servers(json!({"s": fixture_entry(&config)}));
    let mut engine_config = ws.engine_config();
    engine_config.discover_probe_timeout = PATIENT_PROBE;
    let engine = Engine::start(engine_config);
    let mut rx = engine.subscribe();
    let report = wait_for(&mut rx, "changed tools", |r| {
        r.server("s").is_some_and(|s| s.tools.len() == 3)
    })
    .await;
    let s = server(&report, "s");
    assert_eq!(tool_names(s), ["changed_0", "changed_1", "changed_2"]);
    assert_eq!(
        s.details.as_ref().map(|d| d.protocol_version.as_str()),
        Some(MODERN)
    );
    engine.close().await;
}

#[tokio::test]
async fn instructions_are_bounded_and_hold_none_of_the_servers_secrets() {
    let ws = Workspace::new();
    let secret = "s3cr3t-instructions-value";
    let long = format!("call {secret} first. {}", "é".repeat(10_000));
    let mut entry = fixture_entry(&fixture(FixtureLifecycle::Modern).instructions(long));
    entry["env"] = json!({"SERVICE_TOKEN": secret});
    let report = discover(&ws, json!({"s": entry}), |_| {}).await;
    let instructions = details(&report, "s")
        .instructions
        .clone()
        .unwrap_or_default();
    assert!(
        instructions.len() <= ctxsync_agent_diagnostics::MAX_INSTRUCTIONS_BYTES,
        "{}",
        instructions.len()
    );
    assert!(instructions.ends_with("... [truncated]"), "{instructions}");
    assert!(
        instructions.starts_with("call [redacted] first."),
        "{instructions}"
    );
    assert!(!instructions.contains(secret));
}

#[tokio::test]
async fn full_tool_definitions_are_kept_on_both_revisions() {
    let ws = Workspace::new();
    let rich = |lifecycle| fixture(lifecycle).rich_tools();
    let report = discover(
        &ws,
        json!({
            "modern": fixture_entry(&rich(FixtureLifecycle::Modern)),
            "legacy": fixture_entry(&rich(FixtureLifecycle::Legacy)),
        }),
        |_| {},
    )
    .await;
    for name in ["modern", "legacy"] {
        let tool = &server(&report, name).tools[0];
        assert_eq!(tool.name, "tool_0");
        assert_eq!(tool.title, "Title of tool_0", "{name}");
        let hints = tool.annotations.as_ref().expect("annotations");
        assert_eq!(hints.title, "Hint title of tool_0");
        assert_eq!(
            (
                hints.read_only_hint,
                hints.destructive_hint,
                hints.open_world_hint
            ),
            (Some(true), Some(false), Some(false))
        );
        assert_eq!(hints.idempotent_hint, None);
        assert_eq!(
            tool.output_schema,
            Some(json!({"type": "object", "properties": {"result": {"type": "string"}}}))
        );
        assert_eq!(tool.icons.len(), 1);
        assert_eq!(tool.icons[0].mime_type, "image/png");
        assert_eq!(tool.icons[0].sizes, ["16x16"]);
        assert_eq!(
            tool.meta,
            Some(json!({"ui": {"resourceUri": "ui://fixture/tool_0"}}))
        );
    }
}

#[tokio::test]
async fn an_expired_ttl_lists_again_but_never_sooner_than_the_floor() {
    let ws = Workspace::new();
    // Fresh for 1 ms only, and the change is never announced: only a re-list finds it.
    let config = fixture(FixtureLifecycle::Legacy)
        .tools_ttl(Duration::from_millis(1))
        .change_tools_after(Duration::from_millis(200), 3)
        .quiet_change();
    ws.write_servers(json!({"s": fixture_entry(&config)}));
    // Measured from before the first listing, so a slow test machine can only lengthen it:
    // a re-list sooner than the floor would still show as shorter than the floor.
    let started = std::time::Instant::now();
    let engine = Engine::start(ws.engine_config());
    let first = complete(&engine).await;
    assert_eq!(tool_names(server(&first, "s")), ["tool_0", "tool_1"]);
    let mut rx = engine.subscribe();
    let report = wait_for(&mut rx, "the re-listed tools", |r| {
        r.server("s").is_some_and(|s| s.tools.len() == 3)
    })
    .await;
    assert_eq!(
        tool_names(server(&report, "s")),
        ["changed_0", "changed_1", "changed_2"]
    );
    // A 1 ms ttl is not a licence to poll: the re-list waited for the floor.
    let waited = started.elapsed();
    assert!(
        waited >= ctxsync_agent_diagnostics::MIN_TOOLS_TTL,
        "re-listed after {waited:?}"
    );
    engine.close().await;
}

#[tokio::test]
async fn servers_still_connecting_are_named_while_pending() {
    let ws = Workspace::new();
    // Far slower than its sibling even on a loaded machine, so the sibling is done first.
    let slow = fixture(FixtureLifecycle::Legacy).init_delay(Duration::from_secs(4));
    ws.write_servers(json!({
        "quick": fixture_entry(&fixture(FixtureLifecycle::Legacy)),
        "slow": fixture_entry(&slow),
    }));
    let engine = Engine::start(ws.engine_config());
    let mut rx = engine.subscribe();
    let pending = wait_for(&mut rx, "quick done, slow pending", |r| {
        r.server("quick").is_some() && r.phase == ctxsync_mcp_model::ReportPhase::Pending
    })
    .await;
    let names: Vec<&str> = pending.pending.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["slow"], "{pending:#?}");
    assert!(pending.pending[0].since <= std::time::SystemTime::now());
    let done = complete(&engine).await;
    assert!(done.pending.is_empty(), "{done:#?}");
    engine.close().await;
}

/// A legacy server whose HTTP front answers the `server/discover` probe with a bare 404 or
/// 405 (plain text, no JSON-RPC) is connected with `initialize`, as one answering a
/// JSON-RPC error is.
#[tokio::test]
async fn a_bare_http_4xx_to_the_probe_falls_back_to_initialize() {
    let mut servers = serde_json::Map::new();
    let mut fixtures = Vec::new();
    for status in [404, 405] {
        let refusing = fixture(FixtureLifecycle::Legacy)
            .http()
            .discover_http_status(status);
        let served = serve_http(refusing).await.expect("serve");
        servers.insert(
            format!("http-{status}"),
            json!({"type": "http", "url": served.url()}),
        );
        fixtures.push(served);
    }
    let ws = Workspace::new();
    let report = discover(&ws, Value::Object(servers), |_| {}).await;
    for status in [404, 405] {
        let details = details(&report, &format!("http-{status}"));
        assert_eq!(details.protocol_version, LEGACY, "{details:#?}");
    }
    for served in fixtures {
        served.shutdown().await;
    }
}

/// Far beyond what closing a connection needs, and below both what a stuck
/// `subscriptions/listen` would cost (its 5 s bound) and the 2 s after which closing
/// aborts a connection task.
const PROMPT_CLOSE: Duration = Duration::from_secs(1);

/// Removing a server and closing the engine are prompt even while a connection is still
/// opening its `subscriptions/listen` stream with a server that never acknowledges it.
#[tokio::test]
async fn closing_is_prompt_while_listen_is_unacknowledged() {
    let ws = Workspace::new();
    let deaf = fixture_entry(&fixture(FixtureLifecycle::Modern).ignore_listen());
    ws.write_servers(json!({"removed": deaf.clone(), "kept": deaf}));
    let mut config = ws.engine_config();
    config.discover_probe_timeout = PATIENT_PROBE;
    let engine = Engine::start(config);
    let report = complete(&engine).await;
    for name in ["removed", "kept"] {
        assert!(server(&report, name).connected, "{report:#?}");
    }

    ws.write_servers(
        json!({"kept": fixture_entry(&fixture(FixtureLifecycle::Modern).ignore_listen())}),
    );
    let started = std::time::Instant::now();
    let report = engine.reload().await.expect("reload");
    let removal = started.elapsed();
    assert!(report.server("removed").is_none(), "{report:#?}");
    assert!(removal < PROMPT_CLOSE, "the removal took {removal:?}");

    let started = std::time::Instant::now();
    engine.close().await;
    let close = started.elapsed();
    assert!(close < PROMPT_CLOSE, "closing took {close:?}");
}

/// How many times the fixture behind `log` was started (its `--start-log` lines).
fn starts(log: &std::path::Path) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .count()
}

/// A 2026-07-28-only server that takes far longer to start than the probe timeout (it
/// reads nothing meanwhile) is connected with `server/discover` in one start: the probe's
/// clock runs from when the server reads it, so no `initialize` is sent to it.
#[tokio::test]
async fn a_modern_server_slow_to_start_is_started_once() {
    let ws = Workspace::new();
    let log = ws.file("starts.log");
    let slow = fixture(FixtureLifecycle::Modern)
        .modern_only()
        .start_delay(Duration::from_secs(5))
        .start_log(&log);
    ws.write_servers(json!({"slow": fixture_entry(&slow)}));
    let mut config = ws.engine_config();
    config.discover_probe_timeout = ctxsync_agent_diagnostics::DEFAULT_DISCOVER_PROBE_TIMEOUT;
    // Room for the 5 s start on a loaded machine, not for a second one after a fallback.
    config.connect_timeout = Duration::from_secs(9);
    let started = std::time::Instant::now();
    let engine = Engine::start(config);
    let report = complete(&engine).await;
    let connect = started.elapsed();
    engine.close().await;
    let slow = details(&report, "slow");
    assert_eq!(slow.protocol_version, MODERN, "{slow:#?}");
    assert_eq!(starts(&log), 1, "started more than once");
    eprintln!("a server that takes 5 s to start connected in {connect:?}");
}

/// A server that answers `server/discover` (a method it does not know) with an empty
/// result is connected through `initialize` on the same connection, over stdio and HTTP.
#[tokio::test]
async fn a_lenient_server_is_connected_through_initialize() {
    let lenient = serve_http(fixture(FixtureLifecycle::Lenient).http())
        .await
        .expect("serve");
    let ws = Workspace::new();
    let log = ws.file("starts.log");
    let stdio = fixture(FixtureLifecycle::Lenient).start_log(&log);
    let report = discover(
        &ws,
        json!({
            "stdio": fixture_entry(&stdio),
            "http": {"type": "http", "url": lenient.url()},
        }),
        |_| {},
    )
    .await;
    for name in ["stdio", "http"] {
        let details = details(&report, name);
        assert_eq!(details.protocol_version, LEGACY, "{name}: {details:#?}");
        assert_eq!(details.description.as_deref(), Some("nonce n-42"));
    }
    assert_eq!(starts(&log), 1);
    lenient.shutdown().await;
}

/// A modern server that also serves `initialize`, slower to answer the probe than its
/// timeout, keeps the one process: the late discover result starts the session.
#[tokio::test]
async fn a_slow_modern_server_with_initialize_too_keeps_its_process() {
    let ws = Workspace::new();
    let log = ws.file("starts.log");
    let slow = fixture(FixtureLifecycle::Modern)
        .init_delay(Duration::from_millis(600))
        .start_log(&log);
    let report = discover(&ws, json!({"slow": fixture_entry(&slow)}), |config| {
        config.discover_probe_timeout = HASTY_PROBE
    })
    .await;
    assert_eq!(details(&report, "slow").protocol_version, MODERN);
    assert_eq!(starts(&log), 1);
}

/// A 2026-07-28-only server that reads the probe at once but answers it after the probe
/// timeout is not sent `initialize` (which it would refuse, ending its session): the
/// `ping` it leaves unanswered while busy shows it is not ignoring the probe, so it is
/// started once.
#[tokio::test]
async fn a_modern_server_slow_to_answer_the_probe_is_started_once() {
    let ws = Workspace::new();
    let log = ws.file("starts.log");
    let report = discover(
        &ws,
        json!({"slow": fixture_entry(&slow_modern_only().start_log(&log))}),
        |config| config.discover_probe_timeout = HASTY_PROBE,
    )
    .await;
    assert_eq!(details(&report, "slow").protocol_version, MODERN);
    assert_eq!(starts(&log), 1);
}
