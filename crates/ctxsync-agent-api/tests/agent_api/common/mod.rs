//! Shared harness for the integration tests: a store on its own database, the agent
//! API on loopback with a generated client, and snapshot fixtures.

use std::time::Duration;

use ctxsync_agent_api::test_support::{TestAgentApi, serve_agent_api, with_bearer};
use ctxsync_persistence::test_support::TestStore;
use ctxsync_persistence::{AgentContext, AgentId, ChangeEvent, Store};
use ctxsync_protocol::v1::agent_client::AgentClient;
use ctxsync_protocol::{
    DiscoveryPhase, InstructionFileBody, McpTool, Resource, ResourceBody, ResourceStatus, RunId,
    SkillBody, Snapshot, Startup, v1,
};
use ctxsync_test_support::TestBackend;
use sha2::{Digest, Sha256};
use tonic::transport::Channel;
use tonic::{Code, Status};

/// Upper bound for waiting on an event that must arrive; never slept when it does.
pub(crate) const EVENT_DEADLINE: Duration = Duration::from_secs(5);

/// One test's world: its own database, the agent API serving it, and a client.
pub(crate) struct Harness {
    // Field order is drop order: the server stops before the database is dropped.
    pub api: TestAgentApi,
    pub client: AgentClient<Channel>,
    pub db: TestStore,
}

impl Harness {
    /// A harness on `backend` (the per-backend macro's `open`); `None` only when
    /// PostgreSQL may be skipped.
    pub(crate) async fn open(backend: TestBackend) -> Option<Self> {
        match backend {
            TestBackend::Sqlite => Some(Self::sqlite().await),
            TestBackend::Postgres => Self::postgres().await,
        }
    }

    pub(crate) async fn sqlite() -> Self {
        Self::over(TestStore::sqlite().await).await
    }

    pub(crate) async fn postgres() -> Option<Self> {
        Some(Self::over(TestStore::postgres().await?).await)
    }

    /// The API over `store`, sharing `db`'s harness shape (used when a test needs its
    /// own store options).
    pub(crate) async fn over_store(store: Store) -> ServedStore {
        let api = serve_agent_api(store.clone()).await;
        let client = api.client().await;
        ServedStore { api, client, store }
    }

    pub(crate) async fn over(db: TestStore) -> Self {
        let api = serve_agent_api(db.store().clone()).await;
        let client = api.client().await;
        Self { api, client, db }
    }

    pub(crate) fn store(&self) -> &Store {
        self.db.store()
    }

    /// Creates an agent; returns its id and token.
    pub(crate) async fn agent(&self, name: &str) -> (AgentId, String) {
        let created = self.store().create_agent(name).await.expect("create agent");
        (created.id, created.token.into_string())
    }

    /// UpdateStartup through gRPC with `run` as the run id (`""` for a legacy agent).
    pub(crate) async fn startup(&self, token: &str, run: &str) -> Result<v1::Startup, Status> {
        let startup = Startup {
            version: "1.2.3".into(),
            expanded_directory: "/workspace".into(),
            agent_run_id: RunId::new(run),
            accepts_tool_calls: false,
        };
        self.startup_wire(token, startup.into()).await
    }

    pub(crate) async fn startup_wire(
        &self,
        token: &str,
        request: v1::UpdateStartupRequest,
    ) -> Result<v1::Startup, Status> {
        let mut client = self.client.clone();
        client
            .update_startup(with_bearer(request, token))
            .await
            .map(tonic::Response::into_inner)
    }

    /// PushContextState through gRPC; returns `accepted`.
    pub(crate) async fn push(&self, token: &str, snapshot: Snapshot) -> Result<bool, Status> {
        self.push_wire(token, snapshot.into()).await
    }

    pub(crate) async fn push_wire(
        &self,
        token: &str,
        request: v1::PushContextStateRequest,
    ) -> Result<bool, Status> {
        let mut client = self.client.clone();
        client
            .push_context_state(with_bearer(request, token))
            .await
            .map(|r| r.into_inner().accepted)
    }

    pub(crate) async fn context(&self, agent: AgentId) -> AgentContext {
        self.store()
            .read_agent_context(agent)
            .await
            .expect("read agent context")
            .expect("agent exists")
    }
}

/// Asserts a gRPC failure's code and that its message mentions `needle`.
pub(crate) fn assert_status<T: std::fmt::Debug>(
    result: Result<T, Status>,
    code: Code,
    needle: &str,
) {
    match result {
        Err(status) => {
            assert_eq!(status.code(), code, "unexpected status: {status:?}");
            assert!(
                status.message().contains(needle),
                "status message {:?} should mention {needle:?}",
                status.message()
            );
        }
        Ok(value) => panic!("expected {code:?}, got Ok({value:?})"),
    }
}

/// Waits for the next event (bounded by [`EVENT_DEADLINE`]).
pub(crate) async fn next_event(next: impl Future<Output = Option<ChangeEvent>>) -> ChangeEvent {
    tokio::time::timeout(EVENT_DEADLINE, next)
        .await
        .expect("no event within the deadline")
        .expect("store closed")
}

/// The agent API over a caller-made store.
pub(crate) struct ServedStore {
    pub api: TestAgentApi,
    pub client: AgentClient<Channel>,
    pub store: Store,
}

impl ServedStore {
    pub(crate) async fn agent(&self, name: &str) -> (AgentId, String) {
        let created = self.store.create_agent(name).await.expect("create agent");
        (created.id, created.token.into_string())
    }

    pub(crate) async fn startup(&self, token: &str, run: &str) -> Result<v1::Startup, Status> {
        let startup = Startup {
            agent_run_id: RunId::new(run),
            ..Startup::default()
        };
        let mut client = self.client.clone();
        client
            .update_startup(with_bearer(v1::UpdateStartupRequest::from(startup), token))
            .await
            .map(tonic::Response::into_inner)
    }

    pub(crate) async fn push(&self, token: &str, snapshot: Snapshot) -> Result<bool, Status> {
        let mut client = self.client.clone();
        client
            .push_context_state(with_bearer(
                v1::PushContextStateRequest::from(snapshot),
                token,
            ))
            .await
            .map(|r| r.into_inner().accepted)
    }
}

// ---- fixtures ------------------------------------------------------------------------

pub(crate) fn hex_sha256(parts: &[&str]) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update((part.len() as u64).to_le_bytes());
        hasher.update(part.as_bytes());
    }
    hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

pub(crate) fn instruction(source: &str, content: &str) -> Resource {
    Resource {
        source: source.into(),
        source_path: Some(format!("/workspace/{source}")),
        content_hash: hex_sha256(&[content]),
        size_bytes: content.len() as u64,
        status: ResourceStatus::Ok,
        error: None,
        body: ResourceBody::InstructionFile(InstructionFileBody {
            content: content.into(),
        }),
    }
}

pub(crate) fn skill(name: &str, description: &str) -> Resource {
    let meta = format!("---\nname: {name}\ndescription: {description}\n---\n");
    Resource {
        source: format!("skills/{name}/SKILL.md"),
        source_path: Some(format!("/workspace/skills/{name}/SKILL.md")),
        content_hash: hex_sha256(&[&meta]),
        size_bytes: meta.len() as u64,
        status: ResourceStatus::Ok,
        error: None,
        body: ResourceBody::Skill(SkillBody {
            meta,
            name: name.into(),
            description: description.into(),
        }),
    }
}

pub(crate) fn mcp_config(path: &str) -> Resource {
    Resource {
        source: path.into(),
        source_path: Some(format!("/workspace/{path}")),
        content_hash: hex_sha256(&[path]),
        size_bytes: 10,
        status: ResourceStatus::Ok,
        error: None,
        body: ResourceBody::McpConfig,
    }
}

pub(crate) fn mcp_server(name: &str, tools: &[&str]) -> Resource {
    let schema = serde_json::json!({"type": "object", "properties": {"path": {"type": "string"}}});
    let tools: Vec<McpTool> = tools
        .iter()
        .map(|t| ctxsync_test_support::mcp_tool(t, format!("the {t} tool"), schema.clone()))
        .collect();
    let mut hash_parts = vec![name];
    hash_parts.extend(tools.iter().map(|t| t.name.as_str()));
    let content_hash = hex_sha256(&hash_parts);
    ctxsync_test_support::mcp_server(name, content_hash, tools)
}

pub(crate) fn failed_server(name: &str, error: &str) -> Resource {
    Resource {
        status: ResourceStatus::Unreadable,
        error: Some(error.into()),
        ..mcp_server(name, &[])
    }
}

/// A snapshot whose aggregate hash covers the non-MCP resources, as the agent computes.
pub(crate) fn snapshot(
    version: u64,
    run: Option<&str>,
    phase: DiscoveryPhase,
    resources: Vec<Resource>,
) -> Snapshot {
    let mut hashed: Vec<(&str, &str)> = resources
        .iter()
        .filter(|r| !matches!(r.body, ResourceBody::McpConfig | ResourceBody::McpServer(_)))
        .map(|r| (r.source.as_str(), r.content_hash.as_str()))
        .collect();
    hashed.sort();
    let parts: Vec<&str> = hashed.iter().flat_map(|(s, h)| [*s, *h]).collect();
    Snapshot {
        version,
        aggregate_hash: hex_sha256(&parts),
        resources,
        initial: version == 1,
        snapshot_error: None,
        agent_run_id: run.and_then(RunId::new),
        phase,
        ..Default::default()
    }
}

/// `resources` sorted by source, as the store returns them.
pub(crate) fn sorted(mut resources: Vec<Resource>) -> Vec<Resource> {
    resources.sort_by(|a, b| a.source.cmp(&b.source));
    resources
}

/// A typical workspace: an instruction file, a skill, a config file and a server.
pub(crate) fn workspace() -> Vec<Resource> {
    vec![
        instruction("AGENTS.md", "Be brief."),
        skill("pdf-tools", "Work with PDF files"),
        mcp_config(".mcp.json"),
        mcp_server("fs", &["read", "write"]),
    ]
}
