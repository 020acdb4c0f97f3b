//! One caller's wait: when it returns at once, what releases it, when it times out, and
//! how it fails open.

use ctxsync_chat_projection::{Counts, ViewPhase};
use ctxsync_first_turn_gate::OutcomeReason;
use ctxsync_first_turn_gate::memory::MemorySource;
use ctxsync_protocol::DiscoveryPhase::{Complete, Pending, Unspecified};
use tokio::time::Instant;

use super::*;

#[tokio::test(start_paused = true)]
async fn already_complete_returns_at_once_after_one_read() {
    let source = MemorySource::new();
    start(&source, AGENT, Some("run-a"));
    push(&source, AGENT, Some("run-a"), Complete);
    let gate = gate(&source);

    let started = Instant::now();
    let outcome = gate.wait_for_discovery(CHAT, AGENT).await;

    assert_eq!(started.elapsed(), Duration::ZERO);
    assert_eq!(source.discovery_reads(), 1);
    assert_eq!(outcome.phase, ViewPhase::Complete);
    assert!(!outcome.stale && !outcome.wait_timed_out);
    assert_eq!(outcome.counts, COUNTS);
    assert_eq!(outcome.reason, OutcomeReason::DiscoveryComplete);
    assert_eq!((outcome.error, outcome.waited_ms), (None, 0));
    let metrics = gate.metrics();
    assert_eq!((metrics.waits_immediate, metrics.attempts_started), (1, 0));
}

#[tokio::test(start_paused = true)]
async fn legacy_agent_returns_at_once() {
    let source = MemorySource::new();
    start(&source, AGENT, None);
    push(&source, AGENT, None, Unspecified);
    let gate = gate(&source);

    let outcome = gate.wait_for_discovery(CHAT, AGENT).await;

    assert_eq!(source.discovery_reads(), 1);
    assert_eq!(outcome.phase, ViewPhase::Unknown);
    assert!(!outcome.stale && !outcome.wait_timed_out);
    assert_eq!(outcome.reason, OutcomeReason::NoCompletenessGuarantee);
    assert_eq!(outcome.waited_ms, 0);
}

#[tokio::test(start_paused = true)]
async fn missing_agent_returns_at_once_as_unknown_and_stale() {
    let source = MemorySource::new();
    let gate = gate(&source);

    let outcome = gate.wait_for_discovery(CHAT, AGENT).await;

    assert_eq!((outcome.phase, outcome.stale), (ViewPhase::Unknown, true));
    assert_eq!(outcome.reason, OutcomeReason::AgentMissing);
    assert_eq!(outcome.waited_ms, 0);
}

#[tokio::test(start_paused = true)]
async fn no_snapshot_that_appears_later_releases() {
    let source = MemorySource::new();
    start(&source, AGENT, Some("run-a"));
    let gate = gate(&source);
    let started = Instant::now();
    let waiter = spawn_wait(&gate, CHAT, AGENT);

    tokio::time::sleep(ms(700)).await;
    push(&source, AGENT, Some("run-a"), Complete);
    let (outcome, released_at) = waiter.await.unwrap();

    assert_eq!(released_at - started, ms(700));
    assert_eq!(outcome.phase, ViewPhase::Complete);
    assert!(!outcome.wait_timed_out && !outcome.stale);
    assert_eq!(outcome.counts, COUNTS);
    assert_eq!(outcome.waited_ms, 700);
    assert_eq!(gate.metrics().waits_released, 1);
}

#[tokio::test(start_paused = true)]
async fn pending_then_complete_releases_on_the_notification_not_a_timer() {
    let source = MemorySource::new();
    start(&source, AGENT, Some("run-a"));
    push(&source, AGENT, Some("run-a"), Pending);
    let gate = gate(&source);
    let waiter = spawn_wait(&gate, CHAT, AGENT);

    tokio::time::sleep(ms(300)).await;
    assert!(!waiter.is_finished());
    let committed_at = Instant::now();
    push(&source, AGENT, Some("run-a"), Complete);
    let (outcome, released_at) = waiter.await.unwrap();

    // The paused clock only moves when a timer is needed: none was.
    assert_eq!(released_at - committed_at, Duration::ZERO);
    assert!(released_at - committed_at < RECHECK);
    assert_eq!(outcome.phase, ViewPhase::Complete);
    assert_eq!(outcome.reason, OutcomeReason::DiscoveryComplete);
    let metrics = gate.metrics();
    assert_eq!(metrics.recheck_reads, 0, "no re-check tick was needed");
    assert_eq!(metrics.notification_wakeups, 1);
    assert_eq!(source.discovery_reads(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_lost_event_is_covered_by_the_recheck_timer() {
    let source = MemorySource::new();
    start(&source, AGENT, Some("run-a"));
    push(&source, AGENT, Some("run-a"), Pending);
    let gate = gate(&source);
    let started = Instant::now();
    let waiter = spawn_wait(&gate, CHAT, AGENT);

    tokio::time::sleep(ms(300)).await;
    push_silently(&source, AGENT, Some("run-a"), Complete);
    let (outcome, released_at) = waiter.await.unwrap();

    assert_eq!(released_at - started, RECHECK);
    assert_eq!(outcome.phase, ViewPhase::Complete);
    let metrics = gate.metrics();
    assert_eq!(
        (metrics.recheck_reads, metrics.notification_wakeups),
        (1, 0)
    );
}

#[tokio::test(start_paused = true)]
async fn without_notifications_the_recheck_timer_still_releases() {
    let source = MemorySource::new();
    start(&source, AGENT, Some("run-a"));
    push(&source, AGENT, Some("run-a"), Pending);
    source.fail_subscriptions(true);
    let gate = gate(&source);
    let started = Instant::now();
    let waiter = spawn_wait(&gate, CHAT, AGENT);

    tokio::time::sleep(ms(2500)).await;
    push(&source, AGENT, Some("run-a"), Complete);
    let (outcome, released_at) = waiter.await.unwrap();

    assert_eq!(released_at - started, 3 * RECHECK);
    assert_eq!(outcome.phase, ViewPhase::Complete);
    assert_eq!(
        outcome.error, None,
        "a missing subscription is not the turn's problem"
    );
    assert_eq!(gate.metrics().notification_wakeups, 0);
}

#[tokio::test(start_paused = true)]
async fn the_recheck_timer_is_slow() {
    let source = MemorySource::new();
    start(&source, AGENT, Some("run-a"));
    push(&source, AGENT, Some("run-a"), Pending);
    let mut config = gate(&source).config().clone();
    config.recheck_interval = ms(1);
    let gate = FirstTurnGate::new(source.clone(), config);

    let outcome = gate.wait_for_discovery(CHAT, AGENT).await;

    // One initial read plus one per second of the budget: never tighter.
    assert!(outcome.wait_timed_out);
    let rechecks = gate.metrics().recheck_reads;
    assert_eq!(
        rechecks,
        BUDGET.as_secs() - 1,
        "a re-check per second, up to the deadline"
    );
    assert_eq!(source.discovery_reads(), 1 + rechecks);
}

#[tokio::test(start_paused = true)]
async fn pending_times_out_after_the_budget_even_if_it_started_without_a_snapshot() {
    let source = MemorySource::new();
    start(&source, AGENT, Some("run-a"));
    let gate = gate(&source);
    let started = Instant::now();
    let waiter = spawn_wait(&gate, CHAT, AGENT);

    // Seen pending within the grace: from then on the budget applies.
    tokio::time::sleep(ms(2000)).await;
    push(&source, AGENT, Some("run-a"), Pending);
    let (outcome, released_at) = waiter.await.unwrap();

    assert_eq!(released_at - started, BUDGET);
    assert_eq!(outcome.phase, ViewPhase::Pending);
    assert!(outcome.wait_timed_out && !outcome.stale);
    assert_eq!(outcome.reason, OutcomeReason::BudgetExhausted);
    assert_eq!(outcome.counts, COUNTS);
    assert_eq!(outcome.waited_ms, 15_000);
    assert_eq!(gate.metrics().waits_timed_out, 1);
}

#[tokio::test(start_paused = true)]
async fn a_stale_run_waits_for_the_current_run() {
    let source = MemorySource::new();
    start(&source, AGENT, Some("run-b"));
    push(&source, AGENT, Some("run-a"), Complete);
    let gate = gate(&source);
    let started = Instant::now();
    let waiter = spawn_wait(&gate, CHAT, AGENT);

    tokio::time::sleep(ms(1500)).await;
    push(&source, AGENT, Some("run-b"), Complete);
    let (outcome, released_at) = waiter.await.unwrap();

    assert_eq!(released_at - started, ms(1500));
    assert_eq!((outcome.phase, outcome.stale), (ViewPhase::Complete, false));
    assert!(!outcome.wait_timed_out);
}

#[tokio::test(start_paused = true)]
async fn a_stale_run_times_out_only_after_the_grace() {
    let source = MemorySource::new();
    start(&source, AGENT, Some("run-b"));
    push(&source, AGENT, Some("run-a"), Complete);
    let gate = gate(&source);
    let started = Instant::now();
    let waiter = spawn_wait(&gate, CHAT, AGENT);

    tokio::time::sleep(GRACE - ms(1)).await;
    settle().await;
    assert!(
        !waiter.is_finished(),
        "still waiting just before the grace ends"
    );
    let (outcome, released_at) = waiter.await.unwrap();

    assert_eq!(released_at - started, GRACE);
    assert_eq!((outcome.phase, outcome.stale), (ViewPhase::Complete, true));
    assert!(outcome.wait_timed_out);
    assert_eq!(outcome.reason, OutcomeReason::NoCurrentSnapshot);
    assert_eq!(
        outcome.counts, COUNTS,
        "diagnostics of the stale rows still count"
    );
}

#[tokio::test(start_paused = true)]
async fn a_legacy_snapshot_under_a_current_run_is_stale() {
    let source = MemorySource::new();
    start(&source, AGENT, Some("run-b"));
    push(&source, AGENT, None, Unspecified);
    let gate = gate(&source);
    let started = Instant::now();

    let outcome = gate.wait_for_discovery(CHAT, AGENT).await;

    assert_eq!(started.elapsed(), GRACE);
    assert_eq!((outcome.phase, outcome.stale), (ViewPhase::Unknown, true));
    assert!(outcome.wait_timed_out);
    assert_eq!(outcome.reason, OutcomeReason::NoCurrentSnapshot);
}

#[tokio::test(start_paused = true)]
async fn no_snapshot_times_out_after_the_grace() {
    let source = MemorySource::new();
    // Never connected: no run id, so nothing promises a snapshot (SPEC §7: unknown).
    start(&source, AGENT, None);
    // Connected, no snapshot yet (SPEC §7: pending).
    start(&source, OTHER_AGENT, Some("run-a"));
    let gate = gate(&source);
    let started = Instant::now();

    let (never_connected, connected) = tokio::join!(
        gate.wait_for_discovery(CHAT, AGENT),
        gate.wait_for_discovery(CHAT, OTHER_AGENT),
    );

    assert_eq!(started.elapsed(), GRACE);
    assert_eq!(never_connected.phase, ViewPhase::Unknown);
    assert_eq!(connected.phase, ViewPhase::Pending);
    for outcome in [never_connected, connected] {
        assert!(outcome.wait_timed_out && !outcome.stale);
        assert_eq!(outcome.reason, OutcomeReason::NoCurrentSnapshot);
        assert_eq!(outcome.counts, Counts::default());
        assert_eq!(outcome.waited_ms, 3000);
    }
}

#[tokio::test(start_paused = true)]
async fn a_source_error_fails_open_at_once() {
    let source = MemorySource::new();
    start(&source, AGENT, Some("run-a"));
    push(&source, AGENT, Some("run-a"), Pending);
    source.fail_reads(Some("database unavailable"));
    let gate = gate(&source);

    let outcome = gate.wait_for_discovery(CHAT, AGENT).await;

    assert_eq!(outcome.phase, ViewPhase::Unknown);
    assert_eq!(outcome.reason, OutcomeReason::SourceUnavailable);
    assert_eq!(outcome.error.as_deref(), Some("database unavailable"));
    assert_eq!(outcome.waited_ms, 0);
    let metrics = gate.metrics();
    assert_eq!(
        (metrics.waits_failed_open, metrics.attempts_started),
        (1, 0)
    );
}

#[tokio::test(start_paused = true)]
async fn a_hung_read_fails_open_after_the_read_timeout() {
    let source = MemorySource::new();
    start(&source, AGENT, Some("run-a"));
    push(&source, AGENT, Some("run-a"), Complete);
    source.delay_reads(Duration::from_secs(60));
    let gate = gate(&source);
    let started = Instant::now();

    let outcome = gate.wait_for_discovery(CHAT, AGENT).await;

    assert_eq!(started.elapsed(), READ_TIMEOUT);
    assert_eq!(outcome.reason, OutcomeReason::SourceUnavailable);
    assert!(outcome.error.is_some_and(|e| e.contains("timed out")));
}

#[tokio::test(start_paused = true)]
async fn errors_while_waiting_keep_the_wait_and_are_reported_at_the_end() {
    let source = MemorySource::new();
    start(&source, AGENT, Some("run-a"));
    push(&source, AGENT, Some("run-a"), Pending);
    let gate = gate(&source);
    let started = Instant::now();
    let waiter = spawn_wait(&gate, CHAT, AGENT);

    tokio::time::sleep(ms(500)).await;
    source.fail_reads(Some("database unavailable"));
    push(&source, AGENT, Some("run-a"), Pending);
    let (outcome, released_at) = waiter.await.unwrap();

    assert_eq!(released_at - started, BUDGET);
    assert!(outcome.wait_timed_out);
    assert_eq!(
        outcome.phase,
        ViewPhase::Pending,
        "from the last successful read"
    );
    assert_eq!(outcome.counts, COUNTS);
    assert_eq!(outcome.error.as_deref(), Some("database unavailable"));
}

#[tokio::test(start_paused = true)]
async fn a_read_error_while_waiting_heals_on_the_next_read() {
    let source = MemorySource::new();
    start(&source, AGENT, Some("run-a"));
    push(&source, AGENT, Some("run-a"), Pending);
    let gate = gate(&source);
    let waiter = spawn_wait(&gate, CHAT, AGENT);

    tokio::time::sleep(ms(200)).await;
    source.fail_reads(Some("database unavailable"));
    push(&source, AGENT, Some("run-a"), Complete);
    tokio::time::sleep(ms(200)).await;
    assert!(!waiter.is_finished());
    source.fail_reads(None);
    let (outcome, _) = waiter.await.unwrap();

    assert_eq!(outcome.phase, ViewPhase::Complete);
    assert_eq!(
        (outcome.error, outcome.waited_ms),
        (None, 1000),
        "found by the re-check"
    );
}

#[tokio::test(start_paused = true)]
async fn a_commit_right_after_the_first_read_is_not_missed() {
    let inner = MemorySource::new();
    start(&inner, AGENT, Some("run-a"));
    push(&inner, AGENT, Some("run-a"), Pending);
    // The race between a waiter's first read and its subscription, made certain.
    let source = HookedSource::new(&inner, |inner, read| {
        if read == 1 {
            push(inner, AGENT, Some("run-a"), Complete);
        }
    });
    let gate = FirstTurnGate::new(source, GateConfig::default());
    let started = Instant::now();

    let outcome = gate.wait_for_discovery(CHAT, AGENT).await;

    assert_eq!(
        started.elapsed(),
        Duration::ZERO,
        "woken by the notification"
    );
    assert_eq!(outcome.phase, ViewPhase::Complete);
    assert_eq!(gate.metrics().recheck_reads, 0);
}
