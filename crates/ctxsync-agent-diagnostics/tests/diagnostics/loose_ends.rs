//! The engine's loose ends (issue 18, part 5): a retained connection that dies, a retry
//! during the first run, a re-list that fails, and a config file that cannot be watched.

use crate::support;

use std::time::Duration;

use ctxsync_agent_diagnostics::{Engine, RetryPolicy};
use ctxsync_mcp_fixture::FixtureConfig;
use ctxsync_mcp_model::ReportPhase;
use serde_json::json;
use support::*;

const RETAINED: &str = "reconnect with the updated configuration failed";

fn fast_retries() -> RetryPolicy {
    RetryPolicy {
        enabled: true,
        initial_delay: Duration::from_millis(50),
        max_delay: Duration::from_millis(200),
    }
}

#[tokio::test]
async fn a_retained_connection_that_dies_is_retried_with_the_current_config() {
    let ws = Workspace::new();
    // The first configuration works for a while, then its process exits (and would work
    // again if it were started anew); the updated one never initializes.
    let old = FixtureConfig::new()
        .tools(2)
        .exit_after(Duration::from_millis(1500), 3);
    let new = FixtureConfig::new()
        .tools(2)
        .fail_initialize("broken config");
    ws.write_servers(json!({"s": fixture_entry(&old)}));
    let mut config = ws.engine_config();
    config.retry = fast_retries();
    let engine = Engine::start(config);
    complete(&engine).await;

    ws.write_servers(json!({"s": fixture_entry(&new)}));
    let report = engine.reload().await.expect("reload");
    let retained = server(&report, "s");
    assert!(retained.connected, "{retained:#?}");
    assert!(
        retained
            .warning
            .as_deref()
            .unwrap_or_default()
            .contains(RETAINED),
        "{retained:#?}"
    );

    let history = History::record(&engine);
    let mut rx = engine.subscribe();
    // The kept process dies; its retries use the configuration in the file now.
    let report = wait_for(&mut rx, "a retry with the updated configuration", |r| {
        r.server("s").is_some_and(|s| {
            !s.connected
                && s.error
                    .as_deref()
                    .is_some_and(|error| error.contains("broken config"))
        })
    })
    .await;
    assert_eq!(report.phase, ReportPhase::Complete);
    for report in history.reports() {
        let s = server(&report, "s");
        assert!(
            !s.connected || s.warning.is_some(),
            "connected without the warning while the file holds a broken entry: {s:#?}"
        );
    }
    engine.close().await;
}

#[tokio::test]
async fn a_retry_during_the_first_run_does_not_hold_the_phase() {
    let ws = Workspace::new();
    // Fails at once the first time, then hangs (never answers) on every retry.
    let marker = ws.file("failed-once");
    let flaky = json!({
        "command": "sh",
        "args": ["-c", r#"if [ -e "$1" ]; then exec sleep 600; fi; : > "$1"; exit 1"#, "sh", marker],
    });
    let slow = FixtureConfig::new()
        .tools(1)
        .init_delay(Duration::from_millis(700));
    ws.write_servers(json!({"flaky": flaky, "slow": fixture_entry(&slow)}));
    let mut config = ws.engine_config();
    config.retry = fast_retries();
    // Longer than the wait below: a retry that held the phase would fail this test.
    config.connect_timeout = PATIENCE + Duration::from_secs(30);
    let engine = Engine::start(config);
    let report = complete(&engine).await;
    assert!(server(&report, "slow").connected, "{report:#?}");
    let flaky = server(&report, "flaky");
    assert!(!flaky.connected, "{flaky:#?}");
    assert!(
        flaky
            .error
            .as_deref()
            .unwrap_or_default()
            .contains("exit status: 1"),
        "{flaky:#?}"
    );
    assert!(marker.exists(), "the first start ran");
    engine.close().await;
}

#[tokio::test]
async fn a_failed_relist_keeps_the_previous_tools_with_a_warning() {
    let ws = Workspace::new();
    let config = FixtureConfig::new()
        .tools(2)
        .change_tools_after(Duration::from_millis(300), 3)
        .fail_relist();
    ws.write_servers(json!({"s": fixture_entry(&config)}));
    let engine = Engine::start(ws.engine_config());
    let before = complete(&engine).await;
    assert_eq!(tool_names(server(&before, "s")), ["tool_0", "tool_1"]);
    let mut rx = engine.subscribe();
    let report = wait_for(&mut rx, "the re-list warning", |r| {
        r.server("s").is_some_and(|s| s.warning.is_some())
    })
    .await;
    let s = server(&report, "s");
    assert!(s.connected, "{s:#?}");
    assert_eq!(tool_names(s), ["tool_0", "tool_1"], "the previous list");
    let warning = s.warning.as_deref().unwrap_or_default();
    assert!(
        warning.starts_with("re-listing tools after ")
            && warning.contains(" did not work, so the tools are from the previous list: "),
        "{warning}"
    );
    assert_eq!(
        warning.matches("failed").count(),
        1,
        "one cause, said once: {warning}"
    );
    engine.close().await;
}

#[tokio::test]
async fn a_config_file_that_cannot_be_watched_is_polled() {
    let ws = Workspace::new();
    // Its directory does not exist yet, so no watch can be set on it.
    let mut config = ws.engine_config();
    config.config_paths = vec!["later/extra.mcp.json".into()];
    config.watch = true;
    config.watch_debounce = Duration::from_millis(50);
    config.poll_interval = Duration::from_millis(200);
    let engine = Engine::start(config);
    complete(&engine).await;
    std::fs::create_dir(ws.file("later")).expect("mkdir");
    let servers = json!({"mcpServers": {"late": fixture_entry(&FixtureConfig::new().tools(1))}});
    // Write-then-rename, so no poll sees a half-written file.
    std::fs::write(ws.file("later/.extra.tmp"), servers.to_string()).expect("write");
    std::fs::rename(ws.file("later/.extra.tmp"), ws.file("later/extra.mcp.json")).expect("rename");
    let mut rx = engine.subscribe();
    wait_for(&mut rx, "the polled file's server", |r| {
        r.server("late").is_some_and(|s| s.connected)
    })
    .await;
    engine.close().await;
}

fn spec(name: &str, schema: serde_json::Value) -> ctxsync_mcp_fixture::ToolSpec {
    let mut spec = ctxsync_mcp_fixture::ToolSpec::new(name, format!("does {name}"));
    spec.input_schema = schema.as_object().expect("an object").clone();
    spec
}

#[tokio::test]
async fn invalid_tools_are_left_out_with_a_warning_and_the_rest_are_ordered_by_name() {
    let ws = Workspace::new();
    let object = json!({"type": "object", "properties": {"q": {"type": "string"}}});
    let mut config = FixtureConfig::new().tools(0);
    for tool in [
        spec("zeta", object.clone()),
        spec("", object.clone()),
        spec(&"n".repeat(129), object.clone()),
        spec("bell\u{7}\u{1b}[31m", object.clone()),
        spec("scalar", json!({"type": "string"})),
        spec("alpha", object.clone()),
        spec(
            "zeta",
            json!({"type": "object", "description": "the second zeta"}),
        ),
        spec("untyped", json!({"properties": {}})),
        spec("nullable", json!({"type": ["object", "null"]})),
    ] {
        config = config.tool(tool);
    }
    ws.write_servers(json!({"s": fixture_entry(&config)}));
    let engine = Engine::start(ws.engine_config());
    let report = complete(&engine).await;
    let s = server(&report, "s");
    assert!(s.connected, "{s:#?}");
    assert_eq!(tool_names(s), ["alpha", "nullable", "untyped", "zeta"]);
    let zeta = s
        .tools
        .iter()
        .find(|tool| tool.name == "zeta")
        .expect("zeta");
    assert_eq!(zeta.input_schema, object, "the first zeta is kept");
    let warning = s.warning.as_deref().unwrap_or_default();
    for expected in [
        "5 tools left out",
        "\"\" (its name is empty)",
        "(its name is longer than 128 bytes)",
        "(its name contains control characters)",
        "\"scalar\" (its input schema is not an object schema)",
        "\"zeta\" (an earlier tool has the same name (the first is kept))",
    ] {
        assert!(warning.contains(expected), "{expected:?} in {warning}");
    }
    assert!(
        !warning.chars().any(char::is_control),
        "no raw control character reaches a warning: {warning:?}"
    );
    engine.close().await;
}
