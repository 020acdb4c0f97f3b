//! The tool-call channel over real gRPC on loopback: an agent's `ToolCalls` stream (a
//! generated client playing the agent), the hub sending stored calls down it, and every
//! way a call ends from the server's side: the agent's end, a lost or silent stream, no
//! stream, a cancel, the deadline and a restart.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ctxsync_agent_api::test_support::{serve_agent_api, with_bearer};
use ctxsync_agent_api::{AgentApi, CallHub, CallHubConfig};
use ctxsync_mcp_model::{CallEnd, CallProgress, CallReason, CallStatus};
use ctxsync_persistence::test_support::TestStore;
use ctxsync_persistence::{
    AgentId, CallAdmission, ChatTurnMode, NewToolCall, NewTurn, ToolCallRecord, ToolOrigin,
    TurnOrigin,
};
use ctxsync_protocol::tool_call::{AgentCall, MAX_CALL_RESULT_BYTES, ServerCall};
use ctxsync_protocol::v1::agent_client::AgentClient;
use ctxsync_protocol::{RunId, Startup, v1};
use ctxsync_test_support::TestBackend;
use serde_json::json;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;
use tonic::transport::Channel;

ctxsync_test_support::on_both_backends! {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    open = World::open;
    a_stale_run_cannot_open_the_stream,
    a_dispatched_call_runs_to_the_agents_end,
    a_dropped_stream_ends_its_calls_unknown,
    a_silent_stream_is_lost_and_an_idle_one_hears_heartbeats,
    no_stream_within_the_grace_is_agent_unreachable,
    a_stream_opened_within_the_grace_gets_the_call,
    a_cancel_reaches_the_agent_and_records_its_end,
    a_cancel_the_agent_does_not_answer_is_recorded_by_the_server,
    a_silent_call_times_out_at_its_deadline,
    a_restart_ends_the_old_runs_calls,
    the_request_timeout_does_not_cut_a_long_stream,
    a_result_at_the_wire_cap_decodes,
    a_pruned_turns_call_is_canceled_on_its_stream,
    a_call_taken_on_another_replica_runs_on_the_holders_stream,
    a_replica_whose_lease_was_taken_over_closes_its_stream_and_never_delivers,
    duplicate_calls_split_over_two_replicas_run_once,
    every_replica_sees_whether_the_agent_is_connected,
    a_dead_replicas_agent_is_announced_offline_when_its_lease_lapses,
}

/// Bound on anything that must happen; never waited out when it does.
const DEADLINE: Duration = Duration::from_secs(10);
const RUN: &str = "7d7c1f0e-0b1a-4f43-9a53-8c0a3f6c2b11";
const NEW_RUN: &str = "0b9e0d55-2f6f-4d8c-a0a8-0f3f0c2e6d42";

/// Settings for tests: nothing waits on a production-sized budget.
fn quick() -> CallHubConfig {
    CallHubConfig {
        reconnect_grace: Duration::from_millis(300),
        recheck: Duration::from_secs(5),
        heartbeat: Duration::from_secs(15),
        silence_limit: Duration::from_secs(45),
        deadline_slack: Duration::from_millis(100),
        cancel_wait: Duration::from_secs(5),
        lease: Duration::from_millis(500),
        sign_in: None,
    }
}

struct World {
    db: TestStore,
}

/// `agent`'s turn's call of `fs__read`.
fn read_call(agent: &Agent, call_id: &str, timeout_ms: u64) -> NewToolCall {
    NewToolCall {
        chat: agent.chat,
        turn: agent.turn,
        call_id: call_id.into(),
        name: "fs__read".into(),
        arguments: r#"{"path":"/etc/hostname"}"#.into(),
        timeout_ms,
    }
}

/// [`read_call`] admitted through `store`: running.
async fn start_call(
    store: &ctxsync_persistence::Store,
    agent: &Agent,
    call_id: &str,
    timeout_ms: u64,
) -> ToolCallRecord {
    match store
        .admit_tool_call(&read_call(agent, call_id, timeout_ms))
        .await
        .unwrap()
    {
        Some(CallAdmission::Started(record)) => record,
        other => panic!("admission: {other:?}"),
    }
}

/// A second replica: its own store handle (pool, PostgreSQL listener) and hub on the
/// same database, without an agent API of its own.
struct Replica {
    hub: Arc<CallHub>,
    store: ctxsync_persistence::Store,
}

impl Replica {
    async fn call(&self, agent: &Agent, call_id: &str, timeout_ms: u64) -> ToolCallRecord {
        start_call(&self.store, agent, call_id, timeout_ms).await
    }
}

impl World {
    async fn replica(&self, config: CallHubConfig) -> Replica {
        let store = self.db.open_another().await;
        Replica {
            hub: CallHub::new(store.clone(), config),
            store,
        }
    }

    async fn open(backend: TestBackend) -> Option<Self> {
        let db = match backend {
            TestBackend::Sqlite => TestStore::sqlite().await,
            TestBackend::Postgres => TestStore::postgres().await?,
        };
        Some(Self { db })
    }

    /// The agent API with a hub of `config` on loopback, with the server's request
    /// `timeout` when given (as the binary sets one).
    async fn serve(&self, config: CallHubConfig, timeout: Option<Duration>) -> Served {
        let store = self.db.store().clone();
        let hub = CallHub::new(store.clone(), config);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let api = AgentApi::new(store.clone()).with_calls(Arc::clone(&hub));
        let (shutdown, signal) = oneshot::channel::<()>();
        let mut builder = tonic::transport::Server::builder();
        if let Some(timeout) = timeout {
            builder = builder.timeout(timeout);
        }
        let server = tokio::spawn(async move {
            builder
                .add_service(api.into_server())
                .serve_with_incoming_shutdown(
                    tonic::transport::server::TcpIncoming::from(listener),
                    async {
                        let _ = signal.await;
                    },
                )
                .await
                .expect("serving the agent API");
        });
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .expect("connecting");
        Served {
            hub,
            client: AgentClient::new(channel),
            store,
            _shutdown: shutdown,
            _server: Aborting(server),
        }
    }
}

struct Aborting(tokio::task::JoinHandle<()>);

impl Drop for Aborting {
    fn drop(&mut self) {
        self.0.abort();
    }
}

struct Served {
    hub: Arc<CallHub>,
    client: AgentClient<Channel>,
    store: ctxsync_persistence::Store,
    _shutdown: oneshot::Sender<()>,
    _server: Aborting,
}

/// An agent that takes calls, with a turn listing `fs__read` from its run.
struct Agent {
    id: AgentId,
    token: String,
    chat: ctxsync_persistence::ChatId,
    turn: ctxsync_persistence::TurnId,
}

impl Served {
    async fn agent(&self) -> Agent {
        let created = self.store.create_agent("caller").await.unwrap();
        let token = created.token.into_string();
        self.startup(&token, RUN).await.expect("startup");
        let chat = self.store.create_chat(Some(created.id)).await.unwrap().id;
        let origin = TurnOrigin {
            agent_id: created.id,
            agent_run_id: RunId::new(RUN).unwrap(),
            tools: BTreeMap::from([(
                "fs__read".to_owned(),
                ToolOrigin {
                    server: "fs".into(),
                    tool: "read".into(),
                },
            )]),
        };
        let turn = NewTurn {
            mode: ChatTurnMode::Default,
            outcome: json!({}),
            tools: json!([{ "name": "fs__read" }]),
            origin: Some(origin),
        };
        let turn = self.store.record_turn(chat, &turn).await.unwrap().id;
        Agent {
            id: created.id,
            token,
            chat,
            turn,
        }
    }

    async fn startup(&self, token: &str, run: &str) -> Result<v1::Startup, tonic::Status> {
        let startup = Startup {
            version: "1.0.0".into(),
            expanded_directory: "/workspace".into(),
            agent_run_id: RunId::new(run),
            accepts_tool_calls: true,
        };
        let request = v1::UpdateStartupRequest::from(startup);
        let mut client = self.client.clone();
        client
            .update_startup(with_bearer(request, token))
            .await
            .map(tonic::Response::into_inner)
    }

    /// A running call of `agent`'s turn, stored.
    async fn call(&self, agent: &Agent, call_id: &str, timeout_ms: u64) -> ToolCallRecord {
        start_call(&self.store, agent, call_id, timeout_ms).await
    }

    /// Opens the agent's stream with a hello from `run`.
    async fn open(&self, agent: &Agent, run: &str) -> Result<Stream, tonic::Status> {
        let (tx, rx) = mpsc::channel(16);
        let hello = AgentCall::Hello {
            agent_run_id: RunId::new(run).unwrap(),
        };
        tx.send(hello.into()).await.unwrap();
        let mut client = self.client.clone();
        let response = client
            .tool_calls(with_bearer(ReceiverStream::new(rx), &agent.token))
            .await?;
        Ok(Stream {
            tx,
            rx: response.into_inner(),
        })
    }

    async fn wait(&self, record: &ToolCallRecord) -> ToolCallRecord {
        self.hub
            .wait(record.id, DEADLINE)
            .await
            .unwrap()
            .expect("the call exists")
    }

    async fn stored(&self, record: &ToolCallRecord) -> Option<ToolCallRecord> {
        self.store.get_tool_call_by_id(record.id).await.unwrap()
    }

    fn ended(&self, label: &str) -> u64 {
        let metrics = self.hub.metrics();
        metrics
            .ended
            .iter()
            .find(|(l, _)| *l == label)
            .expect("every label is listed")
            .1
    }

    /// The count of `label` once it reaches `count`: a waiter may read the end from the
    /// store a moment before the replica that recorded it counted it.
    async fn ended_reaches(&self, label: &str, count: u64) -> u64 {
        let started = Instant::now();
        while self.ended(label) < count && started.elapsed() < DEADLINE {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Settled: a second count would show by now too.
        tokio::time::sleep(Duration::from_millis(50)).await;
        self.ended(label)
    }
}

/// The agent's side of one stream.
struct Stream {
    tx: mpsc::Sender<v1::AgentCallMessage>,
    rx: tonic::Streaming<v1::ServerCallMessage>,
}

impl Stream {
    async fn send(&self, call: AgentCall) {
        self.tx.send(call.into()).await.expect("the stream is open");
    }

    /// The next message that is not a heartbeat.
    async fn next(&mut self) -> ServerCall {
        loop {
            match self.next_any().await {
                ServerCall::Heartbeat => continue,
                other => return other,
            }
        }
    }

    async fn next_any(&mut self) -> ServerCall {
        let message = tokio::time::timeout(DEADLINE, self.rx.message())
            .await
            .expect("a message within the deadline")
            .expect("the stream is healthy")
            .expect("the stream is open");
        ServerCall::try_from(message).expect("a valid server message")
    }

    /// Receives `record`'s request and acknowledges it.
    async fn accept(&mut self, record: &ToolCallRecord) {
        match self.next().await {
            ServerCall::Call(request) => assert_eq!(request.id.as_uuid(), record.id.as_uuid()),
            other => panic!("expected the call, got {other:?}"),
        }
        self.send(AgentCall::Accepted { id: record.id }).await;
    }

    /// Whether the server ended the stream (within the deadline).
    async fn closed(&mut self) -> bool {
        loop {
            match tokio::time::timeout(DEADLINE, self.rx.message()).await {
                Err(_) => return false,
                Ok(Ok(Some(_))) => continue,
                Ok(Ok(None) | Err(_)) => return true,
            }
        }
    }
}

fn ended(id: &ToolCallRecord, end: CallEnd, ms: u64) -> AgentCall {
    AgentCall::Ended {
        id: id.id,
        end,
        duration: Duration::from_millis(ms),
    }
}

async fn a_stale_run_cannot_open_the_stream(world: World) {
    let served = world.serve(quick(), None).await;
    let agent = served.agent().await;
    let answer = served.startup(&agent.token, NEW_RUN).await.unwrap();
    assert!(answer.accepts_tool_calls, "a server with a hub says so");
    let error = served.open(&agent, RUN).await.err().expect("refused");
    assert_eq!(error.code(), Code::FailedPrecondition, "{error:?}");
    assert!(
        served.open(&agent, NEW_RUN).await.is_ok(),
        "the current run"
    );

    // A server without a hub does not serve the stream at all.
    let plain = serve_agent_api(world.db.store().clone()).await;
    let mut client = plain.client().await;
    let (tx, rx) = mpsc::channel::<v1::AgentCallMessage>(1);
    drop(tx);
    let error = client
        .tool_calls(with_bearer(ReceiverStream::new(rx), &agent.token))
        .await
        .expect_err("refused");
    assert_eq!(error.code(), Code::Unimplemented, "{error:?}");
}

async fn a_dispatched_call_runs_to_the_agents_end(world: World) {
    let served = world.serve(quick(), None).await;
    let agent = served.agent().await;
    let mut stream = served.open(&agent, RUN).await.unwrap();
    let call = served.call(&agent, "c1", 60_000).await;
    let sent = served.hub.dispatch(&call).await.unwrap();
    assert_eq!(sent.status, CallStatus::Running);
    assert_eq!(served.hub.metrics().in_flight, 1);

    let ServerCall::Call(request) = stream.next().await else {
        panic!("expected the call");
    };
    assert_eq!(request.id.as_uuid(), call.id.as_uuid());
    assert_eq!(request.agent_run_id.as_str(), RUN);
    assert_eq!(
        (request.server.as_str(), request.tool.as_str()),
        ("fs", "read")
    );
    assert_eq!(
        request.arguments.parse().unwrap(),
        *json!({"path": "/etc/hostname"}).as_object().unwrap()
    );
    assert_eq!(request.timeout, Duration::from_secs(60));

    stream.send(AgentCall::Accepted { id: call.id }).await;
    for step in 1..=5 {
        let progress = CallProgress {
            progress: f64::from(step),
            total: Some(5.0),
            message: Some(format!("step {step}")),
        };
        stream
            .send(AgentCall::Progress {
                id: call.id,
                progress,
            })
            .await;
    }
    // Coalesced: the latest lands within a flush, and the arguments went on delivery.
    let started = Instant::now();
    let stored = loop {
        let stored = served.stored(&call).await.unwrap();
        if stored.progress.as_ref().is_some_and(|p| p.progress == 5.0) {
            break stored;
        }
        assert!(started.elapsed() < DEADLINE, "progress never stored");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(stored.delivered);
    assert_eq!(stored.arguments, None, "dropped once delivered");
    assert_eq!(
        (stored.arguments_digest.as_str(), stored.arguments_size),
        (call.arguments_digest.as_str(), call.arguments_size),
        "their digest and size stay"
    );
    assert_eq!(stored.progress.unwrap().message.as_deref(), Some("step 5"));

    // Another agent's stream cannot end this call.
    let other = served.agent().await;
    let intruder = served.open(&other, RUN).await.unwrap();
    intruder
        .send(ended(&call, CallEnd::error(1, "not yours"), 1))
        .await;
    // A call id that is no UUID is refused by the message's conversion, and ignored.
    let mut malformed = v1::AgentCallMessage::from(ended(&call, CallEnd::error(1, "malformed"), 0));
    if let Some(v1::agent_call_message::Kind::Ended(ended)) = &mut malformed.kind {
        ended.id = "not-a-uuid".into();
    }
    intruder.tx.send(malformed).await.unwrap();

    let hub = Arc::clone(&served.hub);
    let id = call.id;
    let waiter = tokio::spawn(async move {
        let started = Instant::now();
        let record = hub.wait(id, Duration::from_secs(60)).await.unwrap();
        (record, started.elapsed())
    });
    let result = json!({"content": [{"type": "text", "text": "host"}], "isError": false});
    stream
        .send(ended(&call, CallEnd::complete(result.clone(), false), 42))
        .await;
    let (record, waited) = waiter.await.unwrap();
    let record = record.expect("the call");
    assert!(
        waited < DEADLINE,
        "woken by the end, not its bound: {waited:?}"
    );
    assert_eq!(record.status, CallStatus::Complete);
    assert_eq!(record.result, Some(result));
    assert_eq!(record.duration_ms, Some(42));

    assert_eq!(served.ended_reaches("complete", 1).await, 1);
    let metrics = served.hub.metrics();
    assert_eq!(metrics.in_flight, 0);
    assert_eq!(metrics.ended.len(), CallStatus::ALL.len());
    assert_eq!(served.ended("error"), 0, "the intruder's end was ignored");
    assert_eq!(metrics.duration_count, 1);
    assert!((metrics.duration_sum - 0.042).abs() < 1e-9);
    let at = |le: f64| {
        metrics
            .duration_buckets
            .iter()
            .find(|b| b.0 == le)
            .unwrap()
            .1
    };
    assert_eq!((at(0.025), at(0.05)), (0, 1));
}

async fn a_dropped_stream_ends_its_calls_unknown(world: World) {
    let served = world.serve(quick(), None).await;
    let agent = served.agent().await;
    let mut stream = served.open(&agent, RUN).await.unwrap();
    let call = served.call(&agent, "c1", 60_000).await;
    served.hub.dispatch(&call).await.unwrap();
    stream.accept(&call).await;

    let started = Instant::now();
    drop(stream);
    let record = served.wait(&call).await;
    assert_eq!(record.status, CallStatus::Unknown);
    assert_eq!(record.reason, Some(CallReason::StreamLost));
    assert!(started.elapsed() < DEADLINE, "{:?}", started.elapsed());
    assert_eq!(served.ended_reaches("unknown", 1).await, 1);
    assert_eq!(served.hub.metrics().in_flight, 0);
}

async fn a_silent_stream_is_lost_and_an_idle_one_hears_heartbeats(world: World) {
    let config = CallHubConfig {
        heartbeat: Duration::from_millis(100),
        silence_limit: Duration::from_millis(600),
        ..quick()
    };
    let served = world.serve(config, None).await;
    let agent = served.agent().await;
    let mut stream = served.open(&agent, RUN).await.unwrap();
    assert_eq!(stream.next_any().await, ServerCall::Heartbeat);
    assert_eq!(stream.next_any().await, ServerCall::Heartbeat);

    let call = served.call(&agent, "c1", 60_000).await;
    served.hub.dispatch(&call).await.unwrap();
    // The agent reads but never says anything after its hello.
    let record = served.wait(&call).await;
    assert_eq!(record.status, CallStatus::Unknown);
    assert_eq!(record.reason, Some(CallReason::StreamLost));
    assert!(stream.closed().await, "the server ended the silent stream");
}

async fn no_stream_within_the_grace_is_agent_unreachable(world: World) {
    let served = world.serve(quick(), None).await;
    let agent = served.agent().await;
    let call = served.call(&agent, "c1", 60_000).await;
    let started = Instant::now();
    let record = served.hub.dispatch(&call).await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(300), "the grace");
    assert_eq!(record.status, CallStatus::Refused);
    assert_eq!(record.reason, Some(CallReason::AgentUnreachable));
    let stored = served.stored(&call).await.expect("recorded");
    assert_eq!(stored.reason, Some(CallReason::AgentUnreachable));
    let waited = served
        .hub
        .wait(call.id, Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(
        waited.map(|r| r.reason),
        Some(Some(CallReason::AgentUnreachable))
    );
    assert_eq!(served.ended_reaches("refused", 1).await, 1);
    assert_eq!(served.hub.metrics().in_flight, 0);

    // The same call id may run again.
    let again = served.call(&agent, "c1", 60_000).await;
    assert_ne!(again.id, call.id);
}

async fn a_stream_opened_within_the_grace_gets_the_call(world: World) {
    let config = CallHubConfig {
        reconnect_grace: Duration::from_secs(5),
        ..quick()
    };
    let served = world.serve(config, None).await;
    let agent = served.agent().await;
    let call = served.call(&agent, "c1", 60_000).await;
    let hub = Arc::clone(&served.hub);
    let pending = call.clone();
    let started = Instant::now();
    let dispatch = tokio::spawn(async move { hub.dispatch(&pending).await.unwrap() });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut stream = served.open(&agent, RUN).await.unwrap();
    stream.accept(&call).await;
    let sent = dispatch.await.unwrap();
    assert_eq!(sent.status, CallStatus::Running);
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "sent on registration, not at the grace's end: {:?}",
        started.elapsed()
    );
}

async fn a_cancel_reaches_the_agent_and_records_its_end(world: World) {
    let served = world.serve(quick(), None).await;
    let agent = served.agent().await;
    let mut stream = served.open(&agent, RUN).await.unwrap();
    let call = served.call(&agent, "c1", 60_000).await;
    served.hub.dispatch(&call).await.unwrap();
    stream.accept(&call).await;

    let hub = Arc::clone(&served.hub);
    let id = call.id;
    let cancel = tokio::spawn(async move { hub.cancel(id).await.unwrap() });
    assert_eq!(stream.next().await, ServerCall::Cancel { id: call.id });
    let canceled = CallEnd {
        status: CallStatus::Canceled,
        reason: None,
        error: None,
        result: None,
        truncated: false,
    };
    stream.send(ended(&call, canceled, 7)).await;
    let record = cancel.await.unwrap().expect("the call");
    assert_eq!(record.status, CallStatus::Canceled);
    assert_eq!(record.duration_ms, Some(7), "the agent's end");

    let again = served.hub.cancel(call.id).await.unwrap().unwrap();
    let stored = served.stored(&call).await.unwrap();
    assert_eq!(again, stored, "an ended call is answered unchanged");
    assert_eq!(
        (again.status, again.duration_ms),
        (record.status, record.duration_ms)
    );
    assert_eq!(served.ended_reaches("canceled", 1).await, 1);
}

async fn a_cancel_the_agent_does_not_answer_is_recorded_by_the_server(world: World) {
    let config = CallHubConfig {
        cancel_wait: Duration::from_millis(200),
        ..quick()
    };
    let served = world.serve(config, None).await;
    let agent = served.agent().await;
    let mut stream = served.open(&agent, RUN).await.unwrap();
    let call = served.call(&agent, "c1", 60_000).await;
    served.hub.dispatch(&call).await.unwrap();
    stream.accept(&call).await;
    let record = served.hub.cancel(call.id).await.unwrap().unwrap();
    assert_eq!(record.status, CallStatus::Canceled);
    assert!(matches!(stream.next().await, ServerCall::Cancel { .. }));
    // The agent's late end changes nothing and is not counted again.
    let late = CallEnd::complete(json!({"content": [], "isError": false}), false);
    stream.send(ended(&call, late, 1)).await;
    let unknown = served.call(&agent, "c2", 60_000).await;
    let cancel_unsent = served.hub.cancel(unknown.id).await.unwrap().unwrap();
    assert_eq!(
        cancel_unsent.status,
        CallStatus::Canceled,
        "never sent: ended here"
    );
    assert_eq!(
        served.stored(&call).await.unwrap().status,
        CallStatus::Canceled
    );
    assert_eq!(served.ended_reaches("canceled", 2).await, 2);
    assert_eq!(served.ended("complete"), 0);
}

async fn a_silent_call_times_out_at_its_deadline(world: World) {
    let served = world.serve(quick(), None).await;
    let agent = served.agent().await;
    let mut stream = served.open(&agent, RUN).await.unwrap();
    let call = served.call(&agent, "c1", 200).await;
    served.hub.dispatch(&call).await.unwrap();
    stream.accept(&call).await;
    let record = served.wait(&call).await;
    assert_eq!(record.status, CallStatus::TimedOut);
    assert!(record.duration_ms.is_some_and(|ms| ms >= 300), "{record:?}");
    assert_eq!(
        stream.next().await,
        ServerCall::Cancel { id: call.id },
        "the agent is told to stop"
    );
    assert_eq!(served.ended_reaches("timed_out", 1).await, 1);
    assert_eq!(served.hub.metrics().in_flight, 0);
}

async fn a_restart_ends_the_old_runs_calls(world: World) {
    let served = world.serve(quick(), None).await;
    let agent = served.agent().await;
    let mut stream = served.open(&agent, RUN).await.unwrap();
    let call = served.call(&agent, "c1", 60_000).await;
    served.hub.dispatch(&call).await.unwrap();
    stream.accept(&call).await;

    served
        .startup(&agent.token, NEW_RUN)
        .await
        .expect("restart");
    let record = served.wait(&call).await;
    assert_eq!(record.status, CallStatus::Unknown);
    assert_eq!(record.reason, Some(CallReason::AgentRestarted));
    assert!(stream.closed().await, "the old run's stream is closed");
    assert_eq!(served.ended_reaches("unknown", 1).await, 1, "counted once");
    assert_eq!(served.hub.metrics().in_flight, 0);
    assert_eq!(
        served.store.running_tool_calls(agent.id).await.unwrap(),
        vec![]
    );
}

/// The binary serves with `Server::builder().timeout(..)`: it bounds a handler until it
/// answers (after the hello), never the stream that follows.
async fn the_request_timeout_does_not_cut_a_long_stream(world: World) {
    let timeout = Duration::from_millis(200);
    let served = world.serve(quick(), Some(timeout)).await;
    let agent = served.agent().await;
    let mut stream = served.open(&agent, RUN).await.unwrap();
    tokio::time::sleep(timeout * 3).await;
    stream.send(AgentCall::Heartbeat).await;
    let call = served.call(&agent, "c1", 60_000).await;
    served.hub.dispatch(&call).await.unwrap();
    stream.accept(&call).await;
    let result = json!({"content": [], "isError": false});
    stream
        .send(ended(&call, CallEnd::complete(result, false), 5))
        .await;
    assert_eq!(served.wait(&call).await.status, CallStatus::Complete);
}

/// The Agent server's one decoding limit lets a call's largest message through.
async fn a_result_at_the_wire_cap_decodes(world: World) {
    let served = world.serve(quick(), None).await;
    let agent = served.agent().await;
    let mut stream = served.open(&agent, RUN).await.unwrap();
    let call = served.call(&agent, "c1", 60_000).await;
    served.hub.dispatch(&call).await.unwrap();
    stream.accept(&call).await;
    let text = "x".repeat(MAX_CALL_RESULT_BYTES - 1024);
    let result = json!({"content": [{"type": "text", "text": text}], "isError": false});
    stream
        .send(ended(&call, CallEnd::complete(result.clone(), true), 5))
        .await;
    let record = served.wait(&call).await;
    assert_eq!(record.status, CallStatus::Complete);
    assert_eq!(record.result, Some(result));
}

/// The store cancels a pruned turn's running calls; the hub forwards the cancel.
async fn a_pruned_turns_call_is_canceled_on_its_stream(world: World) {
    let served = world.serve(quick(), None).await;
    let agent = served.agent().await;
    let mut stream = served.open(&agent, RUN).await.unwrap();
    let call = served.call(&agent, "c1", 60_000).await;
    served.hub.dispatch(&call).await.unwrap();
    stream.accept(&call).await;
    let turn = NewTurn {
        mode: ChatTurnMode::Default,
        outcome: json!({}),
        tools: json!([]),
        origin: None,
    };
    let mut canceled = Vec::new();
    for _ in 0..ctxsync_persistence::MAX_TURNS_PER_CHAT {
        let recorded = served.store.record_turn(agent.chat, &turn).await.unwrap();
        canceled.extend(recorded.canceled_calls);
    }
    assert_eq!(canceled.len(), 1, "the first turn was pruned with its call");
    served.hub.canceled_by_store(&canceled);
    assert_eq!(stream.next().await, ServerCall::Cancel { id: call.id });
    assert_eq!(served.ended("canceled"), 1);
    assert_eq!(served.hub.metrics().in_flight, 0);
}

async fn a_call_taken_on_another_replica_runs_on_the_holders_stream(world: World) {
    let holder = world.serve(quick(), None).await;
    let other = world.replica(quick()).await;
    assert_ne!(holder.hub.replica(), other.hub.replica());
    let agent = holder.agent().await;
    let mut stream = holder.open(&agent, RUN).await.unwrap();

    // Taken, waited for and finished on the replica without the stream.
    let call = other.call(&agent, "c1", 60_000).await;
    let sent = other.hub.dispatch(&call).await.unwrap();
    assert_eq!(sent.status, CallStatus::Running);
    assert!(sent.delivered, "the holder claimed it");
    stream.accept(&call).await;
    assert_eq!(holder.hub.metrics().in_flight, 1, "in flight on the holder");
    let progress = CallProgress {
        progress: 1.0,
        total: Some(2.0),
        message: None,
    };
    stream
        .send(AgentCall::Progress {
            id: call.id,
            progress,
        })
        .await;
    let started = Instant::now();
    loop {
        let seen = other.store.get_tool_call_by_id(call.id).await.unwrap();
        if seen
            .and_then(|r| r.progress)
            .is_some_and(|p| p.progress == 1.0)
        {
            break;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "progress never visible elsewhere"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let hub = Arc::clone(&other.hub);
    let id = call.id;
    let waiter = tokio::spawn(async move { hub.wait(id, DEADLINE).await.unwrap() });
    let result = json!({"content": [{"type": "text", "text": "host"}], "isError": false});
    stream
        .send(ended(&call, CallEnd::complete(result.clone(), false), 7))
        .await;
    let record = waiter.await.unwrap().expect("the call");
    assert_eq!(record.status, CallStatus::Complete);
    assert_eq!(record.result, Some(result));
    assert_eq!(
        holder.ended_reaches("complete", 1).await,
        1,
        "counted by the holder"
    );

    // A cancel on the replica without the stream reaches the agent through the store.
    let second = other.call(&agent, "c2", 60_000).await;
    other.hub.dispatch(&second).await.unwrap();
    stream.accept(&second).await;
    let hub = Arc::clone(&other.hub);
    let id = second.id;
    let cancel = tokio::spawn(async move { hub.cancel(id).await.unwrap() });
    match stream.next().await {
        ServerCall::Cancel { id } => assert_eq!(id.as_uuid(), second.id.as_uuid()),
        other => panic!("expected the cancel, got {other:?}"),
    }
    stream
        .send(ended(&second, CallEnd::bare(CallStatus::Canceled), 3))
        .await;
    let canceled = cancel.await.unwrap().expect("the call");
    assert_eq!(canceled.status, CallStatus::Canceled);
    assert_eq!(
        canceled.duration_ms,
        Some(3),
        "the agent's end, not a fallback"
    );

    // A pending call cancelled before any stream took it ends at once.
    drop(stream);
    let started = Instant::now();
    while holder.hub.metrics().in_flight > 0 || started.elapsed() < Duration::from_millis(50) {
        assert!(started.elapsed() < DEADLINE);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn a_replica_whose_lease_was_taken_over_closes_its_stream_and_never_delivers(world: World) {
    let holder = world.serve(quick(), None).await;
    let other = world.replica(quick()).await;
    let agent = holder.agent().await;
    let mut stream = holder.open(&agent, RUN).await.unwrap();
    let call = other.call(&agent, "c1", 60_000).await;
    other.hub.dispatch(&call).await.unwrap();
    stream.accept(&call).await;

    // Another replica's newer stream for the agent (as after a reconnect through the
    // balancer) fences the holder's: its delivered call ends at once, and the holder
    // closes its stream at its next renewal.
    let newer = world.serve(quick(), None).await;
    let mut moved = newer.open(&agent, RUN).await.unwrap();
    let lost = other.hub.wait(call.id, DEADLINE).await.unwrap().unwrap();
    assert_eq!(
        (lost.status, lost.reason),
        (CallStatus::Unknown, Some(CallReason::StreamLost))
    );
    assert!(stream.closed().await, "the fenced stream was closed");

    // Calls now go to the newer stream only.
    let next = other.call(&agent, "c2", 60_000).await;
    let sent = other.hub.dispatch(&next).await.unwrap();
    assert!(sent.delivered);
    moved.accept(&next).await;
    moved
        .send(ended(
            &next,
            CallEnd::complete(json!({"content": []}), false),
            1,
        ))
        .await;
    let done = other.hub.wait(next.id, DEADLINE).await.unwrap().unwrap();
    assert_eq!(done.status, CallStatus::Complete);
}

async fn duplicate_calls_split_over_two_replicas_run_once(world: World) {
    let holder = world.serve(quick(), None).await;
    let other = world.replica(quick()).await;
    let agent = holder.agent().await;
    let mut stream = holder.open(&agent, RUN).await.unwrap();
    let request = read_call(&agent, "same", 60_000);
    let attempts = (0..10).map(|n| {
        let (store, hub) = if n % 2 == 0 {
            (holder.store.clone(), Arc::clone(&holder.hub))
        } else {
            (other.store.clone(), Arc::clone(&other.hub))
        };
        let request = request.clone();
        tokio::spawn(async move {
            match store.admit_tool_call(&request).await.unwrap().unwrap() {
                CallAdmission::Started(call) => {
                    hub.dispatch(&call).await.unwrap();
                    (true, call.id)
                }
                CallAdmission::Existing(call) => (false, call.id),
                other => panic!("admission: {other:?}"),
            }
        })
    });
    let mut answers = Vec::new();
    for attempt in attempts.collect::<Vec<_>>() {
        answers.push(attempt.await.unwrap());
    }
    assert_eq!(answers.iter().filter(|(started, _)| *started).count(), 1);
    let id = answers[0].1;
    assert!(answers.iter().all(|(_, call)| *call == id), "{answers:?}");
    match stream.next().await {
        ServerCall::Call(call) => assert_eq!(call.id.as_uuid(), id.as_uuid()),
        other => panic!("expected the call, got {other:?}"),
    }
    // Nothing else arrives: the one call was sent once.
    let quiet = tokio::time::timeout(Duration::from_millis(300), stream.next()).await;
    assert!(quiet.is_err(), "a second message: {quiet:?}");
}

/// Issue 49: the stream the hub holds is what "connected" means. The agent's subscribers
/// hear it come online when the stream opens and go offline when it drops, and another
/// replica (its own store handle) reads both, dated by the control plane's clock; a
/// restarted process is `never` until its own stream opens.
async fn every_replica_sees_whether_the_agent_is_connected(world: World) {
    use ctxsync_persistence::{AgentConnection, ChangeEvent};

    let holder = world.serve(quick(), None).await;
    let other = world.replica(quick()).await;
    let agent = holder.agent().await;
    let connection = |store: &ctxsync_persistence::Store| {
        let store = store.clone();
        let id = agent.id;
        async move {
            store
                .read_agent_context(id)
                .await
                .unwrap()
                .expect("the agent")
                .connection
        }
    };
    let mut heard = holder.store.subscribe_agent(agent.id);
    let mut hears = async || {
        let event = tokio::time::timeout(DEADLINE, heard.next())
            .await
            .expect("a change within the deadline")
            .expect("the subscription is open");
        assert!(
            matches!(event, ChangeEvent::AgentContextChanged { agent_id, .. } if agent_id == agent.id)
                || event == ChangeEvent::Resync,
            "{event:?}"
        );
    };
    assert_eq!(connection(&other.store).await, AgentConnection::Never);

    let stream = holder.open(&agent, RUN).await.unwrap();
    hears().await;
    assert_eq!(connection(&other.store).await, AgentConnection::Online);
    assert_eq!(other.store.connected_agents().await.unwrap(), 1);

    let dropped = std::time::SystemTime::now() - Duration::from_secs(1);
    drop(stream);
    hears().await;
    let started = Instant::now();
    let since = loop {
        if let AgentConnection::Offline { since } = connection(&other.store).await {
            break std::time::SystemTime::from(since);
        }
        assert!(started.elapsed() < DEADLINE, "never offline");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        since >= dropped,
        "offline since {since:?}, dropped after {dropped:?}"
    );
    assert_eq!(other.store.connected_agents().await.unwrap(), 0);

    holder
        .startup(&agent.token, NEW_RUN)
        .await
        .expect("restart");
    assert_eq!(connection(&other.store).await, AgentConnection::Never);
    let _stream = holder.open(&agent, NEW_RUN).await.unwrap();
    let started = Instant::now();
    while connection(&other.store).await != AgentConnection::Online {
        assert!(started.elapsed() < DEADLINE, "never online again");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Issue 49: a replica that dies releases nothing. Its stream's lease lapses, and a live
/// replica's keeper wakes the agent's subscribers, which then read it offline since the
/// lease ran out.
async fn a_dead_replicas_agent_is_announced_offline_when_its_lease_lapses(world: World) {
    use ctxsync_persistence::{AgentConnection, ChangeEvent};

    let config = CallHubConfig {
        lease: Duration::from_millis(500),
        ..quick()
    };
    let live = world.serve(config, None).await;
    let agent = live.agent().await;
    let run = RunId::new(RUN).unwrap();
    // The dead replica registered the stream, then stopped renewing it.
    let registered = std::time::SystemTime::now();
    live.store
        .register_call_stream(agent.id, &run, "dead-replica", Duration::from_millis(400))
        .await
        .unwrap()
        .expect("registered");
    let mut heard = live.store.subscribe_agent(agent.id);
    let started = Instant::now();
    let event = tokio::time::timeout(DEADLINE, heard.next())
        .await
        .expect("the keeper announces the lapse within the deadline")
        .expect("the subscription is open");
    assert!(
        matches!(event, ChangeEvent::AgentContextChanged { agent_id, .. } if agent_id == agent.id)
            || event == ChangeEvent::Resync,
        "{event:?}"
    );
    let context = live
        .store
        .read_agent_context(agent.id)
        .await
        .unwrap()
        .unwrap();
    let AgentConnection::Offline { since } = context.connection else {
        panic!("offline once announced: {:?}", context.connection);
    };
    let since = std::time::SystemTime::from(since);
    assert!(
        since >= registered && since <= registered + Duration::from_secs(5),
        "offline since {since:?}, registered at {registered:?}"
    );
    eprintln!(
        "announced {:?} after the stream was registered",
        started.elapsed()
    );
}
