//! The gate over the real store ([`StoreGate`]) on SQLite and PostgreSQL: released by a
//! push's notification (never by the re-check timer), immediate when complete, the same
//! phase and freshness as the projection, across two stores on PostgreSQL, and failing
//! open when the database goes away.

use std::time::Duration;

use ctxsync_chat_projection::store::load_agent_view;
use ctxsync_first_turn_gate::{GateConfig, OutcomeReason, StoreGate, TurnMode};
use ctxsync_persistence::test_support::{TestDatabase, TestStore, test_options};
use ctxsync_persistence::{AgentId, ChatId, Store, StoreOptions};
use ctxsync_protocol::DiscoveryPhase::{Complete, Pending, Unspecified};
use ctxsync_protocol::{Resource, ResourceStatus, RunId};
use ctxsync_test_support::{mcp_server, mcp_tool, push_accepted as push, snapshot};

ctxsync_test_support::on_both_backends! {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    open = ctxsync_test_support::store;
    pending_then_complete_is_released_by_the_push,
    complete_returns_at_once_with_the_projections_inventory,
    outcomes_agree_with_the_projection,
    a_timeout_on_one_replica_is_not_waited_again_on_another,
    a_restarted_replica_does_not_wait_again,
}

/// Long enough never to end a test that works; a release must come far sooner.
const BUDGET: Duration = Duration::from_secs(5);
/// Far beyond any test: a release can only come from a notification.
const NO_RECHECK: Duration = Duration::from_secs(3600);
/// Bound on a release after the completing commit, far below [`BUDGET`].
const RELEASE_BOUND: Duration = Duration::from_secs(1);

fn config(budget: Duration, grace: Duration) -> GateConfig {
    GateConfig {
        discovery_budget: budget,
        snapshot_grace: grace,
        recheck_interval: NO_RECHECK,
        read_timeout: Duration::from_secs(2),
        ..GateConfig::default()
    }
}

fn gate(store: &Store, config: GateConfig) -> StoreGate {
    StoreGate::over_store(store.clone(), config)
}

async fn new_agent(store: &Store) -> AgentId {
    store.create_agent("agent").await.expect("create agent").id
}

/// UpdateStartup as process `run` (`""`: a legacy agent).
async fn start(store: &Store, agent: AgentId, run: &str) {
    ctxsync_test_support::start_run(store, agent, run, "1.0.0").await;
}

fn server(name: &str, tools: &[&str], status: ResourceStatus) -> Resource {
    let tools = tools
        .iter()
        .map(|t| {
            mcp_tool(
                t,
                format!("the {t} tool"),
                serde_json::json!({"type": "object"}),
            )
        })
        .collect();
    Resource {
        status,
        error: (status != ResourceStatus::Ok).then(|| "failed to connect".to_owned()),
        ..mcp_server(name, format!("hash-{name}"), tools)
    }
}

/// `fs` with two tools, `empty` with none, `broken` failed.
fn servers() -> Vec<Resource> {
    vec![
        server("fs", &["read", "write"], ResourceStatus::Ok),
        server("empty", &[], ResourceStatus::Ok),
        server("broken", &[], ResourceStatus::Unreadable),
    ]
}

/// A pending current run, then the completing push: the waiter is released by that
/// commit's notification (no re-check tick could have fired), with the committed counts.
/// `writer` commits the push: the gate's own store, or another one.
async fn release_by_push(store: &Store, writer: &Store) {
    let agent = new_agent(store).await;
    start(store, agent, "run-1").await;
    push(store, agent, snapshot(1, "run-1", Pending, servers())).await;
    let gate = gate(store, config(BUDGET, BUDGET));

    let sample = gate
        .measure_release(ChatId::new_random(), agent, async {
            push(writer, agent, snapshot(2, "run-1", Complete, servers())).await;
        })
        .await
        .expect("the pending run waits");
    let outcome = &sample.outcome;
    assert_eq!(
        outcome.reason,
        OutcomeReason::DiscoveryComplete,
        "{outcome:?}"
    );
    assert!(!outcome.wait_timed_out && !outcome.stale, "{outcome:?}");
    assert_eq!(
        (
            outcome.counts.servers_ok,
            outcome.counts.servers_empty,
            outcome.counts.servers_failed
        ),
        (1, 1, 1)
    );
    assert!(
        sample.latency < RELEASE_BOUND,
        "released {:?} after the commit started",
        sample.latency
    );
    let metrics = gate.metrics();
    assert_eq!(metrics.recheck_reads, 0, "{metrics:?}");
    assert!(metrics.notification_wakeups >= 1, "{metrics:?}");
    assert_eq!(metrics.waits_released, 1, "{metrics:?}");
}

async fn pending_then_complete_is_released_by_the_push(db: TestStore) {
    release_by_push(db.store(), db.store()).await;
}

/// Cross-process: the gate waits on one store; the push commits through another store
/// with its own pool and LISTEN connection, as a second server replica would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_through_another_store_releases_the_gate_on_postgres() {
    let Some(db) = TestStore::postgres().await else {
        return;
    };
    let other = db.open_another().await;
    release_by_push(db.store(), &other).await;
}

async fn complete_returns_at_once_with_the_projections_inventory(db: TestStore) {
    let store = db.store();
    let agent = new_agent(store).await;
    start(store, agent, "run-1").await;
    push(store, agent, snapshot(1, "run-1", Complete, servers())).await;
    let chat = store
        .create_chat(Some(agent))
        .await
        .expect("create chat")
        .id;
    let gate = gate(store, config(BUDGET, BUDGET));

    let outcome = gate.wait_for_discovery(chat, agent).await;
    assert_eq!(
        outcome.reason,
        OutcomeReason::DiscoveryComplete,
        "{outcome:?}"
    );
    assert!(!outcome.wait_timed_out);
    let metrics = gate.metrics();
    assert_eq!(
        (metrics.waits_immediate, metrics.attempts_started),
        (1, 0),
        "{metrics:?}"
    );

    // The turn: the projection's tools and note (a failed server makes it incomplete).
    let turn = gate.prepare_turn(chat, TurnMode::Default).await;
    let names: Vec<&str> = turn.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["fs__read", "fs__write"]);
    let view = load_agent_view(store, agent).await.expect("view");
    assert_eq!(turn.note, view.model_note());
    assert!(
        turn.note
            .as_deref()
            .is_some_and(|n| n.starts_with("Workspace MCP: discovery is complete.")),
        "{:?}",
        turn.note
    );
    let outcome = turn.outcome.expect("a default turn reports its wait");
    assert_eq!(outcome.reason, OutcomeReason::DiscoveryComplete);
    assert_eq!(turn.inventory_error, None);

    // A plan turn does not wait; an unbound chat has no tools and no agent to wait for.
    let plan = gate.prepare_turn(chat, TurnMode::Plan).await;
    assert_eq!((plan.outcome, plan.tools.len()), (None, 2));
    let unbound = store.create_chat(None).await.expect("create chat").id;
    let turn = gate.prepare_turn(unbound, TurnMode::Default).await;
    assert!(turn.tools.is_empty() && turn.note.is_none());
    assert_eq!(
        turn.outcome.map(|o| o.reason),
        Some(OutcomeReason::NoBoundAgent)
    );
}

/// The gate decides by its own rules on the observation; its phase and freshness must be
/// the projection's for every row of the phase table (small grace and budget: the waiting
/// rows time out quickly).
async fn outcomes_agree_with_the_projection(db: TestStore) {
    let store = db.store();
    let short = Duration::from_millis(50);
    let gate = gate(store, config(short, short));
    let check = |agent: AgentId, expect: (&'static str, bool, OutcomeReason)| {
        let gate = gate.clone();
        async move {
            let outcome = gate.wait_for_discovery(ChatId::new_random(), agent).await;
            let view = load_agent_view(store, agent).await.expect("view");
            let phase = serde_json::to_value(outcome.phase).expect("serializes");
            assert_eq!(
                (phase.as_str().unwrap_or("?"), outcome.stale, outcome.reason),
                expect,
                "{outcome:?}"
            );
            assert_eq!(
                (phase.as_str().unwrap_or("?"), outcome.stale),
                (view.phase().as_str(), view.is_stale()),
                "gate and projection disagree"
            );
            let counts = view.counts();
            assert_eq!(
                (
                    outcome.counts.servers_ok as usize,
                    outcome.counts.servers_empty as usize,
                    outcome.counts.servers_failed as usize,
                    outcome.counts.config_errors as usize,
                ),
                (
                    counts.servers_ok,
                    counts.servers_empty,
                    counts.servers_failed,
                    counts.config_errors
                )
            );
        }
    };

    let legacy = new_agent(store).await;
    check(legacy, ("unknown", false, OutcomeReason::NoCurrentSnapshot)).await;
    push(store, legacy, snapshot(1, "", Unspecified, servers())).await;
    check(
        legacy,
        ("unknown", false, OutcomeReason::NoCompletenessGuarantee),
    )
    .await;

    let agent = new_agent(store).await;
    start(store, agent, "run-1").await;
    check(agent, ("pending", false, OutcomeReason::NoCurrentSnapshot)).await;
    push(store, agent, snapshot(1, "run-1", Pending, servers())).await;
    check(agent, ("pending", false, OutcomeReason::BudgetExhausted)).await;
    push(store, agent, snapshot(2, "run-1", Complete, servers())).await;
    check(agent, ("complete", false, OutcomeReason::DiscoveryComplete)).await;
    start(store, agent, "run-2").await;
    check(agent, ("complete", true, OutcomeReason::NoCurrentSnapshot)).await;

    store.delete_agent(agent).await.expect("delete agent");
    check(agent, ("unknown", true, OutcomeReason::AgentMissing)).await;
}

/// A dropped database: every read fails, and the gate and the turn fail open with a safe
/// message (the driver's error goes to the log only).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_database_fails_open() {
    let Some(database) = tokio::task::spawn_blocking(TestDatabase::create)
        .await
        .expect("creating a test database")
    else {
        return;
    };
    let options = StoreOptions {
        // A dead pool answers within this, well inside the gate's read timeout.
        connection_timeout: Duration::from_millis(300),
        ..test_options()
    };
    let store = Store::open_with(database.config(), options)
        .await
        .expect("open store");
    let agent = new_agent(&store).await;
    start(&store, agent, "run-1").await;
    let chat = store
        .create_chat(Some(agent))
        .await
        .expect("create chat")
        .id;
    tokio::task::spawn_blocking(move || drop(database))
        .await
        .expect("dropping the database");

    let gate = gate(&store, config(BUDGET, BUDGET));
    let outcome = gate.wait_for_discovery(chat, agent).await;
    assert_eq!(
        outcome.reason,
        OutcomeReason::SourceUnavailable,
        "{outcome:?}"
    );
    assert_eq!(outcome.error.as_deref(), Some("database unavailable"));
    let turn = gate.prepare_turn(chat, TurnMode::Default).await;
    assert_eq!(
        turn.outcome.map(|o| (o.reason, o.error)),
        Some((
            OutcomeReason::SourceUnavailable,
            Some("database unavailable".to_owned())
        ))
    );
    assert!(turn.tools.is_empty());
    assert_eq!(
        turn.inventory_error.as_deref(),
        Some("database unavailable")
    );
}

/// Short enough to time out quickly; far longer than a reused timeout's one read.
const SHORT_BUDGET: Duration = Duration::from_millis(300);

/// A chat bound to an agent whose run `run-1` is pending.
async fn pending_chat(store: &Store) -> (ChatId, AgentId) {
    let agent = new_agent(store).await;
    start(store, agent, "run-1").await;
    push(store, agent, snapshot(1, "run-1", Pending, servers())).await;
    let chat = store
        .create_chat(Some(agent))
        .await
        .expect("create chat")
        .id;
    (chat, agent)
}

/// Times out on `gate`, spending the whole (short) budget.
async fn time_out(gate: &StoreGate, chat: ChatId, agent: AgentId) {
    let outcome = gate.wait_for_discovery(chat, agent).await;
    assert_eq!(
        outcome.reason,
        OutcomeReason::BudgetExhausted,
        "{outcome:?}"
    );
    assert!(outcome.waited_ms >= 300, "{outcome:?}");
}

/// The next turn returns at once: the earlier timeout, refreshed by one read.
async fn reuses_the_timeout(gate: &StoreGate, chat: ChatId, agent: AgentId) {
    let started = std::time::Instant::now();
    let outcome = gate.wait_for_discovery(chat, agent).await;
    assert_eq!(
        outcome.reason,
        OutcomeReason::EarlierWaitTimedOut,
        "{outcome:?}"
    );
    assert!(outcome.wait_timed_out, "{outcome:?}");
    assert!(started.elapsed() < RELEASE_BOUND, "{:?}", started.elapsed());
    let turn = gate.prepare_turn(chat, TurnMode::Default).await;
    assert_eq!(
        turn.outcome.map(|o| o.reason),
        Some(OutcomeReason::EarlierWaitTimedOut)
    );
    let metrics = gate.metrics();
    assert_eq!(metrics.attempts_started, 0, "{metrics:?}");
}

/// Two replicas (own pools, own LISTEN connections on PostgreSQL; two pools on one file
/// on SQLite): the first turn times out on A; the next turn of the same run on B does
/// not wait, even with B's long budget; a new run waits again on B.
async fn a_timeout_on_one_replica_is_not_waited_again_on_another(db: TestStore) {
    let (a, b) = (db.store(), &db.open_another().await);
    let (chat, agent) = pending_chat(a).await;
    let gate_a = gate(a, config(SHORT_BUDGET, SHORT_BUDGET));
    let gate_b = gate(b, config(BUDGET, BUDGET));

    time_out(&gate_a, chat, agent).await;
    reuses_the_timeout(&gate_b, chat, agent).await;

    // Through B's store: SQLite notifies in-process only.
    start(b, agent, "run-2").await;
    push(b, agent, snapshot(1, "run-2", Pending, servers())).await;
    let sample = gate_b
        .measure_release(chat, agent, async {
            push(b, agent, snapshot(2, "run-2", Complete, servers())).await;
        })
        .await
        .expect("a new run waits again");
    assert_eq!(sample.outcome.reason, OutcomeReason::DiscoveryComplete);
    // The end is recorded (just after the release): completed, sparing nobody a wait.
    let record = ctxsync_test_support::poll("the attempt's end in the log")
        .within(RELEASE_BOUND)
        .every(Duration::from_millis(10))
        .until(|| async {
            let record = a
                .read_gate_attempt(chat, agent, RunId::new("run-2").as_ref())
                .await
                .expect("read the attempt log");
            match record {
                Some(ended) if ended.ended_at.is_some() => Ok(ended),
                _ => Err(record),
            }
        })
        .await;
    assert!(!record.timed_out, "{record:?}");
}

/// A replica restart (a new store and gate on the same database) keeps the timeout.
async fn a_restarted_replica_does_not_wait_again(db: TestStore) {
    let (chat, agent) = pending_chat(db.store()).await;
    {
        let store = db.open_another().await;
        time_out(
            &gate(&store, config(SHORT_BUDGET, SHORT_BUDGET)),
            chat,
            agent,
        )
        .await;
    }
    let restarted = db.open_another().await;
    reuses_the_timeout(&gate(&restarted, config(BUDGET, BUDGET)), chat, agent).await;
}

/// A wait still running on replica A bounds the same run's wait on B: B ends at A's
/// deadline instead of starting a budget of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_running_on_another_replica_bounds_this_ones_on_postgres() {
    let budget = Duration::from_millis(1500);
    bounded_by_the_other_replica(budget, budget, Duration::from_millis(1300)).await;
}

/// The same when B's own budget is far longer: A's recorded deadline is the bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_longer_budget_on_this_replica_still_ends_at_the_other_ones_deadline_on_postgres() {
    // B's own budget would run 30 s; ten times what A's deadline leaves is the bound.
    bounded_by_the_other_replica(
        Duration::from_millis(1500),
        Duration::from_secs(30),
        Duration::from_secs(10),
    )
    .await;
}

async fn bounded_by_the_other_replica(budget_a: Duration, budget_b: Duration, bound: Duration) {
    let Some(db) = TestStore::postgres().await else {
        return;
    };
    let (a, b) = (db.store(), &db.open_another().await);
    let (chat, agent) = pending_chat(a).await;
    let gate_a = gate(a, config(budget_a, budget_a));
    let gate_b = gate(b, config(budget_b, budget_b));
    let on_a = tokio::spawn({
        let gate_a = gate_a.clone();
        async move { gate_a.wait_for_discovery(chat, agent).await }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;

    let on_b = gate_b.wait_for_discovery(chat, agent).await;
    assert!(on_b.wait_timed_out, "{on_b:?}");
    assert!(
        Duration::from_millis(on_b.waited_ms) < bound,
        "b waited its own budget: {on_b:?}"
    );
    assert!(on_a.await.expect("a's wait").wait_timed_out);
    assert_eq!(gate_b.metrics().attempts_started, 1);
}
