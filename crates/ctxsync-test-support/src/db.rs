//! A fresh test database per backend (feature `db`).

use ctxsync_persistence::test_support::TestStore;

use crate::backend::TestBackend;

/// A store on its own fresh database; `None` only when PostgreSQL is unreachable and may
/// be skipped (persistence's `test_support` decides, and says so loudly).
pub async fn store(backend: TestBackend) -> Option<TestStore> {
    match backend {
        TestBackend::Sqlite => Some(TestStore::sqlite().await),
        TestBackend::Postgres => TestStore::postgres().await,
    }
}

/// Pushes `snapshot` for `agent` and fails the test unless the store accepted it.
pub async fn push_accepted(
    store: &ctxsync_persistence::Store,
    agent: ctxsync_persistence::AgentId,
    snapshot: ctxsync_protocol::Snapshot,
) {
    let outcome = store
        .push_context_state(agent, snapshot)
        .await
        .expect("push");
    assert!(outcome.accepted(), "push dropped: {outcome:?}");
}

/// UpdateStartup for `agent` as process `run` (`""`: a legacy agent without one) of agent
/// `version`, in `/ws`.
pub async fn start_run(
    store: &ctxsync_persistence::Store,
    agent: ctxsync_persistence::AgentId,
    run: &str,
    version: &str,
) {
    let startup = ctxsync_protocol::Startup {
        version: version.into(),
        expanded_directory: "/ws".into(),
        agent_run_id: ctxsync_protocol::RunId::new(run),
        accepts_tool_calls: false,
    };
    store
        .update_startup(agent, startup)
        .await
        .expect("update startup");
}
