//! Fault injection at the HTTP edge: a first-turn waiter whose HTTP client disconnects
//! does not break later turns. (A server killed mid-stream and restarted is `agent.rs`'s
//! `a_server_restart_loses_nothing`; a PostgreSQL outage through a cut proxy is not
//! covered yet, see RELIABILITY.md.)

use std::time::{Duration, Instant};

use ctxsync::server::ServerConfig;
use ctxsync_persistence::test_support::TestStore;
use ctxsync_protocol::DiscoveryPhase;

/// A first turn that waits for discovery, whose HTTP client goes away mid-wait, leaves
/// the server able to answer later turns (and their waits) normally.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_client_disconnects_does_not_break_later_turns() {
    let store = TestStore::sqlite().await;
    let dir = tempfile::tempdir().unwrap();
    let server = ctxsync::server::start(ServerConfig {
        database: store.config().clone(),
        api_token: Some("fault-api-token-0123456789".into()),
        discovery_budget: Duration::from_secs(3),
        snapshot_grace: Duration::from_secs(3),
        ..ServerConfig::ephemeral(dir.path())
    })
    .await
    .unwrap();
    let agent = store.create_agent("waiter").await.unwrap();
    let chat = store.create_chat(Some(agent.id)).await.unwrap();
    let turn_url = format!("{}/api/chats/{}/turns", server.http_url(), chat.id);
    let http = reqwest::Client::new();
    let turn = || {
        http.post(&turn_url)
            .bearer_auth(&server.api_token)
            .json(&serde_json::json!({ "mode": "default" }))
            .send()
    };

    // The agent process has started but not pushed yet: a first turn waits for it.
    let startup = ctxsync_protocol::Startup {
        version: "t".into(),
        expanded_directory: "/ws".into(),
        agent_run_id: Some("run-1".into()),
    };
    store.update_startup(agent.id, startup).await.unwrap();
    // Three clients give up 200 ms into a wait of up to 3 s.
    for _ in 0..3 {
        let abandoned = tokio::time::timeout(Duration::from_millis(200), turn()).await;
        assert!(abandoned.is_err(), "the turn waits for a snapshot");
    }
    // The agent now publishes; a new turn is answered at once, without waiting.
    let snapshot = ctxsync_protocol::Snapshot {
        version: 1,
        aggregate_hash: "agg".into(),
        resources: vec![],
        initial: true,
        snapshot_error: None,
        agent_run_id: Some("run-1".into()),
        phase: DiscoveryPhase::Complete,
    };
    assert!(
        store
            .push_context_state(agent.id, snapshot)
            .await
            .unwrap()
            .accepted()
    );
    let started = Instant::now();
    let response = turn().await.unwrap();
    assert_eq!(response.status(), 200);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["mcp_discovery"]["phase"], "complete", "{body}");
    assert_eq!(body["mcp_discovery"]["wait_timed_out"], false, "{body}");
    assert!(started.elapsed() < Duration::from_secs(1), "{body}");
}
