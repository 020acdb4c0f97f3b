//! Benchmark: first-turn gate release across two `ctxsync server` processes on one
//! PostgreSQL database — the agent pushes to replica A over gRPC, the chat's first turn
//! waits on replica B over HTTP — next to a client polling B every 500 ms, in the same run.
//!
//! A sample runs from just before the completing push is sent to A until B's HTTP answer
//! to the waiting turn arrives: A's transaction, the NOTIFY, B's LISTEN wake-up and
//! re-read, and the HTTP response, as a user of two replicas sees them. B's re-check timer
//! is set far beyond the run, so every release comes from a notification (checked through
//! B's `/metrics`).
//!
//! `cargo run --release -p ctxsync --example bench_replicas -- [--quick]` prints one JSON
//! row per line on stdout; progress goes to stderr.

mod support;

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use ctxsync_agent_api::test_support::with_bearer;
use ctxsync_persistence::test_support::TestDatabase;
use ctxsync_protocol::{DiscoveryPhase, RunId, Snapshot, Startup, v1};
use serde_json::{Value, json};
use tonic::transport::Channel;

use ctxsync_test_support::{bench_row, bench_row_against};
use support::{ServerProcess, ctxsync_binary, percentile_ms};

const API_TOKEN: &str = "bench-replicas-api-token-0123456789";
/// The polling design the gate replaces.
const POLL_INTERVAL: Duration = Duration::from_millis(500);
const TARGET_P99: Duration = Duration::from_millis(25);
const TARGET_RATIO: f64 = 10.0;
const WARMUP: usize = 5;
/// How long the turn request is given to reach B's gate before the completing push.
const SETTLE: Duration = Duration::from_millis(30);
/// Bound on one trial; a lost notification would show as this error, not as a number.
const TRIAL_TIMEOUT: Duration = Duration::from_secs(20);

/// Five servers with four tools each; the pushes of a trial differ only in phase.
fn snapshot(version: u64, run: &str, phase: DiscoveryPhase) -> Snapshot {
    let servers = ctxsync_test_support::bench_servers(5, 4, &json!({"type": "object"}));
    Snapshot {
        aggregate_hash: "0".repeat(64),
        ..ctxsync_test_support::snapshot(version, run, phase, servers)
    }
}

/// The agent's side: gRPC to replica A.
struct Agent {
    client: v1::agent_client::AgentClient<Channel>,
    token: String,
}

impl Agent {
    /// A new agent process `run` that has published its pending snapshot.
    async fn start_pending(&mut self, run: &str) -> Result<()> {
        let startup = v1::UpdateStartupRequest::from(Startup {
            version: "bench".into(),
            expanded_directory: "/ws".into(),
            agent_run_id: RunId::new(run),
            accepts_tool_calls: false,
        });
        self.client
            .update_startup(with_bearer(startup, &self.token))
            .await
            .context("UpdateStartup")?;
        self.push(snapshot(1, run, DiscoveryPhase::Pending)).await
    }

    async fn push(&mut self, snapshot: Snapshot) -> Result<()> {
        let request = v1::PushContextStateRequest::from(snapshot);
        let response = self
            .client
            .push_context_state(with_bearer(request, &self.token))
            .await
            .context("push")?;
        ensure!(response.get_ref().accepted, "push not accepted");
        Ok(())
    }
}

/// The chat's side: HTTP to replica B.
#[derive(Clone)]
struct Chat {
    http: reqwest::Client,
    base: String,
    id: String,
}

impl Chat {
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value> {
        call(&self.http, &self.base, method, path, body).await
    }

    async fn phase(&self) -> Result<String> {
        let chat = self
            .call(
                reqwest::Method::GET,
                &format!("/api/chats/{}", self.id),
                None,
            )
            .await?;
        Ok(chat["mcp_discovery"]["phase"]
            .as_str()
            .unwrap_or_default()
            .to_owned())
    }

    /// Waits (bounded, not measured) until B reads the pending snapshot of the new run.
    async fn until_pending(&self) -> Result<()> {
        let deadline = Instant::now() + TRIAL_TIMEOUT;
        while self.phase().await? != "pending" {
            ensure!(
                Instant::now() < deadline,
                "B never saw the pending snapshot"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Ok(())
    }

    async fn turn(&self) -> Result<Value> {
        self.call(
            reqwest::Method::POST,
            &format!("/api/chats/{}/turns", self.id),
            Some(json!({ "mode": "default" })),
        )
        .await
    }
}

async fn call(
    http: &reqwest::Client,
    base: &str,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> Result<Value> {
    let what = format!("{method} {path}");
    let mut request = http
        .request(method, format!("{base}{path}"))
        .bearer_auth(API_TOKEN);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.with_context(|| what.clone())?;
    let status = response.status();
    let body: Value = response
        .json()
        .await
        .with_context(|| format!("{what}: the answer is not JSON"))?;
    ensure!(status.is_success(), "{what}: {status}: {body}");
    Ok(body)
}

/// Gate samples: the turn waits on B while the completing push goes to A.
async fn measure_gate(agent: &mut Agent, chat: &Chat, trials: usize) -> Result<Vec<Duration>> {
    let mut samples = Vec::with_capacity(trials);
    for trial in 0..WARMUP + trials {
        let run = uuid::Uuid::new_v4().to_string();
        agent.start_pending(&run).await?;
        chat.until_pending().await?;
        let waiter = {
            let chat = chat.clone();
            tokio::spawn(async move {
                let turn = chat.turn().await;
                (Instant::now(), turn)
            })
        };
        tokio::time::sleep(SETTLE).await;
        ensure!(!waiter.is_finished(), "the turn did not wait for discovery");
        let pushed = Instant::now();
        agent
            .push(snapshot(2, &run, DiscoveryPhase::Complete))
            .await?;
        let (released, turn) = tokio::time::timeout(TRIAL_TIMEOUT, waiter)
            .await
            .context("the waiting turn was never released")??;
        let turn = turn?;
        let discovery = &turn["mcp_discovery"];
        ensure!(
            discovery["phase"] == "complete" && discovery["wait_timed_out"] == false,
            "trial {trial}: unexpected turn {turn}"
        );
        if trial >= WARMUP {
            samples.push(released.saturating_duration_since(pushed));
        }
    }
    Ok(samples)
}

/// Polling samples: a client reads B every [`POLL_INTERVAL`] until complete; the push lands
/// at evenly spread offsets into the poll cycle.
async fn measure_polling(agent: &mut Agent, chat: &Chat, trials: usize) -> Result<Vec<Duration>> {
    let mut samples = Vec::with_capacity(trials);
    for trial in 0..trials {
        let run = uuid::Uuid::new_v4().to_string();
        agent.start_pending(&run).await?;
        chat.until_pending().await?;
        let poller = {
            let chat = chat.clone();
            tokio::spawn(async move {
                loop {
                    if chat.phase().await? == "complete" {
                        return anyhow::Ok(Instant::now());
                    }
                    tokio::time::sleep(POLL_INTERVAL).await;
                }
            })
        };
        tokio::time::sleep(POLL_INTERVAL.mul_f64(trial as f64 / trials as f64)).await;
        let pushed = Instant::now();
        agent
            .push(snapshot(2, &run, DiscoveryPhase::Complete))
            .await?;
        let released = tokio::time::timeout(TRIAL_TIMEOUT, poller)
            .await
            .context("the poller never saw the complete snapshot")???;
        samples.push(released.saturating_duration_since(pushed));
    }
    Ok(samples)
}

/// A counter from a replica's `/metrics` (0 when absent).
async fn metric(http: &reqwest::Client, base: &str, series: &str) -> Result<f64> {
    let text = http
        .get(format!("{base}/metrics"))
        .bearer_auth(API_TOKEN)
        .send()
        .await?
        .text()
        .await?;
    Ok(text
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let quick = std::env::args().any(|a| a == "--quick");
    let (gate_trials, polling_trials) = if quick { (30, 6) } else { (200, 40) };
    let ctxsync = ctxsync_binary("bench_replicas")?;
    let Some(database) = tokio::task::spawn_blocking(TestDatabase::create).await? else {
        eprintln!("bench_replicas: PostgreSQL unavailable, skipped");
        return Ok(());
    };
    let data = tempfile::tempdir()?;
    let replica_flags = [
        "--api-token",
        API_TOKEN,
        "--discovery-budget-ms",
        "20000",
        // Only a notification may release a turn within the run.
        "--gate-recheck-ms",
        "3600000",
    ];
    let a = ServerProcess::start(
        &ctxsync,
        database.url(),
        &data.path().join("a"),
        &replica_flags,
    )
    .await?;
    let b = ServerProcess::start(
        &ctxsync,
        database.url(),
        &data.path().join("b"),
        &replica_flags,
    )
    .await?;
    eprintln!(
        "bench_replicas: replica A (pid {}) takes pushes, replica B (pid {}) takes turns",
        a.pid, b.pid
    );
    let http = reqwest::Client::new();

    let created = call(
        &http,
        &a.http_url,
        reqwest::Method::POST,
        "/api/agents",
        Some(json!({ "name": "bench-replicas" })),
    )
    .await?;
    let mut agent = Agent {
        client: v1::agent_client::AgentClient::connect(a.agent_url.clone()).await?,
        token: created["token"]
            .as_str()
            .context("the new agent's token")?
            .to_owned(),
    };
    let chat_for = |http: &reqwest::Client| {
        let http = http.clone();
        let base = b.http_url.clone();
        let agent_id = created["id"].clone();
        async move {
            let chat = call(
                &http,
                &base,
                reqwest::Method::POST,
                "/api/chats",
                Some(json!({ "agent_id": agent_id })),
            )
            .await?;
            let id = chat["id"].as_str().context("the new chat's id")?.to_owned();
            anyhow::Ok(Chat { http, base, id })
        }
    };

    eprintln!("bench_replicas: {gate_trials} gate trials");
    let gate = measure_gate(&mut agent, &chat_for(&http).await?, gate_trials).await?;
    let rechecks = metric(&http, &b.http_url, "ctxsync_gate_recheck_reads_total").await?;
    let wakeups = metric(
        &http,
        &b.http_url,
        "ctxsync_gate_notification_wakeups_total",
    )
    .await?;
    eprintln!("bench_replicas: B woke {wakeups} times by notification, {rechecks} re-check reads");
    if rechecks > 0.0 {
        bail!("B released a turn by its re-check timer: a notification was lost");
    }
    eprintln!("bench_replicas: {polling_trials} polling trials");
    let polling = measure_polling(&mut agent, &chat_for(&http).await?, polling_trials).await?;

    let setup = "PostgreSQL across two server processes (push to A over gRPC, turn on B over HTTP)";
    let (gate_p50, gate_p99) = (percentile_ms(&gate, 50.0), percentile_ms(&gate, 99.0));
    let (poll_p50, poll_p99) = (percentile_ms(&polling, 50.0), percentile_ms(&polling, 99.0));
    let speedup = poll_p50 / gate_p50.max(f64::MIN_POSITIVE);
    bench_row(
        &format!("gate release p50, {setup} ({} trials)", gate.len()),
        gate_p50,
        "ms",
        Some(poll_p50),
        Some(speedup),
        Some(">= 10x better than 500 ms polling (ratio: polling / gate)"),
        Some(speedup >= TARGET_RATIO),
    );
    bench_row(
        &format!("gate release p99, {setup} ({} trials)", gate.len()),
        gate_p99,
        "ms",
        Some(poll_p99),
        Some(poll_p99 / gate_p99.max(f64::MIN_POSITIVE)),
        Some("<= 25 ms"),
        Some(gate_p99 <= TARGET_P99.as_secs_f64() * 1000.0),
    );
    for (p, value) in [("p50", poll_p50), ("p99", poll_p99)] {
        bench_row_against(
            &format!(
                "500 ms polling client {p}, {setup} ({} trials)",
                polling.len()
            ),
            value,
            "ms",
            None,
            None,
            None,
        );
    }
    a.stop().await?;
    b.stop().await?;
    Ok(())
}
