//! Races on PostgreSQL: many agents at once, each restarted twice while the previous
//! process keeps pushing, every call going through one of two stores (as two server
//! replicas would) at random, with random delays. A reader per agent samples the stored
//! state throughout. Invariants: once the current process has pushed, the snapshot's run
//! id equals the agent row's; versions never go backwards within a run; no push from a
//! retired run is ever stored; every stored snapshot's resources are exactly what that
//! push sent. (`postgres.rs` races two processes of one agent through the gRPC API; this
//! adds many agents, replicas per call and the resource and version invariants.)

use crate::common;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use ctxsync_persistence::test_support::TestStore;
use ctxsync_persistence::{AgentId, PushOutcome, Store, StoreError};
use ctxsync_protocol::DiscoveryPhase::{Complete, Pending};
use ctxsync_protocol::{Resource, RunId, Startup};

const ROUNDS: u64 = 6;
const AGENTS: usize = 8;
const PROCESSES: usize = 3;
const PUSHES: u64 = 6;

struct XorShift(u64);

impl XorShift {
    fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % bound
    }
}

/// What the writers of one agent have done, shared with its reader.
#[derive(Default)]
struct Ledger {
    /// Resources of every push, recorded before it is sent, by (run, version).
    sent: HashMap<(String, u64), Vec<Resource>>,
    /// Runs with an accepted push (recorded after the push returned).
    pushed: HashSet<String>,
    /// Runs retired by a successful UpdateStartup of a later process.
    retired: HashSet<String>,
}

#[derive(Default)]
struct Counts {
    accepted: u64,
    dropped_stale_run: u64,
    dropped_stale_version: u64,
    refused_startups: u64,
    conflicts_retried: u64,
    reads_checked: u64,
}

/// Retries what an agent retries: conflicts and unavailability.
async fn retry<T, F, Fut>(counts: &Mutex<Counts>, mut call: F) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, StoreError>>,
{
    let mut attempts = 0;
    loop {
        match call().await {
            Err(StoreError::Conflict(_) | StoreError::Unavailable(_)) if attempts < 20 => {
                attempts += 1;
                counts.lock().unwrap().conflicts_retried += 1;
            }
            other => return other,
        }
    }
}

fn resources(rng: &mut XorShift, run: &str, version: u64) -> Vec<Resource> {
    let mut all = vec![instruction("AGENTS.md", &format!("{run} v{version}"))];
    for i in 0..rng.below(4) {
        all.push(instruction(
            &format!("docs/{i}.md"),
            &format!("{run} {version} {i}"),
        ));
    }
    if rng.below(2) == 0 {
        all.push(mcp_server(&format!("srv-{}", rng.below(3)), &["read"]));
    }
    all
}

/// One agent process: UpdateStartup, then pushes; sometimes reconnects (UpdateStartup
/// again, then an `initial` push). Stops when its run is refused as superseded.
async fn process(
    stores: [Store; 2],
    agent: AgentId,
    run: String,
    seed: u64,
    ledger: Arc<Mutex<Ledger>>,
    counts: Arc<Mutex<Counts>>,
) {
    let mut rng = XorShift(seed);
    let startup = Startup {
        version: "race".into(),
        expanded_directory: "/ws".into(),
        agent_run_id: RunId::new(run.clone()),
        accepts_tool_calls: false,
    };
    let mut initial = true;
    for version in 1..=PUSHES {
        tokio::time::sleep(Duration::from_micros(rng.below(3000))).await;
        if initial || rng.below(5) == 0 {
            let store = &stores[rng.below(2) as usize];
            match retry(&counts, || store.update_startup(agent, startup.clone())).await {
                Ok(outcome) => {
                    assert_eq!(RunId::edge(outcome.agent_run_id.as_ref()), run);
                    // Whatever this update replaced is retired from now on (committed).
                    if let Some(retired) = outcome.retired_run_id.map(RunId::into_string) {
                        assert_ne!(retired, run, "a process retired itself");
                        ledger.lock().unwrap().retired.insert(retired);
                    }
                }
                Err(StoreError::SupersededRun { .. }) => {
                    counts.lock().unwrap().refused_startups += 1;
                    return;
                }
                Err(other) => panic!("startup of {run}: {other}"),
            }
            initial = true;
        }
        let sent = resources(&mut rng, &run, version);
        let mut snapshot = snapshot(
            version,
            Some(run.as_str()),
            if version == PUSHES { Complete } else { Pending },
            sent.clone(),
        );
        snapshot.initial = initial;
        let retired_before = {
            let mut ledger = ledger.lock().unwrap();
            ledger
                .sent
                .insert((run.clone(), version), sorted(sent.clone()));
            ledger.retired.contains(&run)
        };
        let store = &stores[rng.below(2) as usize];
        let outcome = retry(&counts, || {
            store.push_context_state(agent, snapshot.clone())
        })
        .await
        .unwrap_or_else(|e| panic!("push {run} v{version}: {e}"));
        // One lock at a time: the reader takes the ledger, then the counters.
        match outcome {
            PushOutcome::Accepted(_) => {
                assert!(
                    !retired_before,
                    "a push from retired run {run} (v{version}) was stored"
                );
                ledger.lock().unwrap().pushed.insert(run.clone());
                counts.lock().unwrap().accepted += 1;
                initial = false;
            }
            PushOutcome::DroppedStaleRun => counts.lock().unwrap().dropped_stale_run += 1,
            PushOutcome::DroppedStaleVersion { .. } => {
                counts.lock().unwrap().dropped_stale_version += 1
            }
            PushOutcome::DeltaBaseMissing => panic!("a full push was refused for a delta base"),
        }
    }
}

/// Samples the agent's stored state until `done`, checking every invariant each time.
async fn reader(
    store: Store,
    agent: AgentId,
    ledger: Arc<Mutex<Ledger>>,
    counts: Arc<Mutex<Counts>>,
    done: Arc<tokio::sync::Notify>,
) {
    let mut last_version: BTreeMap<String, u64> = BTreeMap::new();
    let mut stop = false;
    loop {
        // What was known to have happened strictly before the read.
        let pushed_before: BTreeSet<String> =
            ledger.lock().unwrap().pushed.iter().cloned().collect();
        let ctx = store.read_agent_context(agent).await.unwrap().unwrap();
        if let Some(snapshot) = &ctx.snapshot {
            let row_run = RunId::edge(ctx.agent.agent_run_id.as_ref());
            let snapshot_run = RunId::edge(snapshot.agent_run_id.as_ref()).to_owned();
            if pushed_before.contains(row_run) {
                assert_eq!(
                    snapshot_run, row_run,
                    "the current process had pushed, yet the snapshot is another run's"
                );
            }
            let last = last_version.entry(snapshot_run.clone()).or_insert(0);
            assert!(
                snapshot.version >= *last,
                "run {} went back from v{last} to v{}",
                snapshot_run,
                snapshot.version
            );
            *last = snapshot.version;
            let ledger = ledger.lock().unwrap();
            let sent = ledger
                .sent
                .get(&(snapshot_run.clone(), snapshot.version))
                .expect("the stored snapshot was sent by someone");
            assert_eq!(
                &ctx.resources, sent,
                "stored resources differ from what {} v{} sent",
                snapshot_run, snapshot.version
            );
            counts.lock().unwrap().reads_checked += 1;
        }
        if stop {
            return;
        }
        tokio::select! {
            _ = done.notified() => stop = true,
            _ = tokio::time::sleep(Duration::from_micros(500)) => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_agents_and_restarts_through_two_stores_keep_every_invariant() {
    let Some(db) = TestStore::postgres().await else {
        return;
    };
    let stores = [db.store().clone(), db.open_another().await];
    let counts = Arc::new(Mutex::new(Counts::default()));
    for round in 1..=ROUNDS {
        let mut writers = Vec::new();
        let mut readers = Vec::new();
        let mut finals = Vec::new();
        for a in 0..AGENTS {
            let agent = db
                .create_agent(&format!("race-{round}-{a}"))
                .await
                .unwrap()
                .id;
            let ledger = Arc::new(Mutex::new(Ledger::default()));
            let done = Arc::new(tokio::sync::Notify::new());
            readers.push((
                done.clone(),
                tokio::spawn(reader(
                    stores[a % 2].clone(),
                    agent,
                    ledger.clone(),
                    counts.clone(),
                    done,
                )),
            ));
            let runs: Vec<String> = (0..PROCESSES)
                .map(|p| format!("r{round}-{a}-p{p}"))
                .collect();
            let mut rng = XorShift((round * 1000 + a as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let mut agent_writers = Vec::new();
            for (p, run) in runs.iter().enumerate() {
                let delay = Duration::from_micros(p as u64 * 4000 + rng.below(4000));
                let (stores, ledger, counts) = (stores.clone(), ledger.clone(), counts.clone());
                let run = run.clone();
                let seed = rng.below(u64::MAX - 1) + 1;
                agent_writers.push(tokio::spawn(async move {
                    tokio::time::sleep(delay).await;
                    process(stores, agent, run, seed, ledger, counts).await;
                }));
            }
            writers.extend(agent_writers);
            finals.push((agent, runs, ledger));
        }
        for writer in writers {
            writer.await.expect("writer");
        }
        for (done, reader) in readers {
            done.notify_one();
            reader.await.expect("reader");
        }
        // Settled: the last process to start owns the row; when it pushed, the snapshot
        // is its newest push, exactly.
        for (agent, runs, ledger) in finals {
            let ctx = db.read_agent_context(agent).await.unwrap().unwrap();
            let row_run = RunId::edge(ctx.agent.agent_run_id.as_ref()).to_owned();
            assert!(runs.contains(&row_run), "row run {row_run}");
            let ledger = ledger.lock().unwrap();
            if ledger.pushed.contains(&row_run) {
                let snapshot = ctx.snapshot.expect("snapshot");
                assert_eq!(RunId::edge(snapshot.agent_run_id.as_ref()), row_run);
                assert_eq!(
                    &ctx.resources,
                    &ledger.sent[&(row_run.clone(), snapshot.version)]
                );
            }
        }
    }
    let counts = counts.lock().unwrap();
    println!(
        "races: {ROUNDS} rounds x {AGENTS} agents x {PROCESSES} processes: {} pushes accepted, {} dropped (retired run), {} dropped (stale version), {} startups refused, {} conflicts retried, {} reads checked",
        counts.accepted,
        counts.dropped_stale_run,
        counts.dropped_stale_version,
        counts.refused_startups,
        counts.conflicts_retried,
        counts.reads_checked
    );
    assert!(counts.accepted > 0, "nothing was accepted");
    assert!(
        counts.dropped_stale_run > 0,
        "no retired process ever raced a push: the interleavings were too tame"
    );
    assert!(counts.reads_checked > 100, "the readers checked too little");
}
