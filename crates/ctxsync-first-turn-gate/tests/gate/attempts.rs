//! The shared attempt per (chat, agent, run id): joiners, cancellation, retention of a
//! timed-out attempt, its refresh, re-keying after a restart, and what re-arms a wait.

use ctxsync_chat_projection::ViewPhase;
use ctxsync_first_turn_gate::OutcomeReason;
use ctxsync_first_turn_gate::memory::MemorySource;
use ctxsync_protocol::DiscoveryPhase::{Complete, Pending};
use tokio::time::Instant;

use super::*;

/// Runs one wait to its end and checks it spent the whole budget.
async fn time_out(gate: &FirstTurnGate<MemorySource>, chat: MemoryId, agent: MemoryId) {
    let started = Instant::now();
    let outcome = gate.wait_for_discovery(chat, agent).await;
    assert!(outcome.wait_timed_out, "{outcome:?}");
    assert_eq!(started.elapsed(), BUDGET);
}

#[tokio::test(start_paused = true)]
async fn concurrent_callers_join_one_attempt_and_share_one_budget() {
    let source = MemorySource::new();
    start(&source, AGENT, Some("run-a"));
    push(&source, AGENT, Some("run-a"), Pending);
    let gate = gate(&source);
    let started = Instant::now();

    let waiters: Vec<_> = (0..5).map(|_| spawn_wait(&gate, CHAT, AGENT)).collect();
    tokio::time::sleep(ms(4000)).await;
    let late_joiner = spawn_wait(&gate, CHAT, AGENT);
    for waiter in waiters.into_iter().chain([late_joiner]) {
        let (outcome, released_at) = waiter.await.unwrap();
        assert_eq!(
            released_at - started,
            BUDGET,
            "one deadline for every joiner"
        );
        assert!(outcome.wait_timed_out);
        assert_eq!(outcome.reason, OutcomeReason::BudgetExhausted);
    }
    let metrics = gate.metrics();
    assert_eq!(metrics.attempts_started, 1);
    assert_eq!(metrics.waits_timed_out, 6);
    assert_eq!(metrics.attempts_retained, 1);

    // Later turns of the same process do not wait again.
    let turn_started = Instant::now();
    let later = gate.wait_for_discovery(CHAT, AGENT).await;
    assert_eq!(turn_started.elapsed(), Duration::ZERO);
    assert_eq!(later.phase, ViewPhase::Pending);
    assert!(later.wait_timed_out);
    assert_eq!(later.reason, OutcomeReason::EarlierWaitTimedOut);
    assert_eq!(later.waited_ms, 0);
    let metrics = gate.metrics();
    assert_eq!(
        (metrics.attempts_started, metrics.waits_reused_timeout),
        (1, 1)
    );
}

#[tokio::test(start_paused = true)]
async fn joiners_are_released_together_and_a_completed_attempt_is_not_kept() {
    let source = MemorySource::new();
    start(&source, AGENT, Some("run-a"));
    push(&source, AGENT, Some("run-a"), Pending);
    let gate = gate(&source);

    let waiters: Vec<_> = (0..3).map(|_| spawn_wait(&gate, CHAT, AGENT)).collect();
    tokio::time::sleep(ms(250)).await;
    assert_eq!(gate.metrics().attempts_waiting, 1);
    let committed_at = Instant::now();
    push(&source, AGENT, Some("run-a"), Complete);
    for waiter in waiters {
        let (outcome, released_at) = waiter.await.unwrap();
        assert_eq!(released_at, committed_at);
        assert_eq!(outcome.phase, ViewPhase::Complete);
    }
    let metrics = gate.metrics();
    assert_eq!((metrics.attempts_started, metrics.waits_released), (1, 3));
    assert_eq!(
        (metrics.attempts_waiting, metrics.attempts_retained),
        (0, 0)
    );

    let reads_before = source.discovery_reads();
    let later = gate.wait_for_discovery(CHAT, AGENT).await;
    assert_eq!(later.reason, OutcomeReason::DiscoveryComplete);
    assert_eq!(source.discovery_reads() - reads_before, 1);
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_waiter_leaves_the_others_waiting_and_the_attempt_alive() {
    let source = MemorySource::new();
    start(&source, AGENT, Some("run-a"));
    push(&source, AGENT, Some("run-a"), Pending);
    let gate = gate(&source);
    let cancelled = spawn_wait(&gate, CHAT, AGENT);
    let kept = spawn_wait(&gate, CHAT, AGENT);

    tokio::time::sleep(ms(100)).await;
    cancelled.abort();
    assert!(cancelled.await.unwrap_err().is_cancelled());
    tokio::time::sleep(ms(100)).await;
    let metrics = gate.metrics();
    assert_eq!((metrics.waits_cancelled, metrics.attempts_waiting), (1, 1));
    assert!(!kept.is_finished());

    push(&source, AGENT, Some("run-a"), Complete);
    let (outcome, _) = kept.await.unwrap();
    assert_eq!(outcome.phase, ViewPhase::Complete);
    assert_eq!(gate.metrics().attempts_started, 1);
}

#[tokio::test(start_paused = true)]
async fn an_attempt_outlives_all_its_cancelled_callers() {
    let source = MemorySource::new();
    start(&source, AGENT, Some("run-a"));
    push(&source, AGENT, Some("run-a"), Pending);
    let gate = gate(&source);
    let started = Instant::now();

    let first_turn = spawn_wait(&gate, CHAT, AGENT);
    tokio::time::sleep(ms(1000)).await;
    first_turn.abort();
    tokio::time::sleep(ms(1000)).await;
    assert_eq!(gate.metrics().attempts_waiting, 1);

    // A retried turn joins the surviving attempt: its deadline, not a new budget.
    let retried = gate.wait_for_discovery(CHAT, AGENT).await;
    assert_eq!(started.elapsed(), BUDGET);
    assert_eq!(retried.waited_ms, 13_000);
    assert!(retried.wait_timed_out);
    assert_eq!(gate.metrics().attempts_started, 1);
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_attempt_expires_after_its_retention() {
    let source = MemorySource::new();
    start(&source, AGENT, Some("run-a"));
    push(&source, AGENT, Some("run-a"), Pending);
    let gate = gate(&source);
    time_out(&gate, CHAT, AGENT).await;

    tokio::time::advance(RETENTION - ms(1)).await;
    let reused = gate.wait_for_discovery(CHAT, AGENT).await;
    assert_eq!(reused.reason, OutcomeReason::EarlierWaitTimedOut);
    assert_eq!(gate.metrics().attempts_retained, 1);

    tokio::time::advance(ms(1)).await;
    time_out(&gate, CHAT, AGENT).await;
    assert_eq!(gate.metrics().attempts_started, 2);
}

#[tokio::test(start_paused = true)]
async fn expired_attempts_are_swept() {
    let source = MemorySource::new();
    for agent in [AGENT, OTHER_AGENT] {
        start(&source, agent, Some("run-a"));
        push(&source, agent, Some("run-a"), Pending);
    }
    let gate = gate(&source);
    time_out(&gate, CHAT, AGENT).await;
    time_out(&gate, OTHER_CHAT, AGENT).await;
    assert_eq!(gate.metrics().attempts_retained, 2);

    tokio::time::advance(RETENTION).await;
    time_out(&gate, CHAT, OTHER_AGENT).await;

    assert_eq!(
        gate.metrics().attempts_retained,
        1,
        "only the new one is held"
    );
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_attempt_is_refreshed_by_one_read_once_discovery_completes() {
    let source = MemorySource::new();
    start(&source, AGENT, Some("run-a"));
    push(&source, AGENT, Some("run-a"), Pending);
    let gate = gate(&source);
    time_out(&gate, CHAT, AGENT).await;

    tokio::time::sleep(Duration::from_secs(30)).await;
    push_silently(&source, AGENT, Some("run-a"), Complete);
    let reads_before = source.discovery_reads();
    let started = Instant::now();
    let refreshed = gate.wait_for_discovery(CHAT, AGENT).await;

    assert_eq!(started.elapsed(), Duration::ZERO);
    assert_eq!(source.discovery_reads() - reads_before, 1);
    assert_eq!(refreshed.phase, ViewPhase::Complete);
    assert!(!refreshed.wait_timed_out);
    assert_eq!(refreshed.counts, COUNTS);
}

#[tokio::test(start_paused = true)]
async fn the_refresh_of_a_timed_out_attempt_is_bounded() {
    let source = MemorySource::new();
    start(&source, AGENT, Some("run-a"));
    push(&source, AGENT, Some("run-a"), Pending);
    let gate = gate(&source);
    time_out(&gate, CHAT, AGENT).await;

    source.delay_reads(Duration::from_secs(60));
    let started = Instant::now();
    let refreshed = gate.wait_for_discovery(CHAT, AGENT).await;

    assert_eq!(started.elapsed(), READ_TIMEOUT);
    assert_eq!(refreshed.reason, OutcomeReason::SourceUnavailable);
    assert_eq!(gate.metrics().attempts_started, 1);
}

#[tokio::test(start_paused = true)]
async fn an_attempt_is_re_keyed_to_the_run_observed_after_a_restart() {
    let source = MemorySource::new();
    start(&source, AGENT, Some("run-a"));
    push(&source, AGENT, Some("run-a"), Pending);
    let gate = gate(&source);
    let waiter = spawn_wait(&gate, CHAT, AGENT);

    tokio::time::sleep(Duration::from_secs(5)).await;
    start(&source, AGENT, Some("run-b"));
    let (outcome, _) = waiter.await.unwrap();
    assert_eq!(
        outcome.waited_ms, 15_000,
        "the budget, once the run was seen pending"
    );
    assert!(outcome.wait_timed_out && outcome.stale);
    assert_eq!(outcome.reason, OutcomeReason::NoCurrentSnapshot);

    // The next turn sees run-b: the attempt now belongs to it, so no second budget.
    let next = gate.wait_for_discovery(CHAT, AGENT).await;
    assert_eq!(next.waited_ms, 0);
    assert_eq!(next.reason, OutcomeReason::EarlierWaitTimedOut);
    assert!(next.stale);
    let metrics = gate.metrics();
    assert_eq!(
        (metrics.attempts_started, metrics.attempts_retained),
        (1, 1)
    );

    // Yet another process is a new run: it waits again.
    start(&source, AGENT, Some("run-c"));
    push(&source, AGENT, Some("run-c"), Pending);
    time_out(&gate, CHAT, AGENT).await;
    assert_eq!(gate.metrics().attempts_started, 2);
}

#[tokio::test(start_paused = true)]
async fn a_restart_during_a_wait_is_followed_to_the_new_runs_completion() {
    let source = MemorySource::new();
    start(&source, AGENT, Some("run-a"));
    push(&source, AGENT, Some("run-a"), Pending);
    let gate = gate(&source);
    let waiter = spawn_wait(&gate, CHAT, AGENT);

    tokio::time::sleep(Duration::from_secs(5)).await;
    start(&source, AGENT, Some("run-b"));
    tokio::time::sleep(Duration::from_secs(2)).await;
    push(&source, AGENT, Some("run-b"), Complete);
    let (outcome, _) = waiter.await.unwrap();

    assert_eq!(outcome.waited_ms, 7000);
    assert_eq!((outcome.phase, outcome.stale), (ViewPhase::Complete, false));
    assert_eq!(gate.metrics().attempts_retained, 0);
}

#[tokio::test(start_paused = true)]
async fn a_new_run_a_new_agent_or_a_new_chat_re_arms() {
    let source = MemorySource::new();
    for agent in [AGENT, OTHER_AGENT] {
        start(&source, agent, Some("run-a"));
        push(&source, agent, Some("run-a"), Pending);
    }
    let gate = gate(&source);
    time_out(&gate, CHAT, AGENT).await;

    time_out(&gate, OTHER_CHAT, AGENT).await;
    time_out(&gate, CHAT, OTHER_AGENT).await;
    start(&source, AGENT, Some("run-b"));
    push(&source, AGENT, Some("run-b"), Pending);
    time_out(&gate, CHAT, AGENT).await;

    let metrics = gate.metrics();
    assert_eq!(metrics.attempts_started, 4);
    assert_eq!(metrics.attempts_retained, 4);
    // The current runs' attempts are retained: neither waits again.
    for (chat, agent) in [(CHAT, AGENT), (CHAT, OTHER_AGENT)] {
        let outcome = gate.wait_for_discovery(chat, agent).await;
        assert_eq!(
            outcome.reason,
            OutcomeReason::EarlierWaitTimedOut,
            "{chat} {agent}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_lost_attempt_fails_open_and_frees_its_key() {
    let source = MemorySource::new();
    start(&source, AGENT, Some("run-a"));
    push(&source, AGENT, Some("run-a"), Pending);
    // The attempt's first re-read (read 3: two callers read first) panics.
    let hooked = HookedSource::new(&source, |_, read| {
        assert_ne!(read, 3, "injected failure: the source panicked");
    });
    let gate = FirstTurnGate::new(hooked, GateConfig::default());
    let first = tokio::spawn({
        let gate = gate.clone();
        async move { gate.wait_for_discovery(CHAT, AGENT).await }
    });
    let second = tokio::spawn({
        let gate = gate.clone();
        async move { gate.wait_for_discovery(CHAT, AGENT).await }
    });

    tokio::time::sleep(ms(100)).await;
    push(&source, AGENT, Some("run-a"), Pending);
    for waiter in [first, second] {
        let outcome = waiter.await.unwrap();
        assert_eq!(outcome.reason, OutcomeReason::AttemptLost);
        assert_eq!(outcome.waited_ms, 100);
    }
    assert_eq!(gate.metrics().waits_failed_open, 2);
    assert_eq!(gate.metrics().attempts_waiting, 0);

    // The next turn starts a fresh attempt rather than joining the dead one.
    push(&source, AGENT, Some("run-a"), Complete);
    let next = gate.wait_for_discovery(CHAT, AGENT).await;
    assert_eq!(next.reason, OutcomeReason::DiscoveryComplete);
}
