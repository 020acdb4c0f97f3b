//! Security scan: a canary secret in every secret position of `.mcp.json` and in the
//! agent's environment, a real `ctxsync agent` whose MCP servers partly fail (one echoes
//! the request it got, one prints its arguments to stderr), then every place a secret could
//! end up is scanned: the database files byte for byte, every row read back through the
//! store, the agent's and the server's logs, every API response, the web page and the
//! model note. Also: agent tokens are stored only as sha256 digests and never logged, the
//! served page escapes hostile tool names and descriptions, and an oversized request body
//! is refused before it is read.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use ctxsync_mcp_fixture::{FixtureConfig, ToolSpec};
use reqwest::Method;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const CTXSYNC: &str = env!("CARGO_BIN_EXE_ctxsync");
const DEADLINE: Duration = Duration::from_secs(30);
/// The part every canary shares; no legitimate output contains it.
const MARK: &str = "Zq8canaryK3v";
const HOSTILE_TOOL: &str = "<script>alert('tool')</script>";
const HOSTILE_DESCRIPTION: &str = "<img src=x onerror=alert('desc')> & \"quoted\"";

fn canary(position: &str) -> String {
    format!(
        "{position}-{MARK}-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    )
}

/// Whether the scan's test runs: the subscriber records only then. The tests of this
/// binary's other modules run in the same process, and without this their servers would
/// log at `trace` into the file for the rest of the run.
static RECORDING: AtomicUsize = AtomicUsize::new(0);

/// The in-process server's log while held (see [`server_log`]).
struct Recording(&'static Path);

impl Drop for Recording {
    fn drop(&mut self) {
        RECORDING.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Every server log line of this test binary while the returned guard is held, in one
/// file (the server runs in-process).
fn server_log() -> Recording {
    RECORDING.fetch_add(1, Ordering::SeqCst);
    Recording(server_log_file())
}

fn server_log_file() -> &'static Path {
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;

    static LOG: OnceLock<PathBuf> = OnceLock::new();
    LOG.get_or_init(|| {
        let path = std::env::temp_dir().join(format!(
            "ctxsync-security-server-{}.log",
            std::process::id()
        ));
        let file = Arc::new(Mutex::new(std::fs::File::create(&path).expect("log file")));
        let writer = move || LogWriter(file.clone());
        let recording =
            tracing_subscriber::filter::filter_fn(|_| RECORDING.load(Ordering::SeqCst) > 0);
        tracing_subscriber::registry()
            .with(
                tracing_subscriber::fmt::layer()
                    .with_ansi(false)
                    .with_writer(writer)
                    .with_filter(tracing_subscriber::EnvFilter::new(LOG_FILTER))
                    .with_filter(recording),
            )
            .try_init()
            .expect("the only subscriber of this test binary");
        path
    })
}

/// Everything of our own at `trace`; third-party crates at `info` (their `debug`/`trace`
/// output dumps raw protocol frames, which is not a log anyone runs in production).
const LOG_FILTER: &str = "info,ctxsync=trace,ctxsync_persistence=trace,ctxsync_agent_publication=trace,ctxsync_agent_diagnostics=trace,ctxsync_chat_projection=trace,ctxsync_first_turn_gate=trace,ctxsync_context_ui=trace,rmcp=info";

struct LogWriter(Arc<Mutex<std::fs::File>>);

impl std::io::Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.lock().unwrap().flush()
    }
}

/// An HTTP "MCP endpoint" that answers every request with 500 and the request it got
/// (request line, headers with their credentials, body) as the response body.
async fn echoing_500_server() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buffer = vec![0u8; 16 * 1024];
                let n = socket.read(&mut buffer).await.unwrap_or(0);
                let body = &buffer[..n];
                let head = format!(
                    "HTTP/1.1 500 Internal Server Error\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = socket.write_all(head.as_bytes()).await;
                let _ = socket.write_all(body).await;
            });
        }
    });
    addr
}

/// Every file under `dir`, concatenated (the SQLite database, its WAL and journal).
fn bytes_under(dir: &Path) -> Vec<u8> {
    let mut all = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            all.extend(bytes_under(&path));
        } else if let Ok(bytes) = std::fs::read(&path) {
            all.extend(bytes);
        }
    }
    all
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// What was scanned and how big it was, for RELIABILITY.md.
#[derive(Default)]
struct Scan {
    places: Vec<(String, usize)>,
}

impl Scan {
    /// Asserts no canary (nor anything carrying the shared mark) is in `text`.
    fn clean(&mut self, place: &str, text: &[u8], canaries: &[String]) {
        for canary in canaries {
            assert!(
                !contains(text, canary.as_bytes()),
                "canary {canary} leaked into {place}"
            );
        }
        if let Some(at) = text.windows(MARK.len()).position(|w| w == MARK.as_bytes()) {
            let from = at.saturating_sub(120);
            let to = (at + 120).min(text.len());
            panic!(
                "part of a canary leaked into {place}: …{}…",
                String::from_utf8_lossy(&text[from..to])
            );
        }
        self.places.push((place.to_owned(), text.len()));
    }
}

/// One canary per secret position: in `.mcp.json` (env values, headers, URL parts,
/// arguments, a flag) and in the agent's own environment.
struct Canaries {
    env_value: String,
    header_value: String,
    bearer: String,
    userinfo: String,
    query: String,
    path: String,
    arg: String,
    flag_value: String,
    agent_env: String,
}

impl Canaries {
    fn new() -> Self {
        Self {
            env_value: canary("envvalue"),
            header_value: canary("headervalue"),
            bearer: canary("bearer"),
            userinfo: canary("userinfo"),
            query: canary("query"),
            path: canary("urlpath"),
            arg: canary("arg"),
            flag_value: canary("flagvalue"),
            agent_env: canary("agentenv"),
        }
    }

    fn all(&self) -> Vec<String> {
        vec![
            self.env_value.clone(),
            self.header_value.clone(),
            self.bearer.clone(),
            self.userinfo.clone(),
            self.query.clone(),
            self.path.clone(),
            self.arg.clone(),
            self.flag_value.clone(),
            self.agent_env.clone(),
        ]
    }
}

/// Creates the agent and its chat; returns the agent's id, its token and the chat's id.
async fn create_agent_and_chat(h: &Harness) -> (String, String, String) {
    let (status, agent) = h
        .call(Method::POST, "/api/agents", Some(json!({ "name": "sec" })))
        .await;
    assert_eq!(status, 201);
    let agent_id = agent["id"].as_str().unwrap().to_owned();
    let token = agent["token"].as_str().unwrap().to_owned();
    let (status, chat) = h
        .call(
            Method::POST,
            "/api/chats",
            Some(json!({ "agent_id": agent_id })),
        )
        .await;
    assert_eq!(status, 201);
    let chat = chat["id"].as_str().unwrap().to_owned();
    (agent_id, token, chat)
}

/// Writes the workspace: one working MCP server with hostile tool names, one that
/// crashes printing secrets, one that refuses to initialize, one HTTP endpoint echoing
/// its request with 500 and one closed port, each carrying canaries.
async fn write_workspace(workspace: &Path, c: &Canaries) {
    std::fs::write(workspace.join("AGENTS.md"), "Be brief.\n").unwrap();
    let echo = echoing_500_server().await;
    let mut ok_args = vec!["mcp-fixture".to_owned()];
    ok_args.extend(
        FixtureConfig::new()
            .tool(ToolSpec::new(HOSTILE_TOOL, HOSTILE_DESCRIPTION))
            .tool(ToolSpec::new("search", "Search the docs"))
            .to_args(),
    );
    let mut crash_args = vec!["mcp-fixture".to_owned()];
    crash_args.extend(
        FixtureConfig::new()
            .stderr_secret(
                format!(
                    "fatal: token {} env ${{AGENT_SECRET}} Bearer {}",
                    c.arg, c.bearer
                ),
                3,
            )
            .to_args(),
    );
    let mut init_args = vec!["mcp-fixture".to_owned()];
    init_args.extend(FixtureConfig::new().tools(0).to_args());
    init_args.push(format!("--fail-initialize=bad key {}", c.flag_value));
    let (userinfo, path, query) = (&c.userinfo, &c.path, &c.query);
    let servers = json!({
        "docs": { "command": CTXSYNC, "args": ok_args, "env": { "API_KEY": c.env_value } },
        "crashes": { "command": CTXSYNC, "args": crash_args, "env": { "OTHER_KEY": c.env_value } },
        "refuses": { "command": CTXSYNC, "args": init_args },
        "echoes": {
            "type": "http",
            "url": format!("http://user:{userinfo}@{echo}/mcp/{path}?key={query}"),
            "headers": { "Authorization": format!("Bearer {}", c.bearer), "X-Api-Key": c.header_value },
        },
        "closed": {
            "type": "http",
            "url": format!("http://user:{userinfo}@127.0.0.1:9/{path}?key={query}"),
            "headers": { "X-Api-Key": c.header_value },
        },
    });
    std::fs::write(
        workspace.join(".mcp.json"),
        json!({ "mcpServers": servers }).to_string(),
    )
    .unwrap();
}

/// Starts a real `ctxsync agent` on `workspace`, its stderr in `agent_log`.
fn spawn_agent(
    h: &Harness,
    workspace: &Path,
    logs: &Path,
    agent_log: &Path,
    token: &str,
    agent_env: &str,
) -> tokio::process::Child {
    tokio::process::Command::new(CTXSYNC)
        .args(["agent", "--server", &h.server.agent_url(), "--workspace"])
        .arg(workspace)
        .args(["--mcp-timeout-ms", "5000"])
        .env("CTXSYNC_AGENT_TOKEN", token)
        .env("AGENT_SECRET", agent_env)
        .env("RUST_LOG", LOG_FILTER)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(logs.join("agent.out")).unwrap())
        .stderr(std::fs::File::create(agent_log).unwrap())
        .kill_on_drop(true)
        .spawn()
        .expect("the agent starts")
}

/// Discovery settles with one working server and four failures; returns the chat view.
async fn wait_for_discovery(h: &Harness, chat: &str) -> Value {
    let path = format!("/api/chats/{chat}");
    ctxsync_test_support::poll("discovery to complete (the chat view is the last seen)")
        .within(DEADLINE)
        .every(Duration::from_millis(50))
        .until(|| async {
            let (_, view) = h.call(Method::GET, &path, None).await;
            if view["mcp_discovery"]["phase"] == "complete" {
                Ok(view)
            } else {
                Err(view)
            }
        })
        .await
}

/// Every API response (and the model note and `/metrics`) is free of canaries.
async fn scan_api_responses(
    h: &Harness,
    scan: &mut Scan,
    agent_id: &str,
    chat: &str,
    chat_view: &Value,
    canaries: &[String],
) {
    let mut responses = vec![("chat".to_owned(), chat_view.to_string())];
    for (method, route, body) in [
        (Method::GET, format!("/api/agents/{agent_id}/context"), None),
        (
            Method::POST,
            format!("/api/chats/{chat}/turns"),
            Some(json!({ "mode": "default" })),
        ),
        (
            Method::POST,
            format!("/api/chats/{chat}/turns"),
            Some(json!({ "mode": "plan" })),
        ),
        (
            Method::POST,
            format!("/api/chats/{chat}/find-tools"),
            Some(json!({ "queries": ["search", "script", MARK, "key token bearer"] })),
        ),
        (Method::GET, format!("/api/chats/{chat}/context"), None),
        (Method::PUT, format!("/api/chats/{chat}/context"), None),
    ] {
        let (status, body) = h.call(method.clone(), &route, body).await;
        assert_eq!(status, 200, "{method} {route}: {body}");
        responses.push((format!("{method} {route}"), body.to_string()));
    }
    let turn: Value = serde_json::from_str(&responses[2].1).unwrap();
    assert_eq!(turn["mcp_discovery"]["servers_failed"], 4, "{turn}");
    assert_eq!(turn["mcp_discovery"]["servers_ok"], 1, "{turn}");
    let note = turn["note"].as_str().expect("failed servers make a note");
    scan.clean("the model note", note.as_bytes(), canaries);
    for (place, body) in &responses {
        scan.clean(place, body.as_bytes(), canaries);
    }
    let metrics = h
        .http
        .get(h.url("/metrics"))
        .bearer_auth(&h.server.api_token)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    scan.clean("/metrics", metrics.as_bytes(), canaries);
}

/// The web page, through a one-time link: no canary, and hostile tool names and
/// descriptions are escaped, never markup.
async fn scan_web_page(h: &Harness, scan: &mut Scan, chat: &str, canaries: &[String]) {
    let (status, link) = h
        .call(Method::POST, &format!("/api/chats/{chat}/link"), None)
        .await;
    assert_eq!(status, 200);
    let page_client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let link_token = link["url"]
        .as_str()
        .unwrap()
        .split_once("?token=")
        .unwrap()
        .1;
    let exchange = page_client
        .post(h.url(&format!("/chats/{chat}/session")))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={link_token}"))
        .send()
        .await
        .unwrap();
    assert_eq!(exchange.status(), 303);
    let session = exchange.headers()["set-cookie"].to_str().unwrap();
    let session = session.split(';').next().unwrap().to_owned();
    let page = page_client
        .get(h.url(&format!("/chats/{chat}")))
        .header("cookie", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let html = page.text().await.unwrap();
    scan.clean("the web page", html.as_bytes(), canaries);
    // Hostile tool names and descriptions are escaped, never markup.
    assert!(html.contains("docs"), "the page shows the servers");
    for raw in ["<script>alert(", "<img src=x"] {
        assert!(!html.contains(raw), "unescaped {raw:?} in the page");
    }
}

/// The agent's and the server's logs hold no canary and no token (nor its secret part).
fn scan_logs(
    scan: &mut Scan,
    agent_log: &Path,
    server_log: &Path,
    token: &str,
    canaries: &[String],
) {
    let agent_stderr = std::fs::read(agent_log).unwrap();
    assert!(
        !agent_stderr.is_empty(),
        "the agent logged something to scan"
    );
    scan.clean("the agent's log", &agent_stderr, canaries);
    let server_stderr = std::fs::read(server_log).unwrap();
    assert!(!server_stderr.is_empty(), "the server logged something");
    scan.clean("the server's log", &server_stderr, canaries);
    for (place, bytes) in [("agent log", &agent_stderr), ("server log", &server_stderr)] {
        assert!(
            !contains(bytes, token.as_bytes()),
            "the agent token is in the {place}"
        );
        let secret_part = token.split_once('.').unwrap().1;
        assert!(
            !contains(bytes, secret_part.as_bytes()),
            "the token's secret part is in the {place}"
        );
    }
}

/// Every row, read back through the store, is free of canaries.
async fn scan_store_rows(
    h: &Harness,
    scan: &mut Scan,
    agent_id: &str,
    chat: &str,
    canaries: &[String],
) {
    let store = &h.server.store;
    let agent_uuid = agent_id.parse().unwrap();
    let context = store.read_agent_context(agent_uuid).await.unwrap();
    let rows = format!("{context:?} {:?}", store.list_agents().await.unwrap());
    assert!(rows.contains("echoes"), "the rows hold the failed servers");
    scan.clean("rows read through the store", rows.as_bytes(), canaries);
    let chat_rows = format!(
        "{:?}",
        store
            .read_chat_context(chat.parse().unwrap())
            .await
            .unwrap()
    );
    scan.clean("chat rows", chat_rows.as_bytes(), canaries);
}

/// The database files byte for byte: no canary, no token, and the token's sha256.
fn scan_database_files(scan: &mut Scan, data_dir: &Path, token: &str, canaries: &[String]) {
    let db = bytes_under(data_dir);
    assert!(db.len() > 4096, "the database files were found");
    scan.clean("the database files", &db, canaries);
    assert!(
        !contains(&db, token.as_bytes()),
        "a token is stored in clear"
    );
    let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
    assert!(
        contains(&db, &digest),
        "the token's sha256 is what is stored"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_leaves_the_agent_and_tokens_are_only_hashes() {
    let server_log = server_log();
    let h = Harness::start_with(
        TestBackend::Sqlite,
        Duration::from_secs(3),
        Duration::from_secs(2),
    )
    .await
    .unwrap();
    let data_dir = h.data_dir().to_path_buf();
    let logs = tempfile::tempdir().unwrap();
    let secrets = Canaries::new();
    let canaries = secrets.all();
    let (agent_id, token, chat) = create_agent_and_chat(&h).await;

    let workspace = tempfile::tempdir().unwrap();
    write_workspace(workspace.path(), &secrets).await;
    let agent_log = logs.path().join("agent.log");
    let mut agent_process = spawn_agent(
        &h,
        workspace.path(),
        logs.path(),
        &agent_log,
        &token,
        &secrets.agent_env,
    );
    let chat_view = wait_for_discovery(&h, &chat).await;

    let mut scan = Scan::default();
    scan_api_responses(&h, &mut scan, &agent_id, &chat, &chat_view, &canaries).await;
    scan_web_page(&h, &mut scan, &chat, &canaries).await;
    // Stop the agent, then scan what it and the server wrote.
    agent_process.kill().await.unwrap();
    scan_logs(&mut scan, &agent_log, server_log.0, &token, &canaries);
    scan_store_rows(&h, &mut scan, &agent_id, &chat, &canaries).await;
    scan_database_files(&mut scan, &data_dir, &token, &canaries);

    let total: usize = scan.places.iter().map(|(_, n)| n).sum();
    println!(
        "security scan: {} canaries, {} places, {total} bytes scanned: {:?}",
        canaries.len(),
        scan.places.len(),
        scan.places
    );
}

/// Sends `head`, then body bytes in 16 KiB pieces (chunk-framed when `chunked`) until
/// the server answers or 10 MiB are sent; returns the answer and the bytes sent.
async fn post_until_answered(addr: &str, head: String, chunked: bool) -> (String, usize) {
    let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
    socket.write_all(head.as_bytes()).await.unwrap();
    // Valid JSON as far as it goes (an open string), so only the size can refuse it.
    let mut piece = br#"{"name":""#.to_vec();
    piece.resize(16 * 1024, b'a');
    let mut first = true;
    let mut response = vec![0u8; 1024];
    let mut sent = 0usize;
    let n = loop {
        let wrote = async {
            if chunked {
                socket
                    .write_all(format!("{:x}\r\n", piece.len()).as_bytes())
                    .await?;
            }
            socket.write_all(&piece).await?;
            if chunked {
                socket.write_all(b"\r\n").await?;
            }
            Ok::<_, std::io::Error>(())
        }
        .await;
        sent += piece.len();
        if first {
            first = false;
            piece.fill(b'a');
        }
        if wrote.is_err() || sent >= 10 * 1024 * 1024 {
            break tokio::time::timeout(Duration::from_secs(5), socket.read(&mut response))
                .await
                .expect("answered")
                .unwrap_or(0);
        }
        if let Ok(Ok(n)) =
            tokio::time::timeout(Duration::from_millis(2), socket.read(&mut response)).await
        {
            break n;
        }
    };
    (String::from_utf8_lossy(&response[..n]).into_owned(), sent)
}

/// A 10 MiB body is refused with 413 after at most the 64 KiB limit has been read,
/// whether it announces its length or streams chunks: nothing buffers it whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_body_is_refused_before_it_is_read() {
    // Timing-bound: never beside a heavy test (see ctxsync-test-support).
    let _timing = ctxsync_test_support::timing_bound().await;
    let h = Harness::start(TestBackend::Sqlite).await.unwrap();
    let agent = h.new_agent().await;
    let chat = h.new_chat(agent).await;
    let addr = h.server.http_url().trim_start_matches("http://").to_owned();
    for path in [
        "/api/agents".to_owned(),
        format!("/api/chats/{chat}/find-tools"),
        format!("/api/chats/{chat}/turns"),
    ] {
        for chunked in [false, true] {
            let framing = if chunked {
                "transfer-encoding: chunked".to_owned()
            } else {
                format!("content-length: {}", 10 * 1024 * 1024)
            };
            let head = format!(
                "POST {path} HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {}\r\ncontent-type: application/json\r\n{framing}\r\n\r\n",
                h.server.api_token
            );
            let started = Instant::now();
            let (response, sent) = post_until_answered(&addr, head, chunked).await;
            assert!(
                response.starts_with("HTTP/1.1 413"),
                "{path} ({framing}): {response}"
            );
            assert!(
                sent <= 1024 * 1024,
                "{path} ({framing}): {sent} bytes sent before the refusal"
            );
            assert!(started.elapsed() < Duration::from_secs(5), "{path}");
        }
    }
}
