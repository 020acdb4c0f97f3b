//! Deployed across a network: `ctxsync server` with TLS on both listeners (on PostgreSQL
//! with `sslmode=require`), `ctxsync agent` over https trusting a test CA, a chat's first
//! turn over https released by the agent's push; an agent that distrusts the certificate
//! publishes nothing and says why; certificates reload without dropping connections; and
//! an agent token's lifecycle (list, rotate, delete) from the command line and the API.

use crate::processes;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use ctxsync_persistence::test_support::TestDatabase;
use ctxsync_test_support::TestCa;
use processes::{FixtureWorkspace, Logs, WAIT, Workspace, ctxsync, wait_for_log};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

const API_TOKEN: &str = "tls-test-api-token-0123456789";

/// The server's certificate files, signed by `ca`.
struct CertFiles {
    cert: PathBuf,
    key: PathBuf,
}

impl CertFiles {
    fn write(dir: &Path, ca: &TestCa) -> Self {
        let files = Self {
            cert: dir.join("server.pem"),
            key: dir.join("server.key"),
        };
        files.replace(ca);
        files
    }

    /// Replaces both files the way certificate managers do: write aside, rename over.
    fn replace(&self, ca: &TestCa) {
        let (cert, key) = ca.server_cert(&["localhost", "127.0.0.1"]);
        for (path, content) in [(&self.cert, cert), (&self.key, key)] {
            let aside = path.with_extension("new");
            std::fs::write(&aside, content).unwrap();
            std::fs::rename(&aside, path).unwrap();
        }
    }
}

fn write_ca(dir: &Path, name: &str, ca: &TestCa) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, ca.pem()).unwrap();
    path
}

/// An HTTPS client that trusts `ca` (and nothing else).
fn client(ca: &TestCa) -> reqwest::Client {
    let cert = reqwest::Certificate::from_pem(ca.pem().as_bytes()).unwrap();
    reqwest::Client::builder()
        .tls_certs_only([cert])
        .build()
        .unwrap()
}

/// A `ctxsync server` process with TLS, and the URLs it printed.
struct Server {
    child: tokio::process::Child,
    grpc: String,
    http: String,
}

impl Server {
    async fn start(logs: &Logs, database: &[&str], files: &CertFiles) -> Self {
        let mut child = ctxsync()
            .args([
                "server",
                "--grpc-addr",
                "127.0.0.1:0",
                "--http-addr",
                "127.0.0.1:0",
            ])
            .args(database)
            .args(["--discovery-budget-ms", "20000"])
            .env("CTXSYNC_API_TOKEN", API_TOKEN)
            .env("CTXSYNC_TLS_CERT", &files.cert)
            .env("CTXSYNC_TLS_KEY", &files.key)
            .stdout(Stdio::piped())
            .stderr(logs_file(logs, "server"))
            .spawn()
            .expect("spawning ctxsync server");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let (mut grpc, mut http) = (None, None);
        while grpc.is_none() || http.is_none() {
            let line = tokio::time::timeout(WAIT, lines.next_line())
                .await
                .expect("the server prints its addresses")
                .unwrap()
                .unwrap_or_else(|| panic!("the server stopped:\n{}", logs.read("server")));
            if let Some(url) = line.strip_prefix("agent API (gRPC): ") {
                grpc = Some(url.trim().to_owned());
            } else if let Some(url) = line.strip_prefix("chat API (HTTP):") {
                http = Some(url.trim().to_owned());
            }
        }
        // Certificates name `localhost`; the server prints its socket address.
        let named = |url: String| url.replace("127.0.0.1", "localhost");
        Self {
            child,
            grpc: named(grpc.unwrap()),
            http: named(http.unwrap()),
        }
    }

    async fn call(
        &self,
        http: &reqwest::Client,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (reqwest::StatusCode, Value) {
        let mut request = http
            .request(method, format!("{}{path}", self.http))
            .bearer_auth(API_TOKEN);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("an https request");
        let status = response.status();
        let text = response.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }
}

fn logs_file(logs: &Logs, name: &str) -> std::fs::File {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(logs.path(name))
        .unwrap()
}

fn agent(
    logs: &Logs,
    name: &str,
    server: &str,
    workspace: &Path,
    token: &str,
    ca: &Path,
) -> tokio::process::Child {
    ctxsync()
        .args(["agent", "--server", server, "--workspace"])
        .arg(workspace)
        .arg("--ca-cert")
        .arg(ca)
        .args(["--mcp-timeout-ms", processes::MCP_TIMEOUT_MS])
        .env("CTXSYNC_AGENT_TOKEN", token)
        .stdout(Stdio::null())
        .stderr(logs_file(logs, name))
        .spawn()
        .expect("spawning ctxsync agent")
}

/// `url` with `sslmode=require` added.
fn require_tls(url: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}sslmode=require")
}

/// How many of the database's sessions are without TLS, and how many with.
fn sessions_by_tls(database: &TestDatabase) -> (u64, u64) {
    let sql = format!(
        "select count(*) filter (where not s.ssl), count(*) filter (where s.ssl) \
         from pg_stat_ssl s join pg_stat_activity a using (pid) where a.datname = '{}'",
        database.name()
    );
    let admin = ctxsync_persistence::test_support::postgres_url();
    let output = std::process::Command::new("psql")
        .args([admin.as_str(), "-Atc", &sql])
        .output()
        .expect("running psql");
    assert!(output.status.success(), "{output:?}");
    let text = String::from_utf8(output.stdout).unwrap();
    let (plain, tls) = text.trim().split_once('|').expect("two counts");
    (plain.parse().unwrap(), tls.parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_end_to_end_on_postgres_with_sslmode_require() {
    let Some(database) = tokio::task::spawn_blocking(TestDatabase::create)
        .await
        .unwrap()
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("ctxsync test CA");
    let ca_file = write_ca(dir.path(), "ca.pem", &ca);
    let files = CertFiles::write(dir.path(), &ca);
    let logs = Logs::new();
    let url = require_tls(database.url());
    let server = Server::start(&logs, &["--database-url", &url], &files).await;
    assert!(server.grpc.starts_with("https://"), "{}", server.grpc);
    assert!(server.http.starts_with("https://"), "{}", server.http);
    let http = client(&ca);

    // A TLS listener never answers in plain text.
    let plain = reqwest::Client::new()
        .get(format!(
            "{}/healthz",
            server.http.replace("https://", "http://")
        ))
        .send()
        .await;
    assert!(plain.is_err(), "plain http was answered: {plain:?}");

    let (status, agent_row) = server
        .call(
            &http,
            reqwest::Method::POST,
            "/api/agents",
            Some(json!({ "name": "remote" })),
        )
        .await;
    assert_eq!(status, reqwest::StatusCode::CREATED, "{agent_row}");
    let (_, chat) = server
        .call(
            &http,
            reqwest::Method::POST,
            "/api/chats",
            Some(json!({ "agent_id": agent_row["id"] })),
        )
        .await;
    let chat_id = chat["id"].as_str().unwrap().to_owned();

    // The first turn waits (over https) until the agent's push over https completes it.
    let turn = {
        let http = http.clone();
        let base = server.http.clone();
        tokio::spawn(async move {
            let response = http
                .post(format!("{base}/api/chats/{chat_id}/turns"))
                .bearer_auth(API_TOKEN)
                .json(&json!({ "mode": "default" }))
                .send()
                .await
                .unwrap();
            (response.status(), response.json::<Value>().await.unwrap())
        })
    };
    let workspace = Workspace::with_servers(&[("tools", &["--tools", "2"])]);
    let token = agent_row["token"].as_str().unwrap();
    let mut agent = agent(
        &logs,
        "agent",
        &server.grpc,
        &workspace.path(),
        token,
        &ca_file,
    );
    let (status, turn) = tokio::time::timeout(WAIT, turn)
        .await
        .unwrap_or_else(|_| {
            panic!(
                "the first turn was not released\nserver log:\n{}\nagent log:\n{}",
                logs.read("server"),
                logs.read("agent")
            )
        })
        .unwrap();
    assert!(status.is_success(), "{status}: {turn}");
    assert_eq!(turn["mcp_discovery"]["phase"], "complete", "{turn}");
    assert_eq!(turn["mcp_discovery"]["wait_timed_out"], false, "{turn}");
    assert_eq!(turn["tools"].as_array().map(Vec::len), Some(2), "{turn}");

    // Every database session of the server — the pool's and LISTEN's — uses TLS.
    let (plain_sessions, tls_sessions) = sessions_by_tls(&database);
    assert_eq!(plain_sessions, 0, "a session without TLS");
    assert!(tls_sessions >= 2, "the pool and LISTEN: {tls_sessions}");
    let agent_log = logs.read("agent");
    assert!(
        !agent_log.contains("unencrypted"),
        "https never warns: {agent_log}"
    );
    agent.kill().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_distrusts_the_certificate_logs_why_and_publishes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("the server's CA");
    let other = TestCa::new("some other CA");
    let other_file = write_ca(dir.path(), "other.pem", &other);
    let files = CertFiles::write(dir.path(), &ca);
    let logs = Logs::new();
    let data_dir = dir.path().join("data");
    let data = data_dir.to_str().unwrap();
    let server = Server::start(&logs, &["--data-dir", data], &files).await;
    let http = client(&ca);
    let (_, agent_row) = server
        .call(
            &http,
            reqwest::Method::POST,
            "/api/agents",
            Some(json!({ "name": "distrustful" })),
        )
        .await;
    let agent_id = agent_row["id"].as_str().unwrap();
    let workspace = Workspace::new();
    workspace.write("AGENTS.md", "hello");
    let mut agent = agent(
        &logs,
        "agent",
        &server.grpc,
        &workspace.path(),
        agent_row["token"].as_str().unwrap(),
        &other_file,
    );
    let log = wait_for_log(&logs, "agent", "unknown issuer").await;
    let line = log
        .lines()
        .find(|l| l.contains("unknown issuer"))
        .unwrap()
        .to_owned();
    assert!(line.contains("localhost"), "names the host: {line}");
    assert!(line.contains("certificate"), "says what failed: {line}");
    assert!(line.contains("retry_in"), "then backs off: {line}");

    let (status, context) = server
        .call(
            &http,
            reqwest::Method::GET,
            &format!("/api/agents/{agent_id}/context"),
            None,
        )
        .await;
    assert!(status.is_success(), "{status}: {context}");
    assert_eq!(
        context["snapshot"],
        Value::Null,
        "nothing landed: {context}"
    );
    assert!(
        agent.try_wait().unwrap().is_none(),
        "a refused certificate is retried, not fatal"
    );
    agent.kill().await.unwrap();
}

/// A chat command given the agent API's TLS port: the handshake refuses HTTP/1.1, and
/// the command says which port it needs instead of the TLS alert.
#[tokio::test]
async fn a_chat_command_at_the_tls_agent_port_names_the_port_it_needs() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("the server's CA");
    let ca_file = write_ca(dir.path(), "ca.pem", &ca);
    let files = CertFiles::write(dir.path(), &ca);
    let logs = Logs::new();
    let data_dir = dir.path().join("data");
    let mut server =
        Server::start(&logs, &["--data-dir", data_dir.to_str().unwrap()], &files).await;
    let out = tokio::time::timeout(
        WAIT,
        ctxsync()
            .args(["context", "--chat", "00000000-0000-4000-8000-000000000000"])
            .args(["--server", &server.grpc, "--ca-cert"])
            .arg(&ca_file)
            .env("CTXSYNC_API_TOKEN", API_TOKEN)
            .output(),
    )
    .await
    .expect("the command ends")
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains(&format!(
            "cannot talk to the chat API at {}: this looks like the gRPC port",
            server.grpc
        )),
        "{stderr}"
    );
    server.child.kill().await.unwrap();
}

/// Waits until the agent's snapshot version exceeds `above`; returns it.
async fn wait_version(
    server: &Server,
    client: &reqwest::Client,
    context_path: &str,
    logs: &Logs,
    above: u64,
) -> u64 {
    processes::poll(format!("a snapshot above version {above}"))
        .within(WAIT)
        .explain(|| format!("agent log:\n{}", logs.read("agent")))
        .until(move || async move {
            let (_, context) = server
                .call(client, reqwest::Method::GET, context_path, None)
                .await;
            let version = context["snapshot"]["version"].as_u64().unwrap_or(0);
            if version > above {
                Ok(version)
            } else {
                Err(context)
            }
        })
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_certificate_is_served_without_dropping_open_connections() {
    let dir = tempfile::tempdir().unwrap();
    let first = TestCa::new("first CA");
    let second = TestCa::new("second CA");
    let first_file = write_ca(dir.path(), "first.pem", &first);
    let files = CertFiles::write(dir.path(), &first);
    let logs = Logs::new();
    let data_dir = dir.path().join("data");
    let server = Server::start(&logs, &["--data-dir", data_dir.to_str().unwrap()], &files).await;
    let old_client = client(&first);
    let (_, agent_row) = server
        .call(
            &old_client,
            reqwest::Method::POST,
            "/api/agents",
            Some(json!({ "name": "long-lived" })),
        )
        .await;
    let agent_id = agent_row["id"].as_str().unwrap().to_owned();
    let workspace = Workspace::new();
    workspace.write("AGENTS.md", "before the reload");
    let mut agent = agent(
        &logs,
        "agent",
        &server.grpc,
        &workspace.path(),
        agent_row["token"].as_str().unwrap(),
        &first_file,
    );
    let context_path = format!("/api/agents/{agent_id}/context");
    let before = wait_version(&server, &old_client, &context_path, &logs, 0).await;

    // Replaced on disk: picked up by the file check.
    files.replace(&second);
    wait_for_log(&logs, "server", "reloaded the TLS certificate").await;
    let new_client = client(&second);
    let healthz = format!("{}/healthz", server.http);
    processes::poll("the new certificate to be served")
        .within(WAIT)
        .every(Duration::from_millis(25))
        .until(|| async { new_client.get(&healthz).send().await.map(drop) })
        .await;
    // A fresh connection that trusts only the old CA is refused now...
    let refused = client(&first)
        .get(format!("{}/healthz", server.http))
        .send()
        .await;
    assert!(refused.is_err(), "the old certificate is still served");
    // ...while the agent's connection, opened before the reload, still carries pushes.
    workspace.write("AGENTS.md", "after the reload");
    wait_version(&server, &new_client, &context_path, &logs, before).await;
    let agent_log = logs.read("agent");
    assert_eq!(
        agent_log.matches("registered with the server").count(),
        1,
        "the agent never reconnected: {agent_log}"
    );

    // SIGHUP reloads too.
    let pid = server.child.id().unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap()),
        nix::sys::signal::Signal::SIGHUP,
    )
    .unwrap();
    wait_for_log(&logs, "server", "(SIGHUP)").await;
    agent.kill().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_token_is_refused_at_once_and_the_agent_says_so_once() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("lifecycle CA");
    let ca_file = write_ca(dir.path(), "ca.pem", &ca);
    let files = CertFiles::write(dir.path(), &ca);
    let logs = Logs::new();
    let data_dir = dir.path().join("data");
    let data = data_dir.to_str().unwrap();
    let server = Server::start(&logs, &["--data-dir", data], &files).await;
    let http = client(&ca);
    let cli = |args: &[&str]| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_ctxsync"))
            .arg("agents")
            .args(args)
            .args(["--data-dir", data, "--json"])
            .env_remove("CTXSYNC_DATABASE_URL")
            .env("RUST_LOG", "warn")
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "ctxsync agents {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_slice::<Value>(&output.stdout).unwrap()
    };
    let created = cli(&["create", "rotating"]);
    let id = created["id"].as_str().unwrap().to_owned();
    let listed = cli(&["list"]);
    assert_eq!(listed[0]["id"], created["id"], "{listed}");
    assert_eq!(listed[0]["name"], "rotating");
    assert!(
        !listed
            .to_string()
            .contains(created["token"].as_str().unwrap()),
        "a listing never shows a token"
    );

    let workspace = Workspace::new();
    workspace.write("AGENTS.md", "one");
    let mut agent = agent(
        &logs,
        "agent",
        &server.grpc,
        &workspace.path(),
        created["token"].as_str().unwrap(),
        &ca_file,
    );
    wait_for_log(&logs, "agent", "the server accepted the snapshot").await;

    let rotated = cli(&["rotate", &id]);
    assert_eq!(rotated["id"], created["id"]);
    assert_ne!(rotated["token"], created["token"]);
    // The next push on the agent's open connection is refused: the old token is dead.
    workspace.write("AGENTS.md", "two");
    let log = wait_for_log(&logs, "agent", "refused the agent token").await;
    assert!(
        log.contains("ctxsync agents rotate"),
        "says how to get a new token: {log}"
    );
    workspace.write("AGENTS.md", "three");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let log = logs.read("agent");
    assert_eq!(
        log.matches("refused the agent token").count(),
        1,
        "said once: {log}"
    );
    assert!(
        agent.try_wait().unwrap().is_none(),
        "the agent keeps running"
    );

    // The API lists, rotates and deletes too; the rotated token works until deleted.
    let (status, listed) = server
        .call(&http, reqwest::Method::GET, "/api/agents", None)
        .await;
    assert!(status.is_success(), "{status}");
    assert_eq!(listed["agents"][0]["id"], created["id"], "{listed}");
    let (status, again) = server
        .call(
            &http,
            reqwest::Method::POST,
            &format!("/api/agents/{id}/token"),
            None,
        )
        .await;
    assert!(status.is_success(), "{status}: {again}");
    assert_ne!(again["token"], rotated["token"]);
    let (status, _) = server
        .call(
            &http,
            reqwest::Method::DELETE,
            &format!("/api/agents/{id}"),
            None,
        )
        .await;
    assert_eq!(status, reqwest::StatusCode::NO_CONTENT);
    let (status, gone) = server
        .call(
            &http,
            reqwest::Method::DELETE,
            &format!("/api/agents/{id}"),
            None,
        )
        .await;
    assert_eq!(status, reqwest::StatusCode::NOT_FOUND, "{gone}");
    let (status, missing) = server
        .call(
            &http,
            reqwest::Method::POST,
            &format!("/api/agents/{id}/token"),
            None,
        )
        .await;
    assert_eq!(status, reqwest::StatusCode::NOT_FOUND, "{missing}");
    assert_eq!(cli(&["list"]), json!([]));
    agent.kill().await.unwrap();
}

#[test]
fn no_secret_in_help() {
    let password = "pw-in-the-url-0123";
    let url = format!("postgres://user:{password}@db.example/ctxsync");
    for args in [
        &["server", "--help"][..],
        &["agents", "create", "--help"],
        &["agents", "list", "--help"],
        &["agents", "rotate", "--help"],
        &["agents", "delete", "--help"],
        &["agent", "--help"],
        &["context", "--help"],
    ] {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_ctxsync"))
            .args(args)
            .env("CTXSYNC_DATABASE_URL", &url)
            .env("CTXSYNC_API_TOKEN", "api-token-in-the-environment")
            .env("CTXSYNC_AGENT_TOKEN", "agent-token-in-the-environment")
            .output()
            .unwrap();
        assert!(output.status.success(), "{args:?}");
        let help = String::from_utf8_lossy(&output.stdout);
        for secret in [password, "api-token-in-the", "agent-token-in-the"] {
            assert!(
                !help.contains(secret),
                "`ctxsync {args:?}` prints {secret}:\n{help}"
            );
        }
    }
}

#[test]
fn the_data_directory_and_database_files_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("new").join("data");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_ctxsync"))
        .args(["agents", "create", "private", "--json", "--data-dir"])
        .arg(&data_dir)
        .env_remove("CTXSYNC_DATABASE_URL")
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&data_dir), 0o700, "the data directory");
    let files: Vec<_> = std::fs::read_dir(&data_dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    assert!(!files.is_empty());
    for file in files {
        assert_eq!(
            mode(&file) & 0o077,
            0,
            "{} is readable by others",
            file.display()
        );
    }
}

#[tokio::test]
async fn plain_text_on_a_network_address_is_warned_about_once() {
    let dir = tempfile::tempdir().unwrap();
    let logs = Logs::new();
    let mut child = ctxsync()
        .args([
            "server",
            "--grpc-addr",
            "0.0.0.0:0",
            "--http-addr",
            "127.0.0.1:0",
        ])
        .arg("--data-dir")
        .arg(dir.path())
        .env("CTXSYNC_API_TOKEN", API_TOKEN)
        .stdout(Stdio::null())
        .stderr(logs_file(&logs, "server"))
        .spawn()
        .unwrap();
    let log = wait_for_log(&logs, "server", "without TLS").await;
    child.kill().await.unwrap();
    let warnings: Vec<&str> = log.lines().filter(|l| l.contains("without TLS")).collect();
    assert_eq!(warnings.len(), 1, "{log}");
    assert!(
        warnings[0].contains("agent API"),
        "says what: {}",
        warnings[0]
    );
    assert!(
        !warnings[0].contains("chat API"),
        "the HTTP listener is on loopback: {}",
        warnings[0]
    );
    assert!(
        warnings[0].contains("--tls-cert"),
        "says how: {}",
        warnings[0]
    );
}
