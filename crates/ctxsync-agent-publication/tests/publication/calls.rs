//! The agent's call wing against a real in-process tonic server: the `ToolCalls` stream
//! after registration, which calls run and how they end, cancellation, progress,
//! heartbeats, and a lost stream. Calls run through a scripted [`CallRunner`].

use crate::support;

use std::collections::HashSet;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use ctxsync_agent_publication::{
    CallGlob, CallPolicy, CallRunner, ConnectionState, MAX_RUNNING_CALLS, MAX_WAITING_CALLS,
    PublishError, Publisher, ToolCallConfig,
};
use ctxsync_mcp_model::{CallEnd, CallProgress, CallReason, CallSpec, CallStatus, Report};
use ctxsync_protocol::RunId;
use ctxsync_protocol::tool_call::{AgentCall, CallArguments, CallRequest, ServerCall, ToolCallId};
use serde_json::json;
use support::{FakeServer, Recorder, TOKEN, WAIT, Workspace, config};
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// A runner whose tools are scripted by name: `echo` completes at once, `block` waits for
/// [`Script::release`] or its cancellation, `progress` reports three steps then completes,
/// `gone` is not listed.
#[derive(Clone)]
struct Script(Arc<ScriptState>);

struct ScriptState {
    /// Every call the runner started, in order.
    started: watch::Sender<Vec<CallSpec>>,
    /// The `n` argument of each `block` call that saw its cancellation.
    cancelled: watch::Sender<Vec<u64>>,
    release: Semaphore,
}

impl Script {
    fn new() -> Self {
        Self(Arc::new(ScriptState {
            started: watch::channel(Vec::new()).0,
            cancelled: watch::channel(Vec::new()).0,
            release: Semaphore::new(0),
        }))
    }

    fn started(&self) -> Vec<CallSpec> {
        self.0.started.borrow().clone()
    }

    /// Lets `n` blocked calls complete.
    fn release(&self, n: usize) {
        self.0.release.add_permits(n);
    }

    async fn wait_started(&self, n: usize) {
        let mut started = self.0.started.subscribe();
        tokio::time::timeout(WAIT, started.wait_for(|s| s.len() >= n))
            .await
            .unwrap_or_else(|_| panic!("{n} calls never started: {:?}", self.started()))
            .unwrap();
    }

    async fn wait_cancelled(&self, n: u64) {
        let mut cancelled = self.0.cancelled.subscribe();
        tokio::time::timeout(WAIT, cancelled.wait_for(|c| c.contains(&n)))
            .await
            .unwrap_or_else(|_| panic!("call {n} never saw its cancellation"))
            .unwrap();
    }
}

fn result(text: &str) -> serde_json::Value {
    json!({"content": [{"type": "text", "text": text}], "isError": false})
}

impl CallRunner for Script {
    fn lists(&self, _server: &str, tool: &str) -> bool {
        tool != "gone"
    }

    async fn call(
        &self,
        spec: CallSpec,
        progress: mpsc::Sender<CallProgress>,
        cancel: CancellationToken,
    ) -> CallEnd {
        self.0.started.send_modify(|s| s.push(spec.clone()));
        let n = spec
            .arguments
            .get("n")
            .and_then(|n| n.as_u64())
            .unwrap_or(0);
        match spec.tool.as_str() {
            "block" => {
                tokio::select! {
                    () = cancel.cancelled() => {
                        self.0.cancelled.send_modify(|c| c.push(n));
                        CallEnd { status: CallStatus::Canceled, reason: None, error: None, result: None, truncated: false }
                    }
                    permit = self.0.release.acquire() => {
                        permit.unwrap().forget();
                        CallEnd::complete(result("released"), false)
                    }
                }
            }
            "progress" => {
                for step in 1..=3 {
                    let report = CallProgress {
                        progress: f64::from(step),
                        total: Some(3.0),
                        message: Some(format!("step {step}")),
                    };
                    progress.send(report).await.unwrap();
                    // Let the wing relay each report before the next.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                CallEnd::complete(result("done"), false)
            }
            _ => CallEnd::complete(result(&format!("echo {n}")), false),
        }
    }
}

type Running = JoinHandle<Result<Infallible, PublishError>>;

/// A publisher taking calls against a fake server, its stream open.
struct Agent {
    recorder: Arc<Recorder>,
    script: Script,
    run_id: RunId,
    // Held so the publisher, its report source and its server live as long as the test.
    _server: FakeServer,
    _reports: Option<watch::Sender<Arc<Report>>>,
    _ws: Workspace,
    task: Running,
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn calls_config(deny: bool) -> ToolCallConfig {
    ToolCallConfig {
        deny,
        heartbeat: Duration::from_millis(200),
        // The fake server never sends heartbeats of its own.
        silence_limit: Duration::from_secs(600),
        ..ToolCallConfig::default()
    }
}

async fn start(calls: ToolCallConfig) -> Agent {
    let recorder = Recorder::new();
    let server = FakeServer::start(recorder.clone()).await;
    let ws = Workspace::new();
    let (reports, rx) = watch::channel(Arc::new(Report::default()));
    let script = Script::new();
    let publisher = Publisher::new(config(&server.url(), &ws.path()), Some(Box::new(rx)))
        .unwrap()
        .with_tool_calls(script.clone(), calls)
        .unwrap();
    let run_id = publisher.run_id().cloned().unwrap();
    assert!(publisher.startup().accepts_tool_calls);
    let task = tokio::spawn(publisher.run());
    recorder
        .wait_for_agent("Hello", |m| {
            m.iter().any(|(_, m)| matches!(m, AgentCall::Hello { .. }))
        })
        .await;
    Agent {
        recorder,
        script,
        run_id,
        _server: server,
        _reports: Some(reports),
        _ws: ws,
        task,
    }
}

impl Agent {
    fn request(&self, id: &str, tool: &str, n: u64) -> CallRequest {
        CallRequest {
            id: call_id(id),
            agent_run_id: self.run_id.clone(),
            server: "fs".to_owned(),
            tool: tool.to_owned(),
            arguments: CallArguments::new(&json!({ "n": n })).unwrap(),
            timeout: Duration::from_secs(60),
        }
    }

    async fn send(&self, request: CallRequest) {
        self.recorder.send_to_agent(ServerCall::Call(request)).await;
    }

    /// Waits for the end of call `id` and returns it.
    async fn ended(&self, id: &str) -> CallEnd {
        let messages = self
            .recorder
            .wait_for_agent(&format!("the end of {id}"), |m| {
                m.iter().any(|(_, m)| is_end_of(m, id))
            })
            .await;
        messages
            .into_iter()
            .find_map(|(_, m)| match m {
                AgentCall::Ended { id: ended, end, .. } if ended == call_id(id) => Some(end),
                _ => None,
            })
            .unwrap()
    }

    /// The messages about call `id`, in order.
    fn about(&self, id: &str) -> Vec<AgentCall> {
        self.recorder
            .agent_messages()
            .into_iter()
            .map(|(_, m)| m)
            .filter(|m| match m {
                AgentCall::Accepted { id: of }
                | AgentCall::Progress { id: of, .. }
                | AgentCall::Ended { id: of, .. } => *of == call_id(id),
                AgentCall::Hello { .. }
                | AgentCall::Heartbeat
                | AgentCall::SignIn { .. }
                | AgentCall::Credential(_) => false,
            })
            .collect()
    }
}

fn is_end_of(message: &AgentCall, id: &str) -> bool {
    matches!(message, AgentCall::Ended { id: ended, .. } if *ended == call_id(id))
}

/// The call id a test names `name` (at most 16 bytes): its bytes, zero-padded, as a UUID.
fn call_id(name: &str) -> ToolCallId {
    let mut bytes = [0; 16];
    bytes[..name.len()].copy_from_slice(name.as_bytes());
    ToolCallId::from_uuid(uuid::Uuid::from_bytes(bytes))
}

fn refused(reason: CallReason) -> CallEnd {
    CallEnd::with_reason(CallStatus::Refused, reason)
}

fn hellos(messages: &[(usize, AgentCall)]) -> Vec<(usize, RunId)> {
    messages
        .iter()
        .filter_map(|(stream, m)| match m {
            AgentCall::Hello { agent_run_id } => Some((*stream, agent_run_id.clone())),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn the_stream_opens_after_registering_and_says_hello_with_the_run_id() {
    let agent = start(calls_config(false)).await;
    let calls = agent.recorder.calls();
    assert!(calls[0].startup().unwrap().accepts_tool_calls);
    let opened = agent.recorder.streams_opened();
    assert_eq!(opened.len(), 1, "{opened:#?}");
    assert_eq!(opened[0].after_startups, 1, "UpdateStartup comes first");
    assert_eq!(
        opened[0].authorization.as_deref(),
        Some(&*format!("Bearer {TOKEN}"))
    );
    let messages = agent.recorder.agent_messages();
    assert_eq!(
        messages.first(),
        Some(&(
            0,
            AgentCall::Hello {
                agent_run_id: agent.run_id.clone()
            }
        )),
        "Hello is the stream's first message"
    );
}

#[tokio::test]
async fn a_call_is_accepted_then_answered_with_its_end() {
    let agent = start(calls_config(false)).await;
    let mut request = agent.request("c1", "echo", 7);
    request.timeout = Duration::from_secs(30);
    agent.send(request).await;
    assert_eq!(
        agent.ended("c1").await,
        CallEnd::complete(result("echo 7"), false)
    );
    let about = agent.about("c1");
    assert!(
        matches!(
            &about[..],
            [AgentCall::Accepted { .. }, AgentCall::Ended { .. }]
        ),
        "{about:#?}"
    );
    let started = agent.script.started();
    assert_eq!(started.len(), 1);
    let spec = &started[0];
    assert_eq!((spec.server.as_str(), spec.tool.as_str()), ("fs", "echo"));
    assert_eq!(spec.arguments, *json!({"n": 7}).as_object().unwrap());
    assert_eq!(
        spec.max_result_bytes,
        ToolCallConfig::default().max_result_bytes
    );
    assert!(
        spec.timeout <= Duration::from_secs(30) && spec.timeout > Duration::from_secs(20),
        "the deadline counts from receipt: {:?}",
        spec.timeout
    );
}

#[tokio::test]
async fn a_repeated_call_id_runs_once() {
    let agent = start(calls_config(false)).await;
    agent.send(agent.request("dup", "echo", 1)).await;
    agent.ended("dup").await;
    // Again after its end, and twice while one runs.
    agent.send(agent.request("dup", "echo", 1)).await;
    agent.send(agent.request("held", "block", 2)).await;
    agent.send(agent.request("held", "block", 2)).await;
    agent.send(agent.request("marker", "echo", 3)).await;
    agent.ended("marker").await;
    agent.script.release(1);
    agent.ended("held").await;
    assert_eq!(agent.about("dup").len(), 2, "one Accepted, one Ended");
    assert_eq!(agent.about("held").len(), 2, "one Accepted, one Ended");
    let tools: Vec<String> = agent.script.started().into_iter().map(|s| s.tool).collect();
    assert_eq!(tools, ["echo", "block", "echo"]);
}

#[tokio::test]
async fn a_call_for_another_run_is_refused_stale_run_and_never_runs() {
    let agent = start(calls_config(false)).await;
    let mut request = agent.request("old", "echo", 1);
    request.agent_run_id = RunId::new("a-previous-run").unwrap();
    agent.send(request).await;
    assert_eq!(agent.ended("old").await, refused(CallReason::StaleRun));
    assert!(matches!(
        &agent.about("old")[..],
        [AgentCall::Accepted { .. }, AgentCall::Ended { .. }]
    ));
    assert!(agent.script.started().is_empty());
}

#[tokio::test]
async fn no_tool_calls_still_opens_the_stream_and_refuses_denied() {
    let agent = start(calls_config(true)).await;
    let startup = agent.recorder.calls()[0].startup().cloned().unwrap();
    assert!(startup.accepts_tool_calls, "declared, so calls fail fast");
    agent.send(agent.request("c1", "echo", 1)).await;
    assert_eq!(agent.ended("c1").await, refused(CallReason::Denied));
    assert!(agent.script.started().is_empty());
}

#[tokio::test]
async fn a_call_outside_the_allow_list_is_refused_denied_and_never_runs() {
    let globs = ["fs/ec?o", "other/*"].map(|g| CallGlob::parse(g).unwrap());
    let agent = start(ToolCallConfig {
        policy: CallPolicy::allow_only(globs),
        ..calls_config(false)
    })
    .await;
    agent.send(agent.request("allowed", "echo", 1)).await;
    agent.send(agent.request("outside", "block", 2)).await;
    // Refused before the listing is asked: an unlisted tool outside the policy is `denied`.
    agent.send(agent.request("outside-gone", "gone", 3)).await;
    assert_eq!(
        agent.ended("allowed").await,
        CallEnd::complete(result("echo 1"), false)
    );
    assert_eq!(agent.ended("outside").await, refused(CallReason::Denied));
    assert_eq!(
        agent.ended("outside-gone").await,
        refused(CallReason::Denied)
    );
    assert!(matches!(
        &agent.about("outside")[..],
        [AgentCall::Accepted { .. }, AgentCall::Ended { .. }]
    ));
    let tools: Vec<String> = agent.script.started().into_iter().map(|s| s.tool).collect();
    assert_eq!(tools, ["echo"]);
}

#[tokio::test]
async fn a_tool_the_server_no_longer_lists_is_refused_tool_gone() {
    let agent = start(calls_config(false)).await;
    agent.send(agent.request("c1", "gone", 1)).await;
    assert_eq!(agent.ended("c1").await, refused(CallReason::ToolGone));
    assert!(agent.script.started().is_empty());
}

#[tokio::test]
async fn beyond_eight_running_and_thirty_two_waiting_calls_are_refused_busy() {
    let agent = start(calls_config(false)).await;
    let held = MAX_RUNNING_CALLS + MAX_WAITING_CALLS;
    for n in 0..held {
        agent
            .send(agent.request(&format!("c{n}"), "block", n as u64))
            .await;
    }
    agent.send(agent.request("over", "block", 99)).await;
    assert_eq!(agent.ended("over").await, refused(CallReason::Busy));
    agent.script.wait_started(MAX_RUNNING_CALLS).await;
    assert_eq!(agent.script.started().len(), MAX_RUNNING_CALLS);

    agent.script.release(held);
    for n in 0..held {
        assert_eq!(
            agent.ended(&format!("c{n}")).await.status,
            CallStatus::Complete
        );
    }
    // `busy` is not recorded: the same id may run once there is room.
    agent.script.release(1);
    agent.send(agent.request("over", "block", 99)).await;
    let ends: Vec<CallEnd> = agent
        .recorder
        .wait_for_agent("the retried call's end", |m| {
            m.iter().filter(|(_, m)| is_end_of(m, "over")).count() == 2
        })
        .await
        .into_iter()
        .filter_map(|(_, m)| match m {
            AgentCall::Ended { id, end, .. } if id == call_id("over") => Some(end),
            _ => None,
        })
        .collect();
    assert_eq!(ends[1].status, CallStatus::Complete);
}

#[tokio::test]
async fn a_waiting_call_times_out_from_receipt_without_running() {
    let agent = start(calls_config(false)).await;
    for n in 0..MAX_RUNNING_CALLS {
        agent
            .send(agent.request(&format!("c{n}"), "block", n as u64))
            .await;
    }
    agent.script.wait_started(MAX_RUNNING_CALLS).await;
    let mut waiting = agent.request("late", "echo", 1);
    waiting.timeout = Duration::from_millis(100);
    agent.send(waiting).await;
    assert_eq!(agent.ended("late").await.status, CallStatus::TimedOut);
    assert_eq!(agent.script.started().len(), MAX_RUNNING_CALLS);
    agent.script.release(MAX_RUNNING_CALLS);
}

#[tokio::test]
async fn a_cancel_reaches_the_runner_and_the_call_ends_canceled() {
    let agent = start(calls_config(false)).await;
    agent.send(agent.request("c1", "block", 5)).await;
    agent.script.wait_started(1).await;
    agent
        .recorder
        .send_to_agent(ServerCall::Cancel { id: call_id("c1") })
        .await;
    agent.script.wait_cancelled(5).await;
    assert_eq!(agent.ended("c1").await.status, CallStatus::Canceled);
}

#[tokio::test]
async fn progress_is_relayed_before_the_end() {
    let agent = start(calls_config(false)).await;
    agent.send(agent.request("c1", "progress", 1)).await;
    assert_eq!(
        agent.ended("c1").await,
        CallEnd::complete(result("done"), false)
    );
    let about = agent.about("c1");
    let steps: Vec<f64> = about
        .iter()
        .filter_map(|m| match m {
            AgentCall::Progress { progress, .. } => Some(progress.progress),
            _ => None,
        })
        .collect();
    assert_eq!(steps, [1.0, 2.0, 3.0]);
    assert!(matches!(about.last(), Some(AgentCall::Ended { .. })));
    let AgentCall::Progress { progress, .. } = &about[1] else {
        panic!("{about:#?}");
    };
    assert_eq!(progress.total, Some(3.0));
    assert_eq!(progress.message.as_deref(), Some("step 1"));
}

#[tokio::test]
async fn a_lost_stream_cancels_its_calls_and_is_reopened() {
    let agent = start(calls_config(false)).await;
    agent.send(agent.request("c1", "block", 1)).await;
    agent.script.wait_started(1).await;
    agent.recorder.end_call_stream();
    agent.script.wait_cancelled(1).await;
    let messages = agent
        .recorder
        .wait_for_agent("a second Hello", |m| hellos(m).len() == 2)
        .await;
    assert_eq!(
        hellos(&messages),
        [(0, agent.run_id.clone()), (1, agent.run_id.clone())]
    );
    assert_eq!(agent.recorder.streams_opened().len(), 2);
    // The cancelled call is never run again, and the new stream takes new calls.
    agent.send(agent.request("c1", "block", 1)).await;
    agent.send(agent.request("c2", "echo", 2)).await;
    assert_eq!(agent.ended("c2").await.status, CallStatus::Complete);
    let tools: Vec<String> = agent.script.started().into_iter().map(|s| s.tool).collect();
    assert_eq!(tools, ["block", "echo"]);
}

#[tokio::test]
async fn heartbeats_go_out_while_the_stream_is_idle() {
    let agent = start(ToolCallConfig {
        heartbeat: Duration::from_millis(20),
        ..calls_config(false)
    })
    .await;
    let messages = agent
        .recorder
        .wait_for_agent("three heartbeats", |m| {
            m.iter()
                .filter(|(_, m)| matches!(m, AgentCall::Heartbeat))
                .count()
                >= 3
        })
        .await;
    let streams: HashSet<usize> = messages.iter().map(|(stream, _)| *stream).collect();
    assert_eq!(streams, HashSet::from([0]), "all on the first stream");
}

#[tokio::test]
async fn a_silent_server_loses_the_stream_and_it_is_reopened() {
    let agent = start(ToolCallConfig {
        heartbeat: Duration::from_millis(20),
        silence_limit: Duration::from_millis(300),
        ..calls_config(false)
    })
    .await;
    agent.send(agent.request("c1", "block", 1)).await;
    agent.script.wait_started(1).await;
    agent.script.wait_cancelled(1).await;
    agent
        .recorder
        .wait_for_agent("a second Hello", |m| hellos(m).len() >= 2)
        .await;
}

#[test]
fn a_result_cap_out_of_bounds_is_refused_naming_the_flag() {
    let ws = Workspace::new();
    let (_reports, rx) = watch::channel(Arc::new(Report::default()));
    let publisher =
        Publisher::new(config("http://127.0.0.1:1", &ws.path()), Some(Box::new(rx))).unwrap();
    let error = publisher
        .with_tool_calls(
            Script::new(),
            ToolCallConfig {
                max_result_bytes: 10,
                ..ToolCallConfig::default()
            },
        )
        .unwrap_err()
        .to_string();
    assert!(error.contains("--tool-result-max-bytes"), "{error}");
}

#[test]
fn without_a_run_id_nothing_is_declared() {
    let ws = Workspace::new();
    let publisher = Publisher::new(config("http://127.0.0.1:1", &ws.path()), None)
        .unwrap()
        .with_tool_calls(Script::new(), ToolCallConfig::default())
        .unwrap();
    assert!(!publisher.startup().accepts_tool_calls);
}

/// The fixture's call log events for `tool`, in order.
fn logged(log: &std::path::Path, tool: &str) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|line| line["tool"] == tool)
        .filter_map(|line| line["event"].as_str().map(str::to_owned))
        .collect()
}

/// The engine's tool caller as this crate's runner, as the agent's binary wires it.
#[derive(Clone)]
struct EngineCaller(ctxsync_agent_diagnostics::ToolCaller);

impl CallRunner for EngineCaller {
    fn lists(&self, server: &str, tool: &str) -> bool {
        self.0.lists(server, tool)
    }

    async fn call(
        &self,
        spec: CallSpec,
        progress: mpsc::Sender<CallProgress>,
        cancel: CancellationToken,
    ) -> CallEnd {
        self.0.call(spec, progress, cancel).await
    }
}

#[tokio::test]
async fn calls_run_through_a_real_engine_capped_and_cancellable() {
    use ctxsync_agent_diagnostics::{Engine, EngineConfig, RetryPolicy};
    use ctxsync_mcp_fixture::FixtureConfig;
    use ctxsync_protocol::v1::push_context_state_request::mcp_discovery::Phase;

    let recorder = Recorder::new();
    let server = FakeServer::start(recorder.clone()).await;
    let ws = Workspace::new();
    let log = ws.file("calls.jsonl");
    let fixture = FixtureConfig::new().tools(0).call_tools().call_log(&log);
    let command = ctxsync_mcp_fixture::binary_path().expect("the fixture binary");
    let servers = json!({"mcpServers": {"s": {"command": command, "args": fixture.to_args()}}});
    ws.write(".mcp.json", servers.to_string());
    let mut engine_config = EngineConfig::new(ws.path());
    engine_config.connect_timeout = Duration::from_secs(10);
    engine_config.retry = RetryPolicy {
        enabled: false,
        ..RetryPolicy::default()
    };
    let engine = Engine::start(engine_config);
    let publisher = Publisher::new(
        config(&server.url(), &ws.path()),
        Some(Box::new(engine.subscribe())),
    )
    .unwrap()
    .with_tool_calls(
        EngineCaller(engine.caller()),
        ToolCallConfig {
            max_result_bytes: 2048,
            ..calls_config(false)
        },
    )
    .unwrap();
    let run_id = publisher.run_id().cloned().unwrap();
    let running = tokio::spawn(publisher.run());
    recorder
        .wait_for_push("a complete push", |p| {
            p.mcp_discovery
                .as_ref()
                .is_some_and(|d| d.phase == Phase::Complete as i32)
        })
        .await;
    let agent = Agent {
        recorder,
        script: Script::new(),
        run_id,
        _server: server,
        _reports: None,
        _ws: ws,
        task: running,
    };

    let mut sized = agent.request("big", "sized_result", 0);
    sized.server = "s".into();
    sized.arguments = CallArguments::new(&json!({"bytes": 100_000})).unwrap();
    agent.send(sized).await;
    let end = agent.ended("big").await;
    assert_eq!(end.status, CallStatus::Complete, "{end:?}");
    assert!(end.truncated);
    assert!(serde_json::to_vec(&end.result.unwrap()).unwrap().len() <= 2048);

    let mut sleep = agent.request("slow", "sleep", 0);
    sleep.server = "s".into();
    sleep.arguments = CallArguments::new(&json!({"ms": 600_000})).unwrap();
    agent.send(sleep).await;
    tokio::time::timeout(WAIT, async {
        while !logged(&log, "sleep").contains(&"started".to_owned()) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the sleep call reached the fixture");
    agent
        .recorder
        .send_to_agent(ServerCall::Cancel {
            id: call_id("slow"),
        })
        .await;
    assert_eq!(agent.ended("slow").await.status, CallStatus::Canceled);
    tokio::time::timeout(WAIT, async {
        while !logged(&log, "sleep").contains(&"cancelled".to_owned()) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the cancel reached the fixture");

    let mut gone = agent.request("gone", "no_such_tool", 0);
    gone.server = "s".into();
    agent.send(gone).await;
    assert_eq!(agent.ended("gone").await, refused(CallReason::ToolGone));
    drop(agent);
    engine.close().await;
}

#[tokio::test]
async fn a_server_without_tool_calls_leaves_pushes_alone_and_is_not_asked_again() {
    let recorder = Recorder::new();
    recorder.refuse_call_streams();
    let server = FakeServer::start(recorder.clone()).await;
    let ws = Workspace::new();
    let (_reports, rx) = watch::channel(Arc::new(Report::default()));
    let publisher = Publisher::new(config(&server.url(), &ws.path()), Some(Box::new(rx)))
        .unwrap()
        .with_tool_calls(Script::new(), calls_config(false))
        .unwrap();
    let status = publisher.status();
    let running = tokio::spawn(publisher.run());
    recorder.wait_for_pushes(1).await;
    let attempts = || recorder.call_stream_attempts();
    tokio::time::timeout(WAIT, async {
        while attempts() == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the agent asked for the stream");
    // Several backoff cycles of the test timing (at most 80 ms each).
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(attempts(), 1, "not asked again on the same connection");
    let status = status.borrow().clone();
    assert_eq!(status.connection, ConnectionState::Ready, "{status:?}");
    assert_eq!(status.last_push, Some((status.published_version, true)));
    assert!(!running.is_finished());
    running.abort();
}
