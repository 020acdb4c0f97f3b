//! Behaviour tests of the first-turn gate over the in-memory source, on tokio's paused
//! clock: budgets of seconds pass instantly and every duration is exact.

mod attempts;
mod turn;
mod wait;

use std::time::Duration;

use ctxsync_first_turn_gate::memory::{MemoryId, MemorySource};
use ctxsync_first_turn_gate::{
    DiscoveryCounts, FirstTurnGate, GateConfig, Outcome, SnapshotObservation,
};
use ctxsync_protocol::DiscoveryPhase;
use tokio::task::JoinHandle;
use tokio::time::Instant;

const CHAT: MemoryId = 1;
const OTHER_CHAT: MemoryId = 2;
const AGENT: MemoryId = 10;
const OTHER_AGENT: MemoryId = 11;

const BUDGET: Duration = Duration::from_secs(15);
const GRACE: Duration = Duration::from_secs(3);
const RECHECK: Duration = Duration::from_secs(1);
const RETENTION: Duration = Duration::from_secs(600);
const READ_TIMEOUT: Duration = Duration::from_secs(2);

const COUNTS: DiscoveryCounts = DiscoveryCounts {
    servers_ok: 3,
    servers_empty: 1,
    servers_failed: 1,
    config_errors: 2,
};

fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

/// A gate with the production defaults spelled out, so the tests read against them.
fn gate(source: &MemorySource) -> FirstTurnGate<MemorySource> {
    let config = GateConfig {
        discovery_budget: BUDGET,
        snapshot_grace: GRACE,
        recheck_interval: RECHECK,
        timed_out_retention: RETENTION,
        read_timeout: READ_TIMEOUT,
    };
    assert_eq!(config, GateConfig::default());
    FirstTurnGate::new(source.clone(), config)
}

/// The agent (re)started as process `run` (`None`: a legacy or never-connected agent).
fn start(source: &MemorySource, agent: MemoryId, run: Option<&str>) {
    source.commit(agent, |record| record.run_id = run.map(str::to_owned));
}

fn snapshot(run: Option<&str>, phase: DiscoveryPhase) -> SnapshotObservation {
    SnapshotObservation {
        run_id: run.map(str::to_owned),
        phase,
        counts: COUNTS,
    }
}

/// Commits a snapshot stamped with `run` and notifies.
fn push(source: &MemorySource, agent: MemoryId, run: Option<&str>, phase: DiscoveryPhase) {
    source.commit(agent, |record| record.snapshot = Some(snapshot(run, phase)));
}

/// Commits a snapshot whose notification is lost.
fn push_silently(source: &MemorySource, agent: MemoryId, run: Option<&str>, phase: DiscoveryPhase) {
    source.commit_silently(agent, |record| record.snapshot = Some(snapshot(run, phase)));
}

/// Starts a waiter on its own task; returns when it was started and its handle.
fn spawn_wait(
    gate: &FirstTurnGate<MemorySource>,
    chat: MemoryId,
    agent: MemoryId,
) -> JoinHandle<(Outcome, Instant)> {
    let gate = gate.clone();
    tokio::spawn(async move {
        let outcome = gate.wait_for_discovery(chat, agent).await;
        (outcome, Instant::now())
    })
}

/// Lets spawned tasks run until they block, without moving the paused clock.
async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}
