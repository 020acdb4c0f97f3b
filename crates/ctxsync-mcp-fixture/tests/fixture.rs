//! Drives the fixture as a real child process (stdio and HTTP) and in-process over HTTP.

use std::{
    process::Stdio,
    sync::Arc,
    time::{Duration, Instant},
};

use ctxsync_mcp_fixture::{FixtureConfig, ToolSpec, serve_http};
use rmcp::{
    ClientHandler, RoleClient, ServiceExt,
    model::{CallToolRequestParams, PaginatedRequestParams, Tool},
    service::{NotificationContext, RunningService},
    transport::{
        StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
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
}

impl ClientHandler for Client {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.tools_changed.notify_one();
    }
}

type Session = RunningService<RoleClient, Client>;

fn spawn(config: &FixtureConfig) -> Child {
    Command::new(BIN)
        .args(config.to_args())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn fixture")
}

async fn connect_stdio(config: &FixtureConfig, client: Client) -> (Child, Session) {
    let mut child = spawn(config);
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
