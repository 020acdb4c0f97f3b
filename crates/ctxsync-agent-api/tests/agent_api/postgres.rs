//! PostgreSQL-only behaviour: several store instances (as several server processes
//! would have, each with its own pool and LISTEN connection) on one database.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use ctxsync_agent_api::test_support::{serve_agent_api, with_bearer};
use ctxsync_persistence::test_support::{TestStore, test_options};
use ctxsync_persistence::{AgentId, ChangeEvent, Store, StoreOptions};
use ctxsync_protocol::DiscoveryPhase::{Complete, Pending};
use ctxsync_protocol::v1::agent_client::AgentClient;
use ctxsync_protocol::{RunId, v1};
use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use tonic::Code;
use tonic::transport::Channel;

/// Interleavings tried by the race test.
const RACE_ITERATIONS: u64 = 40;

/// A tiny deterministic generator, so a failing interleaving can be replayed by seed.
struct XorShift(u64);

impl XorShift {
    fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % bound
    }
}

/// Retries what an agent retries: `Aborted` (write conflict) and `Unavailable`.
macro_rules! persist {
    ($call:expr) => {{
        let mut attempts = 0;
        loop {
            match $call.await {
                Err(s)
                    if matches!(s.code(), Code::Aborted | Code::Unavailable) && attempts < 10 =>
                {
                    attempts += 1;
                }
                other => break other,
            }
        }
    }};
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_processes_never_leave_a_foreign_snapshot() {
    let Some(db) = TestStore::postgres().await else {
        return;
    };
    let old_api = serve_agent_api(db.store().clone()).await;
    let new_store = db.open_another().await;
    let new_api = serve_agent_api(new_store.clone()).await;
    let (mut old_accepted, mut old_dropped) = (0, 0);
    let (old_client, new_client) = (old_api.client().await, new_api.client().await);

    for seed in 1..=RACE_ITERATIONS {
        let (accepted, dropped) = race_once(seed, &db, &old_client, &new_client, &new_store).await;
        old_accepted += accepted;
        old_dropped += dropped;
    }
    // The interleavings covered both orders: old pushes landing before the restart
    // and old pushes arriving after it.
    eprintln!("old process pushes: {old_accepted} accepted, {old_dropped} dropped");
    assert!(old_accepted > 0 && old_dropped > 0, "the race never raced");
}

/// The startup a process sends for `run`.
fn startup(run: &str) -> v1::UpdateStartupRequest {
    ctxsync_protocol::Startup {
        agent_run_id: RunId::new(run),
        ..Default::default()
    }
    .into()
}

/// Push `version` of `run`: its instruction file names both, so a stored one tells whose it is.
fn push(run: &str, version: u64, initial: bool) -> v1::PushContextStateRequest {
    let mut resources = workspace();
    resources[0] = instruction("AGENTS.md", &format!("{run} v{version}"));
    let mut s = snapshot(version, Some(run), Pending, resources);
    s.initial = initial;
    s.into()
}

/// One interleaving, drawn from `seed`: an old process has pushed, then goes on pushing
/// while a new one starts through the other store. Returns the old process's later
/// pushes accepted and dropped.
async fn race_once(
    seed: u64,
    db: &TestStore,
    old_client: &AgentClient<Channel>,
    new_client: &AgentClient<Channel>,
    new_store: &Store,
) -> (u32, u32) {
    let mut rng = XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let created = db.create_agent(&format!("racer-{seed}")).await.unwrap();
    let (agent, token) = (created.id, created.token.into_string());
    let (old_run, new_run) = (format!("old-{seed}"), format!("new-{seed}"));
    let mut client = old_client.clone();
    client
        .update_startup(with_bearer(startup(&old_run), &token))
        .await
        .unwrap();
    client
        .push_context_state(with_bearer(push(&old_run, 1, true), &token))
        .await
        .unwrap();

    // The old process keeps pushing (and may reconnect with its old run id) while
    // the new process starts up and pushes through the other store.
    let old_plan: Vec<(u64, bool, bool)> = (0..4)
        .map(|_| (rng.below(3000), rng.below(3) == 0, rng.below(4) == 0))
        .collect();
    let new_delay = rng.below(4000);
    let old = tokio::spawn(old_process_pushes(
        old_client.clone(),
        token.clone(),
        old_run.clone(),
        old_plan,
    ));
    let checks = [rng.below(1500), rng.below(1500)];
    let new = tokio::spawn(new_process_starts(
        new_client.clone(),
        token.clone(),
        new_run.clone(),
        new_store.clone(),
        agent,
        new_delay,
        checks,
    ));
    let (accepted, dropped) = old.await.expect("old process task");
    new.await.expect("new process task");

    check_new_run_owns_the_row(db, agent, seed, &new_run).await;
    (accepted, dropped)
}

/// The old process: after each planned delay it may reconnect with its old run id
/// (refused once the new run holds the row), then pushes the next version.
async fn old_process_pushes(
    client: AgentClient<Channel>,
    token: String,
    run: String,
    plan: Vec<(u64, bool, bool)>,
) -> (u32, u32) {
    let (mut accepted, mut dropped) = (0, 0);
    for (version, (delay_us, initial, reconnect)) in (2..).zip(plan) {
        tokio::time::sleep(Duration::from_micros(delay_us)).await;
        if reconnect {
            let result = persist!(
                client
                    .clone()
                    .update_startup(with_bearer(startup(&run), &token))
            );
            if let Err(status) = result {
                assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
            }
        }
        let outcome = persist!(
            client
                .clone()
                .push_context_state(with_bearer(push(&run, version, initial), &token))
        )
        .expect("old push failed");
        if outcome.into_inner().accepted {
            accepted += 1;
        } else {
            dropped += 1;
        }
    }
    (accepted, dropped)
}

/// The new process: starts up after `delay_us`, its first push is accepted, and at each
/// of `checks` later the stored snapshot is still its own.
async fn new_process_starts(
    client: AgentClient<Channel>,
    token: String,
    run: String,
    store: Store,
    agent: AgentId,
    delay_us: u64,
    checks: [u64; 2],
) {
    tokio::time::sleep(Duration::from_micros(delay_us)).await;
    persist!(
        client
            .clone()
            .update_startup(with_bearer(startup(&run), &token))
    )
    .expect("new startup failed");
    let accepted = persist!(
        client
            .clone()
            .push_context_state(with_bearer(push(&run, 1, true), &token))
    )
    .expect("new push failed")
    .into_inner()
    .accepted;
    assert!(accepted, "the current process's push was dropped");
    // From now on, whatever the old process does, the snapshot is ours.
    for delay_us in checks {
        tokio::time::sleep(Duration::from_micros(delay_us)).await;
        let ctx = store.read_agent_context(agent).await.unwrap().unwrap();
        let stored = ctx.snapshot.expect("snapshot");
        assert_eq!(
            (
                RunId::edge(ctx.agent.agent_run_id.as_ref()),
                RunId::edge(stored.agent_run_id.as_ref())
            ),
            (run.as_str(), run.as_str())
        );
    }
}

/// After both processes are done: the row, its snapshot and its resources are the new run's.
async fn check_new_run_owns_the_row(db: &TestStore, agent: AgentId, seed: u64, new_run: &str) {
    let ctx = db.read_agent_context(agent).await.unwrap().unwrap();
    let stored = ctx.snapshot.expect("snapshot");
    assert_eq!(
        RunId::edge(ctx.agent.agent_run_id.as_ref()),
        new_run,
        "seed {seed}: the old run reclaimed the row"
    );
    assert_eq!(
        stored.agent_run_id, ctx.agent.agent_run_id,
        "seed {seed}: foreign snapshot"
    );
    let expected = instruction("AGENTS.md", &format!("{new_run} v1"));
    assert!(
        ctx.resources.contains(&expected),
        "seed {seed}: resources from another run"
    );
}

#[tokio::test]
async fn a_notify_from_one_store_wakes_a_subscriber_on_another() {
    let Some(h) = Harness::postgres().await else {
        return;
    };
    let other = h.db.open_another().await;
    let (agent, token) = h.agent("cross-process").await;
    let mut remote = other.subscribe_agent(agent);
    let mut local = h.store().subscribe_agent(agent);

    h.startup(&token, "run-1").await.unwrap();
    let startup_event = ChangeEvent::AgentContextChanged {
        agent_id: agent,
        snapshot_version: None,
    };
    assert_eq!(next_event(remote.next()).await, startup_event);
    assert_eq!(next_event(local.next()).await, startup_event);

    for version in 1..=3 {
        let phase = if version == 3 { Complete } else { Pending };
        let mut resources = workspace();
        resources[0] = instruction("AGENTS.md", &format!("v{version}"));
        assert!(
            h.push(&token, snapshot(version, Some("run-1"), phase, resources))
                .await
                .unwrap()
        );
        let started = Instant::now();
        let expect = ChangeEvent::AgentContextChanged {
            agent_id: agent,
            snapshot_version: Some(version),
        };
        assert_eq!(next_event(remote.next()).await, expect);
        eprintln!("cross-store wake-up after {:?}", started.elapsed());
        // The writer's own store delivers once (in-process), not again via NOTIFY.
        assert_eq!(next_event(local.next()).await, expect);
    }

    // Chat events cross too.
    let chat = h.store().create_chat(Some(agent)).await.unwrap();
    let mut chat_events = other.subscribe_chat(chat.id).await.unwrap();
    h.store().refresh_chat(chat.id).await.unwrap();
    assert_eq!(
        next_event(chat_events.next()).await,
        ChangeEvent::ChatChanged {
            chat_id: chat.id,
            agent_id: Some(agent)
        }
    );
}

#[tokio::test]
async fn a_dropped_listener_resyncs_and_reconnects() {
    let Some(db) = TestStore::postgres().await else {
        return;
    };
    let other = db.open_another().await;
    let created = db.create_agent("listener").await.unwrap();
    let agent = created.id;
    let mut events = other.subscribe_agent(agent);

    let database = db.postgres_database().unwrap();
    let mut admin = PgConnection::establish(database.url()).unwrap();
    admin
        .batch_execute(&format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = '{}' AND application_name = 'ctxsync-listener'",
            database.name()
        ))
        .unwrap();
    assert_eq!(next_event(events.next()).await, ChangeEvent::Resync);

    // Once reconnected (a second Resync says so), other processes' commits arrive again.
    assert_eq!(next_event(events.next()).await, ChangeEvent::Resync);
    let mut version = 0;
    let delivered = loop {
        version += 1;
        let s = snapshot(
            version,
            None,
            Pending,
            vec![instruction("AGENTS.md", &version.to_string())],
        );
        assert!(db.push_context_state(agent, s).await.unwrap().accepted());
        match tokio::time::timeout(Duration::from_millis(500), events.next()).await {
            Ok(Some(ChangeEvent::AgentContextChanged { .. })) => break true,
            _ if version < 10 => continue,
            _ => break false,
        }
    };
    assert!(delivered, "no event after the listener reconnected");
}

#[tokio::test]
async fn an_unreachable_database_is_unavailable_to_agents() {
    let Some(db) = TestStore::postgres().await else {
        return;
    };
    let options = StoreOptions {
        connection_timeout: Duration::from_millis(300),
        ..test_options()
    };
    let store = Store::open_with(db.config().clone(), options)
        .await
        .unwrap();
    let h = Harness::over_store(store).await;
    let (_, token) = h.agent("orphan").await;
    h.startup(&token, "run-1").await.unwrap();

    let database = db.postgres_database().unwrap();
    let mut admin =
        PgConnection::establish(&ctxsync_persistence::test_support::postgres_url()).unwrap();
    admin
        .batch_execute(&format!(
            "DROP DATABASE \"{}\" WITH (FORCE)",
            database.name()
        ))
        .unwrap();
    assert_status(
        h.push(&token, snapshot(1, Some("run-1"), Pending, workspace()))
            .await,
        Code::Unavailable,
        "unavailable",
    );
    assert!(h.api.metrics().requests_unavailable >= 1);
}
