//! Turn preparation (default and plan mode), the metrics a server exports, and the
//! release-latency measurement used by benchmarks.

use ctxsync_chat_projection::ViewPhase;
use ctxsync_first_turn_gate::memory::MemorySource;
use ctxsync_first_turn_gate::{OutcomeReason, TurnMode};
use ctxsync_protocol::DiscoveryPhase::{Complete, Pending};
use tokio::time::Instant;

use super::*;

fn tools(names: &[&str]) -> Vec<String> {
    names.iter().map(|t| (*t).to_owned()).collect()
}

/// Whether a turn's note is the projection's note of a pending view.
fn says_pending(note: Option<&str>) -> bool {
    note.is_some_and(|n| n.starts_with("Workspace MCP:") && n.contains("initializing"))
}

fn bound_pending_chat() -> MemorySource {
    let source = MemorySource::new();
    start(&source, AGENT, Some("run-a"));
    push(&source, AGENT, Some("run-a"), Pending);
    source.bind(CHAT, AGENT);
    source.set_tools(CHAT, tools(&["fs__read"]));
    source
}

#[tokio::test(start_paused = true)]
async fn the_first_turn_spends_the_budget_and_later_turns_do_not() {
    let source = bound_pending_chat();
    let gate = gate(&source);

    let started = Instant::now();
    let first = gate.prepare_turn(CHAT, TurnMode::Default).await;
    assert_eq!(started.elapsed(), BUDGET);
    assert_eq!(first.tools, ["fs__read"]);
    assert!(says_pending(first.note.as_deref()), "{:?}", first.note);
    assert!(first.outcome.as_ref().is_some_and(|o| o.wait_timed_out));
    assert_eq!(first.inventory_error, None);

    let started = Instant::now();
    let second = gate.prepare_turn(CHAT, TurnMode::Default).await;
    assert_eq!(started.elapsed(), Duration::ZERO);
    let outcome = second.outcome.expect("a default turn carries an outcome");
    assert_eq!(outcome.reason, OutcomeReason::EarlierWaitTimedOut);

    push_silently(&source, AGENT, Some("run-a"), Complete);
    source.set_tools(CHAT, tools(&["fs__read", "fs__write"]));
    let third = gate.prepare_turn(CHAT, TurnMode::Default).await;
    assert_eq!(third.tools, ["fs__read", "fs__write"]);
    // Complete, but with failed servers and config errors: the model is still told.
    assert!(!says_pending(third.note.as_deref()), "{:?}", third.note);
    assert!(third.note.is_some());
    let outcome = third.outcome.unwrap();
    assert_eq!(
        (outcome.phase, outcome.wait_timed_out),
        (ViewPhase::Complete, false)
    );
    assert_eq!(gate.metrics().attempts_started, 1);
}

#[tokio::test(start_paused = true)]
async fn a_default_turn_reads_its_tools_after_the_wait() {
    let source = bound_pending_chat();
    let gate = gate(&source);
    let turn = tokio::spawn({
        let gate = gate.clone();
        async move { gate.prepare_turn(CHAT, TurnMode::Default).await }
    });

    tokio::time::sleep(ms(800)).await;
    source.set_tools(CHAT, tools(&["fs__read", "git__log"]));
    push(&source, AGENT, Some("run-a"), Complete);
    let context = turn.await.unwrap();

    assert_eq!(context.tools, ["fs__read", "git__log"]);
    let outcome = context.outcome.unwrap();
    assert_eq!(
        (outcome.phase, outcome.waited_ms),
        (ViewPhase::Complete, 800)
    );
    assert_eq!(source.inventory_reads(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_plan_mode_turn_neither_waits_nor_carries_an_outcome() {
    let source = bound_pending_chat();
    let gate = gate(&source);

    let started = Instant::now();
    let context = gate.prepare_turn(CHAT, TurnMode::Plan).await;

    assert_eq!(started.elapsed(), Duration::ZERO);
    assert_eq!(context.outcome, None);
    assert_eq!(context.tools, ["fs__read"]);
    assert!(says_pending(context.note.as_deref()), "{:?}", context.note);
    assert_eq!(source.discovery_reads(), 0);
    assert_eq!(gate.metrics().attempts_started, 0);
}

#[tokio::test(start_paused = true)]
async fn a_chat_without_an_agent_does_not_wait() {
    let source = MemorySource::new();
    let gate = gate(&source);

    let context = gate.prepare_turn(CHAT, TurnMode::Default).await;

    let outcome = context.outcome.unwrap();
    assert_eq!(outcome.reason, OutcomeReason::NoBoundAgent);
    assert_eq!((outcome.phase, outcome.waited_ms), (ViewPhase::Unknown, 0));
    assert!(context.tools.is_empty());
    assert_eq!(source.discovery_reads(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_turn_proceeds_without_tools_when_the_database_is_down() {
    let source = bound_pending_chat();
    source.fail_reads(Some("database unavailable"));
    let gate = gate(&source);

    let context = gate.prepare_turn(CHAT, TurnMode::Default).await;

    assert!(context.tools.is_empty());
    assert_eq!(context.note, None);
    assert_eq!(
        context.inventory_error.as_deref(),
        Some("database unavailable")
    );
    let outcome = context.outcome.unwrap();
    assert_eq!(outcome.reason, OutcomeReason::SourceUnavailable);
    assert_eq!(outcome.waited_ms, 0);
    assert_eq!(gate.metrics().waits_failed_open, 1);
}

#[tokio::test(start_paused = true)]
async fn the_turn_context_serializes_for_the_api() {
    let source = bound_pending_chat();
    push(&source, AGENT, Some("run-a"), Complete);
    let gate = gate(&source);

    let context = gate.prepare_turn(CHAT, TurnMode::Default).await;

    let json = serde_json::to_value(&context).unwrap();
    assert_eq!(json["tools"], serde_json::json!(["fs__read"]));
    assert_eq!(json["outcome"]["phase"], "complete");
    assert_eq!(json["outcome"]["servers_ok"], COUNTS.servers_ok);
    assert_eq!(json["outcome"]["reason"], "discovery_complete");
    assert_eq!(json["inventory_error"], serde_json::Value::Null);
}

#[tokio::test(start_paused = true)]
async fn metrics_count_every_kind_of_wait() {
    let source = MemorySource::new();
    start(&source, AGENT, Some("run-a"));
    push(&source, AGENT, Some("run-a"), Complete);
    start(&source, OTHER_AGENT, Some("run-a"));
    push(&source, OTHER_AGENT, Some("run-a"), Pending);
    let gate = gate(&source);

    gate.wait_for_discovery(CHAT, AGENT).await; // immediate
    gate.wait_for_discovery(CHAT, OTHER_AGENT).await; // timed out
    gate.wait_for_discovery(CHAT, OTHER_AGENT).await; // reused
    let waiter = spawn_wait(&gate, OTHER_CHAT, OTHER_AGENT);
    tokio::time::sleep(ms(20)).await;
    push(&source, OTHER_AGENT, Some("run-a"), Complete); // released
    waiter.await.unwrap();
    source.fail_reads(Some("database unavailable"));
    gate.wait_for_discovery(CHAT, AGENT).await; // failed open

    let metrics = gate.metrics();
    assert_eq!(
        [
            metrics.waits_immediate,
            metrics.waits_timed_out,
            metrics.waits_reused_timeout,
            metrics.waits_released,
            metrics.waits_failed_open,
        ],
        [1, 1, 1, 1, 1]
    );
    assert_eq!(metrics.wait_seconds_count, 5);
    assert!((metrics.wait_seconds_sum - 15.02).abs() < 1e-6);
    let within_25ms = metrics.wait_seconds_buckets[1];
    assert_eq!(within_25ms, (0.025, 4));

    let mut text = String::new();
    metrics.write_prometheus("ctxsync_first_turn_gate", &mut text);
    assert!(text.contains("ctxsync_first_turn_gate_waits_total{result=\"timed_out\"} 1"));
    assert!(text.contains("ctxsync_first_turn_gate_wait_seconds_count 5"));
}

/// On the real clock: the in-process notification path releases in well under the
/// re-check interval, every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_latency_is_measured_from_the_commit() {
    let source = MemorySource::new();
    let gate = gate(&source);
    let mut latencies = Vec::new();
    for agent in 0..20 {
        start(&source, agent, Some("run-a"));
        push(&source, agent, Some("run-a"), Pending);
        let sample = gate
            .measure_release(CHAT, agent, async {
                push(&source, agent, Some("run-a"), Complete);
            })
            .await
            .expect("the waiter was waiting");
        assert_eq!(sample.outcome.phase, ViewPhase::Complete);
        latencies.push(sample.latency);
    }

    let metrics = gate.metrics();
    assert_eq!(
        metrics.recheck_reads, 0,
        "every release came from a notification"
    );
    assert_eq!(metrics.waits_released, 20);
    latencies.sort();
    assert!(latencies[19] < RECHECK / 2, "latencies: {latencies:?}");
}

#[tokio::test(start_paused = true)]
async fn measuring_an_already_complete_agent_returns_its_outcome() {
    let source = MemorySource::new();
    start(&source, AGENT, Some("run-a"));
    push(&source, AGENT, Some("run-a"), Complete);
    let gate = gate(&source);

    let result = gate.measure_release(CHAT, AGENT, async {}).await;

    let outcome = result.expect_err("nothing to measure");
    assert_eq!(outcome.reason, OutcomeReason::DiscoveryComplete);
}
