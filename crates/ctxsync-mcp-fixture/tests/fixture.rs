//! Drives the fixture as a real child process (stdio and HTTP) and in-process over HTTP.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use ctxsync_mcp_fixture::{FixtureConfig, FixtureLifecycle, ToolSpec, serve_http};
use rmcp::{
    ClientHandler, ClientLifecycleMode, ClientServiceExt, ErrorData, RoleClient, ServiceError,
    ServiceExt,
    model::{
        CallToolRequest, CallToolRequestParams, CallToolResponse, CallToolResult, ClientRequest,
        CreateMessageRequestMethod, ErrorCode, PaginatedRequestParams, ProgressNotificationParam,
        ProtocolVersion, Tool,
    },
    service::{NotificationContext, PeerRequestOptions, RequestContext, RunningService},
    transport::{
        StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use serde_json::json;
use tokio::{
    io::AsyncBufReadExt,
    process::{Child, Command},
    sync::Notify,
};

const BIN: &str = env!("CARGO_BIN_EXE_ctxsync-mcp-fixture");
/// Generous bound for a local round trip; tests never wait this long when things work.
const STEP: Duration = Duration::from_secs(10);

#[derive(Clone, Default)]
struct Client {
    tools_changed: Arc<Notify>,
    /// Progress notifications in the order they arrived.
    progress: Arc<Mutex<Vec<ProgressNotificationParam>>>,
    progress_seen: Arc<Notify>,
    /// What this client's model answers to sampling; `None` declines (the SDK's default).
    sampling_answer: Option<&'static str>,
}

impl ClientHandler for Client {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.tools_changed.notify_one();
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(params);
        self.progress_seen.notify_one();
    }

    #[expect(deprecated, reason = "the fixture's `sample` tool exercises sampling")]
    async fn create_message(
        &self,
        _params: rmcp::model::CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<rmcp::model::CreateMessageResult, ErrorData> {
        match self.sampling_answer {
            Some(answer) => Ok(rmcp::model::CreateMessageResult::new(
                rmcp::model::SamplingMessage::assistant_text(answer),
                "test-model".into(),
            )),
            None => Err(ErrorData::method_not_found::<CreateMessageRequestMethod>()),
        }
    }
}

type Session = RunningService<RoleClient, Client>;

fn command(config: &FixtureConfig) -> Command {
    let mut command = Command::new(BIN);
    command
        .args(config.to_args())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

fn spawn(config: &FixtureConfig) -> Child {
    command(config).spawn().expect("spawn fixture")
}

async fn connect_stdio(config: &FixtureConfig, client: Client) -> (Child, Session) {
    connect_command(command(config), client).await
}

async fn connect_command(mut command: Command, client: Client) -> (Child, Session) {
    let mut child = command.spawn().expect("spawn fixture");
    let stdout = child.stdout.take().expect("stdout");
    let stdin = child.stdin.take().expect("stdin");
    let session = tokio::time::timeout(STEP, client.serve((stdout, stdin)))
        .await
        .expect("initialize in time")
        .expect("initialize ok");
    (child, session)
}

async fn all_tools(session: &Session) -> Vec<Tool> {
    tokio::time::timeout(STEP, session.peer().list_all_tools())
        .await
        .expect("list in time")
        .expect("list ok")
}

fn names(tools: &[Tool]) -> Vec<String> {
    tools.iter().map(|tool| tool.name.to_string()).collect()
}

async fn whoami(session: &Session) -> String {
    let result = session
        .peer()
        .call_tool(CallToolRequestParams::new("whoami"))
        .await
        .expect("whoami");
    let value = serde_json::to_value(&result.content).expect("content json");
    value[0]["text"].as_str().expect("text content").to_owned()
}

#[tokio::test]
async fn stdio_tool_counts() {
    for (config, expect) in [
        (FixtureConfig::new().tools(0), vec![]),
        (FixtureConfig::new().tools(2), vec!["tool_0", "tool_1"]),
        (
            FixtureConfig::new()
                .tool(ToolSpec::new("read_file", "Reads a file"))
                .tools(1)
                .whoami(),
            vec!["read_file", "tool_0", "whoami"],
        ),
    ] {
        let (_child, session) = connect_stdio(&config, Client::default()).await;
        assert_eq!(names(&all_tools(&session).await), expect, "{config:?}");
        session.cancel().await.expect("close");
    }
}

#[tokio::test]
async fn nonce_identifies_the_instance() {
    let config = FixtureConfig::new()
        .tools(1)
        .whoami()
        .nonce_in_descriptions();
    let (_a, first) = connect_stdio(&config, Client::default()).await;
    let (_b, second) = connect_stdio(&config, Client::default()).await;
    let (nonce_a, nonce_b) = (whoami(&first).await, whoami(&second).await);
    assert_ne!(nonce_a, nonce_b);
    let description = all_tools(&first).await[0]
        .description
        .clone()
        .unwrap_or_default();
    assert!(description.contains(&nonce_a), "{description}");

    let fixed = FixtureConfig::new().tools(0).whoami().nonce("fixed-nonce");
    let (_c, third) = connect_stdio(&fixed, Client::default()).await;
    assert_eq!(whoami(&third).await, "fixed-nonce");
}

#[tokio::test]
async fn paging_and_repeated_cursor() {
    let (_child, session) = connect_stdio(
        &FixtureConfig::new().tools(5).page_size(2),
        Client::default(),
    )
    .await;
    let mut cursor = None;
    let mut pages = Vec::new();
    loop {
        let params = cursor.map(|c| PaginatedRequestParams::default().with_cursor(Some(c)));
        let page = session.peer().list_tools(params).await.expect("page");
        pages.push(names(&page.tools));
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert_eq!(
        pages,
        [
            vec!["tool_0", "tool_1"],
            vec!["tool_2", "tool_3"],
            vec!["tool_4"]
        ]
    );

    let (_child, session) = connect_stdio(
        &FixtureConfig::new().tools(3).repeat_cursor(),
        Client::default(),
    )
    .await;
    let first = session.peer().list_tools(None).await.expect("first page");
    let cursor = first.next_cursor.clone().expect("a cursor");
    let params = PaginatedRequestParams::default().with_cursor(Some(cursor.clone()));
    let second = session
        .peer()
        .list_tools(Some(params))
        .await
        .expect("page 2");
    assert_eq!(second.next_cursor, Some(cursor));
}

#[tokio::test]
async fn more_than_a_thousand_tools() {
    let (_child, session) =
        connect_stdio(&FixtureConfig::new().tools(1500), Client::default()).await;
    assert_eq!(all_tools(&session).await.len(), 1500);
}

#[tokio::test]
async fn initialize_delay_hang_and_failure() {
    let delay = Duration::from_millis(300);
    let started = Instant::now();
    let (_child, _session) =
        connect_stdio(&FixtureConfig::new().init_delay(delay), Client::default()).await;
    assert!(started.elapsed() >= delay, "{:?}", started.elapsed());

    let mut child = spawn(&FixtureConfig::new().hang());
    let transport = (
        child.stdout.take().expect("out"),
        child.stdin.take().expect("in"),
    );
    let hung = tokio::time::timeout(
        Duration::from_millis(500),
        Client::default().serve(transport),
    );
    assert!(
        hung.await.is_err(),
        "a hung fixture must not answer initialize"
    );

    let mut child = spawn(&FixtureConfig::new().fail_initialize("no way: hunter22"));
    let transport = (
        child.stdout.take().expect("out"),
        child.stdin.take().expect("in"),
    );
    let error = tokio::time::timeout(STEP, Client::default().serve(transport))
        .await
        .expect("answer in time")
        .err()
        .expect("initialize fails");
    assert!(error.to_string().contains("hunter22"), "{error}");
}

#[tokio::test]
async fn scripted_exits() {
    let mut child = spawn(&FixtureConfig::new().exit_on_start(3));
    let status = tokio::time::timeout(STEP, child.wait())
        .await
        .expect("exits")
        .expect("status");
    assert_eq!(status.code(), Some(3));

    let dir = tempfile::tempdir().expect("tempdir");
    let marker = dir.path().join("exited-once");
    let config = FixtureConfig::new()
        .tools(1)
        .exit_after(Duration::from_millis(100), 4)
        .exit_once(&marker);
    let (mut first, session) = connect_stdio(&config, Client::default()).await;
    assert_eq!(all_tools(&session).await.len(), 1);
    let status = tokio::time::timeout(STEP, first.wait())
        .await
        .expect("exits")
        .expect("status");
    assert_eq!(status.code(), Some(4));
    assert!(marker.exists());

    let (mut second, session) = connect_stdio(&config, Client::default()).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        second.try_wait().expect("try_wait").is_none(),
        "second run stays up"
    );
    assert_eq!(all_tools(&session).await.len(), 1);
}

#[tokio::test]
async fn stderr_secret_flood_and_pid_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pid_file = dir.path().join("pid");
    let child = spawn(
        &FixtureConfig::new()
            .stderr_flood(100_000)
            .stderr_secret("hunter2-secret", 5)
            .pid_file(&pid_file),
    );
    let pid = child.id().expect("pid");
    let output = tokio::time::timeout(STEP, child.wait_with_output())
        .await
        .expect("exits")
        .expect("output");
    assert_eq!(output.status.code(), Some(5));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("hunter2-secret"));
    assert!(stderr.len() > 100_000, "{}", stderr.len());
    assert_eq!(
        std::fs::read_to_string(&pid_file).expect("pid file"),
        pid.to_string()
    );
}

#[tokio::test]
async fn tools_list_changed_is_sent() {
    let client = Client::default();
    let changed = client.tools_changed.clone();
    let config = FixtureConfig::new()
        .tools(2)
        .change_tools_after(Duration::from_millis(100), 3);
    let (_child, session) = connect_stdio(&config, client).await;
    assert_eq!(names(&all_tools(&session).await), ["tool_0", "tool_1"]);
    tokio::time::timeout(STEP, changed.notified())
        .await
        .expect("list_changed");
    assert_eq!(
        names(&all_tools(&session).await),
        ["changed_0", "changed_1", "changed_2"]
    );
}

async fn connect_http(url: &str, header: Option<(&str, &str)>) -> Result<Session, String> {
    let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_owned());
    if let Some((name, value)) = header {
        config = config.custom_headers(
            [(
                http::HeaderName::from_bytes(name.as_bytes()).expect("name"),
                http::HeaderValue::from_str(value).expect("value"),
            )]
            .into(),
        );
    }
    let transport = StreamableHttpClientTransport::from_config(config);
    tokio::time::timeout(STEP, Client::default().serve(transport))
        .await
        .expect("answer in time")
        .map_err(|e| e.to_string())
}

#[tokio::test]
async fn http_in_process_with_required_header() {
    let fixture = serve_http(
        FixtureConfig::new()
            .tools(3)
            .whoami()
            .require_header("X-Api-Key", "letmein"),
    )
    .await
    .expect("serve");
    let denied = connect_http(&fixture.url(), None).await.err().expect("401");
    assert!(
        denied.contains("401") || denied.to_lowercase().contains("auth"),
        "{denied}"
    );
    let wrong = connect_http(&fixture.url(), Some(("x-api-key", "nope"))).await;
    assert!(wrong.is_err());

    let session = connect_http(&fixture.url(), Some(("x-api-key", "letmein")))
        .await
        .expect("connect");
    assert_eq!(all_tools(&session).await.len(), 4);
    assert_eq!(whoami(&session).await, fixture.nonce());
    session.cancel().await.expect("close");
    fixture.shutdown().await;
}

#[tokio::test]
async fn http_process_prints_its_url() {
    let mut child = spawn(&FixtureConfig::new().http().tools(1).whoami().nonce("proc"));
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let url = tokio::time::timeout(STEP, lines.next_line())
        .await
        .expect("url in time")
        .expect("read")
        .expect("a line");
    assert!(
        url.starts_with("http://127.0.0.1:") && url.ends_with("/mcp"),
        "{url}"
    );
    let session = connect_http(&url, None).await.expect("connect");
    assert_eq!(whoami(&session).await, "proc");
    child.kill().await.expect("kill");
}

#[test]
fn binary_path_builds_or_finds_the_binary() {
    let path = ctxsync_mcp_fixture::binary_path().expect("fixture binary");
    assert!(path.is_file(), "{}", path.display());
    assert_eq!(
        path.file_name().and_then(|n| n.to_str()),
        Some("ctxsync-mcp-fixture")
    );
    // A second call is answered from the cache.
    assert_eq!(ctxsync_mcp_fixture::binary_path().expect("again"), path);
}

/// The `--call-log` lines written so far.
fn call_log(path: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect()
}

/// The events logged for the call with `request_id`, in order.
fn events_of(path: &Path, request_id: &serde_json::Value) -> Vec<String> {
    call_log(path)
        .into_iter()
        .filter(|line| &line["request_id"] == request_id)
        .map(|line| line["event"].as_str().expect("event").to_owned())
        .collect()
}

/// Polls the call log until `request_id` has logged `events`, or fails after [`STEP`].
async fn wait_for_events(path: &Path, request_id: &serde_json::Value, events: &[&str]) {
    let started = Instant::now();
    loop {
        let seen = events_of(path, request_id);
        if seen == events {
            return;
        }
        assert!(
            started.elapsed() < STEP,
            "call {request_id}: expected {events:?}, saw {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn arguments(value: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
    match value {
        serde_json::Value::Object(map) => map,
        other => panic!("arguments must be an object: {other}"),
    }
}

async fn call(
    session: &Session,
    name: &'static str,
    args: serde_json::Value,
) -> Result<CallToolResult, ServiceError> {
    let params = CallToolRequestParams::new(name).with_arguments(arguments(args));
    tokio::time::timeout(STEP, session.peer().call_tool(params))
        .await
        .expect("answer in time")
}

fn text_of(result: &CallToolResult) -> String {
    let value = serde_json::to_value(&result.content).expect("content json");
    value[0]["text"].as_str().expect("text content").to_owned()
}

/// Starts `sleep`, cancels it once the server logged `started`, and checks the log.
async fn cancel_sleep(session: &Session, log: &Path, ms: u64, ignore_cancel: bool) {
    let params = CallToolRequestParams::new("sleep").with_arguments(arguments(
        json!({ "ms": ms, "ignore_cancel": ignore_cancel }),
    ));
    let handle = session
        .peer()
        .send_cancellable_request(
            ClientRequest::CallToolRequest(CallToolRequest::new(params)),
            PeerRequestOptions::no_options(),
        )
        .await
        .expect("send sleep");
    let id = serde_json::to_value(&handle.id).expect("id json");
    wait_for_events(log, &id, &["started"]).await;
    handle
        .cancel(Some("test cancels".into()))
        .await
        .expect("cancel");
    if ignore_cancel {
        wait_for_events(log, &id, &["started", "cancelled", "finished"]).await;
    } else {
        wait_for_events(log, &id, &["started", "cancelled"]).await;
    }
}

fn call_tools_config(log: &Path) -> FixtureConfig {
    FixtureConfig::new().tools(0).call_tools().call_log(log)
}

/// A call-tools fixture over stdio with its call log in a temporary directory.
struct CallFixture {
    log: PathBuf,
    session: Session,
    _child: Child,
    _dir: tempfile::TempDir,
}

async fn call_fixture(client: Client) -> CallFixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("calls.jsonl");
    let (child, session) = connect_stdio(&call_tools_config(&log), client).await;
    CallFixture {
        log,
        session,
        _child: child,
        _dir: dir,
    }
}

#[tokio::test]
async fn sleep_cancellation_reaches_the_server_over_stdio() {
    let fixture = call_fixture(Client::default()).await;
    let (session, log) = (&fixture.session, &fixture.log);
    // A minute-long sleep only ends this quickly because the cancellation stopped it.
    cancel_sleep(session, log, 60_000, false).await;
    cancel_sleep(session, log, 300, true).await;

    let done = call(session, "sleep", json!({ "ms": 1 }))
        .await
        .expect("sleep");
    assert_eq!(text_of(&done), "slept 1 ms");
}

#[tokio::test]
async fn sleep_cancellation_reaches_the_server_over_http() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("calls.jsonl");
    let fixture = serve_http(call_tools_config(&log)).await.expect("serve");
    let session = connect_http(&fixture.url(), None).await.expect("connect");
    cancel_sleep(&session, &log, 60_000, false).await;
    cancel_sleep(&session, &log, 300, true).await;
    session.cancel().await.expect("close");
    fixture.shutdown().await;
}

#[tokio::test]
async fn sized_results_and_images_are_exact() {
    let fixture = call_fixture(Client::default()).await;
    let session = &fixture.session;
    for bytes in [0_usize, 1, 14, 100_000] {
        let result = call(session, "sized_result", json!({ "bytes": bytes }))
            .await
            .expect("sized_result");
        assert_eq!(text_of(&result).len(), bytes);
        assert_eq!(result.structured_content, None);
    }
    let result = call(
        session,
        "sized_result",
        json!({ "bytes": 5000, "structured": true }),
    )
    .await
    .expect("structured");
    let text = text_of(&result);
    assert_eq!(text.len(), 5000);
    assert!(
        text.chars().any(|c| c.len_utf8() == 4),
        "a 4-byte character"
    );
    assert!(
        text.chars().any(|c| c.len_utf8() == 2),
        "a 2-byte character"
    );
    let structured = result.structured_content.expect("structuredContent");
    assert_eq!(structured["text"].as_str().map(str::len), Some(5000));

    let image = call(session, "image", json!({ "bytes": 1000 }))
        .await
        .expect("image");
    let block = serde_json::to_value(&image.content).expect("content json");
    assert_eq!(block.as_array().map(Vec::len), Some(1));
    assert_eq!(block[0]["type"], "image");
    assert_eq!(block[0]["mimeType"], "image/png");
    let data = block[0]["data"].as_str().expect("data");
    // Base64 of 1000 bytes: 334 groups of four characters, the last padded.
    assert_eq!(data.len(), 1336);
    assert!(
        data.starts_with("iVBORw0KGgo") && data.ends_with("A=="),
        "{data:.20}"
    );
}

#[tokio::test]
async fn fail_answers_a_tool_error_or_an_rpc_error() {
    let fixture = call_fixture(Client::default()).await;
    let session = &fixture.session;
    let fail = |mode: &str, message: &str| {
        call(session, "fail", json!({ "mode": mode, "message": message }))
    };
    let result = fail("tool", "tool broke").await.expect("a result");
    assert_eq!(result.is_error, Some(true));
    assert_eq!(text_of(&result), "tool broke");

    let error = fail("rpc", "rpc broke").await.expect_err("an error");
    let ServiceError::McpError(error) = error else {
        panic!("expected a JSON-RPC error, got {error}");
    };
    assert_eq!(error.code, ErrorCode::INVALID_PARAMS);
    assert_eq!(error.message, "rpc broke");
}

#[tokio::test]
async fn progress_notifications_arrive_in_order() {
    let client = Client::default();
    let (progress, seen) = (client.progress.clone(), client.progress_seen.clone());
    let fixture = call_fixture(client).await;
    let session = &fixture.session;
    let result = call(
        session,
        "progress",
        json!({ "steps": 4, "interval_ms": 10 }),
    )
    .await
    .expect("progress");
    assert_eq!(text_of(&result), "done");
    let started = Instant::now();
    let received = loop {
        let received = progress.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if received.len() >= 4 || started.elapsed() > STEP {
            break received;
        }
        // Notifications are handled apart from the response; wait for the last ones.
        let _ = tokio::time::timeout(Duration::from_millis(100), seen.notified()).await;
    };
    let steps: Vec<(f64, Option<f64>, Option<String>)> = received
        .into_iter()
        .map(|p| (p.progress, p.total, p.message))
        .collect();
    let expected: Vec<(f64, Option<f64>, Option<String>)> = (1..=4)
        .map(|step| {
            let message = format!("step {step} of 4");
            (f64::from(step), Some(4.0), Some(message))
        })
        .collect();
    assert_eq!(steps, expected);
}

#[tokio::test]
async fn env_returns_the_variable() {
    let mut command = command(&FixtureConfig::new().tools(0).call_tools());
    command
        .env("FIXTURE_TEST_SECRET", "hunter2-in-env")
        .env_remove("FIXTURE_TEST_UNSET");
    let (_child, session) = connect_command(command, Client::default()).await;
    let result = call(&session, "env", json!({ "name": "FIXTURE_TEST_SECRET" }))
        .await
        .expect("env");
    assert_eq!(result.is_error, Some(false));
    assert_eq!(text_of(&result), "hunter2-in-env");
    let unset = call(&session, "env", json!({ "name": "FIXTURE_TEST_UNSET" }))
        .await
        .expect("env");
    assert_eq!(unset.is_error, Some(true));
}

#[tokio::test]
async fn count_increases_and_every_call_is_logged() {
    let fixture = call_fixture(Client::default()).await;
    let (session, log) = (&fixture.session, &fixture.log);
    for expected in ["1", "2", "3"] {
        let result = call(session, "count", json!({})).await.expect("count");
        assert_eq!(text_of(&result), expected);
    }
    let lines = call_log(log);
    let events: Vec<(&str, &str)> = lines
        .iter()
        .map(|line| {
            assert!(line["request_id"].is_number(), "{line}");
            (
                line["event"].as_str().expect("event"),
                line["tool"].as_str().expect("tool"),
            )
        })
        .collect();
    assert_eq!(
        events,
        [("started", "count"), ("finished", "count")].repeat(3)
    );
}

#[tokio::test]
async fn sample_before_2026_07_28_asks_the_client() {
    let fixture = call_fixture(Client::default()).await;
    let session = &fixture.session;
    let declined = call(session, "sample", json!({})).await.expect("a result");
    assert_eq!(declined.is_error, Some(true));
    let text = text_of(&declined);
    assert!(text.starts_with("sampling refused by the client"), "{text}");

    let client = Client {
        sampling_answer: Some("hello, fixture"),
        ..Client::default()
    };
    let fixture = call_fixture(client).await;
    let session = &fixture.session;
    let answered = call(session, "sample", json!({})).await.expect("a result");
    assert_eq!(answered.is_error, Some(false));
    assert_eq!(text_of(&answered), "hello, fixture");
    let structured = answered.structured_content.expect("structuredContent");
    assert_eq!(structured["model"], "test-model");
}

async fn connect_modern(config: &FixtureConfig, client: Client) -> (Child, Session) {
    let mut child = spawn(config);
    let transport = (
        child.stdout.take().expect("stdout"),
        child.stdin.take().expect("stdin"),
    );
    let lifecycle = ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    };
    let session = tokio::time::timeout(STEP, client.serve_with_lifecycle(transport, lifecycle))
        .await
        .expect("discover in time")
        .expect("discover ok");
    (child, session)
}

#[tokio::test]
async fn sample_on_2026_07_28_answers_input_required() {
    let config = FixtureConfig::new()
        .tools(0)
        .call_tools()
        .lifecycle(FixtureLifecycle::Modern);
    let client = Client {
        sampling_answer: Some("hello, modern fixture"),
        ..Client::default()
    };
    let (_child, session) = connect_modern(&config, client).await;

    let first = session
        .peer()
        .call_tool_once(CallToolRequestParams::new("sample"))
        .await
        .expect("first round");
    let CallToolResponse::InputRequired(required) = first else {
        panic!("expected input_required, got {first:?}");
    };
    let requests = required.input_requests.expect("input requests");
    assert_eq!(requests.keys().collect::<Vec<_>>(), ["sample"]);

    // The SDK's client fulfils the request through its handler and retries.
    let answered = tokio::time::timeout(
        STEP,
        session.call_tool(CallToolRequestParams::new("sample")),
    )
    .await
    .expect("in time")
    .expect("answered");
    assert_eq!(text_of(&answered), "hello, modern fixture");

    // A retry without the response is the documented refusal.
    let retry = CallToolRequestParams::new("sample").with_input_responses(Default::default());
    let refused = session.peer().call_tool(retry).await.expect("a result");
    assert_eq!(refused.is_error, Some(true));
    assert!(
        text_of(&refused).starts_with("sampling refused by the client"),
        "{}",
        text_of(&refused)
    );
}
