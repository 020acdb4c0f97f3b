//! Canary tests: secrets planted where `.mcp.json` and the agent hold them (an entry's env,
//! headers, URL userinfo and query, a `-pVALUE` argument, a secret-named variable of the
//! agent's environment, the agent's token), echoed by a failing MCP server on its stderr in
//! raw, base64, percent-encoded and JSON-escaped forms and as a PEM block, through a real
//! `ctxsync server` and `ctxsync agent`. One test per path a secret could leave by: the
//! database, the API, the page, the model note and the logs. Each asserts that no canary is
//! there and that the path was exercised (the failed server's diagnostic is there, with
//! `[redacted]`), and that `CI=true` in the agent's environment leaves "true" readable.

use crate::processes;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use ctxsync_persistence::test_support::TestStore;
use ctxsync_persistence::{AgentContext, AgentId};
use ctxsync_protocol::{DiscoveryPhase, ResourceStatus};
use processes::{
    AgentProcess, Logs, MCP_TIMEOUT_MS, ServerProcess, TestBackend, Workspace, bytes_under,
    contains, ctxsync, database, wait_for_context,
};
use reqwest::Method;
use serde_json::{Value, json};

/// Logs as verbose as an operator would run them for our own crates.
const LOG_FILTER: &str =
    "info,ctxsync=trace,ctxsync_agent_publication=trace,ctxsync_agent_diagnostics=trace,rmcp=info";
/// The line the leaking server prints first, `ci=$CI level=info` with the agent's `CI=true`:
/// ordinary environment values, which must stay readable.
const ORDINARY_LINE: &str = "ci=true level=info";

/// The secrets of one run (unique, so no other output can contain them by chance).
struct Canaries {
    entry_env: String,
    agent_env: String,
    url_password: String,
    url_query: String,
    header: String,
    p_flag: String,
    pem_body: String,
}

impl Canaries {
    fn new() -> Self {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let id = &id[..12];
        Self {
            // Characters that make each encoded form differ from the raw one.
            entry_env: format!("env/{id}@canary+é\"q"),
            agent_env: format!("ambient-{id}-canary"),
            url_password: format!("urlpw-{id}-canary"),
            url_query: format!("query-{id}-canary"),
            header: format!("header-{id}-canary"),
            p_flag: format!("pflag{id}canary"),
            pem_body: format!("MIIEvQIBADANBgkqhkiG9w0BAQEFAASC{id}canary"),
        }
    }

    /// Basic credentials an HTTP client builds from the URL's userinfo.
    fn basic(&self) -> String {
        BASE64.encode(format!("canary-user:{}", self.url_password))
    }

    /// What the failing server prints after its first lines: each form of each secret.
    fn leak(&self, token: &str) -> String {
        let env = &self.entry_env;
        format!(
            "base64 {}\npercent {}\njson {{\"key\":{}}}\n\
             Authorization: Bearer {token}\ntoken base64 {}\n\
             Authorization: Basic {}\n\
             url http://canary-user:{}@db.example/x?key={}\nheader {}\n\
             -----BEGIN PRIVATE KEY-----\n{}\nAAAA{}\n-----END PRIVATE KEY-----\n",
            BASE64.encode(env),
            percent_encode(env),
            serde_json::to_string(env).unwrap(),
            BASE64.encode(token),
            self.basic(),
            self.url_password,
            self.url_query,
            self.header,
            self.pem_body,
            self.pem_body,
        )
    }

    /// Every string that must appear nowhere: each secret and each form it was printed in.
    fn forbidden(&self, token: &str) -> Vec<String> {
        let env = &self.entry_env;
        let json = serde_json::to_string(env).unwrap();
        let mut all = vec![
            env.clone(),
            BASE64.encode(env),
            percent_encode(env),
            json[1..json.len() - 1].to_owned(),
            self.agent_env.clone(),
            self.url_password.clone(),
            self.url_query.clone(),
            self.header.clone(),
            self.p_flag.clone(),
            self.pem_body.clone(),
            self.basic(),
            token.to_owned(),
            BASE64.encode(token),
        ];
        all.extend(token.split_once('.').map(|(_, secret)| secret.to_owned()));
        all
    }
}

/// RFC 3986 percent-encoding, as a URL-building client writes a value.
fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// A real server and agent whose workspace declares a leaking server, discovery complete.
struct Planted {
    store: TestStore,
    logs: Logs,
    server: ServerProcess,
    agent_process: AgentProcess,
    agent: AgentId,
    chat: String,
    api_token: String,
    forbidden: Vec<String>,
    http: reqwest::Client,
    _workspace: Workspace,
}

impl Planted {
    async fn start() -> Self {
        let store = database(TestBackend::Sqlite).await.expect("SQLite");
        let agent = store.create_agent("canary").await.expect("agent");
        let token = agent.token.expose().to_owned();
        let logs = Logs::new();
        let server = ServerProcess::start(&store, &logs).await;
        let data_dir = store.sqlite_data_dir().expect("a SQLite data dir");
        let api_token = std::fs::read_to_string(data_dir.join("api-token"))
            .expect("the server's API token")
            .trim()
            .to_owned();

        let canaries = Canaries::new();
        let workspace = Workspace::new();
        workspace.write("AGENTS.md", "# Agents\nBe brief.\n");
        workspace.write("leak.txt", canaries.leak(&token));
        // `$0` is the file to print, `$1` the `-pVALUE` argument.
        let script = "echo \"ci=$CI level=info\" >&2; \
             echo \"env $LEAKY_API_KEY ambient $CANARY_SECRET flag $1\" >&2; \
             cat \"$0\" >&2; exit 3";
        let leak_path = workspace.path().join("leak.txt");
        let servers = json!({
            "leaky": {
                "command": "sh",
                "args": ["-c", script, leak_path, format!("-p{}", canaries.p_flag)],
                "env": { "LEAKY_API_KEY": canaries.entry_env },
            },
            "remote": {
                "type": "http",
                "url": format!(
                    "http://canary-user:{}@127.0.0.1:9/mcp?key={}",
                    canaries.url_password, canaries.url_query
                ),
                "headers": { "X-Api-Key": canaries.header },
            },
        });
        workspace.write(".mcp.json", json!({ "mcpServers": servers }).to_string());

        // The agent's environment: one secret-named variable, and `CI=true` as on a CI
        // machine. Set on the child only, so tests stay independent.
        let child = ctxsync()
            .args(["agent", "--server", &server.url(), "--workspace"])
            .arg(workspace.path())
            .args(["--mcp-timeout-ms", MCP_TIMEOUT_MS])
            .env("CTXSYNC_AGENT_TOKEN", &token)
            .env("CANARY_SECRET", &canaries.agent_env)
            .env("CI", "true")
            .env("RUST_LOG", LOG_FILTER)
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(logs.path("agent")).expect("the agent's log file"))
            .spawn()
            .expect("spawning ctxsync agent");
        let agent_process = AgentProcess { child };
        wait_for_context(&store, agent.id, &logs, "complete discovery", |c| {
            c.snapshot
                .as_ref()
                .is_some_and(|s| s.phase == DiscoveryPhase::Complete)
                && leaky_error(c).is_some()
        })
        .await;

        let mut planted = Self {
            forbidden: canaries.forbidden(&token),
            store,
            logs,
            server,
            agent_process,
            agent: agent.id,
            chat: String::new(),
            api_token,
            http: reqwest::Client::new(),
            _workspace: workspace,
        };
        let (status, chat) = planted
            .call(
                Method::POST,
                "/api/chats",
                Some(json!({ "agent_id": planted.agent.to_string() })),
            )
            .await;
        assert_eq!(status, 201, "{chat}");
        planted.chat = chat["id"].as_str().expect("a chat id").to_owned();
        planted
    }

    /// An authenticated request to the chat API; the status and the body as text.
    async fn request(&self, method: Method, path: &str, body: Option<Value>) -> (u16, String) {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.server.http_url()))
            .bearer_auth(&self.api_token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("the request is sent");
        let status = response.status().as_u16();
        (status, response.text().await.unwrap_or_default())
    }

    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let (status, text) = self.request(method, path, body).await;
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// Asserts that no canary, in any form, is in `text`.
    fn assert_clean(&self, place: &str, text: &[u8]) {
        for secret in &self.forbidden {
            assert!(
                !contains(text, secret.as_bytes()),
                "{secret:?} leaked into {place}:\n{}",
                String::from_utf8_lossy(text)
            );
        }
    }
}

/// The failed server's stored diagnostic.
fn leaky_error(context: &AgentContext) -> Option<&str> {
    context
        .resources
        .iter()
        .find(|r| r.source == "mcp:leaky" && r.status == ResourceStatus::Unreadable)?
        .error
        .as_deref()
}

/// The diagnostic reached the path: the failing server's error, its secrets redacted and
/// the ordinary line readable.
fn assert_exercised(place: &str, text: &str) {
    assert!(
        text.contains("leaky") && text.contains("[redacted]"),
        "{place} does not show the failed server's diagnostic:\n{text}"
    );
    assert!(
        text.contains(ORDINARY_LINE),
        "CI=true must leave \"true\" readable in {place}:\n{text}"
    );
}

#[tokio::test]
async fn database_holds_no_secret() {
    let planted = Planted::start().await;
    let context = planted
        .store
        .read_agent_context(planted.agent)
        .await
        .expect("reading the agent context")
        .expect("the agent exists");
    let error = leaky_error(&context).expect("the failed server's row");
    assert_exercised("the stored row", &format!("leaky: {error}"));
    planted.assert_clean(
        "rows read through the store",
        format!("{context:?}").as_bytes(),
    );

    let files = bytes_under(planted.store.sqlite_data_dir().expect("a SQLite data dir"));
    assert!(
        contains(&files, b"[redacted]"),
        "the database files hold the diagnostic"
    );
    planted.assert_clean("the database files", &files);
}

#[tokio::test]
async fn api_responses_hold_no_secret() {
    let planted = Planted::start().await;
    for path in [
        format!("/api/agents/{}/context", planted.agent),
        format!("/api/chats/{}/context", planted.chat),
        format!("/api/chats/{}", planted.chat),
    ] {
        let (status, body) = planted.request(Method::GET, &path, None).await;
        assert_eq!(status, 200, "GET {path}: {body}");
        let body: Value = serde_json::from_str(&body).expect("a JSON body");
        // Compare the decoded text, so a JSON escape cannot hide a secret from the check.
        let text = collect_strings(&body);
        assert_exercised(&format!("GET {path}"), &text);
        planted.assert_clean(&format!("GET {path}"), text.as_bytes());
        planted.assert_clean(&format!("GET {path}"), body.to_string().as_bytes());
    }
}

/// Every string in `value`, one per line.
fn collect_strings(value: &Value) -> String {
    match value {
        Value::String(text) => format!("{text}\n"),
        Value::Array(items) => items.iter().map(collect_strings).collect(),
        Value::Object(map) => map
            .iter()
            .map(|(key, item)| format!("{key}\n{}", collect_strings(item)))
            .collect(),
        _ => String::new(),
    }
}

#[tokio::test]
async fn chat_page_holds_no_secret() {
    let planted = Planted::start().await;
    let path = format!("/chats/{}", planted.chat);
    let (status, html) = planted.request(Method::GET, &path, None).await;
    assert_eq!(status, 200, "{html}");
    assert!(
        html.contains("leaky") && html.contains("[redacted]"),
        "the page shows the failed server's diagnostic:\n{html}"
    );
    planted.assert_clean("the chat page", html.as_bytes());
}

#[tokio::test]
async fn model_note_holds_no_secret() {
    let planted = Planted::start().await;
    let (status, turn) = planted
        .call(
            Method::POST,
            &format!("/api/chats/{}/turns", planted.chat),
            Some(json!({ "mode": "default" })),
        )
        .await;
    assert_eq!(status, 200, "{turn}");
    let note = turn["note"].as_str().expect("a failed server makes a note");
    assert!(note.contains("leaky (error:"), "{note}");
    assert_exercised("the model note", note);
    planted.assert_clean("the model note", note.as_bytes());
    planted.assert_clean("the turn", turn.to_string().as_bytes());
}

#[tokio::test]
async fn logs_hold_no_secret() {
    let mut planted = Planted::start().await;
    // A turn, so the server logs request handling too.
    let (status, _) = planted
        .call(
            Method::POST,
            &format!("/api/chats/{}/turns", planted.chat),
            Some(json!({ "mode": "default" })),
        )
        .await;
    assert_eq!(status, 200);
    let status = planted.agent_process.terminate().await;
    assert!(status.success(), "{status:?}");
    let agent_log = planted.logs.read("agent");
    assert!(
        agent_log.contains("published context snapshot") && agent_log.contains("complete"),
        "the agent logged the snapshot that carries the diagnostic:\n{agent_log}"
    );
    planted.assert_clean("the agent's log", agent_log.as_bytes());
    let server_log = planted.logs.read("server");
    assert!(!server_log.is_empty(), "the server logged something");
    planted.assert_clean("the server's log", server_log.as_bytes());
}
