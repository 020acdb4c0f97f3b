//! Shared harness for the integration tests: a store on its own database, the agent
//! API on loopback with a generated client, and snapshot fixtures.

use std::time::Duration;

use ctxsync_agent_api::test_support::{TestAgentApi, serve_agent_api, with_bearer};
use ctxsync_persistence::test_support::TestStore;
use ctxsync_persistence::{AgentContext, AgentId, ChangeEvent, Store};
use ctxsync_protocol::v1::agent_client::AgentClient;
use ctxsync_protocol::{RunId, Snapshot, Startup, v1};
use ctxsync_test_support::TestBackend;
pub(crate) use ctxsync_test_support::pushed::{
    failed_server, instruction, mcp_config, mcp_server, skill, snapshot, sorted, workspace,
};
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
