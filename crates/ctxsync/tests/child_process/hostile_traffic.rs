//! Hostile traffic against a real `ctxsync server` process: oversized unauthenticated and
//! authenticated gRPC frames (peak memory from `/proc`), clients that never finish their
//! headers, SIGTERM with an open event stream, and the event-stream caps.
//!
//! Memory is the server's `VmHWM` (peak resident set) before and after; the figures are
//! printed for RELIABILITY.md.

use crate::processes;

use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, Bytes};
use ctxsync_persistence::AgentId;
use ctxsync_persistence::test_support::TestStore;
use ctxsync_protocol::{DiscoveryPhase, RunId, Snapshot, Startup};
use processes::{AgentProcess, Logs, ServerProcess, WAIT, Workspace, wait_for_context};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::Status;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};

/// The attack frame of the issue: 5 million empty `resources` entries (tag 3, length 0),
/// 10 MB on the wire, inside the transport's decoding limit.
fn empty_resources_frame() -> Bytes {
    Bytes::from([0x1a_u8, 0x00].repeat(5_000_000))
}

const PUSH_PATH: &str = "/ctxsync.agent.v1.Agent/PushContextState";

/// Sends pre-encoded message bytes as they are; discards the answer's body.
#[derive(Clone, Copy, Debug, Default)]
struct RawCodec;

impl Codec for RawCodec {
    type Encode = Bytes;
    type Decode = ();
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> Self::Encoder {
        Self
    }

    fn decoder(&mut self) -> Self::Decoder {
        Self
    }
}

impl Encoder for RawCodec {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        buf.put_slice(&item);
        Ok(())
    }
}

impl Decoder for RawCodec {
    type Item = ();
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<()>, Status> {
        let len = buf.remaining();
        buf.advance(len);
        Ok(Some(()))
    }
}

/// One push of `frame` on its own connection, with `token` when given; the status the
/// server answered.
async fn raw_push(url: String, frame: Bytes, token: Option<String>) -> Status {
    let channel = tonic::transport::Endpoint::from_shared(url)
        .expect("endpoint")
        .connect()
        .await
        .expect("connecting to the agent API");
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.expect("the connection is ready");
    let mut request = tonic::Request::new(frame);
    if let Some(token) = token {
        request.metadata_mut().insert(
            "authorization",
            format!("Bearer {token}").parse().expect("header value"),
        );
    }
    match grpc
        .unary::<Bytes, (), _>(
            request,
            tonic::codegen::http::uri::PathAndQuery::from_static(PUSH_PATH),
            RawCodec,
        )
        .await
    {
        Ok(_) => Status::ok("accepted"),
        Err(status) => status,
    }
}

fn peak_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let kib: f64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|value| value.split_whitespace().next()?.parse().ok())
        .expect("VmHWM in /proc status");
    kib / 1024.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthenticated_floods_cost_little_memory_while_a_real_agent_keeps_pushing() {
    let logs = Logs::new();
    let db = TestStore::sqlite().await;
    let server = ServerProcess::start(&db, &logs).await;
    let store = db.store();
    let agent = store.create_agent("under-attack").await.expect("agent");
    let workspace = Workspace::new();
    workspace.write("AGENTS.md", "# Agents\nfirst\n");
    let mut agent_process = AgentProcess::start(
        &logs,
        "agent",
        &server.url(),
        &workspace.path(),
        agent.token.expose(),
        &[],
    );
    wait_for_context(&db, agent.id, &logs, "the first snapshot", |c| {
        c.snapshot.is_some()
    })
    .await;

    let before = peak_mib(server.pid());
    let frame = empty_resources_frame();
    let flood: Vec<_> = (0..20)
        .map(|_| tokio::spawn(raw_push(server.url(), frame.clone(), None)))
        .collect();
    // Meanwhile the agent publishes a change and the server takes it.
    workspace.write("AGENTS.md", "# Agents\nsecond\n");
    wait_for_context(&db, agent.id, &logs, "the push made during the flood", |c| {
        c.resources.iter().any(|r| {
            matches!(&r.body, ctxsync_protocol::ResourceBody::InstructionFile(f) if f.content.contains("second"))
        })
    })
    .await;
    for attack in flood {
        let status = attack.await.expect("flood task");
        assert_eq!(
            status.code(),
            tonic::Code::Unauthenticated,
            "an unauthenticated frame is refused as such: {status:?}"
        );
    }
    let after = peak_mib(server.pid());
    println!(
        "hostile: 20 x 10 MB unauthenticated frames: peak RSS {before:.1} -> {after:.1} MiB (+{:.1})",
        after - before
    );
    assert!(
        after - before < 64.0,
        "peak memory grew by {:.1} MiB (limit 64)",
        after - before
    );
    assert!(agent_process.is_running(), "{}", logs.read("agent"));

    // The same frame with a valid token is refused from its bytes, before decoding.
    let before = peak_mib(server.pid());
    let status = raw_push(server.url(), frame, Some(agent.token.expose().to_owned())).await;
    let after = peak_mib(server.pid());
    println!(
        "hostile: one 10 MB authenticated frame: peak RSS {before:.1} -> {after:.1} MiB (+{:.1}); {status:?}",
        after - before
    );
    assert!(
        matches!(
            status.code(),
            tonic::Code::InvalidArgument | tonic::Code::ResourceExhausted
        ),
        "{status:?}"
    );
    assert!(
        status.message().contains("5000000 entries, at most 1000"),
        "{status:?}"
    );
    assert!(
        after - before < 100.0,
        "peak memory grew by {:.1} MiB (limit 100)",
        after - before
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_never_finish_their_headers_neither_block_others_nor_stay_forever() {
    // Timing-bound: never beside a heavy test (see ctxsync-test-support).
    let _timing = ctxsync_test_support::timing_bound().await;
    let logs = Logs::new();
    let db = TestStore::sqlite().await;
    let server =
        ServerProcess::start_with(&db, &logs, &["--http-header-read-timeout-ms", "1000"]).await;
    let mut stalled = Vec::new();
    for _ in 0..200 {
        let mut tcp = tokio::net::TcpStream::connect(server.http_addr)
            .await
            .expect("connecting");
        tcp.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            .await
            .expect("writing part of a header");
        stalled.push(tcp);
    }
    let started = Instant::now();
    let health = reqwest::Client::new()
        .get(format!("{}/healthz", server.http_url()))
        .timeout(WAIT)
        .send()
        .await
        .expect("healthz answers beside 200 stalled clients");
    let took = started.elapsed();
    println!("hostile: /healthz beside 200 stalled header writers: {took:?}");
    assert!(health.status().is_success());
    assert!(took < Duration::from_secs(10), "{took:?}");

    // The header-read timeout closes every stalled connection.
    for mut tcp in stalled {
        let mut buf = [0u8; 512];
        let closed = tokio::time::timeout(WAIT, async {
            loop {
                match tcp.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        })
        .await;
        assert!(
            closed.is_ok(),
            "a connection that never finished its headers is closed"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_open_event_streams_and_exits_within_the_grace() {
    // Timing-bound: never beside a heavy test (see ctxsync-test-support).
    let _timing = ctxsync_test_support::timing_bound().await;
    let logs = Logs::new();
    let db = TestStore::sqlite().await;
    let token = "hostile-traffic-test-token";
    let mut server = ServerProcess::start_with(
        &db,
        &logs,
        &[
            "--api-token",
            token,
            "--shutdown-grace-ms",
            "2000",
            "--max-event-streams-per-chat",
            "1",
        ],
    )
    .await;
    let client = reqwest::Client::new();
    let agent = db.store().create_agent("watched").await.expect("agent");
    let chat: serde_json::Value = client
        .post(format!("{}/api/chats", server.http_url()))
        .bearer_auth(token)
        .json(&serde_json::json!({ "agent_id": agent.id.to_string() }))
        .send()
        .await
        .expect("create chat")
        .json()
        .await
        .expect("chat JSON");
    let chat = chat["id"].as_str().expect("chat id").to_owned();
    let events = format!("{}/api/chats/{chat}/context/events", server.http_url());
    let mut stream = client
        .get(&events)
        .bearer_auth(token)
        .send()
        .await
        .expect("open the event stream");
    assert!(stream.status().is_success());
    let first = tokio::time::timeout(WAIT, stream.chunk())
        .await
        .expect("a first event")
        .expect("reading the stream");
    assert!(first.is_some_and(|c| String::from_utf8_lossy(&c).contains("panel")));

    // A second stream of the same chat is over its cap of 1.
    let second = client
        .get(&events)
        .bearer_auth(token)
        .send()
        .await
        .expect("a second stream request");
    assert_eq!(second.status(), reqwest::StatusCode::TOO_MANY_REQUESTS);

    let (status, took) = server.terminate().await;
    println!("hostile: SIGTERM with an open event stream: exited in {took:?} ({status})");
    assert!(
        status.success(),
        "exit status {status}: {}",
        logs.read("server")
    );
    assert!(took < Duration::from_secs(20), "{took:?}");
    // The stream ended rather than being left hanging.
    let rest = tokio::time::timeout(WAIT, async {
        while let Ok(Some(_)) = stream.chunk().await {}
    })
    .await;
    assert!(rest.is_ok(), "the event stream ends at shutdown");
}

/// A chat whose agent process has started but not published: its first turn waits in the
/// gate (up to the snapshot grace).
async fn waiting_chat(db: &TestStore, http_url: &str, token: &str) -> (AgentId, String) {
    let agent = db.store().create_agent("slow").await.expect("agent").id;
    db.store()
        .update_startup(
            agent,
            Startup {
                version: "1".into(),
                expanded_directory: "/ws".into(),
                agent_run_id: RunId::new("run-1"),
                accepts_tool_calls: false,
            },
        )
        .await
        .expect("startup");
    let chat: serde_json::Value = reqwest::Client::new()
        .post(format!("{http_url}/api/chats"))
        .bearer_auth(token)
        .json(&serde_json::json!({ "agent_id": agent.to_string() }))
        .send()
        .await
        .expect("create chat")
        .json()
        .await
        .expect("chat JSON");
    (agent, chat["id"].as_str().expect("chat id").to_owned())
}

fn start_turn(
    http_url: &str,
    chat: &str,
    token: &str,
) -> tokio::task::JoinHandle<reqwest::Result<reqwest::Response>> {
    let request = reqwest::Client::new()
        .post(format!("{http_url}/api/chats/{chat}/turns"))
        .bearer_auth(token)
        .json(&serde_json::json!({}));
    tokio::spawn(request.send())
}

const SLOW_GATE: &[&str] = &[
    "--api-token",
    "hostile-traffic-test-token",
    "--snapshot-grace-ms",
    "60000",
    "--http-request-timeout-ms",
    "120000",
    "--gate-recheck-ms",
    "100",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_an_in_flight_turn_finish_and_a_second_signal_exits_at_once() {
    // Timing-bound: never beside a heavy test (see ctxsync-test-support).
    let _timing = ctxsync_test_support::timing_bound().await;
    let token = "hostile-traffic-test-token";
    let logs = Logs::new();
    let db = TestStore::sqlite().await;
    let mut extra = SLOW_GATE.to_vec();
    extra.extend(["--shutdown-grace-ms", "60000"]);
    let mut server = ServerProcess::start_with(&db, &logs, &extra).await;
    let (agent, chat) = waiting_chat(&db, &server.http_url(), token).await;
    let turn = start_turn(&server.http_url(), &chat, token);
    wait_for_waiting_turn(&server).await;
    let pid = nix::unistd::Pid::from_raw(i32::try_from(server.pid()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    wait_for_log_line(&logs, "stopping: draining").await;
    // The agent publishes while the server drains: the waiting turn completes normally.
    let snapshot = Snapshot {
        version: 1,
        aggregate_hash: "h".into(),
        resources: Vec::new(),
        initial: true,
        snapshot_error: None,
        agent_run_id: RunId::new("run-1"),
        phase: DiscoveryPhase::Complete,
        ..Default::default()
    };
    db.store()
        .push_context_state(agent, snapshot)
        .await
        .expect("push");
    let answer = tokio::time::timeout(WAIT, turn)
        .await
        .expect("the turn finishes during the drain")
        .expect("turn task")
        .expect("the turn is answered");
    assert!(answer.status().is_success(), "{}", answer.status());
    let status = server.wait_exit().await;
    println!("hostile: drained an in-flight turn, then exited ({status})");
    assert!(status.success(), "{}", logs.read("server"));

    // A second signal does not wait for a turn that is still waiting.
    let logs = Logs::new();
    let db = TestStore::sqlite().await;
    let mut server = ServerProcess::start_with(&db, &logs, &extra).await;
    let (_, chat) = waiting_chat(&db, &server.http_url(), token).await;
    let _turn = start_turn(&server.http_url(), &chat, token);
    wait_for_waiting_turn(&server).await;
    let pid = nix::unistd::Pid::from_raw(i32::try_from(server.pid()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    wait_for_log_line(&logs, "stopping: draining").await;
    let (status, took) = server.terminate().await;
    println!("hostile: second SIGTERM during a 60 s drain: exited {status} in {took:?}");
    assert!(!status.success(), "a cut drain is not a clean exit");
    assert!(took < Duration::from_secs(20), "{took:?}");
}

/// The turn has reached the gate (the server's gate metrics show a waiting turn).
async fn wait_for_waiting_turn(server: &ServerProcess) {
    let url = format!("{}/metrics", server.http_url());
    let url = url.as_str();
    processes::poll("a waiting turn in the gate metrics")
        .within(WAIT)
        .until(move || async move {
            let metrics = reqwest::Client::new()
                .get(url)
                .bearer_auth("hostile-traffic-test-token")
                .send()
                .await
                .expect("metrics")
                .text()
                .await
                .expect("metrics text");
            let waiting = metrics
                .lines()
                .any(|l| l.starts_with("ctxsync_gate_attempts_waiting ") && !l.ends_with(" 0"));
            if waiting { Ok(()) } else { Err(metrics) }
        })
        .await;
}

async fn wait_for_log_line(logs: &Logs, needle: &str) {
    processes::wait_for_log(logs, "server", needle).await;
}
