//! Hostile stdio servers (malformed or endless stdout, floods, crash loops) against the engine:
//! it stays bounded in time and memory, healthy siblings connect, and the diagnostic is clear.

use crate::support;

use std::{
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use ctxsync_agent_diagnostics::{Engine, MAX_DIAGNOSTIC_BYTES, RetryPolicy};
use ctxsync_mcp_fixture::{FIXTURE_BIN_ENV, FixtureConfig, MalformedStdout};
use ctxsync_mcp_model::{Report, ReportPhase};
use serde_json::{Value, json};
use support::*;

/// Connect budget for servers that will never answer properly: small, so tests stay quick.
const SMALL_TIMEOUT: Duration = Duration::from_millis(1500);
/// Passed as `--nonce`, which the fixture prints on stderr, and held in the entry's `env`,
/// which makes it a secret: it must be redacted.
const SECRET_NONCE: &str = "hostile-nonce-secret-4711";
const MIB: usize = 1024 * 1024;

fn hostile(kind: MalformedStdout) -> FixtureConfig {
    FixtureConfig::new()
        .nonce(SECRET_NONCE)
        .malformed_stdout(kind)
}

/// The entry for a fixture configured with [`SECRET_NONCE`], the nonce a secret of its own.
fn secret_entry(config: &FixtureConfig) -> Value {
    let mut entry = fixture_entry(config);
    entry["env"] = json!({ "HOSTILE_NONCE": SECRET_NONCE });
    entry
}

/// Checks what every failed server's diagnostic must be: present, bounded, sanitized.
fn failed_diagnostic(report: &Report, name: &str) -> String {
    let server = server(report, name);
    assert!(!server.connected, "{server:#?}");
    let error = server.error.clone().unwrap_or_default();
    assert!(!error.is_empty(), "{name}: empty diagnostic");
    assert!(
        error.len() <= MAX_DIAGNOSTIC_BYTES,
        "{name}: {} bytes",
        error.len()
    );
    assert!(!error.contains(SECRET_NONCE), "{name} leaked: {error}");
    error
}

#[tokio::test]
async fn malformed_stdout_fails_only_that_server_within_the_timeout() {
    let ws = Workspace::new();
    ws.write_servers(json!({
        "ok": fixture_entry(&FixtureConfig::new().tools(1)),
        "not_json": secret_entry(&hostile(MalformedStdout::NotJson)),
        "not_jsonrpc": secret_entry(&hostile(MalformedStdout::NotJsonrpc)),
        "wrong_id": secret_entry(&hostile(MalformedStdout::WrongId)),
        "huge_line": secret_entry(&hostile(MalformedStdout::HugeLine).huge_line_bytes(64 * MIB)),
    }));
    let mut config = ws.engine_config();
    config.connect_timeout = SMALL_TIMEOUT;
    let started = Instant::now();
    let engine = Engine::start(config);
    let history = History::record(&engine);
    let report = complete(&engine).await;
    println!("terminal result after {:?}", started.elapsed());

    assert!(server(&report, "ok").connected, "{report:#?}");
    // The healthy sibling was published before the hostile ones were given up on.
    let reports = history.reports();
    let ok_first = reports
        .iter()
        .find(|r| r.server("ok").is_some_and(|s| s.connected))
        .expect("ok was published");
    assert_eq!(ok_first.phase, ReportPhase::Pending, "{ok_first:#?}");

    // Unparsable lines are ignored by the framing, so these end in the timeout, which names
    // the budget and shows the (sanitized) stderr.
    for name in ["not_json", "not_jsonrpc"] {
        let error = failed_diagnostic(&report, name);
        assert!(error.starts_with("no response within 1500ms"), "{error}");
        assert!(error.contains("nonce=[redacted]"), "{error}");
    }
    let not_json = failed_diagnostic(&report, "not_json");
    assert!(
        not_json.contains("; the server wrote 1000 lines on stdout that are not JSON; stderr: "),
        "{not_json}"
    );
    let wrong_id = failed_diagnostic(&report, "wrong_id");
    assert!(
        wrong_id.starts_with("initialize failed: the server answered with id 1000"),
        "{wrong_id}"
    );
    let huge = failed_diagnostic(&report, "huge_line");
    assert!(
        huge.starts_with("the server sent a message larger than 16 MiB"),
        "{huge}"
    );
    engine.close().await;
}

#[tokio::test]
async fn unsolicited_notification_flood_does_not_break_the_connection() {
    let ws = Workspace::new();
    ws.write_servers(json!({
        "chatty": fixture_entry(&FixtureConfig::new().tools(3).notification_flood(50_000)),
    }));
    let engine = Engine::start(ws.engine_config());
    let report = complete(&engine).await;
    let chatty = server(&report, "chatty");
    assert!(chatty.connected, "{chatty:#?}");
    assert_eq!(tool_names(chatty), ["tool_0", "tool_1", "tool_2"]);
    engine.close().await;
}

#[tokio::test]
async fn stderr_flood_keeps_a_bounded_tail_and_a_talking_server_connects() {
    let ws = Workspace::new();
    ws.write_servers(json!({
        "flood_then_exit": secret_entry(
            &FixtureConfig::new().nonce(SECRET_NONCE).stderr_flood(64 * MIB).exit_on_start(2),
        ),
        "flood_then_serve": fixture_entry(&FixtureConfig::new().tools(1).stderr_flood(64 * MIB)),
    }));
    let engine = Engine::start(ws.engine_config());
    let report = complete(&engine).await;
    assert!(server(&report, "flood_then_serve").connected, "{report:#?}");
    let error = failed_diagnostic(&report, "flood_then_exit");
    assert!(
        error.starts_with("the server exited with exit status: 2; stderr: xxx"),
        "{error}"
    );
    assert!(
        error.ends_with("xxx"),
        "the freshest stderr is kept: {error}"
    );
    engine.close().await;
}

/// A server that exits right after every connect is retried with exponential backoff, never in
/// a tight loop. The engine runs real processes, so tokio's paused clock cannot drive it (an
/// idle runtime waiting on pipes would jump straight to the connect timeout); instead the
/// process starts are counted over a real window, against a bound that backoff guarantees
/// however slow the machine is: with delays of at least 0.8 × 800 ms once the backoff is
/// capped, a 3 s window holds at most 5 starts.
#[tokio::test]
async fn crash_loop_is_retried_with_backoff_and_does_not_spin() {
    const WINDOW: Duration = Duration::from_secs(3);
    let ws = Workspace::new();
    let starts_log = ws.file("starts.log");
    let fixture = FixtureConfig::new().tools(1).exit_after(Duration::ZERO, 3);
    let mut script = format!(
        "echo start >> {}; exec {}",
        quoted(&starts_log),
        quoted(fixture_bin())
    );
    for arg in fixture.to_args() {
        script.push(' ');
        script.push_str(&quoted(Path::new(&arg)));
    }
    ws.write_servers(json!({
        "crashy": {"command": "sh", "args": ["-c", script]},
        "ok": fixture_entry(&FixtureConfig::new().tools(1)),
    }));
    let mut config = ws.engine_config();
    config.retry = RetryPolicy {
        enabled: true,
        initial_delay: Duration::from_millis(200),
        max_delay: Duration::from_millis(800),
    };
    let engine = Engine::start(config);
    let starts = || {
        std::fs::read_to_string(&starts_log)
            .map(|text| text.lines().count())
            .unwrap_or(0)
    };
    // Three starts: the first and two retries (delays 200 ms and 400 ms, jittered); from
    // here on every delay is capped at 800 ms ± 20%.
    poll("three starts: the first and two retries (starts are the last seen)")
        .within(PATIENCE)
        .every(Duration::from_millis(20))
        .until(|| async {
            match starts() {
                n if n >= 3 => Ok(()),
                n => Err(n),
            }
        })
        .await;
    let before = starts();
    tokio::time::sleep(WINDOW).await;
    let in_window = starts() - before;
    println!("crash loop: {in_window} process starts in {WINDOW:?} (after {before})");
    // Backoff allows at most 3000 / 640 + 1 = 5 starts in the window; a spinning retry loop
    // starts a process every few tens of milliseconds.
    assert!(
        in_window <= 5,
        "{in_window} starts in {WINDOW:?}: retries spin"
    );

    let report = engine.report();
    assert!(server(&report, "ok").connected, "{report:#?}");
    if let Some(error) = server(&report, "crashy").error.as_deref() {
        assert!(error.contains("exit status: 3"), "{error}");
        assert!(error.len() <= MAX_DIAGNOSTIC_BYTES);
    }
    engine.close().await;
}

fn quoted(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', r"'\''"))
}

// ---------------------------------------------------------------------------------------------
// Memory: the engine runs in a child process (this test binary, re-executed in helper mode), so
// that its peak RSS is its own and not that of parallel tests.

/// Selects the helper scenario in the re-executed test binary.
const HELPER_ENV: &str = "CTXSYNC_HOSTILE_MEMORY_HELPER";
/// Prefix of the helper's one result line on stdout.
const HELPER_RESULT: &str = "hostile-memory-helper-result: ";
/// Peak RSS the engine process may reach while a server sends 256 MiB without a newline.
const PEAK_RSS_BOUND_KIB: u64 = 200 * 1024;

/// Not a test by itself: when re-executed with [`HELPER_ENV`] set, runs the engine against the
/// named hostile server and prints its peak RSS (`VmHWM`) and the server's diagnostic.
#[tokio::test]
async fn memory_helper() {
    let Ok(scenario) = std::env::var(HELPER_ENV) else {
        return;
    };
    let fixture = match scenario.as_str() {
        "healthy" => FixtureConfig::new().tools(1),
        "thousand_tools" => FixtureConfig::new().tools(1000).page_size(1000),
        "huge_line" => FixtureConfig::new()
            .malformed_stdout(MalformedStdout::HugeLine)
            .huge_line_bytes(256 * MIB),
        "stderr_flood" => FixtureConfig::new().tools(1).stderr_flood(64 * MIB),
        other => panic!("unknown helper scenario {other}"),
    };
    let ws = Workspace::new();
    ws.write_servers(json!({"s": fixture_entry(&fixture)}));
    let mut config = ws.engine_config();
    config.connect_timeout = Duration::from_secs(5);
    let started = Instant::now();
    let engine = Engine::start(config);
    let report = complete(&engine).await;
    let elapsed = started.elapsed();
    let s = server(&report, "s");
    let result = json!({
        "peak_rss_kib": peak_rss_kib(),
        "connected": s.connected,
        "tools": s.tools.len(),
        "error": s.error,
        "elapsed_ms": elapsed.as_millis(),
    });
    engine.close().await;
    println!("{HELPER_RESULT}{result}");
}

/// `VmHWM` of this process in KiB.
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/self/status")
}

/// Runs [`memory_helper`] in a child process and returns its result.
fn run_helper(scenario: &str) -> Value {
    let exe = std::env::current_exe().expect("test binary path");
    let output = Command::new(exe)
        .args([
            "--exact",
            // This module's test in the crate's one test binary.
            "hostile::memory_helper",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HELPER_ENV, scenario)
        .env(FIXTURE_BIN_ENV, fixture_bin())
        .output()
        .expect("run the helper");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let result = stdout
        .lines()
        // libtest may print the test's name on the same line first.
        .find_map(|line| Some(&line[line.find(HELPER_RESULT)? + HELPER_RESULT.len()..]))
        .unwrap_or_else(|| {
            panic!(
                "helper {scenario} printed no result ({}):\n{stdout}\n{}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            )
        });
    let result: Value = serde_json::from_str(result).expect("helper result JSON");
    println!("helper {scenario}: {result}");
    result
}

fn peak_of(result: &Value) -> u64 {
    result["peak_rss_kib"].as_u64().expect("peak_rss_kib")
}

#[test]
fn endless_line_keeps_the_engine_memory_bounded() {
    let baseline = run_helper("thousand_tools");
    assert_eq!(
        baseline["tools"], 1000,
        "a full 1000-tool page fits: {baseline}"
    );
    let huge = run_helper("huge_line");
    let peak = peak_of(&huge);
    println!(
        "peak RSS: {} MiB against a 256 MiB line (healthy 1000-tool server: {} MiB)",
        peak / 1024,
        peak_of(&baseline) / 1024
    );
    assert!(peak < PEAK_RSS_BOUND_KIB, "peak RSS {peak} KiB");
    let error = huge["error"].as_str().unwrap_or_default();
    assert!(
        error.starts_with("the server sent a message larger than 16 MiB"),
        "{error}"
    );
}

#[test]
fn stderr_flood_keeps_the_engine_memory_flat() {
    let baseline = run_helper("healthy");
    let flood = run_helper("stderr_flood");
    assert_eq!(flood["connected"], true, "{flood}");
    let (base, peak) = (peak_of(&baseline), peak_of(&flood));
    println!(
        "peak RSS: {} MiB with 64 MiB of stderr (healthy one-tool server: {} MiB)",
        peak / 1024,
        base / 1024
    );
    // Buffering the flood would add 64 MiB or more; a 4 KiB tail adds nothing measurable.
    assert!(peak < base + 32 * 1024, "peak {peak} KiB vs {base} KiB");
}
