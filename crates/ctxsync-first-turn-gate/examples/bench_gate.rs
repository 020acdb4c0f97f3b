//! Benchmark (not a test): how fast the first-turn gate releases a waiter after the
//! push that completes discovery, over the real store — SQLite in-process, and
//! PostgreSQL across two `Store` instances (the gate on one, with its own pool and
//! LISTEN connection; the push committed through the other, as a second server replica
//! would) — next to a waiter that polls the projection every 500 ms, measured in the
//! same run.
//!
//! `cargo run --release -p ctxsync-first-turn-gate --example bench_gate -- [--quick]`
//! prints one JSON object per line on stdout; progress goes to stderr. PostgreSQL comes
//! from `CTXSYNC_TEST_POSTGRES_URL` (default `postgres://postgres@127.0.0.1:5432/test`).
//!
//! A gate sample runs from just before the completing push is sent to the waiter's
//! release, so it includes the push's own transaction: an upper bound on the time from
//! the commit to the release.

use std::time::Duration;

use ctxsync_chat_projection::ViewPhase;
use ctxsync_chat_projection::store::load_agent_view;
use ctxsync_first_turn_gate::{GateConfig, OutcomeReason, StoreGate};
use ctxsync_persistence::test_support::TestStore;
use ctxsync_persistence::{AgentId, ChatId, Store};
use ctxsync_protocol::{DiscoveryPhase, Snapshot};
use ctxsync_test_support::{bench_servers, push_accepted as push};
use serde_json::json;
use tokio::time::Instant;

/// The polling design this gate replaces.
const POLL_INTERVAL: Duration = Duration::from_millis(500);
/// Target: p99 release across stores.
const TARGET_P99: Duration = Duration::from_millis(25);
/// Target: how many times faster than polling at p50.
const TARGET_RATIO: f64 = 10.0;
const WARMUP: usize = 5;

struct Trials {
    gate: usize,
    polling: usize,
}

/// The workspace's servers (five, four tools each); a trial's pushes differ only in phase.
fn snapshot(version: u64, run: &str, phase: DiscoveryPhase) -> Snapshot {
    let schema = json!({"type": "object", "properties": {"path": {"type": "string"}}});
    Snapshot {
        aggregate_hash: "0".repeat(64),
        ..ctxsync_test_support::snapshot(version, run, phase, bench_servers(5, 4, &schema))
    }
}

/// A new agent process `run`, still discovering.
async fn start_pending(store: &Store, agent: AgentId, run: &str) {
    ctxsync_test_support::start_run(store, agent, run, "bench").await;
    push(store, agent, snapshot(1, run, DiscoveryPhase::Pending)).await;
}

/// Gate release latencies: the gate reads through `reader`, the push goes through
/// `writer`.
async fn measure_gate(reader: &Store, writer: &Store, trials: usize) -> Vec<Duration> {
    let gate = StoreGate::over_store(
        reader.clone(),
        GateConfig {
            discovery_budget: Duration::from_secs(10),
            snapshot_grace: Duration::from_secs(10),
            // Releases come from notifications only; a lost one would show as a 10 s outlier.
            recheck_interval: Duration::from_secs(3600),
            ..GateConfig::default()
        },
    );
    let agent = reader.create_agent("bench").await.expect("agent").id;
    let mut samples = Vec::with_capacity(trials);
    for trial in 0..WARMUP + trials {
        let run = format!("gate-{trial}");
        start_pending(writer, agent, &run).await;
        let sample = gate
            .measure_release(ChatId::new_random(), agent, async {
                push(writer, agent, snapshot(2, &run, DiscoveryPhase::Complete)).await;
            })
            .await
            .expect("the pending run waits");
        assert_eq!(
            sample.outcome.reason,
            OutcomeReason::DiscoveryComplete,
            "{:?}",
            sample.outcome
        );
        if trial >= WARMUP {
            samples.push(sample.latency);
        }
    }
    let metrics = gate.metrics();
    eprintln!(
        "  gate: {} released, {} notification wake-ups, {} re-check reads",
        metrics.waits_released, metrics.notification_wakeups, metrics.recheck_reads
    );
    samples
}

/// Polling latencies: a waiter reads the view every [`POLL_INTERVAL`] until complete; the
/// push lands at evenly spread offsets into the poll cycle.
async fn measure_polling(reader: &Store, writer: &Store, trials: usize) -> Vec<Duration> {
    let agent = reader.create_agent("bench-poll").await.expect("agent").id;
    let mut samples = Vec::with_capacity(trials);
    for trial in 0..trials {
        let run = format!("poll-{trial}");
        start_pending(writer, agent, &run).await;
        let poller = {
            let reader = reader.clone();
            tokio::spawn(async move {
                loop {
                    let view = load_agent_view(&reader, agent).await.expect("view");
                    if view.phase() == ViewPhase::Complete && !view.is_stale() {
                        return Instant::now();
                    }
                    tokio::time::sleep(POLL_INTERVAL).await;
                }
            })
        };
        let offset = POLL_INTERVAL.mul_f64(trial as f64 / trials as f64);
        tokio::time::sleep(offset).await;
        let pushed = Instant::now();
        push(writer, agent, snapshot(2, &run, DiscoveryPhase::Complete)).await;
        let released = poller.await.expect("poller");
        samples.push(released.saturating_duration_since(pushed));
    }
    samples
}

fn percentile(samples: &[Duration], p: f64) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort();
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn row(
    name: &str,
    value: f64,
    reference: Option<f64>,
    ratio: Option<f64>,
    target: Option<&str>,
    pass: Option<bool>,
) {
    ctxsync_test_support::bench_row(name, value, "ms", reference, ratio, target, pass);
}

/// Prints the rows of one setup: gate p50 against polling p50 (ratio), gate p99 (against
/// the p99 target when `p99_target`), and the polling figures themselves.
fn report(setup: &str, gate: &[Duration], polling: &[Duration], p99_target: bool) {
    let (gate_p50, gate_p99) = (percentile(gate, 50.0), percentile(gate, 99.0));
    let (poll_p50, poll_p99) = (percentile(polling, 50.0), percentile(polling, 99.0));
    let ratio = ms(poll_p50) / ms(gate_p50).max(f64::MIN_POSITIVE);
    row(
        &format!("gate release p50, {setup} ({} trials)", gate.len()),
        ms(gate_p50),
        Some(ms(poll_p50)),
        Some(ratio),
        Some(">= 10x better than 500 ms polling"),
        Some(ratio >= TARGET_RATIO),
    );
    let (target, pass) = if p99_target {
        (Some("<= 25 ms"), Some(gate_p99 <= TARGET_P99))
    } else {
        (None, None)
    };
    row(
        &format!("gate release p99, {setup} ({} trials)", gate.len()),
        ms(gate_p99),
        Some(ms(poll_p99)),
        Some(ms(poll_p99) / ms(gate_p99).max(f64::MIN_POSITIVE)),
        target,
        pass,
    );
    for (p, value) in [("p50", poll_p50), ("p99", poll_p99)] {
        row(
            &format!(
                "500 ms polling waiter {p}, {setup} ({} trials)",
                polling.len()
            ),
            ms(value),
            None,
            None,
            None,
            None,
        );
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let trials = if quick {
        Trials {
            gate: 40,
            polling: 10,
        }
    } else {
        Trials {
            gate: 200,
            polling: 40,
        }
    };

    eprintln!("SQLite, one store in-process: {} gate trials", trials.gate);
    let sqlite = TestStore::sqlite().await;
    let gate = measure_gate(sqlite.store(), sqlite.store(), trials.gate).await;
    eprintln!("SQLite: {} polling trials", trials.polling);
    let polling = measure_polling(sqlite.store(), sqlite.store(), trials.polling).await;
    report("SQLite in-process", &gate, &polling, false);
    drop(sqlite);

    let Some(postgres) = TestStore::postgres().await else {
        eprintln!("PostgreSQL skipped");
        return;
    };
    let other = postgres.open_another().await;
    eprintln!(
        "PostgreSQL, two stores (separate pools and LISTEN connections): {} gate trials",
        trials.gate
    );
    let gate = measure_gate(postgres.store(), &other, trials.gate).await;
    eprintln!("PostgreSQL: {} polling trials", trials.polling);
    let polling = measure_polling(postgres.store(), &other, trials.polling).await;
    report(
        "PostgreSQL across two stores (separate pools + LISTEN connections)",
        &gate,
        &polling,
        true,
    );
}
