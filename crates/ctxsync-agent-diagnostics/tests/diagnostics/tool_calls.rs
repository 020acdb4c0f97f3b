//! Tool calls through the engine (issue 36): the real fixture as a stdio child (and over
//! streamable HTTP), started by an engine from a `.mcp.json`; what reached the server is
//! read from the fixture's call log.

use crate::support;

use std::{
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use ctxsync_agent_diagnostics::{DEFAULT_MAX_RESULT_BYTES, Engine, ToolCaller};
use ctxsync_mcp_fixture::{FixtureConfig, FixtureLifecycle, serve_http};
use ctxsync_mcp_model::{CallEnd, CallProgress, CallReason, CallSpec, CallStatus};
use serde_json::{Map, Value, json};
use support::*;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

const MIB: usize = 1024 * 1024;
/// A secret only the server's entry holds, which its `env` tool prints.
const CANARY: &str = "canary-7f3e9a2c41d8";
/// Far more than any call here takes when it passes.
const LONG: Duration = Duration::from_secs(60);

/// The call tools, logging to `log`.
fn call_fixture(log: &Path) -> FixtureConfig {
    FixtureConfig::new().tools(0).call_tools().call_log(log)
}

/// A workspace whose engine runs the fixture (`s`) with `tune`d config and a secret in
/// its entry's env; discovery is complete when this returns.
struct Setup {
    _ws: Workspace,
    engine: Engine,
    log: PathBuf,
}

impl Setup {
    async fn start(tune: impl FnOnce(FixtureConfig) -> FixtureConfig) -> Self {
        let ws = Workspace::new();
        let log = ws.file("calls.jsonl");
        let mut entry = fixture_entry(&tune(call_fixture(&log)));
        entry["env"] = json!({ "FIXTURE_API_KEY": CANARY });
        ws.write_servers(json!({ "s": entry }));
        let engine = Engine::start(ws.engine_config());
        let report = complete(&engine).await;
        assert!(server(&report, "s").connected, "{report:#?}");
        Self {
            _ws: ws,
            engine,
            log,
        }
    }

    fn caller(&self) -> ToolCaller {
        self.engine.caller()
    }

    /// Waits until the call log has an `event` for `tool`.
    async fn logged(&self, event: &str, tool: &str) {
        let log = self.log.clone();
        poll(format!("{event} of {tool} in the call log"))
            .within(PATIENCE)
            .every(Duration::from_millis(20))
            .until_true(|| {
                let log = log.clone();
                async move { events(&log, tool).iter().any(|e| e == event) }
            })
            .await;
    }
}

/// The events the fixture logged for `tool`, in order.
fn events(log: &Path, tool: &str) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| line["tool"] == tool)
        .filter_map(|line| line["event"].as_str().map(str::to_owned))
        .collect()
}

fn spec(tool: &str, arguments: Value) -> CallSpec {
    let Value::Object(arguments) = arguments else {
        panic!("arguments are an object")
    };
    CallSpec {
        server: "s".into(),
        tool: tool.into(),
        arguments,
        timeout: LONG,
        max_result_bytes: DEFAULT_MAX_RESULT_BYTES,
    }
}

/// Runs a call to its end (bounded), collecting the progress it relayed.
async fn run(caller: &ToolCaller, spec: CallSpec) -> (CallEnd, Vec<CallProgress>) {
    run_with(caller, spec, CancellationToken::new()).await
}

async fn run_with(
    caller: &ToolCaller,
    spec: CallSpec,
    cancel: CancellationToken,
) -> (CallEnd, Vec<CallProgress>) {
    let (tx, mut rx) = mpsc::channel(64);
    let end = tokio::time::timeout(LONG + PATIENCE, caller.call(spec, tx, cancel))
        .await
        .expect("the call ends");
    // A failed call's message reaches the model and the audit log: words only.
    if let Some(error) = &end.error {
        ctxsync_test_support::assert_in_words(&error.message);
    }
    let mut progress = Vec::new();
    while let Ok(report) = rx.try_recv() {
        progress.push(report);
    }
    (end, progress)
}

fn text_of(end: &CallEnd) -> &str {
    end.result.as_ref().expect("a result")["content"][0]["text"]
        .as_str()
        .expect("a text block")
}

fn assert_complete(end: &CallEnd, is_error: bool) {
    assert_eq!(end.status, CallStatus::Complete, "{end:?}");
    let result = end.result.as_ref().expect("a result");
    assert_eq!(
        result["isError"].as_bool().unwrap_or(false),
        is_error,
        "{result}"
    );
}

#[tokio::test]
async fn a_call_completes_with_its_text_and_leaves_discovery_alone() {
    let setup = Setup::start(|c| c).await;
    let before = setup.engine.report();
    let history = History::record(&setup.engine);
    let caller = setup.caller();
    assert!(caller.lists("s", "count"));
    assert!(!caller.lists("s", "no_such_tool"));
    assert!(!caller.lists("other", "count"));

    for expect in ["1", "2"] {
        let (end, _) = run(&caller, spec("count", json!({}))).await;
        assert_complete(&end, false);
        assert_eq!(text_of(&end), expect);
        assert!(!end.truncated);
    }
    let (end, _) = run(&caller, spec("sleep", json!({"ms": 10}))).await;
    assert_eq!(text_of(&end), "slept 10 ms");

    assert_eq!(setup.engine.report(), before, "a call changed the report");
    assert_eq!(history.reports().len(), 1, "a call published a report");
    assert_eq!(
        events(&setup.log, "count"),
        ["started", "finished", "started", "finished"]
    );
    setup.engine.close().await;
}

#[tokio::test]
async fn progress_is_relayed_in_order() {
    let setup = Setup::start(|c| c).await;
    let (end, progress) = run(
        &setup.caller(),
        spec("progress", json!({"steps": 3, "interval_ms": 20})),
    )
    .await;
    assert_complete(&end, false);
    assert_eq!(text_of(&end), "done");
    let expect: Vec<CallProgress> = (1..=3)
        .map(|step| CallProgress {
            progress: f64::from(step),
            total: Some(3.0),
            message: Some(format!("step {step} of 3")),
        })
        .collect();
    assert_eq!(progress, expect);
    setup.engine.close().await;
}

#[tokio::test]
async fn a_deadline_ends_the_call_timed_out_and_cancels_it_on_the_server() {
    let setup = Setup::start(|c| c).await;
    let mut call = spec("sleep", json!({"ms": 600_000}));
    call.timeout = Duration::from_millis(300);
    let started = Instant::now();
    let (end, _) = run(&setup.caller(), call).await;
    assert_eq!(end.status, CallStatus::TimedOut, "{end:?}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    setup.logged("cancelled", "sleep").await;
    assert_eq!(events(&setup.log, "sleep"), ["started", "cancelled"]);

    // The connection is still good for the next call.
    let (end, _) = run(&setup.caller(), spec("count", json!({}))).await;
    assert_complete(&end, false);
    setup.engine.close().await;
}

#[tokio::test]
async fn a_cancel_ends_the_call_canceled_and_cancels_it_on_the_server() {
    let setup = Setup::start(|c| c).await;
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    let log = setup.log.clone();
    tokio::spawn(async move {
        // Cancel once the call is running on the server.
        while !events(&log, "sleep").iter().any(|e| e == "started") {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        trigger.cancel();
    });
    let (end, _) = run_with(
        &setup.caller(),
        spec("sleep", json!({"ms": 600_000})),
        cancel,
    )
    .await;
    assert_eq!(end.status, CallStatus::Canceled, "{end:?}");
    setup.logged("cancelled", "sleep").await;
    assert_eq!(events(&setup.log, "sleep"), ["started", "cancelled"]);
    setup.engine.close().await;
}

#[tokio::test]
async fn a_server_ignoring_the_cancel_does_not_hold_the_call_past_its_deadline() {
    let setup = Setup::start(|c| c).await;
    let mut call = spec("sleep", json!({"ms": 600_000, "ignore_cancel": true}));
    call.timeout = Duration::from_millis(300);
    let started = Instant::now();
    let (end, _) = run(&setup.caller(), call).await;
    assert_eq!(end.status, CallStatus::TimedOut, "{end:?}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    setup.logged("cancelled", "sleep").await;
    assert_eq!(events(&setup.log, "sleep"), ["started", "cancelled"]);
    setup.engine.close().await;
}

#[tokio::test]
async fn tool_errors_complete_and_rpc_errors_end_in_error_with_their_code() {
    let setup = Setup::start(|c| c).await;
    let caller = setup.caller();
    let (end, _) = run(
        &caller,
        spec("fail", json!({"mode": "tool", "message": "the tool broke"})),
    )
    .await;
    assert_complete(&end, true);
    assert_eq!(text_of(&end), "the tool broke");

    let (end, _) = run(
        &caller,
        spec("fail", json!({"mode": "rpc", "message": "bad arguments"})),
    )
    .await;
    assert_eq!(end.status, CallStatus::Error, "{end:?}");
    let error = end.error.expect("an error");
    assert_eq!(error.code, -32602);
    assert!(error.message.contains("bad arguments"), "{error:?}");
    setup.engine.close().await;
}

#[tokio::test]
async fn a_10_mib_result_is_capped_on_a_character_boundary() {
    let setup = Setup::start(|c| c).await;
    let caller = setup.caller();
    for cap in [DEFAULT_MAX_RESULT_BYTES, 1000] {
        let mut call = spec("sized_result", json!({"bytes": 10 * MIB}));
        call.max_result_bytes = cap;
        let (end, _) = run(&caller, call).await;
        assert_complete(&end, false);
        assert!(end.truncated);
        let serialized = serde_json::to_vec(end.result.as_ref().expect("a result")).expect("json");
        assert!(serialized.len() <= cap, "{} > {cap}", serialized.len());
        assert!(
            serialized.len() > cap - 64,
            "the cap is used: {}",
            serialized.len()
        );
        let text = text_of(&end);
        assert!(
            text.starts_with("abcdefgh é € 😀\nabcdefgh"),
            "{}",
            &text[..40]
        );
        assert!(
            text.ends_with("... [truncated]"),
            "{}",
            &text[text.len() - 40..]
        );
    }
    setup.engine.close().await;
}

#[tokio::test]
async fn structured_content_that_does_not_fit_is_dropped() {
    let setup = Setup::start(|c| c).await;
    let caller = setup.caller();
    let mut call = spec("sized_result", json!({"bytes": 1000, "structured": true}));
    call.max_result_bytes = 1500;
    let (end, _) = run(&caller, call.clone()).await;
    assert_complete(&end, false);
    assert!(end.truncated);
    let result = end.result.as_ref().expect("a result");
    assert!(result.get("structuredContent").is_none(), "{result}");
    assert_eq!(text_of(&end).len(), 1000, "the text fits whole");

    call.max_result_bytes = 4000;
    let (end, _) = run(&caller, call).await;
    assert!(!end.truncated);
    assert_eq!(
        end.result.as_ref().expect("a result")["structuredContent"]["text"]
            .as_str()
            .map(str::len),
        Some(1000)
    );
    setup.engine.close().await;
}

#[tokio::test]
async fn an_image_over_the_cap_becomes_a_placeholder() {
    let setup = Setup::start(|c| c).await;
    let mut call = spec("image", json!({"bytes": 300_000}));
    call.max_result_bytes = 4096;
    let (end, _) = run(&setup.caller(), call).await;
    assert_complete(&end, false);
    assert!(end.truncated);
    let text = text_of(&end);
    assert!(
        text.contains("image content (image/png, 300000 bytes)"),
        "{text}"
    );
    let serialized = serde_json::to_vec(end.result.as_ref().expect("a result")).expect("json");
    assert!(serialized.len() <= 4096);

    // Within the cap, the image comes back as it is.
    let (end, _) = run(&setup.caller(), spec("image", json!({"bytes": 100}))).await;
    assert!(!end.truncated);
    let block = &end.result.as_ref().expect("a result")["content"][0];
    assert_eq!(block["type"], "image");
    assert_eq!(block["mimeType"], "image/png");
    setup.engine.close().await;
}

#[tokio::test]
async fn a_secret_from_the_servers_env_comes_back_redacted() {
    let setup = Setup::start(|c| c).await;
    let caller = setup.caller();
    let (end, _) = run(&caller, spec("env", json!({"name": "FIXTURE_API_KEY"}))).await;
    assert_complete(&end, false);
    assert_eq!(text_of(&end), "[redacted]");

    // An error message carrying it too.
    let message = format!("rejected {CANARY} here");
    let (end, _) = run(
        &caller,
        spec("fail", json!({"mode": "rpc", "message": message})),
    )
    .await;
    let error = end.error.as_ref().expect("an error");
    assert!(
        error.message.contains("rejected [redacted] here"),
        "{error:?}"
    );
    assert!(!format!("{end:?}").contains(CANARY));
    setup.engine.close().await;
}

#[tokio::test]
async fn sampling_is_declined_without_hanging() {
    // Before 2026-07-28 the fixture asks sampling/createMessage during the call.
    let setup = Setup::start(|c| c).await;
    let started = Instant::now();
    let (end, _) = run(&setup.caller(), spec("sample", json!({}))).await;
    assert_complete(&end, true);
    assert!(
        text_of(&end).starts_with("sampling refused by the client: "),
        "{end:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    setup.engine.close().await;

    // On 2026-07-28 it answers input_required, which the agent cannot fulfil.
    let setup = Setup::start(|c| c.lifecycle(FixtureLifecycle::Modern)).await;
    let (end, _) = run(&setup.caller(), spec("sample", json!({}))).await;
    assert_eq!(end.status, CallStatus::Error, "{end:?}");
    let error = end.error.expect("an error");
    assert_eq!(error.code, 0);
    assert!(error.message.contains("input"), "{error:?}");
    // Other calls work on that lifecycle.
    let (end, _) = run(&setup.caller(), spec("count", json!({}))).await;
    assert_complete(&end, false);
    setup.engine.close().await;
}

#[tokio::test]
async fn unknown_tools_and_servers_are_refused_as_gone() {
    let setup = Setup::start(|c| c).await;
    let caller = setup.caller();
    let gone = CallEnd::with_reason(CallStatus::Refused, CallReason::ToolGone);
    let (end, _) = run(&caller, spec("no_such_tool", json!({}))).await;
    assert_eq!(end, gone);
    let mut call = spec("count", json!({}));
    call.server = "other".into();
    assert_eq!(run(&caller, call).await.0, gone);

    // A closed engine's servers are gone too.
    setup.engine.close().await;
    assert!(!caller.lists("s", "count"));
    assert_eq!(run(&caller, spec("count", json!({}))).await.0, gone);
    assert!(events(&setup.log, "count").is_empty());
    assert_eq!(
        run(&ToolCaller::default(), spec("count", json!({})))
            .await
            .0,
        gone
    );
}

#[tokio::test]
async fn a_connection_that_dies_during_the_call_ends_it_in_error() {
    let setup = Setup::start(|c| c.exit_after(Duration::from_millis(500), 3)).await;
    let (end, _) = run(&setup.caller(), spec("sleep", json!({"ms": 600_000}))).await;
    assert_eq!(end.status, CallStatus::Error, "{end:?}");
    let error = end.error.expect("an error");
    assert_eq!(
        (error.code, error.message.as_str()),
        (0, "the MCP server's connection closed during the call")
    );
    setup.engine.close().await;
}

#[tokio::test]
async fn calls_run_over_streamable_http() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("calls.jsonl");
    let fixture = serve_http(call_fixture(&log).http()).await.expect("serve");
    let ws = Workspace::new();
    ws.write_servers(json!({ "s": {"type": "http", "url": fixture.url()} }));
    let engine = Engine::start(ws.engine_config());
    let report = complete(&engine).await;
    assert!(server(&report, "s").connected, "{report:#?}");
    let caller = engine.caller();
    let (end, progress) = run(
        &caller,
        spec("progress", json!({"steps": 2, "interval_ms": 10})),
    )
    .await;
    assert_complete(&end, false);
    assert_eq!(progress.len(), 2, "{progress:?}");
    let mut call = spec("sleep", json!({"ms": 600_000}));
    call.timeout = Duration::from_millis(300);
    assert_eq!(run(&caller, call).await.0.status, CallStatus::TimedOut);
    poll("the HTTP server to see the cancel")
        .within(PATIENCE)
        .every(Duration::from_millis(20))
        .until_true(|| {
            let log = log.clone();
            async move { events(&log, "sleep").iter().any(|e| e == "cancelled") }
        })
        .await;
    engine.close().await;
}

/// Arguments pass through untouched (a map, not a string).
#[tokio::test]
async fn arguments_reach_the_tool() {
    let setup = Setup::start(|c| c).await;
    let mut arguments = Map::new();
    arguments.insert("bytes".into(), json!(5));
    let mut call = spec("sized_result", json!({}));
    call.arguments = arguments;
    let (end, _) = run(&setup.caller(), call).await;
    assert_eq!(text_of(&end), "abcde");
    setup.engine.close().await;
}

#[tokio::test]
async fn a_result_over_the_message_limit_fails_only_its_call() {
    let setup = Setup::start(|c| c).await;
    let before = setup.engine.report();
    let history = History::record(&setup.engine);
    let caller = setup.caller();
    let (end, _) = run(&caller, spec("sized_result", json!({"bytes": 17 * MIB}))).await;
    assert_eq!(end.status, CallStatus::Error, "{end:?}");
    let error = end.error.expect("an error");
    assert_eq!(error.code, 0);
    assert!(error.message.contains("16 MiB message limit"), "{error:?}");

    // The connection and discovery are untouched: the next call runs on the same process.
    let (end, _) = run(&caller, spec("count", json!({}))).await;
    assert_complete(&end, false);
    assert_eq!(text_of(&end), "1");
    assert_eq!(setup.engine.report(), before);
    assert_eq!(history.reports().len(), 1, "a call published a report");
    setup.engine.close().await;
}
