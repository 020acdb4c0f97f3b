//! Shared set-up for the binary's tests: a real server on loopback ports over SQLite or a
//! fresh PostgreSQL database, and snapshots to push through the real store.

pub(crate) mod haproxy;
pub(crate) mod webdriver;

use std::path::PathBuf;
use std::time::Duration;

use ctxsync::server::{RunningServer, ServerConfig};
use ctxsync_persistence::test_support::TestDatabase;
use ctxsync_persistence::{AgentId, DatabaseConfig};
use ctxsync_protocol::*;
use serde_json::{Value, json};

pub(crate) use ctxsync_test_support::TestBackend;

/// A running server and what keeps its database alive.
pub(crate) struct Harness {
    pub server: RunningServer,
    pub http: reqwest::Client,
    _database: Option<TestDatabase>,
    _dir: tempfile::TempDir,
}

impl Harness {
    /// `None` only when PostgreSQL is unreachable outside CI with the skip flag set.
    pub(crate) async fn start(backend: TestBackend) -> Option<Self> {
        Self::start_with(backend, Duration::from_secs(5), Duration::from_secs(2)).await
    }

    pub(crate) async fn start_with(
        backend: TestBackend,
        budget: Duration,
        grace: Duration,
    ) -> Option<Self> {
        Self::start_configured(backend, |config| {
            config.discovery_budget = budget;
            config.snapshot_grace = grace;
        })
        .await
    }

    /// A server with the tests' API token and budgets of 5 s and 2 s, then `configure`'s
    /// changes.
    pub(crate) async fn start_configured(
        backend: TestBackend,
        configure: impl FnOnce(&mut ServerConfig),
    ) -> Option<Self> {
        let dir = tempfile::tempdir().expect("temp dir");
        let (database, db) = match backend {
            TestBackend::Sqlite => (DatabaseConfig::sqlite_in(dir.path()), None),
            TestBackend::Postgres => {
                let db = tokio::task::spawn_blocking(TestDatabase::create)
                    .await
                    .expect("create task")?;
                (db.config(), Some(db))
            }
        };
        let mut config = ServerConfig {
            database,
            api_token: Some("test-api-token-0123456789".into()),
            discovery_budget: Duration::from_secs(5),
            snapshot_grace: Duration::from_secs(2),
            ..ServerConfig::ephemeral(dir.path())
        };
        configure(&mut config);
        let server = ctxsync::server::start(config).await.expect("server starts");
        Some(Self {
            server,
            http: reqwest::Client::new(),
            _database: db,
            _dir: dir,
        })
    }

    /// The server's data directory (the SQLite files live here).
    pub(crate) fn data_dir(&self) -> &std::path::Path {
        self._dir.path()
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.server.http_url())
    }

    /// An authenticated JSON request; returns the status and the JSON body (or `null`).
    pub(crate) async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut request = self
            .http
            .request(method, self.url(path))
            .bearer_auth(&self.server.api_token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("request is sent");
        let status = response.status().as_u16();
        let text = response.text().await.unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// The chat's context panel in the format `accept` asks for.
    pub(crate) async fn panel_as(&self, chat: &str, accept: &str) -> String {
        self.http
            .get(self.url(&format!("/api/chats/{chat}/context")))
            .bearer_auth(&self.server.api_token)
            .header("accept", accept)
            .send()
            .await
            .expect("request is sent")
            .text()
            .await
            .expect("the panel's body is read")
    }

    pub(crate) async fn new_agent(&self) -> AgentId {
        self.server
            .store
            .create_agent("agent")
            .await
            .expect("agent")
            .id
    }

    pub(crate) async fn new_chat(&self, agent: AgentId) -> String {
        let (status, chat) = self
            .call(
                reqwest::Method::POST,
                "/api/chats",
                Some(json!({ "agent_id": agent.to_string() })),
            )
            .await;
        assert_eq!(status, 201, "{chat}");
        chat["id"].as_str().unwrap().to_string()
    }

    /// Starts a default turn of `chat` (`POST …/turns {}`, which must answer 200) and
    /// returns it.
    pub(crate) async fn new_turn(&self, chat: &str) -> Value {
        let (status, turn) = self
            .call(
                reqwest::Method::POST,
                &format!("/api/chats/{chat}/turns"),
                Some(json!({})),
            )
            .await;
        assert_eq!(status, 200, "{turn}");
        turn
    }

    /// Reports a process start and pushes a snapshot from it, through the real store.
    pub(crate) async fn push(
        &self,
        agent: AgentId,
        run: &str,
        version: u64,
        phase: DiscoveryPhase,
        resources: Vec<Resource>,
    ) {
        let store = &self.server.store;
        let startup = Startup {
            version: "test".into(),
            expanded_directory: "/ws".into(),
            agent_run_id: RunId::new(run),
            accepts_tool_calls: false,
        };
        store.update_startup(agent, startup).await.expect("startup");
        let snapshot = Snapshot {
            version,
            aggregate_hash: "agg".into(),
            resources,
            initial: true,
            snapshot_error: None,
            agent_run_id: RunId::new(run),
            phase,
            ..Default::default()
        };
        store
            .push_context_state(agent, snapshot)
            .await
            .expect("push");
    }
}

pub(crate) fn file(source: &str, content: &str) -> Resource {
    Resource {
        source: source.into(),
        source_path: None,
        content_hash: format!("h-{}", content.len()),
        size_bytes: content.len() as u64,
        status: ResourceStatus::Ok,
        error: None,
        body: ResourceBody::InstructionFile(InstructionFileBody {
            content: content.into(),
        }),
    }
}

pub(crate) fn config_file() -> Resource {
    Resource {
        source: ".mcp.json".into(),
        source_path: Some("/ws/.mcp.json".into()),
        content_hash: "cfg".into(),
        size_bytes: 42,
        status: ResourceStatus::Ok,
        error: None,
        body: ResourceBody::McpConfig,
    }
}

pub(crate) fn server(name: &str, tools: &[(&str, &str)]) -> Resource {
    let schema = json!({ "type": "object", "properties": { "query": { "type": "string" } } });
    let tools: Vec<_> = tools
        .iter()
        .map(|(t, d)| ctxsync_test_support::mcp_tool(t, *d, schema.clone()))
        .collect();
    ctxsync_test_support::mcp_server(name, format!("s-{name}-{}", tools.len()), tools)
}

pub(crate) fn failed_server(name: &str, error: &str) -> Resource {
    Resource {
        status: ResourceStatus::Unreadable,
        error: Some(error.into()),
        ..server(name, &[])
    }
}

/// Where tests leave artifacts (screenshots) for people to look at.
pub(crate) fn artifact_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/test-artifacts");
    std::fs::create_dir_all(&dir).expect("artifact dir");
    dir
}

/// Names a Python interpreter with the generic clients (`prometheus-client`, the gRPC
/// health and reflection clients, schemathesis); otherwise the one `cargo xtask test`
/// installs in `<workspace>/target/tools/pyeco` is used.
const PYTHON_ENV: &str = "CTXSYNC_PYTHON_ECOSYSTEM";

/// That interpreter; a missing one fails the test with what to run, never skips it.
pub(crate) fn python() -> PathBuf {
    let default =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/tools/pyeco/bin/python");
    let path = std::env::var_os(PYTHON_ENV).map_or(default, PathBuf::from);
    assert!(
        path.is_file(),
        "no Python with the ecosystem clients at {}: run `cargo xtask test` (it installs \
         target/tools/pyeco) or set {PYTHON_ENV} to a python that has the packages \
         xtask's PYTHON_ECOSYSTEM_PACKAGES pins",
        path.display()
    );
    path
}
