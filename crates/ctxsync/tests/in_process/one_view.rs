//! One view, one vocabulary: the turn, the chat API, the agent-context API, the panel
//! JSON and the event stream all say what the chat projection decided — `unknown`,
//! `pending` or `complete`, stale or fresh — for a legacy, a pending, a complete and a
//! stale agent; and an open event stream catches up with a change whose notification
//! was lost.

use crate::support;

use std::time::Duration;

use ctxsync_persistence::{AgentId, DatabaseConfig, Store};
use ctxsync_protocol::{DiscoveryPhase, RunId, Snapshot, Startup};
use futures::StreamExt;
use reqwest::Method;
use serde_json::{Value, json};
use support::*;

/// Short budgets: a default turn of a pending or stale agent waits this long, no more.
const BUDGET: Duration = Duration::from_millis(300);
const GRACE: Duration = Duration::from_millis(300);
/// How long any event may take to arrive.
const EVENT_WAIT: Duration = Duration::from_secs(10);

/// (phase, stale) as one surface says it.
type Words = (String, bool);

fn words(discovery: &Value) -> Words {
    (
        discovery["phase"]
            .as_str()
            .unwrap_or("<missing>")
            .to_owned(),
        discovery["stale"].as_bool().expect("a stale flag"),
    )
}

fn expect(phase: &str, stale: bool) -> Words {
    (phase.to_owned(), stale)
}

/// A startup from process `run` (`None`: a legacy agent, which sends no run id).
fn startup(run: Option<&str>) -> Startup {
    Startup {
        version: "test".into(),
        expanded_directory: "/ws".into(),
        agent_run_id: run.and_then(RunId::new),
        accepts_tool_calls: false,
    }
}

fn snapshot(version: u64, run: Option<&str>, phase: DiscoveryPhase) -> Snapshot {
    Snapshot {
        version,
        aggregate_hash: "agg".into(),
        resources: vec![config_file(), server("fs", &[("read", "Read a file")])],
        initial: true,
        snapshot_error: None,
        agent_run_id: run.and_then(RunId::new),
        phase,
        ..Default::default()
    }
}

async fn publish(store: &Store, agent: AgentId, run: Option<&str>, snapshot: Snapshot) {
    store
        .update_startup(agent, startup(run))
        .await
        .expect("startup");
    store
        .push_context_state(agent, snapshot)
        .await
        .expect("push");
}

/// Reads server-sent events off one open stream.
struct Events {
    body: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    buffer: String,
}

impl Events {
    async fn open(h: &Harness, chat: &str) -> Self {
        let response = h
            .http
            .get(h.url(&format!("/api/chats/{chat}/context/events")))
            .bearer_auth(&h.server.api_token)
            .send()
            .await
            .expect("the stream opens");
        assert_eq!(response.status(), 200);
        Self {
            body: response.bytes_stream().boxed(),
            buffer: String::new(),
        }
    }

    /// The next event's data, or `None` when none arrives within `wait`.
    async fn next_within(&mut self, wait: Duration) -> Option<Value> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let event: String = self.buffer.drain(..end + 2).collect();
                if let Some(data) = event.lines().find_map(|l| l.strip_prefix("data: ")) {
                    return Some(serde_json::from_str(data).expect("event data is JSON"));
                }
                continue;
            }
            let chunk = tokio::time::timeout_at(deadline, self.body.next())
                .await
                .ok()?
                .expect("the stream stays open")
                .expect("a chunk");
            self.buffer.push_str(&String::from_utf8_lossy(&chunk));
        }
    }
}

/// Every surface's words for the chat bound to `agent` (a new chat per call).
async fn every_surface(h: &Harness, agent: AgentId) -> Vec<(&'static str, Words)> {
    let chat = h.new_chat(agent).await;
    let mut said = Vec::new();

    let (status, turn) = h
        .call(
            Method::POST,
            &format!("/api/chats/{chat}/turns"),
            Some(json!({ "mode": "default" })),
        )
        .await;
    assert_eq!(status, 200, "{turn}");
    said.push(("turn", words(&turn["mcp_discovery"])));

    let (status, read) = h
        .call(Method::GET, &format!("/api/chats/{chat}"), None)
        .await;
    assert_eq!(status, 200, "{read}");
    said.push(("chat API", words(&read["mcp_discovery"])));
    said.push(("chat API panel", words(&read["context"]["mcp_discovery"])));

    let (status, context) = h
        .call(Method::GET, &format!("/api/agents/{agent}/context"), None)
        .await;
    assert_eq!(status, 200, "{context}");
    said.push(("agent-context API", words(&context["mcp_discovery"])));
    said.push((
        "agent-context API (top level)",
        (
            context["mcp_discovery"]["phase"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            context["stale"].as_bool().expect("stale"),
        ),
    ));
    if !context["snapshot"].is_null() {
        said.push((
            "agent-context API snapshot",
            (
                context["snapshot"]["phase"]
                    .as_str()
                    .unwrap_or("<missing>")
                    .to_owned(),
                context["stale"].as_bool().expect("stale"),
            ),
        ));
    }

    let (status, panel) = h
        .call(Method::GET, &format!("/api/chats/{chat}/context"), None)
        .await;
    assert_eq!(status, 200, "{panel}");
    said.push(("panel JSON", words(&panel["mcp_discovery"])));

    let mut events = Events::open(h, &chat).await;
    let first = events
        .next_within(EVENT_WAIT)
        .await
        .expect("the current panel at once");
    said.push(("event stream", words(&first["panel"]["mcp_discovery"])));
    said
}

async fn check(h: &Harness, name: &str, agent: AgentId, expected: Words) {
    for (surface, said) in every_surface(h, agent).await {
        assert_eq!(said, expected, "{name}: {surface} says otherwise");
    }
}

async fn every_surface_uses_the_projections_words(h: Harness) {
    let store = &h.server.store;

    let never_connected = h.new_agent().await;
    check(
        &h,
        "legacy, no snapshot",
        never_connected,
        expect("unknown", false),
    )
    .await;

    let legacy = h.new_agent().await;
    let unstamped = snapshot(1, None, DiscoveryPhase::Unspecified);
    publish(store, legacy, None, unstamped).await;
    check(
        &h,
        "legacy, unstamped snapshot",
        legacy,
        expect("unknown", false),
    )
    .await;

    let pending = h.new_agent().await;
    let started = snapshot(1, Some("run-1"), DiscoveryPhase::Pending);
    publish(store, pending, Some("run-1"), started).await;
    check(&h, "pending", pending, expect("pending", false)).await;

    let complete = h.new_agent().await;
    let done = snapshot(1, Some("run-1"), DiscoveryPhase::Complete);
    publish(store, complete, Some("run-1"), done).await;
    check(&h, "complete", complete, expect("complete", false)).await;

    // Complete under run 1, then restarted as run 2, which has not reported yet.
    let restarted = h.new_agent().await;
    let done = snapshot(1, Some("run-1"), DiscoveryPhase::Complete);
    publish(store, restarted, Some("run-1"), done).await;
    store
        .update_startup(restarted, startup(Some("run-2")))
        .await
        .expect("restart");
    check(
        &h,
        "stale after restart",
        restarted,
        expect("complete", true),
    )
    .await;
}

mod sqlite {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_surface_uses_the_projections_words() {
        let start =
            super::Harness::start_with(super::TestBackend::Sqlite, super::BUDGET, super::GRACE);
        if let Some(h) = start.await {
            super::every_surface_uses_the_projections_words(h).await;
        }
    }
}

mod postgres {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_surface_uses_the_projections_words() {
        let start =
            super::Harness::start_with(super::TestBackend::Postgres, super::BUDGET, super::GRACE);
        if let Some(h) = start.await {
            super::every_surface_uses_the_projections_words(h).await;
        }
    }
}

/// A commit through a second store on the same SQLite file notifies nobody in the
/// server (SQLite's notifications are in-process): only the stream's re-check can carry
/// it to an open page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_stream_catches_up_with_a_lost_notification() {
    const RECHECK: Duration = Duration::from_millis(200);
    let start = Harness::start_configured(TestBackend::Sqlite, |config| {
        config.event_recheck = RECHECK;
    });
    let h = start.await.expect("SQLite always starts");
    let agent = h.new_agent().await;
    let pending = snapshot(1, Some("run-1"), DiscoveryPhase::Pending);
    publish(&h.server.store, agent, Some("run-1"), pending).await;
    let chat = h.new_chat(agent).await;

    let mut events = Events::open(&h, &chat).await;
    let first = events.next_within(EVENT_WAIT).await.expect("first panel");
    assert_eq!(
        words(&first["panel"]["mcp_discovery"]),
        expect("pending", false)
    );
    // Re-checks of an unchanged view send nothing.
    assert_eq!(events.next_within(RECHECK * 4).await, None);

    let elsewhere = Store::open(DatabaseConfig::sqlite_in(h.data_dir()))
        .await
        .expect("a second store on the same file");
    let done = snapshot(2, Some("run-1"), DiscoveryPhase::Complete);
    elsewhere
        .push_context_state(agent, done)
        .await
        .expect("push through the second store");

    let next = events
        .next_within(EVENT_WAIT)
        .await
        .expect("the re-check carries the change to the open stream");
    assert_eq!(
        words(&next["panel"]["mcp_discovery"]),
        expect("complete", false)
    );
    assert_eq!(next["panel"]["discovery"]["state"], "complete", "{next}");
    // And sends it once.
    assert_eq!(events.next_within(RECHECK * 4).await, None);
}
