//! Several `ctxsync server` processes on one PostgreSQL database behave as one: the agent
//! talks to one replica, the chat to the other, and the first turn waiting on the second
//! is released by the first's commit through LISTEN/NOTIFY — not by a re-check timer.

use std::process::Stdio;
use std::time::Duration;

use ctxsync_mcp_fixture::{FixtureConfig, ToolSpec};
use ctxsync_persistence::test_support::TestDatabase;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

const CTXSYNC: &str = env!("CARGO_BIN_EXE_ctxsync");
const API_TOKEN: &str = "replica-test-token-0123456789";

/// A `ctxsync server` process and the addresses it printed.
struct Replica {
    _child: tokio::process::Child,
    grpc: String,
    http: String,
}

async fn start_replica(url: &str, data_dir: &std::path::Path) -> Replica {
    let mut child = tokio::process::Command::new(CTXSYNC)
        .args([
            "server",
            "--database-url",
            url,
            "--grpc-addr",
            "127.0.0.1:0",
            "--http-addr",
            "127.0.0.1:0",
        ])
        .args(["--api-token", API_TOKEN, "--discovery-budget-ms", "20000"])
        // A re-check far beyond the test's length: only a notification can release the turn.
        .args(["--gate-recheck-ms", "600000"])
        .arg("--data-dir")
        .arg(data_dir)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("server starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let (mut grpc, mut http) = (None, None);
    while grpc.is_none() || http.is_none() {
        let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
            .await
            .expect("the server prints its addresses")
            .unwrap()
            .expect("the server is running");
        if let Some(url) = line.strip_prefix("agent API (gRPC): ") {
            grpc = Some(url.trim().to_string());
        } else if let Some(url) = line.strip_prefix("chat API (HTTP):") {
            http = Some(url.trim().to_string());
        }
    }
    Replica {
        _child: child,
        grpc: grpc.unwrap(),
        http: http.unwrap(),
    }
}

async fn call(
    http: &reqwest::Client,
    base: &str,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> Value {
    let mut request = http
        .request(method, format!("{base}{path}"))
        .bearer_auth(API_TOKEN);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    assert!(
        response.status().is_success(),
        "{path}: {}",
        response.status()
    );
    response.json().await.unwrap()
}

async fn metric(http: &reqwest::Client, base: &str, series: &str) -> u64 {
    let text = http
        .get(format!("{base}/metrics"))
        .bearer_auth(API_TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| {
            l.strip_prefix(series)
                .and_then(|rest| rest.strip_prefix(' '))
        })
        .map_or(0, |v| v.trim().parse::<f64>().unwrap_or(0.0) as u64)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_to_one_replica_releases_a_turn_waiting_on_another() {
    // Heavy: one at a time in this binary (see ctxsync-test-support's `heavy`).
    let _heavy = ctxsync_test_support::heavy().await;
    let Some(database) = tokio::task::spawn_blocking(TestDatabase::create)
        .await
        .unwrap()
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let a = start_replica(database.url(), &dir.path().join("a")).await;
    let b = start_replica(database.url(), &dir.path().join("b")).await;
    let http = reqwest::Client::new();

    let agent = call(
        &http,
        &a.http,
        reqwest::Method::POST,
        "/api/agents",
        Some(json!({ "name": "replicated" })),
    )
    .await;
    let chat = call(
        &http,
        &b.http,
        reqwest::Method::POST,
        "/api/chats",
        Some(json!({ "agent_id": agent["id"] })),
    )
    .await;
    let chat_id = chat["id"].as_str().unwrap();

    let workspace = tempfile::tempdir().unwrap();
    let slow = FixtureConfig::new()
        .init_delay(Duration::from_millis(1500))
        .tool(ToolSpec::new("lookup", "Look something up"));
    let mut args = vec!["mcp-fixture".to_string()];
    args.extend(slow.to_args());
    let config = json!({ "mcpServers": { "slow": { "command": CTXSYNC, "args": args } } });
    std::fs::write(workspace.path().join(".mcp.json"), config.to_string()).unwrap();
    let _agent = tokio::process::Command::new(CTXSYNC)
        .args(["agent", "--server", &a.grpc, "--workspace"])
        .arg(workspace.path())
        .args(["--mcp-timeout-ms", "10000"])
        .env("CTXSYNC_AGENT_TOKEN", agent["token"].as_str().unwrap())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();

    // Wait (bounded) until replica B sees the agent's pending snapshot, then take the turn there.
    let chat_path = format!("/api/chats/{chat_id}");
    ctxsync_test_support::poll("replica B to see the pending snapshot")
        .within(Duration::from_secs(30))
        .every(Duration::from_millis(20))
        .until(|| async {
            let read = call(&http, &b.http, reqwest::Method::GET, &chat_path, None).await;
            if read["mcp_discovery"]["phase"] == "pending" {
                Ok(())
            } else {
                Err(read)
            }
        })
        .await;
    let turn = call(
        &http,
        &b.http,
        reqwest::Method::POST,
        &format!("/api/chats/{chat_id}/turns"),
        Some(json!({ "mode": "default" })),
    )
    .await;
    assert_eq!(turn["mcp_discovery"]["phase"], "complete", "{turn}");
    assert_eq!(turn["mcp_discovery"]["wait_timed_out"], false);
    assert_eq!(turn["tools"][0]["name"], "slow__lookup");
    // The completing push went through replica A; B was woken by its notification.
    assert!(metric(&http, &b.http, "ctxsync_gate_notification_wakeups_total").await >= 1);
    assert_eq!(
        metric(&http, &b.http, "ctxsync_gate_recheck_reads_total").await,
        0,
        "no re-check tick was needed"
    );
    assert_eq!(
        metric(
            &http,
            &b.http,
            "ctxsync_agent_pushes_total{result=\"accepted\"}"
        )
        .await,
        0,
        "B received no push"
    );
    assert!(
        metric(
            &http,
            &a.http,
            "ctxsync_agent_pushes_total{result=\"accepted\"}"
        )
        .await
            >= 2
    );
}
