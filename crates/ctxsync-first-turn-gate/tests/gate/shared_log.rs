//! Gates sharing one attempt log behave as one gate, as server replicas sharing a store
//! do: a run whose wait timed out on one is not waited for again on another, a wait
//! still running on one bounds the other's, and a new run waits again.

use std::sync::Arc;

use ctxsync_first_turn_gate::memory::MemorySource;
use ctxsync_first_turn_gate::{
    AttemptLog, AttemptResult, GateConfig, MemoryAttemptLog, OutcomeReason,
};
use ctxsync_protocol::DiscoveryPhase::{Complete, Pending};
use tokio::time::Instant;

use super::*;

type SharedLog = Arc<MemoryAttemptLog<MemoryId, MemoryId>>;

/// Two "replicas": one source of committed state, one log, two gates.
fn replicas(
    source: &MemorySource,
) -> (
    FirstTurnGate<MemorySource, SharedLog>,
    FirstTurnGate<MemorySource, SharedLog>,
    SharedLog,
) {
    let log = SharedLog::default();
    let gate =
        || FirstTurnGate::with_attempt_log(source.clone(), Arc::clone(&log), GateConfig::default());
    (gate(), gate(), log.clone())
}

#[tokio::test(start_paused = true)]
async fn a_timeout_on_one_gate_is_not_waited_again_on_another() {
    let source = MemorySource::new();
    start(&source, AGENT, Some("run-a"));
    push(&source, AGENT, Some("run-a"), Pending);
    let (a, b, _) = replicas(&source);

    let started = Instant::now();
    let first = a.wait_for_discovery(CHAT, AGENT).await;
    assert_eq!(started.elapsed(), BUDGET);
    assert_eq!(first.reason, OutcomeReason::BudgetExhausted);

    let started = Instant::now();
    let next = b.wait_for_discovery(CHAT, AGENT).await;
    assert_eq!(started.elapsed(), Duration::ZERO);
    assert!(next.wait_timed_out);
    assert_eq!(next.reason, OutcomeReason::EarlierWaitTimedOut);
    let metrics = b.metrics();
    assert_eq!(
        (
            metrics.attempts_started,
            metrics.waits_reused_timeout,
            metrics.attempts_retained
        ),
        (0, 1, 1),
        "{metrics:?}"
    );

    // Another chat, and a new run, wait again.
    let started = Instant::now();
    assert!(b.wait_for_discovery(OTHER_CHAT, AGENT).await.wait_timed_out);
    assert_eq!(started.elapsed(), BUDGET);
    start(&source, AGENT, Some("run-b"));
    push(&source, AGENT, Some("run-b"), Pending);
    let started = Instant::now();
    let new_run = b.wait_for_discovery(CHAT, AGENT).await;
    assert_eq!(started.elapsed(), BUDGET);
    assert_eq!(new_run.reason, OutcomeReason::BudgetExhausted);
}

#[tokio::test(start_paused = true)]
async fn a_wait_running_on_one_gate_bounds_the_others() {
    let source = MemorySource::new();
    start(&source, AGENT, Some("run-a"));
    push(&source, AGENT, Some("run-a"), Pending);
    let (a, b, _) = replicas(&source);
    let started = Instant::now();
    let on_a = tokio::spawn({
        let a = a.clone();
        async move {
            let outcome = a.wait_for_discovery(CHAT, AGENT).await;
            (outcome, Instant::now())
        }
    });

    tokio::time::sleep(ms(5000)).await;
    let on_b = b.wait_for_discovery(CHAT, AGENT).await;
    assert_eq!(started.elapsed(), BUDGET, "b ends at a's deadline");
    assert!(on_b.wait_timed_out);
    assert_eq!(on_b.waited_ms, 10_000);
    let (on_a, released_at) = on_a.await.unwrap();
    assert!(on_a.wait_timed_out);
    assert_eq!(released_at - started, BUDGET);

    // Completion released both; a completed record does not count as a timeout.
    push(&source, AGENT, Some("run-a"), Complete);
    assert_eq!(
        b.wait_for_discovery(CHAT, AGENT).await.reason,
        OutcomeReason::DiscoveryComplete
    );
}

#[tokio::test(start_paused = true)]
async fn an_attempt_whose_waiter_died_counts_once_its_budget_has_passed() {
    let source = MemorySource::new();
    start(&source, AGENT, Some("run-a"));
    push(&source, AGENT, Some("run-a"), Pending);
    let (_, b, log) = replicas(&source);
    // A replica recorded a start and died without recording the end.
    let run = RunId::new("run-a");
    log.record_start(&CHAT, &AGENT, run.as_ref(), BUDGET, RETENTION)
        .await
        .unwrap();

    tokio::time::sleep(BUDGET + ms(1)).await;
    let started = Instant::now();
    let outcome = b.wait_for_discovery(CHAT, AGENT).await;
    assert_eq!(started.elapsed(), Duration::ZERO);
    assert_eq!(outcome.reason, OutcomeReason::EarlierWaitTimedOut);

    // Past the retention as well, the record no longer spares a wait.
    tokio::time::sleep(RETENTION).await;
    let started = Instant::now();
    assert!(b.wait_for_discovery(CHAT, AGENT).await.wait_timed_out);
    assert_eq!(started.elapsed(), BUDGET);
    // Its end is recorded like any other's, and the next turn is spared again.
    let record = log.read(&CHAT, &AGENT, run.as_ref()).await.unwrap();
    assert_eq!(
        record.and_then(|r| r.end).map(|end| end.result),
        Some(AttemptResult::TimedOut)
    );
}
