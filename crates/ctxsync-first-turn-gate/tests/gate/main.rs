//! Behaviour tests of the first-turn gate over the in-memory source, on tokio's paused
//! clock: budgets of seconds pass instantly and every duration is exact; and, in
//! `store`, over the real store on both backends.

mod attempts;
mod shared_log;
mod store;
mod turn;
mod wait;

use std::time::Duration;

use ctxsync_chat_projection::{Counts, SnapshotState, View};
use ctxsync_first_turn_gate::memory::{MemoryId, MemorySource};
use ctxsync_first_turn_gate::{
    DiscoverySource, FirstTurnGate, GateConfig, Outcome, SourceError, TurnInventory,
};
use ctxsync_protocol::{
    DiscoveryPhase, McpServerBody, McpTool, Resource, ResourceBody, ResourceStatus, RunId,
};
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

/// What the rows of [`snapshot`] count as.
const COUNTS: Counts = Counts {
    servers_ok: 3,
    servers_empty: 1,
    servers_failed: 1,
    servers_needing_authorization: 0,
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
    source.commit(agent, |record| {
        record.agent_run_id = run.and_then(RunId::new);
    });
}

fn row(source: &str, status: ResourceStatus, body: ResourceBody) -> Resource {
    Resource {
        source: source.to_owned(),
        source_path: None,
        content_hash: String::new(),
        size_bytes: 0,
        error: (status != ResourceStatus::Ok).then(|| format!("{source} failed")),
        status,
        body,
    }
}

fn server(name: &str, status: ResourceStatus, tools: usize) -> Resource {
    let body = McpServerBody {
        server_name: name.to_owned(),
        description: String::new(),
        tools: (0..tools)
            .map(|i| McpTool {
                name: format!("tool{i}"),
                description: String::new(),
                input_schema: serde_json::json!({ "type": "object" }),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    row(name, status, ResourceBody::McpServer(body))
}

/// A snapshot stamped with `run` whose rows count as [`COUNTS`].
fn snapshot(run: Option<&str>, phase: DiscoveryPhase) -> SnapshotState {
    use ResourceStatus::{Invalid, Ok, Unreadable};
    SnapshotState {
        agent_run_id: run.and_then(RunId::new),
        phase,
        resources: vec![
            server("a", Ok, 1),
            server("b", Ok, 2),
            server("c", Ok, 1),
            server("empty", Ok, 0),
            server("broken", Unreadable, 0),
            row(".mcp.json", Invalid, ResourceBody::McpConfig),
            row("sub/.mcp.json", Invalid, ResourceBody::McpConfig),
        ],
        ..SnapshotState::default()
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

/// Runs after a discovery read with the read's number.
type ReadHook = Box<dyn Fn(&MemorySource, u64) + Send + Sync>;

/// The in-memory source with a hook run after each discovery read, given the read's
/// number (from 1): to commit at an awkward moment, or to panic.
struct HookedSource {
    inner: MemorySource,
    reads: std::sync::atomic::AtomicU64,
    after_read: ReadHook,
}

impl HookedSource {
    fn new(
        inner: &MemorySource,
        after_read: impl Fn(&MemorySource, u64) + Send + Sync + 'static,
    ) -> Self {
        Self {
            inner: inner.clone(),
            reads: 0.into(),
            after_read: Box::new(after_read),
        }
    }
}

impl DiscoverySource for HookedSource {
    type ChatId = MemoryId;
    type AgentId = MemoryId;
    type Tool = String;
    type Subscription = <MemorySource as DiscoverySource>::Subscription;

    async fn subscribe(&self, agent: &MemoryId) -> Result<Self::Subscription, SourceError> {
        self.inner.subscribe(agent).await
    }

    async fn read_discovery(&self, chat: &MemoryId, agent: &MemoryId) -> Result<View, SourceError> {
        let observation = self.inner.read_discovery(chat, agent).await;
        let read = 1 + self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        (self.after_read)(&self.inner, read);
        observation
    }

    async fn bound_agent(&self, chat: &MemoryId) -> Result<Option<MemoryId>, SourceError> {
        self.inner.bound_agent(chat).await
    }

    async fn turn_inventory(
        &self,
        chat: &MemoryId,
        agent: Option<&MemoryId>,
    ) -> Result<TurnInventory<String>, SourceError> {
        self.inner.turn_inventory(chat, agent).await
    }
}

/// The gate's futures can be spawned and held across awaits by any server, whatever
/// the source (checked at compile time).
#[allow(dead_code)]
fn gate_futures_are_send<S: DiscoverySource>(
    gate: &FirstTurnGate<S>,
    chat: S::ChatId,
    agent: S::AgentId,
) {
    fn send<T: Send>(_: &T) {}
    send(&gate.wait_for_discovery(chat.clone(), agent.clone()));
    send(&gate.prepare_turn(chat.clone(), ctxsync_first_turn_gate::TurnMode::Default));
    send(&gate.measure_release(chat, agent, async {}));
}
