//! Benchmark: what a tool call through the chat API adds to the same call made directly.
//!
//! Directly: an rmcp client runs the fixture MCP server (`ctxsync mcp-fixture
//! --call-tools`) as its child over stdio and calls its trivial `count` tool sequentially.
//! Through ctxsync: an in-process `ctxsync server` (SQLite, then PostgreSQL), a real
//! `ctxsync agent` child process whose workspace declares the same fixture server, and
//! the same number of sequential `POST /api/chats/{id}/turns/{turn}/tool-calls` that wait
//! for the end. Each added-latency figure is the API's percentile minus the direct
//! client's, measured in the same run. Then the cross-replica rows (issue 37): two
//! `ctxsync server` processes on one PostgreSQL database (`replicas`).
//!
//! `cargo run --release -p ctxsync --example bench_tool_calls -- [--quick]` prints one
//! JSON row per line on stdout; progress goes to stderr.

#[path = "bench_tool_calls/replicas.rs"]
mod replicas;
mod support;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use ctxsync::server::{ServerConfig, start};
use ctxsync_persistence::DatabaseConfig;
use ctxsync_persistence::test_support::TestDatabase;
use ctxsync_protocol::DiscoveryPhase;
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};

use ctxsync_test_support::{bench_row, bench_row_against};
use support::{ctxsync_binary, percentile_ms};

const API_TOKEN: &str = "bench-tool-calls-api-token-0123456789";
const WARMUP: usize = 20;
const DISCOVERY_DEADLINE: Duration = Duration::from_secs(60);

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let quick = std::env::args().any(|a| a == "--quick");
    let calls = if quick { 100 } else { 1000 };
    let ctxsync = ctxsync_binary("bench_tool_calls")?;

    let direct = direct_calls(&ctxsync, calls).await?;
    let (direct_p50, direct_p99) = (percentile_ms(&direct, 50.0), percentile_ms(&direct, 99.0));
    eprintln!("bench_tool_calls: direct rmcp p50 {direct_p50:.3} ms, p99 {direct_p99:.3} ms");
    for (label, value) in [("p50", direct_p50), ("p99", direct_p99)] {
        bench_row_against(
            &format!("tool_call.direct_rmcp.{label} ({calls} sequential calls)"),
            value,
            "ms",
            None,
            None,
            None,
        );
    }

    let data = tempfile::tempdir()?;
    let sqlite = api_calls(
        &ctxsync,
        DatabaseConfig::sqlite_in(data.path()),
        data.path(),
        calls,
    )
    .await?;
    report("sqlite", &sqlite, (direct_p50, direct_p99), (3.0, 15.0));

    let Some(database) = tokio::task::spawn_blocking(TestDatabase::create).await? else {
        eprintln!("bench_tool_calls: PostgreSQL unavailable, its rows skipped");
        return Ok(());
    };
    let pg_data = tempfile::tempdir()?;
    let postgres = api_calls(
        &ctxsync,
        DatabaseConfig::from_url(database.url())?,
        pg_data.path(),
        calls,
    )
    .await?;
    report("postgres", &postgres, (direct_p50, direct_p99), (8.0, 30.0));
    drop(database);

    let direct = replicas::Direct {
        p50: direct_p50,
        p99: direct_p99,
    };
    replicas::run(&ctxsync, quick, calls, direct).await
}

/// Prints the API's percentiles and what they add to the direct ones, against targets.
fn report(backend: &str, samples: &[Duration], direct: (f64, f64), targets: (f64, f64)) {
    let (p50, p99) = (percentile_ms(samples, 50.0), percentile_ms(samples, 99.0));
    eprintln!("bench_tool_calls: via the API on {backend}: p50 {p50:.3} ms, p99 {p99:.3} ms");
    for (label, value, reference, target) in [
        ("p50", p50, direct.0, targets.0),
        ("p99", p99, direct.1, targets.1),
    ] {
        bench_row_against(
            &format!("tool_call.api.{backend}.{label}"),
            value,
            "ms",
            Some(reference),
            Some("reference: the direct rmcp client's figure"),
            None,
        );
        let added = value - reference;
        bench_row(
            &format!("tool_call.api.{backend}.added_{label}"),
            added,
            "ms",
            None,
            None,
            Some(&format!("added {label} <= {target} ms")),
            Some(added <= target),
        );
    }
}

/// `calls` sequential `count` calls by an rmcp client on the fixture's stdio.
async fn direct_calls(ctxsync: &Path, calls: usize) -> Result<Vec<Duration>> {
    let mut child = tokio::process::Command::new(ctxsync)
        .args(["mcp-fixture", "--call-tools"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .context("starting the fixture")?;
    let stdout = child.stdout.take().context("the fixture's stdout")?;
    let stdin = child.stdin.take().context("the fixture's stdin")?;
    let client = ().serve((stdout, stdin)).await.context("connecting to the fixture")?;
    let mut samples = Vec::with_capacity(calls);
    for i in 0..WARMUP + calls {
        let started = Instant::now();
        let result = client
            .call_tool(CallToolRequestParams::new("count"))
            .await
            .context("calling count")?;
        ensure!(result.is_error != Some(true), "count failed: {result:?}");
        if i >= WARMUP {
            samples.push(started.elapsed());
        }
    }
    client.cancel().await.ok();
    Ok(samples)
}

/// `calls` sequential calls of the fixture's `count` through a server on `database`
/// and a real agent.
async fn api_calls(
    ctxsync: &Path,
    database: DatabaseConfig,
    data: &Path,
    calls: usize,
) -> Result<Vec<Duration>> {
    let mut config = ServerConfig::ephemeral(data);
    config.database = database;
    config.api_token = Some(API_TOKEN.into());
    let server = start(config).await?;
    let agent = server.store.create_agent("bench").await?;
    let workspace = tempfile::tempdir()?;
    std::fs::write(
        workspace.path().join(".mcp.json"),
        json!({"mcpServers": {"calls": {"command": ctxsync, "args": ["mcp-fixture", "--call-tools"]}}})
            .to_string(),
    )?;
    let mut child = tokio::process::Command::new(ctxsync)
        .args(["agent", "--server", &server.agent_url(), "--workspace"])
        .arg(workspace.path())
        .env("CTXSYNC_AGENT_TOKEN", agent.token.expose())
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .context("starting ctxsync agent")?;
    let deadline = Instant::now() + DISCOVERY_DEADLINE;
    loop {
        let context = server.store.read_agent_context(agent.id).await?;
        if context
            .and_then(|c| c.snapshot)
            .is_some_and(|s| s.phase == DiscoveryPhase::Complete)
        {
            break;
        }
        if Instant::now() > deadline {
            bail!("the agent did not publish a complete snapshot");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let chat = server.store.create_chat(Some(agent.id)).await?.id;
    let http = reqwest::Client::new();
    let base = format!("{}/api/chats/{chat}", server.http_url());
    let turn: Value = http
        .post(format!("{base}/turns"))
        .bearer_auth(API_TOKEN)
        .json(&json!({}))
        .send()
        .await?
        .json()
        .await?;
    let turn = turn["turn_id"]
        .as_str()
        .context("a stored turn")?
        .to_owned();
    let url = format!("{base}/turns/{turn}/tool-calls");
    let mut samples = Vec::with_capacity(calls);
    // A turn holds at most 256 calls: a new turn every 200.
    let mut turn_url = url;
    for i in 0..WARMUP + calls {
        if i > 0 && i % 200 == 0 {
            let next: Value = http
                .post(format!("{base}/turns"))
                .bearer_auth(API_TOKEN)
                .json(&json!({}))
                .send()
                .await?
                .json()
                .await?;
            let id = next["turn_id"].as_str().context("a stored turn")?;
            turn_url = format!("{base}/turns/{id}/tool-calls");
        }
        let started = Instant::now();
        let response = http
            .post(&turn_url)
            .bearer_auth(API_TOKEN)
            .json(&json!({"call_id": format!("call-{i}"), "name": "calls__count"}))
            .send()
            .await?;
        let status = response.status();
        let call: Value = response.json().await?;
        let elapsed = started.elapsed();
        ensure!(
            status == 200 && call["status"] == "complete",
            "call {i}: {status} {call}"
        );
        if i >= WARMUP {
            samples.push(elapsed);
        }
    }
    child.kill().await.ok();
    server.shutdown().await;
    Ok(samples)
}
