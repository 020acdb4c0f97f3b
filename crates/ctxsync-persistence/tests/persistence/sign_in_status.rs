//! A server that asks for a person's sign-in is stored with its own status on both
//! backends, and reads back as such (the SQLite table's CHECK was rebuilt for it).

use ctxsync_persistence::test_support::TestStore;
use ctxsync_protocol::DiscoveryPhase::Complete;
use ctxsync_protocol::{ResourceStatus, RunId, Startup};
use ctxsync_test_support::pushed::{failed_server, mcp_server, snapshot};

ctxsync_test_support::on_both_backends! {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    open = ctxsync_test_support::store;
    a_server_that_needs_a_sign_in_keeps_its_status,
}

async fn a_server_that_needs_a_sign_in_keeps_its_status(db: TestStore) {
    let store = db.store();
    let agent = store.create_agent("laptop").await.unwrap().id;
    let startup = Startup {
        agent_run_id: RunId::new("run-1"),
        ..Startup::default()
    };
    store.update_startup(agent, startup).await.unwrap();
    let mut github = failed_server("github", "the server answered 401 Unauthorized");
    github.status = ResourceStatus::NeedsAuthorization;
    let pushed = snapshot(
        1,
        Some("run-1"),
        Complete,
        vec![mcp_server("fs", &["read"]), github],
    );
    store.push_context_state(agent, pushed).await.unwrap();
    let context = store.read_agent_context(agent).await.unwrap().unwrap();
    let status = |source: &str| {
        context
            .resources
            .iter()
            .find(|r| r.source == source)
            .map(|r| r.status)
    };
    assert_eq!(
        status("mcp:github"),
        Some(ResourceStatus::NeedsAuthorization)
    );
    assert_eq!(status("mcp:fs"), Some(ResourceStatus::Ok));
}
