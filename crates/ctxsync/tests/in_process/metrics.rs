//! `/metrics` read by Prometheus' own text parser (Python's `prometheus_client`, see
//! `tests/py/metrics_parse.py`): every family parses with its declared type, histograms
//! hold their invariants, and the values move with gRPC pushes, a first turn and an
//! open event stream on a real server.

use crate::support;

use std::path::PathBuf;
use std::time::Duration;

use ctxsync_agent_api::test_support::with_bearer;
use ctxsync_protocol::v1::agent_client::AgentClient;
use ctxsync_protocol::{
    DiscoveryPhase, McpConnectTimings, ResourceBody, RunId, Snapshot, Startup, v1,
};
use futures::StreamExt;
use reqwest::Method;
use serde_json::{Value, json};
use support::*;

/// One parsed family: `prometheus_client`'s name (a counter's without `_total`), type
/// and samples.
struct Family {
    kind: String,
    samples: Vec<Value>,
}

/// The server's `/metrics`, checked for its content type and parsed by the Python script.
async fn scrape(h: &Harness) -> (String, Vec<(String, Family)>) {
    let response = h
        .http
        .get(h.url("/metrics"))
        .bearer_auth(&h.server.api_token)
        .send()
        .await
        .expect("GET /metrics");
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    let text = response.text().await.expect("metrics text");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/py/metrics_parse.py");
    let mut child = tokio::process::Command::new(python())
        .arg(script)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starting Python");
    let mut stdin = child.stdin.take().expect("stdin");
    tokio::io::AsyncWriteExt::write_all(&mut stdin, text.as_bytes())
        .await
        .expect("writing to Python");
    drop(stdin);
    let output = child.wait_with_output().await.expect("Python runs");
    assert!(
        output.status.success(),
        "prometheus_client refused /metrics: {}\n{text}",
        String::from_utf8_lossy(&output.stderr)
    );
    let parsed: Vec<Value> = serde_json::from_slice(&output.stdout).expect("the script's JSON");
    let families = parsed
        .into_iter()
        .map(|f| {
            let name = f["name"].as_str().unwrap().to_owned();
            let family = Family {
                kind: f["type"].as_str().unwrap().to_owned(),
                samples: f["samples"].as_array().unwrap().clone(),
            };
            (name, family)
        })
        .collect();
    (text, families)
}

/// The value of the sample `name` with exactly `labels`.
fn value(families: &[(String, Family)], name: &str, labels: Value) -> f64 {
    families
        .iter()
        .flat_map(|(_, f)| &f.samples)
        .find(|s| s["name"] == name && s["labels"] == labels)
        .and_then(|s| s["value"].as_f64())
        .unwrap_or_else(|| panic!("no sample {name}{labels}"))
}

/// Every family this server exposes, by `prometheus_client`'s name, with its type.
const FAMILIES: &[(&str, &str)] = &[
    ("ctxsync_agent_pushes", "counter"),
    ("ctxsync_agent_delta_pushes", "counter"),
    ("ctxsync_agent_startups", "counter"),
    ("ctxsync_agent_requests_rejected", "counter"),
    ("ctxsync_agent_push_duration_seconds", "histogram"),
    ("ctxsync_mcp_server_connect_duration_seconds", "histogram"),
    (
        "ctxsync_mcp_server_connect_phase_duration_seconds",
        "histogram",
    ),
    ("ctxsync_tool_calls", "counter"),
    ("ctxsync_tool_call_duration_seconds", "histogram"),
    ("ctxsync_tool_calls_in_flight", "gauge"),
    ("ctxsync_gate_waits", "counter"),
    ("ctxsync_gate_wait_seconds", "histogram"),
    ("ctxsync_gate_attempts_started", "counter"),
    ("ctxsync_gate_attempts_waiting", "gauge"),
    ("ctxsync_gate_attempts_retained", "gauge"),
    ("ctxsync_gate_notification_wakeups", "counter"),
    ("ctxsync_gate_recheck_reads", "counter"),
    ("ctxsync_event_streams_open", "gauge"),
    ("ctxsync_agents", "gauge"),
    ("ctxsync_agents_connected", "gauge"),
];

fn assert_families(text: &str, families: &[(String, Family)]) {
    let found: Vec<(&str, &str)> = families
        .iter()
        .map(|(name, f)| (name.as_str(), f.kind.as_str()))
        .collect();
    assert_eq!(found, FAMILIES, "{text}");
}

async fn open_grpc(h: &Harness) -> AgentClient<tonic::transport::Channel> {
    let channel = tonic::transport::Endpoint::from_shared(h.server.agent_url())
        .expect("agent URL")
        .connect()
        .await
        .expect("connecting to the agent API");
    AgentClient::new(channel)
}

fn snapshot(version: u64, initial: bool, resources: Vec<ctxsync_protocol::Resource>) -> Snapshot {
    Snapshot {
        version,
        aggregate_hash: "agg".into(),
        resources,
        initial,
        agent_run_id: RunId::new("run-1"),
        phase: DiscoveryPhase::Complete,
        ..Default::default()
    }
}

/// `ctxsync_agent_push_duration_seconds_count` for one push result.
fn push_count(families: &[(String, Family)], result: &str) -> f64 {
    value(
        families,
        "ctxsync_agent_push_duration_seconds_count",
        json!({ "result": result }),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_parse_as_prometheus_text_and_move() {
    let h = Harness::start(TestBackend::Sqlite)
        .await
        .expect("SQLite needs no service");
    let (text, families) = scrape(&h).await;
    assert_families(&text, &families);
    assert_eq!(push_count(&families, "accepted"), 0.0);
    assert_eq!(
        value(&families, "ctxsync_event_streams_open", json!({})),
        0.0
    );

    let agent = push_over_grpc(&h).await;

    // A first turn: discovery is complete, so the gate lets it through at once.
    let chat = h.new_chat(agent).await;
    let (status, turn) = h
        .call(
            Method::POST,
            &format!("/api/chats/{chat}/turns"),
            Some(json!({})),
        )
        .await;
    assert_eq!(status, 200, "{turn}");

    // An open event stream, read until its first event so the server has counted it.
    let response = h
        .http
        .get(h.url(&format!("/api/chats/{chat}/context/events")))
        .bearer_auth(&h.server.api_token)
        .send()
        .await
        .expect("event stream");
    assert_eq!(response.status(), 200);
    let mut events = response.bytes_stream();
    tokio::time::timeout(Duration::from_secs(10), events.next())
        .await
        .expect("a first event in time")
        .expect("the stream is open")
        .expect("an event");

    check_moved_values(&h).await;

    // The client goes away: the stream's slot is freed once the server notices (at the
    // latest on its next keep-alive write).
    drop(events);
    wait_until_no_stream_is_counted(&h).await;
}

/// Pushes over gRPC: a server's connect, the same snapshot again, a replay and a
/// refused one. Returns the pushing agent.
async fn push_over_grpc(h: &Harness) -> ctxsync_persistence::AgentId {
    let created = h.server.store.create_agent("metrics").await.expect("agent");
    let (agent, token) = (created.id, created.token.into_string());
    let mut client = open_grpc(h).await;
    let startup = Startup {
        version: "test".into(),
        expanded_directory: "/ws".into(),
        agent_run_id: RunId::new("run-1"),
        accepts_tool_calls: false,
    };
    client
        .update_startup(with_bearer(v1::UpdateStartupRequest::from(startup), &token))
        .await
        .expect("startup");
    let mut fs = server("fs", &[("read", "Read a file")]);
    let ResourceBody::McpServer(body) = &mut fs.body else {
        unreachable!("a server row")
    };
    body.timings = Some(McpConnectTimings {
        start_ms: Some(20),
        handshake_ms: 30,
        tools_ms: 10,
    });
    let mut push = async |snapshot: Snapshot| {
        client
            .push_context_state(with_bearer(
                v1::PushContextStateRequest::from(snapshot),
                &token,
            ))
            .await
            .map(|r| r.into_inner().accepted)
    };
    assert!(push(snapshot(1, true, vec![fs.clone()])).await.unwrap());
    // The same server's same connect in a later push of the run is not counted again.
    let second = snapshot(2, false, vec![fs.clone(), file("CLAUDE.md", "hi")]);
    assert!(push(second).await.unwrap());
    assert!(!push(snapshot(2, false, vec![fs.clone()])).await.unwrap());
    let duplicate = snapshot(3, false, vec![fs.clone(), fs.clone()]);
    let refused = push(duplicate).await.expect_err("duplicate sources");
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    agent
}

/// After the pushes, the turn and the open stream: every counter, histogram and gauge
/// moved by exactly what happened.
async fn check_moved_values(h: &Harness) {
    let (text, families) = scrape(h).await;
    assert_families(&text, &families);
    assert_eq!(
        value(&families, "ctxsync_event_streams_open", json!({})),
        1.0,
        "{text}"
    );
    assert_eq!(push_count(&families, "accepted"), 2.0, "{text}");
    assert_eq!(push_count(&families, "dropped_stale_version"), 1.0);
    assert_eq!(push_count(&families, "error"), 1.0, "{text}");
    let pushes = |result: &str| {
        value(
            &families,
            "ctxsync_agent_pushes_total",
            json!({ "result": result }),
        )
    };
    assert_eq!(pushes("accepted"), 2.0);
    assert_eq!(pushes("dropped_stale_version"), 1.0);
    assert_eq!(
        value(
            &families,
            "ctxsync_agent_requests_rejected_total",
            json!({ "reason": "invalid" })
        ),
        1.0
    );
    check_connect_histograms(&text, &families);
    assert!(value(&families, "ctxsync_gate_wait_seconds_count", json!({})) >= 1.0);
    assert!(
        value(
            &families,
            "ctxsync_gate_waits_total",
            json!({ "result": "immediate" })
        ) >= 1.0
    );
    assert_eq!(
        value(
            &families,
            "ctxsync_agents",
            json!({ "phase": "complete", "stale": "false" })
        ),
        1.0,
        "{text}"
    );
}

/// One connect of 60 ms, counted once although two accepted pushes carried it, and its
/// phases each once with their own durations.
fn check_connect_histograms(text: &str, families: &[(String, Family)]) {
    let connect = |sample: &str| {
        value(
            families,
            &format!("ctxsync_mcp_server_connect_duration_seconds_{sample}"),
            json!({}),
        )
    };
    assert_eq!(connect("count"), 1.0, "{text}");
    assert!((connect("sum") - 0.06).abs() < 1e-9, "{text}");
    let in_bucket = |le: &str| {
        value(
            families,
            "ctxsync_mcp_server_connect_duration_seconds_bucket",
            json!({ "le": le }),
        )
    };
    assert_eq!((in_bucket("0.05"), in_bucket("0.1")), (0.0, 1.0));
    for (phase, seconds) in [("start", 0.02), ("handshake", 0.03), ("tools", 0.01)] {
        let labels = json!({ "phase": phase });
        let name = "ctxsync_mcp_server_connect_phase_duration_seconds";
        assert_eq!(
            value(families, &format!("{name}_count"), labels.clone()),
            1.0
        );
        let sum = value(families, &format!("{name}_sum"), labels);
        assert!((sum - seconds).abs() < 1e-9, "{phase}: {sum}");
    }
}

/// Scrapes until no event stream is counted open, failing after 40 seconds.
async fn wait_until_no_stream_is_counted(h: &Harness) {
    ctxsync_test_support::poll(
        "the closed stream to be counted no more (the scrape is the last seen)",
    )
    .within(Duration::from_secs(40))
    .every(Duration::from_millis(200))
    .until(|| async {
        let (text, families) = scrape(h).await;
        let open = value(&families, "ctxsync_event_streams_open", json!({}));
        // The scrape as text, so the timeout shows it line by line.
        if open == 0.0 { Ok(()) } else { Err(Text(text)) }
    })
    .await;
}

/// Shows a scrape as its lines (a `String`'s `Debug` would escape them).
struct Text(String);

impl std::fmt::Debug for Text {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[tokio::test]
async fn metrics_need_the_bearer_token() {
    let h = Harness::start(TestBackend::Sqlite)
        .await
        .expect("SQLite needs no service");
    let response = h.http.get(h.url("/metrics")).send().await.expect("GET");
    assert_eq!(response.status(), 401);
}
