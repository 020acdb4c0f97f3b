//! Whether an agent is connected (issue 49), on both backends: the call stream's row says
//! `online` while its current run's stream is open under a live lease, `offline` from when
//! the stream was released or its lease ran out, and `never` for a run that has opened
//! none; every change of it wakes the agent's subscribers, and `connected_agents` counts
//! the online ones.

use std::time::Duration;

use chrono::Utc;
use ctxsync_persistence::test_support::TestStore;
use ctxsync_persistence::{AgentConnection, AgentId, ChangeEvent, Store};
use ctxsync_protocol::{RunId, Startup};

ctxsync_test_support::on_both_backends! {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    open = ctxsync_test_support::store;
    a_stream_makes_its_run_online_and_its_end_offline,
    a_lapsed_lease_is_offline_since_it_ran_out,
}

const LEASE: Duration = Duration::from_secs(30);

async fn start(store: &Store, agent: AgentId, run: &str) {
    let startup = Startup {
        agent_run_id: RunId::new(run),
        accepts_tool_calls: true,
        ..Startup::default()
    };
    store.update_startup(agent, startup).await.unwrap();
}

async fn connection(store: &Store, agent: AgentId) -> AgentConnection {
    store
        .read_agent_context(agent)
        .await
        .unwrap()
        .expect("the agent exists")
        .connection
}

/// Waits (bounded) for a change notification of `agent` on `subscription`.
async fn heard(subscription: &mut ctxsync_persistence::AgentSubscription, agent: AgentId) {
    let event = tokio::time::timeout(Duration::from_secs(10), subscription.next())
        .await
        .expect("a change notification within 10 s")
        .expect("the subscription is open");
    match event {
        ChangeEvent::AgentContextChanged { agent_id, .. } => assert_eq!(agent_id, agent),
        ChangeEvent::Resync => {}
        other => panic!("unexpected event {other:?}"),
    }
}

async fn a_stream_makes_its_run_online_and_its_end_offline(db: TestStore) {
    let store = db.store();
    let agent = store.create_agent("laptop").await.unwrap().id;
    let other = store.create_agent("desktop").await.unwrap().id;
    assert_eq!(connection(store, agent).await, AgentConnection::Never);
    start(store, agent, "run-1").await;
    start(store, other, "run-9").await;
    assert_eq!(
        connection(store, agent).await,
        AgentConnection::Never,
        "no stream of this run yet"
    );
    assert_eq!(store.connected_agents().await.unwrap(), 0);

    let mut subscription = store.subscribe_agent(agent);
    let run = RunId::new("run-1").unwrap();
    let (lease, _) = store
        .register_call_stream(agent, &run, "replica-a", LEASE)
        .await
        .unwrap()
        .expect("the current run registers");
    heard(&mut subscription, agent).await;
    assert_eq!(connection(store, agent).await, AgentConnection::Online);
    assert_eq!(connection(store, other).await, AgentConnection::Never);
    assert_eq!(store.connected_agents().await.unwrap(), 1);

    let before = Utc::now() - chrono::Duration::seconds(1);
    store.release_call_stream(&lease).await.unwrap();
    heard(&mut subscription, agent).await;
    let AgentConnection::Offline { since } = connection(store, agent).await else {
        panic!("offline after the stream ended");
    };
    assert!(
        since >= before && since <= Utc::now() + chrono::Duration::seconds(1),
        "offline since {since}, released after {before}"
    );
    assert_eq!(store.connected_agents().await.unwrap(), 0);
    // An ended stream holds nothing: its replica renews no lease for it.
    assert!(
        store
            .renew_call_streams("replica-a", LEASE)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(matches!(
        connection(store, agent).await,
        AgentConnection::Offline { .. }
    ));

    // A restarted process has not connected until its own stream opens.
    start(store, agent, "run-2").await;
    assert_eq!(connection(store, agent).await, AgentConnection::Never);
    let run = RunId::new("run-2").unwrap();
    store
        .register_call_stream(agent, &run, "replica-b", LEASE)
        .await
        .unwrap()
        .expect("the new run registers");
    assert_eq!(connection(store, agent).await, AgentConnection::Online);
    assert_eq!(store.connected_agents().await.unwrap(), 1);

    // A deleted agent leaves no stream row behind once its stream ends.
    let run = RunId::new("run-9").unwrap();
    let (lease, _) = store
        .register_call_stream(other, &run, "replica-a", LEASE)
        .await
        .unwrap()
        .unwrap();
    store.delete_agent(other).await.unwrap();
    store.release_call_stream(&lease).await.unwrap();
    assert_eq!(store.connected_agents().await.unwrap(), 1);
}

async fn a_lapsed_lease_is_offline_since_it_ran_out(db: TestStore) {
    let store = db.store();
    let agent = store.create_agent("laptop").await.unwrap().id;
    start(store, agent, "run-1").await;
    let run = RunId::new("run-1").unwrap();
    let lease = Duration::from_millis(300);
    let registered = Utc::now();
    store
        .register_call_stream(agent, &run, "replica-a", lease)
        .await
        .unwrap()
        .unwrap();
    // The holding replica stops renewing (it died): offline once the lease runs out,
    // dated by the lease, not by whoever reads it.
    ctxsync_test_support::poll("the lapsed lease to read offline")
        .within(Duration::from_secs(10))
        .until_true(|| async {
            matches!(
                connection(store, agent).await,
                AgentConnection::Offline { .. }
            )
        })
        .await;
    let AgentConnection::Offline { since } = connection(store, agent).await else {
        unreachable!("polled for offline");
    };
    assert!(
        since >= registered && since <= registered + chrono::Duration::seconds(10),
        "offline since {since}, registered at {registered}"
    );
    assert_eq!(store.connected_agents().await.unwrap(), 0);
    // A replica that renews again holds the stream again: online.
    let held = store.renew_call_streams("replica-a", LEASE).await.unwrap();
    assert_eq!(held.len(), 1);
    assert_eq!(connection(store, agent).await, AgentConnection::Online);
}
