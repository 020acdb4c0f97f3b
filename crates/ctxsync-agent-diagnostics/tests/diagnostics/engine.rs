//! The engine against real fixture processes and real HTTP on loopback.

use crate::support;

use std::{sync::Arc, time::Duration};

use ctxsync_agent_diagnostics::{Engine, EngineError, RetryPolicy};
use ctxsync_mcp_fixture::{FixtureConfig, serve_http};
use ctxsync_mcp_model::{Report, ReportPhase};
use serde_json::json;
use support::*;

const RETAINED: &str =
    "reconnect with the updated configuration failed; tools are from the previous connection: ";

#[tokio::test]
async fn zero_servers_complete_with_no_outcomes() {
    for config_text in [
        None,
        Some(r#"{"mcpServers": {}}"#),
        Some(r#"{"servers": {}}"#),
    ] {
        let ws = Workspace::new();
        if let Some(text) = config_text {
            ws.write(".mcp.json", text);
        }
        let mut config = ws.engine_config();
        config.config_paths.push("missing-extra.json".into());
        let engine = Engine::start(config);
        let report = complete(&engine).await;
        assert!(report.servers.is_empty(), "{report:?}");
        assert!(report.config_outcomes.is_empty(), "{report:?}");
        engine.close().await;
    }
}

#[tokio::test]
async fn a_file_without_a_server_map_is_a_config_error_and_others_still_connect() {
    let ws = Workspace::new();
    ws.write_servers(json!({"ok": fixture_entry(&FixtureConfig::new().tools(1))}));
    ws.write("empty.json", "{}");
    let mut config = ws.engine_config();
    config.config_paths.push("empty.json".into());
    let engine = Engine::start(config);
    let report = complete(&engine).await;
    assert_eq!(report.config_outcomes.len(), 1, "{report:#?}");
    let outcome = &report.config_outcomes[0];
    assert_eq!(outcome.path, ws.file("empty.json"));
    let error = outcome.error.as_deref().unwrap_or_default();
    assert!(
        error.starts_with("no \"mcpServers\" or \"servers\" object: "),
        "{error}"
    );
    assert!(server(&report, "ok").connected);
    engine.close().await;
}

#[tokio::test]
async fn invalid_json_is_attributed_to_its_file_and_others_still_connect() {
    let ws = Workspace::new();
    ws.write_servers(json!({"ok": fixture_entry(&FixtureConfig::new().tools(1))}));
    ws.write("broken.json", "{ not json");
    let mut config = ws.engine_config();
    config.config_paths.push("broken.json".into());
    let engine = Engine::start(config);
    let report = complete(&engine).await;
    assert_eq!(report.config_outcomes.len(), 1, "{report:#?}");
    let outcome = &report.config_outcomes[0];
    assert_eq!(outcome.path, ws.file("broken.json"));
    let error = outcome.error.as_deref().unwrap_or_default();
    assert!(
        error.starts_with("invalid JSON at line 1, column 3: "),
        "{error}"
    );
    assert!(server(&report, "ok").connected);
    engine.close().await;
}

#[tokio::test]
async fn semantic_error_rejects_one_entry_and_its_sibling_connects() {
    let ws = Workspace::new();
    ws.write_servers(json!({
        "good": fixture_entry(&FixtureConfig::new().tools(2)),
        "bad__name": fixture_entry(&FixtureConfig::new()),
        "no_transport": {"args": []},
    }));
    let engine = Engine::start(ws.engine_config());
    let report = complete(&engine).await;
    assert_eq!(tool_names(server(&report, "good")), ["tool_0", "tool_1"]);
    assert_eq!(report.servers.len(), 1, "{report:#?}");
    let error = report.config_outcomes[0].error.clone().unwrap_or_default();
    assert!(
        error.contains("\"bad__name\": name contains \"__\""),
        "{error}"
    );
    assert!(error.contains("\"no_transport\": neither"), "{error}");
    engine.close().await;
}

#[tokio::test]
async fn duplicate_name_in_a_later_file_is_ignored_with_a_warning() {
    let ws = Workspace::new();
    ws.write_servers(json!({"dup": fixture_entry(&FixtureConfig::new().tools(1))}));
    ws.write(
        "extra.json",
        json!({"mcpServers": {"dup": fixture_entry(&FixtureConfig::new().tools(3))}}).to_string(),
    );
    let mut config = ws.engine_config();
    config.config_paths.push("extra.json".into());
    let engine = Engine::start(config);
    let report = complete(&engine).await;
    assert_eq!(server(&report, "dup").tools.len(), 1);
    let outcome = &report.config_outcomes[0];
    assert_eq!(outcome.path, ws.file("extra.json"));
    let warning = outcome.warning.as_deref().unwrap_or_default();
    assert!(
        warning.contains("\"dup\" is already declared in"),
        "{warning}"
    );
    engine.close().await;
}

#[tokio::test]
async fn zero_tool_server_is_connected() {
    let ws = Workspace::new();
    ws.write_servers(json!({"empty": fixture_entry(&FixtureConfig::new().tools(0))}));
    let engine = Engine::start(ws.engine_config());
    let report = complete(&engine).await;
    let empty = server(&report, "empty");
    assert!(empty.connected && empty.tools.is_empty() && empty.error.is_none());
    engine.close().await;
}

/// `entry` with `"alwaysLoad": value` added.
fn always_loaded(mut entry: serde_json::Value, value: bool) -> serde_json::Value {
    entry["alwaysLoad"] = json!(value);
    entry
}

#[tokio::test]
async fn always_load_is_reported_from_the_entry_connected_or_not() {
    let ws = Workspace::new();
    let fixture = FixtureConfig::new().tools(1);
    ws.write_servers(json!({
        "kept": always_loaded(fixture_entry(&fixture), true),
        "plain": fixture_entry(&fixture),
        "off": always_loaded(fixture_entry(&fixture), false),
        "missing": {"command": "ctxsync-no-such-binary-xyz", "alwaysLoad": true},
    }));
    let engine = Engine::start(ws.engine_config());
    let report = complete(&engine).await;
    assert!(report.config_outcomes.is_empty(), "{report:#?}");
    let flags: Vec<(&str, bool, bool)> = report
        .servers
        .iter()
        .map(|s| (s.name.as_str(), s.connected, s.always_load))
        .collect();
    assert_eq!(
        flags,
        [
            ("kept", true, true),
            ("missing", false, true),
            ("off", true, false),
            ("plain", true, false),
        ]
    );
    engine.close().await;
}

#[tokio::test]
async fn toggling_always_load_keeps_the_connection() {
    let ws = Workspace::new();
    let pid_file = ws.path().join("s.pid");
    let entry = fixture_entry(&FixtureConfig::new().tools(1).pid_file(&pid_file));
    ws.write_servers(json!({"s": entry.clone()}));
    let engine = Engine::start(ws.engine_config());
    assert!(!server(&*complete(&engine).await, "s").always_load);
    let pid = read_pid(&pid_file).await;

    ws.write_servers(json!({"s": always_loaded(entry.clone(), true)}));
    let report = engine.reload().await.expect("reload");
    let s = server(&report, "s");
    assert!(s.connected && s.always_load, "{s:#?}");
    assert_eq!(read_pid(&pid_file).await, pid, "the same process");

    ws.write_servers(json!({"s": entry}));
    let report = engine.reload().await.expect("reload");
    assert!(!server(&report, "s").always_load);
    assert_eq!(read_pid(&pid_file).await, pid, "the same process");
    engine.close().await;
}

#[tokio::test]
async fn a_retained_connection_reports_the_entry_the_file_holds_now() {
    let ws = Workspace::new();
    let good = FixtureConfig::new().tools(1);
    ws.write_servers(json!({"s": fixture_entry(&good)}));
    let engine = Engine::start(ws.engine_config());
    assert!(!server(&*complete(&engine).await, "s").always_load);

    let broken = fixture_entry(&good.clone().fail_initialize("broken config"));
    ws.write_servers(json!({"s": always_loaded(broken, true)}));
    let report = engine.reload().await.expect("reload");
    let s = server(&report, "s");
    let warning = s.warning.as_deref().unwrap_or_default();
    assert!(s.connected && warning.starts_with(RETAINED), "{s:#?}");
    assert!(s.always_load, "{s:#?}");

    ws.write_servers(json!({"s": fixture_entry(&good)}));
    let report = engine.reload().await.expect("reload");
    let s = server(&report, "s");
    assert!(s.warning.is_none() && !s.always_load, "{s:#?}");
    engine.close().await;
}

#[tokio::test]
async fn partial_failure_names_the_missing_binary() {
    let ws = Workspace::new();
    ws.write_servers(json!({
        "ok": fixture_entry(&FixtureConfig::new().tools(1)),
        "missing": {"command": "ctxsync-no-such-binary-xyz", "args": ["--flag"]},
    }));
    let engine = Engine::start(ws.engine_config());
    let report = complete(&engine).await;
    assert!(server(&report, "ok").connected);
    let missing = server(&report, "missing");
    assert!(!missing.connected);
    let error = missing.error.as_deref().unwrap_or_default();
    assert!(
        error.starts_with("command not found: ctxsync-no-such-binary-xyz"),
        "{error}"
    );
    engine.close().await;
}

#[tokio::test]
async fn all_servers_failing_still_completes() {
    let ws = Workspace::new();
    ws.write_servers(json!({
        "missing": {"command": "ctxsync-no-such-binary-xyz"},
        "crashes": fixture_entry(&FixtureConfig::new().exit_on_start(3)),
        "refuses": fixture_entry(&FixtureConfig::new().fail_initialize("not today")),
        "http": {"url": "http://127.0.0.1:1/mcp"},
    }));
    let engine = Engine::start(ws.engine_config());
    let report = complete(&engine).await;
    assert_eq!(report.servers.len(), 4);
    for server in &report.servers {
        assert!(!server.connected, "{server:?}");
        assert!(server.error.as_deref().is_some_and(|e| !e.is_empty()));
    }
    let crashes = server(&report, "crashes").error.clone().unwrap_or_default();
    assert!(crashes.contains("exit status: 3"), "{crashes}");
    let refuses = server(&report, "refuses").error.clone().unwrap_or_default();
    // The server's own message is an argument here, so it is redacted; the code stays.
    assert!(refuses.starts_with("initialize failed: "), "{refuses}");
    assert!(refuses.contains("-32603"), "{refuses}");
    engine.close().await;
}

#[tokio::test]
async fn hung_server_times_out_without_delaying_its_sibling() {
    let ws = Workspace::new();
    ws.write_servers(json!({
        "fast": fixture_entry(&FixtureConfig::new().tools(1)),
        "hung": fixture_entry(&FixtureConfig::new().hang()),
    }));
    let mut config = ws.engine_config();
    config.connect_timeout = Duration::from_millis(1500);
    let engine = Engine::start(config);
    let history = History::record(&engine);
    let report = complete(&engine).await;
    let hung = server(&report, "hung").error.clone().unwrap_or_default();
    assert!(hung.starts_with("no response within 1500ms"), "{hung}");

    let reports = history.reports();
    let fast_first = reports
        .iter()
        .position(|r| r.server("fast").is_some_and(|s| s.connected))
        .expect("fast was published");
    let fast_report = &reports[fast_first];
    assert_eq!(fast_report.phase, ReportPhase::Pending);
    assert!(fast_report.server("hung").is_none(), "{fast_report:#?}");
    engine.close().await;
}

#[tokio::test]
async fn phase_never_moves_back_and_unchanged_reloads_notify_nobody() {
    let ws = Workspace::new();
    ws.write_servers(json!({"a": fixture_entry(&FixtureConfig::new().tools(1))}));
    let engine = Engine::start(ws.engine_config());
    let history = History::record(&engine);
    complete(&engine).await;

    let mut rx = engine.subscribe();
    rx.borrow_and_update();
    let same = engine.reload().await.expect("reload");
    assert!(
        !rx.has_changed().expect("open"),
        "an unchanged reload notified"
    );
    assert_eq!(same.phase, ReportPhase::Complete);

    ws.write_servers(json!({
        "a": fixture_entry(&FixtureConfig::new().tools(1)),
        "b": fixture_entry(&FixtureConfig::new().init_delay(Duration::from_millis(200))),
    }));
    let report = engine.reload().await.expect("reload");
    assert!(server(&report, "b").connected);
    ws.write_servers(json!({"c": {"command": "ctxsync-no-such-binary-xyz"}}));
    let report = engine.reload().await.expect("reload");
    assert_eq!(report.servers.len(), 1);

    let phases: Vec<ReportPhase> = history.reports().iter().map(|r| r.phase).collect();
    let first_complete = phases
        .iter()
        .position(|p| *p == ReportPhase::Complete)
        .expect("complete");
    assert!(
        phases[first_complete..]
            .iter()
            .all(|p| *p == ReportPhase::Complete),
        "{phases:?}"
    );
    engine.close().await;
}

#[tokio::test]
async fn reconnect_failure_keeps_the_old_connection_until_the_config_is_restored() {
    let ws = Workspace::new();
    let good = FixtureConfig::new().tools(2).nonce_in_descriptions();
    ws.write_servers(json!({"s": fixture_entry(&good)}));
    let engine = Engine::start(ws.engine_config());
    let before = complete(&engine).await;
    let original = server(&before, "s").clone();

    ws.write_servers(json!({"s": fixture_entry(&good.clone().fail_initialize("broken config"))}));
    let report = engine.reload().await.expect("reload");
    let retained = server(&report, "s");
    assert!(retained.connected && retained.error.is_none());
    assert_eq!(
        retained.tools, original.tools,
        "tools from the previous connection"
    );
    let warning = retained.warning.as_deref().unwrap_or_default();
    assert!(warning.starts_with(RETAINED), "{warning}");
    assert!(warning.contains("initialize failed"), "{warning}");

    // The retained entry keeps its old config, so the next reload tries again.
    let report = engine.reload().await.expect("reload");
    assert!(server(&report, "s").warning.is_some());

    ws.write_servers(json!({"s": fixture_entry(&good)}));
    let report = engine.reload().await.expect("reload");
    let restored = server(&report, "s");
    assert_eq!(restored.warning, None);
    assert_eq!(
        restored.tools, original.tools,
        "the original connection was kept"
    );
    engine.close().await;
}

/// Issue 49: a typo while editing `.mcp.json` (here a missing comma, saved and picked up by
/// the watch) keeps what the file declared before — the working server stays connected
/// with its tools, retained with a warning naming the parse error, a failed one stays
/// failed — and fixing the file reloads as usual.
#[tokio::test]
async fn a_json_typo_keeps_the_working_servers_until_the_file_is_fixed() {
    let ws = Workspace::new();
    let good = FixtureConfig::new().tools(2).nonce_in_descriptions();
    let entry = fixture_entry(&good);
    let gone = json!({"command": "ctxsync-test-no-such-command"});
    ws.write_servers(json!({"s": entry, "gone": gone}));
    let mut config = ws.engine_config();
    config.watch = true;
    config.watch_debounce = Duration::from_millis(100);
    let engine = Engine::start(config);
    let before = complete(&engine).await;
    let original = server(&before, "s").clone();
    assert!(
        original.connected && original.warning.is_none(),
        "{before:#?}"
    );
    assert!(!server(&before, "gone").connected);

    // Line 4 lacks the comma after line 3's entry.
    ws.write(
        ".mcp.json",
        format!("{{\n  \"mcpServers\": {{\n    \"s\": {entry}\n    \"gone\": {gone}\n  }}\n}}\n"),
    );
    let mut rx = engine.subscribe();
    let broken = wait_for(&mut rx, "the typo's config error", |r| {
        !r.config_outcomes.is_empty()
    })
    .await;
    let outcome = &broken.config_outcomes[0];
    assert_eq!(outcome.path, ws.file(".mcp.json"));
    assert_eq!(
        outcome.error.as_deref(),
        Some("invalid JSON at line 4, column 5: expected `,` or `}`"),
        "{broken:#?}"
    );
    let note = outcome.warning.as_deref().unwrap_or_default();
    assert!(
        note.starts_with("kept the servers it declared before, as they were, until it is fixed: ")
            && note.contains("\"s\"")
            && note.contains("\"gone\""),
        "{note}"
    );
    let kept = server(&broken, "s");
    assert!(kept.connected && kept.error.is_none(), "{kept:#?}");
    assert_eq!(kept.tools, original.tools, "the same connection's tools");
    let warning = kept.warning.as_deref().unwrap_or_default();
    assert!(
        warning.starts_with(
            "its config file could not be read; tools are from the previous connection until the file is fixed: "
        ) && warning.contains("line 4, column 5"),
        "{warning}"
    );
    assert!(!server(&broken, "gone").connected, "{broken:#?}");
    assert_report_in_words(&broken);
    // An explicit reload of the same broken file changes nothing.
    let again = engine.reload().await.expect("reload");
    assert_eq!(*again, *broken);

    // Fixed (and "gone" removed): the kept connection is the file's again, no warning.
    ws.write_servers(json!({"s": entry}));
    let fixed = wait_for(&mut rx, "the fixed file's report", |r| {
        r.config_outcomes.is_empty() && r.server("gone").is_none()
    })
    .await;
    let s = server(&fixed, "s");
    assert!(s.connected && s.warning.is_none(), "{fixed:#?}");
    assert_eq!(s.tools, original.tools, "the connection was never replaced");
    assert_eq!(fixed.servers.len(), 1, "{fixed:#?}");
    engine.close().await;
}

/// A file that is rejected before the engine ever read it well keeps nothing: the first
/// run reports the error and no server, and an emptied file (an editor mid-save) says so.
#[tokio::test]
async fn a_file_broken_from_the_start_declares_nothing() {
    let ws = Workspace::new();
    ws.write(".mcp.json", "  \n");
    let engine = Engine::start(ws.engine_config());
    let report = complete(&engine).await;
    assert!(report.servers.is_empty(), "{report:#?}");
    assert_eq!(
        report.config_outcomes[0].error.as_deref(),
        Some("the file is empty (an MCP config file is a JSON object)")
    );
    assert_eq!(report.config_outcomes[0].warning, None);
    assert_report_in_words(&report);
    engine.close().await;
}

#[tokio::test]
async fn changed_entry_connects_anew_and_swaps() {
    let ws = Workspace::new();
    let dir = ws.path().to_owned();
    let (old_pid, new_pid) = (dir.join("old.pid"), dir.join("new.pid"));
    ws.write_servers(
        json!({"s": fixture_entry(&FixtureConfig::new().tools(1).pid_file(&old_pid))}),
    );
    let engine = Engine::start(ws.engine_config());
    complete(&engine).await;
    let old = read_pid(&old_pid).await;

    ws.write_servers(
        json!({"s": fixture_entry(&FixtureConfig::new().tools(3).pid_file(&new_pid))}),
    );
    let report = engine.reload().await.expect("reload");
    assert_eq!(
        tool_names(server(&report, "s")),
        ["tool_0", "tool_1", "tool_2"]
    );
    assert!(alive(read_pid(&new_pid).await));
    assert_gone(old, "the replaced server").await;
    engine.close().await;
}

#[tokio::test]
async fn removed_server_leaves_the_report_and_its_process_is_gone() {
    let ws = Workspace::new();
    let pid_file = ws.file("gone.pid");
    ws.write_servers(json!({
        "stay": fixture_entry(&FixtureConfig::new().tools(1)),
        "gone": fixture_entry(&FixtureConfig::new().pid_file(&pid_file)),
    }));
    let engine = Engine::start(ws.engine_config());
    let report = complete(&engine).await;
    assert!(server(&report, "gone").connected);
    let pid = read_pid(&pid_file).await;
    assert!(alive(pid));

    ws.write_servers(json!({"stay": fixture_entry(&FixtureConfig::new().tools(1))}));
    let report = engine.reload().await.expect("reload");
    assert!(report.server("gone").is_none(), "{report:#?}");
    assert!(server(&report, "stay").connected);
    assert!(
        !alive(pid),
        "reload returned while the removed server still ran"
    );
    engine.close().await;
}

#[tokio::test]
async fn paging_guards_and_tool_cap() {
    let ws = Workspace::new();
    ws.write_servers(json!({
        "loop": fixture_entry(&FixtureConfig::new().tools(3).page_size(1).repeat_cursor()),
        "pages": fixture_entry(&FixtureConfig::new().tools(101).page_size(1)),
        "hundred": fixture_entry(&FixtureConfig::new().tools(100).page_size(1)),
        "big": fixture_entry(&FixtureConfig::new().tools(1500).page_size(700)),
    }));
    let engine = Engine::start(ws.engine_config());
    let report = complete(&engine).await;
    let error = |name: &str| server(&report, name).error.clone().unwrap_or_default();
    assert!(
        error("loop").contains("repeated a cursor"),
        "{}",
        error("loop")
    );
    assert!(
        error("pages").contains("more than 100 pages"),
        "{}",
        error("pages")
    );
    assert_eq!(server(&report, "hundred").tools.len(), 100);
    let big = server(&report, "big");
    assert!(big.connected);
    assert_eq!(big.tools.len(), 1000);
    assert_eq!(big.tools[999].name, "tool_999");
    let warning = big.warning.as_deref().unwrap_or_default();
    assert!(
        warning.contains("only the first 1000 are kept"),
        "{warning}"
    );
    engine.close().await;
}

#[tokio::test]
async fn tools_list_changed_updates_the_tools() {
    let ws = Workspace::new();
    ws.write_servers(json!({
        "s": fixture_entry(&FixtureConfig::new().tools(1).change_tools_after(Duration::from_millis(300), 3)),
    }));
    let engine = Engine::start(ws.engine_config());
    let mut rx = engine.subscribe();
    let report = wait_for(&mut rx, "changed tools", |r| {
        r.server("s").is_some_and(|s| s.tools.len() == 3)
    })
    .await;
    assert_eq!(
        tool_names(server(&report, "s")),
        ["changed_0", "changed_1", "changed_2"]
    );
    assert_eq!(report.phase, ReportPhase::Complete);
    engine.close().await;
}

#[tokio::test]
async fn server_exiting_after_connect_fails_with_its_exit_status() {
    let ws = Workspace::new();
    ws.write_servers(json!({
        "s": fixture_entry(&FixtureConfig::new().tools(1).exit_after(Duration::from_millis(300), 7)),
    }));
    let engine = Engine::start(ws.engine_config());
    let mut rx = engine.subscribe();
    wait_for(&mut rx, "connected", |r| {
        r.server("s").is_some_and(|s| s.connected)
    })
    .await;
    let report = wait_for(&mut rx, "failed", |r| {
        r.server("s").is_some_and(|s| !s.connected)
    })
    .await;
    let error = server(&report, "s").error.clone().unwrap_or_default();
    assert!(error.contains("exited with exit status: 7"), "{error}");
    assert_eq!(report.phase, ReportPhase::Complete);
    engine.close().await;
}

#[tokio::test]
async fn crashed_server_is_retried_and_recovers() {
    let ws = Workspace::new();
    let config = FixtureConfig::new()
        .tools(1)
        .nonce_in_descriptions()
        .exit_after(Duration::from_millis(200), 3)
        .exit_once(ws.file("crashed-once"));
    ws.write_servers(json!({"s": fixture_entry(&config)}));
    let mut engine_config = ws.engine_config();
    engine_config.retry = RetryPolicy {
        enabled: true,
        initial_delay: Duration::from_millis(100),
        max_delay: Duration::from_millis(400),
    };
    let engine = Engine::start(engine_config);
    let mut rx = engine.subscribe();
    let first = wait_for(&mut rx, "connected", |r| {
        r.server("s").is_some_and(|s| s.connected)
    })
    .await;
    let failed = wait_for(&mut rx, "crashed", |r| {
        r.server("s").is_some_and(|s| !s.connected)
    })
    .await;
    assert!(
        server(&failed, "s")
            .error
            .as_deref()
            .unwrap_or_default()
            .contains("exit status: 3")
    );
    let recovered = wait_for(&mut rx, "recovered", |r| {
        r.server("s").is_some_and(|s| s.connected)
    })
    .await;
    // A different process answered: its nonce differs.
    assert_ne!(
        server(&first, "s").tools[0].description,
        server(&recovered, "s").tools[0].description
    );
    assert_eq!(recovered.phase, ReportPhase::Complete);
    engine.close().await;
}

#[tokio::test]
async fn http_server_with_required_header() {
    let fixture = serve_http(
        FixtureConfig::new()
            .tools(2)
            .require_header("x-api-key", "letmein-123"),
    )
    .await
    .expect("serve");
    let ws = Workspace::new();
    ws.write_servers(json!({
        "authorized": {"type": "http", "url": fixture.url(), "headers": {"X-Api-Key": "${API_KEY}"}},
        "anonymous": {"type": "streamable-http", "url": fixture.url()},
    }));
    let mut config = ws.engine_config();
    config.env.insert("API_KEY".into(), "letmein-123".into());
    let engine = Engine::start(config);
    let report = complete(&engine).await;
    let authorized = server(&report, "authorized");
    assert!(authorized.connected, "{authorized:?}");
    assert_eq!(tool_names(authorized), ["tool_0", "tool_1"]);
    let anonymous = server(&report, "anonymous")
        .error
        .clone()
        .unwrap_or_default();
    assert!(
        anonymous.contains("answered 401 Unauthorized: it needs a person to sign in"),
        "{anonymous}"
    );
    engine.close().await;
    fixture.shutdown().await;
}

#[tokio::test]
async fn closing_during_a_reload_leaves_no_children() {
    let ws = Workspace::new();
    let slow = |name: &str| {
        fixture_entry(
            &FixtureConfig::new()
                .init_delay(Duration::from_secs(30))
                .pid_file(ws.file(&format!("{name}.pid"))),
        )
    };
    // A wrapper shell whose background child shares its process group.
    let grandchild_pid = ws.file("grandchild.pid");
    let script = format!(
        "sleep 300 & echo $! > '{}'; exec '{}' --init-delay-ms 30000",
        grandchild_pid.display(),
        fixture_bin().display()
    );
    let fast = fixture_entry(&FixtureConfig::new().pid_file(ws.file("one.pid")));
    ws.write_servers(json!({"one": fast}));
    let mut config = ws.engine_config();
    config.connect_timeout = Duration::from_secs(60);
    let engine = Arc::new(Engine::start(config));
    complete(&engine).await;
    let mut pids = vec![read_pid(&ws.file("one.pid")).await];

    ws.write_servers(json!({
        "one": fast,
        "two": slow("two"),
        "three": slow("three"),
        "wrapped": {"command": "sh", "args": ["-c", script]},
    }));
    let reloading = tokio::spawn({
        let engine = engine.clone();
        async move { engine.reload().await }
    });
    pids.push(read_pid(&ws.file("two.pid")).await);
    pids.push(read_pid(&ws.file("three.pid")).await);
    pids.push(read_pid(&grandchild_pid).await);
    assert!(pids.iter().all(|pid| alive(*pid)));

    engine.close().await;
    for pid in pids {
        assert_gone(pid, "a server process").await;
    }
    let reload = tokio::time::timeout(PATIENCE, reloading)
        .await
        .expect("reload ends");
    assert_eq!(reload.expect("join"), Err(EngineError::Closed));
    assert_eq!(engine.reload().await, Err(EngineError::Closed));
}

#[tokio::test]
async fn dropping_the_engine_kills_its_servers() {
    let ws = Workspace::new();
    let pid_file = ws.file("s.pid");
    ws.write_servers(json!({"s": fixture_entry(&FixtureConfig::new().pid_file(&pid_file))}));
    // Watching and fast retries on: neither may bring a server back after the drop.
    let mut config = ws.engine_config();
    config.watch = true;
    config.retry = RetryPolicy {
        enabled: true,
        initial_delay: Duration::from_millis(20),
        max_delay: Duration::from_millis(20),
    };
    let engine = Engine::start(config);
    complete(&engine).await;
    let pid = read_pid(&pid_file).await;
    drop(engine);
    assert_gone(pid, "the server of a dropped engine").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        read_pid(&pid_file).await,
        pid,
        "a server was started after the drop"
    );
}

#[tokio::test]
async fn watched_config_changes_reload_by_themselves() {
    let ws = Workspace::new();
    let mut config = ws.engine_config();
    config.watch = true;
    config.watch_debounce = Duration::from_millis(100);
    let engine = Engine::start(config);
    complete(&engine).await;
    ws.write_servers(json!({"late": fixture_entry(&FixtureConfig::new().tools(1))}));
    let mut rx = engine.subscribe();
    wait_for(&mut rx, "the watched server", |r| {
        r.server("late").is_some_and(|s| s.connected)
    })
    .await;
    engine.close().await;
}

#[tokio::test]
async fn concurrent_reloads_coalesce_and_progress_counts() {
    let ws = Workspace::new();
    ws.write_servers(json!({
        "a": fixture_entry(&FixtureConfig::new().tools(1)),
        "b": fixture_entry(&FixtureConfig::new().init_delay(Duration::from_millis(300))),
    }));
    let engine = Engine::start(ws.engine_config());
    let (one, two, three) = tokio::join!(engine.reload(), engine.reload(), engine.reload());
    for report in [one, two, three] {
        let report: Arc<Report> = report.expect("reload");
        assert_eq!(report.phase, ReportPhase::Complete);
        assert_eq!(report.servers.len(), 2);
    }
    let progress = engine.progress().borrow().clone();
    assert_eq!(progress.finished, progress.total);
    assert!(progress.connecting.is_empty());
    engine.close().await;
}

#[tokio::test]
async fn no_secret_reaches_any_outcome() {
    let fixture = serve_http(
        FixtureConfig::new()
            .tools(1)
            .require_header("x-api-key", "the-right-key"),
    )
    .await
    .expect("serve");
    let port = fixture.addr().port();
    let secrets = [
        "entry-env-secret-1",
        "header-value-secret-2",
        "bearer-token-secret-3",
        "url-user-secret-4",
        "url-password-secret-5",
        "url-query-secret-6",
        "flag-value-secret-9",
        "injected-agent-token-10",
        "ambient-env-secret-11",
    ];
    let ws = Workspace::new();
    ws.write_servers(json!({
        // stderr carries each secret; only its own rule can redact it.
        "entry_env": {"command": "sh", "args": ["-c", "echo \"$ENTRY_SECRET\" >&2; exit 3"],
                      "env": {"ENTRY_SECRET": "entry-env-secret-1"}},
        "ambient": {"command": "sh", "args": ["-c", "echo \"$AMBIENT_SECRET\" >&2; exit 3"]},
        "injected": {"command": "sh", "args": ["-c", "printf '%s-%s\\n' injected-agent token-10 >&2; exit 3"]},
        "secret_flag": {"command": fixture_bin(), "args": ["--stderr-secret", "flag-value-secret-9"]},
        // Ordinary arguments, paths and environment values are not secrets.
        "args": {"command": fixture_bin(), "args": [
            "--tools", "1", "--nonce", "readable-nonce", "--fail-initialize=readable message"]},
        "ordinary": {"command": "sh", "args": ["-c", "echo \"ci=$CI home=$HOME\" >&2; exit 3"]},
        "headers": {"url": fixture.url(), "headers": {
            "x-api-key": "header-value-secret-2", "Authorization": "Bearer bearer-token-secret-3"}},
        "url_parts": {"url": format!(
            "http://url-user-secret-4:url-password-secret-5@127.0.0.1:{port}/mcp?key=url-query-secret-6")},
    }));
    let mut config = ws.engine_config();
    config
        .env
        .insert("AMBIENT_SECRET".into(), "ambient-env-secret-11".into());
    config.env.insert("CI".into(), "true".into());
    config
        .injected_secrets
        .push("injected-agent-token-10".into());
    let engine = Engine::start(config);
    let report = complete(&engine).await;
    let text = serde_json::to_string_pretty(&*report).expect("json");
    for secret in secrets {
        assert!(!text.contains(secret), "{secret} leaked:\n{text}");
    }
    assert!(report.servers.iter().all(|s| !s.connected), "{text}");
    // The secrets did reach the messages, so redaction (not luck) kept them out.
    for name in ["entry_env", "ambient", "injected"] {
        let error = server(&report, name).error.clone().unwrap_or_default();
        assert!(error.ends_with("stderr: [redacted]"), "{name}: {error}");
    }
    let flag = server(&report, "secret_flag")
        .error
        .clone()
        .unwrap_or_default();
    assert!(flag.contains("secret=[redacted]"), "{flag}");
    let args = server(&report, "args").error.clone().unwrap_or_default();
    assert!(
        args.contains("nonce=readable-nonce") && args.contains("readable message"),
        "{args}"
    );
    let ordinary = server(&report, "ordinary")
        .error
        .clone()
        .unwrap_or_default();
    let home = base_env()["HOME"].clone();
    assert!(
        ordinary.ends_with(&format!("stderr: ci=true home={home}")),
        "{ordinary}"
    );
    engine.close().await;
    fixture.shutdown().await;
}

/// A server's tools are checked against its own secrets and the agent's token, not against
/// another server's secrets or the agent's environment (which are no leak of this server's).
#[tokio::test]
async fn tools_are_checked_against_their_own_secrets_and_the_agent_token() {
    let offering = |description: &str| {
        let tool = json!({"name": "lookup", "description": description,
                          "inputSchema": {"type": "object", "properties": {}}});
        vec![
            "--tools".to_owned(),
            "0".into(),
            "--tool-json".into(),
            tool.to_string(),
        ]
    };
    let ws = Workspace::new();
    ws.write_servers(json!({
        "alpha": {"command": fixture_bin(),
                  "args": offering("alpha-own-secret and agent-token-1234; ci true"),
                  "env": {"ALPHA_KEY": "alpha-own-secret"}},
        "beta": {"command": fixture_bin(),
                 "args": offering("alpha-own-secret, ambient-env-secret, agent-token-1234")},
    }));
    let mut config = ws.engine_config();
    config.env.insert("CI".into(), "true".into());
    config
        .env
        .insert("AMBIENT_SECRET".into(), "ambient-env-secret".into());
    config.injected_secrets.push("agent-token-1234".into());
    let engine = Engine::start(config);
    let report = complete(&engine).await;
    let description = |name: &str| {
        let server = server(&report, name);
        assert!(server.connected, "{server:#?}");
        server.tools[0].description.clone()
    };
    assert_eq!(description("alpha"), "[redacted] and [redacted]; ci true");
    assert_eq!(
        description("beta"),
        "alpha-own-secret, ambient-env-secret, [redacted]"
    );
    engine.close().await;
}

#[tokio::test]
async fn every_diagnostic_is_bounded_on_a_utf8_boundary() {
    let ws = Workspace::new();
    let mut servers = serde_json::Map::new();
    servers.insert(
        "multibyte".into(),
        json!({"command": "sh", "args": ["-c",
            "i=0; while [ $i -lt 2000 ]; do echo \"ééé😀 line $i\"; i=$((i+1)); done >&2; exit 1"]}),
    );
    servers.insert(
        "flood".into(),
        fixture_entry(
            &FixtureConfig::new()
                .stderr_flood(1_000_000)
                .exit_on_start(2),
        ),
    );
    for i in 0..300 {
        servers.insert(format!("bad_é😀_{i}_"), json!({"command": "x"}));
    }
    ws.write(".mcp.json", json!({"mcpServers": servers}).to_string());
    let engine = Engine::start(ws.engine_config());
    let report = complete(&engine).await;
    let mut diagnostics: Vec<&str> = Vec::new();
    for server in &report.servers {
        diagnostics.extend(server.error.as_deref());
        diagnostics.extend(server.warning.as_deref());
    }
    for outcome in &report.config_outcomes {
        diagnostics.extend(outcome.error.as_deref());
        diagnostics.extend(outcome.warning.as_deref());
    }
    assert_eq!(diagnostics.len(), 3, "{report:#?}");
    for diagnostic in diagnostics {
        assert!(diagnostic.len() <= 4096, "{} bytes", diagnostic.len());
    }
    // The stderr tail keeps its freshest lines within the bound.
    let multibyte = server(&report, "multibyte")
        .error
        .clone()
        .unwrap_or_default();
    assert!(multibyte.len() > 3900, "{}", multibyte.len());
    assert!(multibyte.ends_with("ééé😀 line 1999"), "{multibyte}");
    let flood = server(&report, "flood").error.clone().unwrap_or_default();
    assert!(
        flood.starts_with("the server exited with exit status: 2; stderr: xxx"),
        "{flood}"
    );
    // 300 invalid entries overflow the bound and are cut on a character boundary.
    let config = report.config_outcomes[0].error.clone().unwrap_or_default();
    assert!(
        config.ends_with("... [truncated]") && config.len() > 4000,
        "{config}"
    );
    engine.close().await;
}

#[tokio::test]
async fn stdio_runs_in_the_workspace_with_agent_and_entry_env_only() {
    let ws = Workspace::new();
    ws.write_servers(json!({
        "probe": {"command": "sh", "args": ["-c",
            "echo \"cwd=$(pwd) agent=$AGENT_VAR entry=$ENTRY_VAR other=${CARGO_PKG_NAME:-unset}\" >&2; exit 1"],
            "env": {"ENTRY_VAR": "cd"}},
    }));
    let mut config = ws.engine_config();
    // Values shorter than 4 characters are never redacted, so they stay readable here.
    config.env.insert("AGENT_VAR".into(), "ab".into());
    let engine = Engine::start(config);
    let report = complete(&engine).await;
    let error = server(&report, "probe").error.clone().unwrap_or_default();
    let cwd = std::fs::canonicalize(ws.path()).expect("canonical workspace");
    let expect = format!("cwd={} agent=ab entry=cd other=unset", cwd.display());
    assert!(
        error.ends_with(&expect),
        "{error}\nexpected to end with: {expect}"
    );
    engine.close().await;
}
