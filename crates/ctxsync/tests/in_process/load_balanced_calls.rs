//! Tool calls across replicas (issue 37), end to end: two `ctxsync server` replicas on one
//! PostgreSQL database, HAProxy in front of both their chat API and their agent API, real
//! agents running the fixture's call tools. A call made on one replica runs on the agent
//! whose stream the other holds, with its result, progress and cancel; duplicates run
//! once; a killed replica or agent ends its calls `unknown` within seconds and the agent
//! moves to the survivor; an idle stream outlives the balancer's idle timeout only
//! because of its heartbeats.
//!
//! Every test prints what it measured (`timing:` lines; see them with `--nocapture`).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use ctxsync_agent_api::test_support::with_bearer;
use ctxsync_mcp_fixture::FixtureConfig;
use ctxsync_protocol::v1::agent_client::AgentClient;
use reqwest::Method;
use serde_json::{Value, json};
use tokio::process::Child;
use tokio_stream::wrappers::ReceiverStream;

use crate::load_balanced::{WAIT, agent_and_chat, open_page, wait_for_chat, workspace};
use crate::support::artifact_dir;
use crate::support::haproxy::{GRPC_IDLE_TIMEOUT, LoadBalanced, REPLICAS, Via, haproxy_available};
use crate::support::webdriver::{Browser, browser_available};

/// The call streams' heartbeat on replicas and agents: well below [`GRPC_IDLE_TIMEOUT`].
const HEARTBEAT_MS: &str = "500";
const REPLICA_FLAGS: &[&str] = &[
    "--discovery-budget-ms",
    "20000",
    "--tool-call-heartbeat-ms",
    HEARTBEAT_MS,
];
/// The replicas' flags with the product's default heartbeat (15 s, above the timeout).
const DEFAULT_HEARTBEAT_REPLICA_FLAGS: &[&str] = &["--discovery-budget-ms", "20000"];
const AGENT_FLAGS: &[&str] = &["--tool-call-heartbeat-ms", HEARTBEAT_MS];
/// The bound on a lost call's `unknown`.
const LOST_WITHIN: Duration = Duration::from_secs(10);
/// The bound on relaying progress to another replica; asserted ten times over.
const PROGRESS_WITHIN: Duration = Duration::from_secs(1);
/// How long a cancel waits for the agent's word before a replica records `canceled`
/// itself (the hub's default): a cancel answered sooner came from the agent.
const CANCEL_WAIT: Duration = Duration::from_secs(5);
/// How long a call waits for its agent's stream when there is none (the hub's default):
/// a call answered sooner found the stream open.
const RECONNECT_GRACE: Duration = Duration::from_secs(5);
/// The fixture's progress tool: one report every this long.
const PROGRESS_INTERVAL: Duration = Duration::from_millis(500);
/// What the agent logs each time its call stream opens.
const STREAM_OPEN: &str = "the tool call stream is open";
const STREAM_FAILED: &str = "the tool call stream failed";
const IN_FLIGHT: &str = "ctxsync_tool_calls_in_flight";

async fn balanced(flags: &[&str]) -> Option<LoadBalanced> {
    if !haproxy_available() {
        return None;
    }
    LoadBalanced::start(flags).await
}

/// An agent running the fixture `calls` (with its call tools), a chat bound to it and a
/// turn listing its tools.
struct Caller {
    chat: String,
    turn: String,
    /// The agent's log's name (see [`LoadBalanced::log`]).
    log: String,
    agent: Child,
    /// The fixture's call log: outside the workspace, whose files the agent watches.
    call_log: PathBuf,
    _call_log_dir: tempfile::TempDir,
    _workspace: tempfile::TempDir,
}

impl Caller {
    /// Starts the agent (gRPC `via`, `extra` flags, its log named `log`) and waits for
    /// its discovery, its open call stream and a turn.
    async fn start(lb: &LoadBalanced, via: Via<'_>, extra: &[&str], log: &str) -> Self {
        let (_, token, chat) = agent_and_chat(lb).await;
        let call_log_dir = tempfile::tempdir().unwrap();
        let call_log = call_log_dir.path().join("calls.jsonl");
        let fixture = FixtureConfig::new().call_tools().call_log(&call_log);
        let workspace = workspace(&[("calls", fixture)]);
        let agent = lb.spawn_agent(via, &token, workspace.path(), extra, log);
        wait_for_chat(lb, &chat, "complete discovery", |c| {
            c["mcp_discovery"]["phase"] == "complete"
        })
        .await;
        let mut caller = Self {
            chat,
            turn: String::new(),
            log: log.to_owned(),
            agent,
            call_log,
            _call_log_dir: call_log_dir,
            _workspace: workspace,
        };
        caller.wait_until_opened(lb, 1).await;
        let turn = lb
            .call(
                Method::POST,
                &format!("/api/chats/{}/turns", caller.chat),
                Some(json!({})),
            )
            .await;
        assert_eq!(turn.status, 200, "{turn:?}");
        let tools = turn.body["tools"].to_string();
        assert!(tools.contains("calls__count"), "{tools}");
        caller.turn = turn.body["turn_id"].as_str().unwrap().to_owned();
        caller
    }

    fn path(&self, call_id: Option<&str>) -> String {
        let base = format!("/api/chats/{}/turns/{}/tool-calls", self.chat, self.turn);
        match call_id {
            Some(id) => format!("{base}/{id}"),
            None => base,
        }
    }

    /// POSTs a call of `name` to the replica `on`.
    async fn post(
        &self,
        lb: &LoadBalanced,
        on: &str,
        call_id: &str,
        name: &str,
        arguments: Value,
        wait_ms: u64,
    ) -> Value {
        let body = json!({
            "call_id": call_id, "name": name, "arguments": arguments, "wait_ms": wait_ms,
        });
        let answer = lb
            .call_on(on, Method::POST, &self.path(None), Some(body))
            .await;
        let expected = if wait_ms == 0 { 202 } else { 200 };
        assert_eq!(answer.status, expected, "{answer:?}\n{}", lb.logs());
        answer.body
    }

    async fn get(&self, lb: &LoadBalanced, on: &str, call_id: &str, wait_ms: u64) -> Value {
        let path = format!("{}?wait_ms={wait_ms}", self.path(Some(call_id)));
        let answer = lb.call_on(on, Method::GET, &path, None).await;
        assert_eq!(answer.status, 200, "{answer:?}");
        answer.body
    }

    async fn delete(&self, lb: &LoadBalanced, on: &str, call_id: &str) -> Value {
        let answer = lb
            .call_on(on, Method::DELETE, &self.path(Some(call_id)), None)
            .await;
        assert_eq!(answer.status, 200, "{answer:?}");
        answer.body
    }

    /// `count` and its answer, made on `on`: it completes.
    async fn count(&self, lb: &LoadBalanced, on: &str, call_id: &str) -> Value {
        let call = self
            .post(lb, on, call_id, "calls__count", json!({}), 20_000)
            .await;
        assert_eq!(call["status"], "complete", "{call:#}\n{}", lb.logs());
        call
    }

    /// Reads `call_id` on `on` (each read waiting up to a second) until it has ended.
    async fn ended(&self, lb: &LoadBalanced, on: &str, call_id: &str) -> Value {
        ctxsync_test_support::poll(format!("call {call_id} to end, read on {on}"))
            .within(WAIT)
            .every(Duration::from_millis(10))
            .explain(|| lb.logs())
            .until(|| async {
                let call = self.get(lb, on, call_id, 1000).await;
                if call["status"] == "running" {
                    Err(call)
                } else {
                    Ok(call)
                }
            })
            .await
    }

    /// How many `event`s of `tool` the fixture logged.
    fn events(&self, tool: &str, event: &str) -> usize {
        std::fs::read_to_string(&self.call_log)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|e| e["tool"] == tool && e["event"] == event)
            .count()
    }

    /// Waits until the fixture logged `count` `event`s of `tool`; answers when it was seen.
    async fn wait_for_event(
        &self,
        lb: &LoadBalanced,
        tool: &str,
        event: &str,
        count: usize,
    ) -> Instant {
        ctxsync_test_support::poll(format!("{count} `{event}` of {tool} in the call log"))
            .within(WAIT)
            .every(Duration::from_millis(10))
            .explain(|| lb.logs())
            .until_true(|| async { self.events(tool, event) >= count })
            .await;
        Instant::now()
    }

    /// How many times the agent's call stream has opened so far.
    fn opened(&self, lb: &LoadBalanced) -> usize {
        lb.log(&self.log).matches(STREAM_OPEN).count()
    }

    async fn wait_until_opened(&self, lb: &LoadBalanced, times: usize) -> Instant {
        ctxsync_test_support::poll(format!("the call stream of {} open {times}×", self.log))
            .within(WAIT)
            .every(Duration::from_millis(10))
            .explain(|| lb.logs())
            .until_true(|| async { self.opened(lb) >= times })
            .await;
        Instant::now()
    }
}

/// The replica whose in-flight gauge shows the one call in flight: the one that
/// delivered it on the agent's stream.
async fn holder(lb: &LoadBalanced) -> &'static str {
    ctxsync_test_support::poll("exactly one replica to hold the call in flight")
        .within(WAIT)
        .every(Duration::from_millis(20))
        .explain(|| lb.logs())
        .until(|| async {
            let mut gauges = Vec::new();
            for name in REPLICAS {
                gauges.push((name, lb.metric(name, IN_FLIGHT).await));
            }
            let holding: Vec<&str> = gauges
                .iter()
                .filter(|(_, gauge)| gauge.is_some_and(|g| g >= 1.0))
                .map(|(name, _)| *name)
                .collect();
            match holding.as_slice() {
                [name] => Ok(*name),
                _ => Err(gauges),
            }
        })
        .await
}

/// Asserts `call` ended `unknown` for one of `reasons`.
fn assert_unknown(call: &Value, reasons: &[&str], lb: &LoadBalanced) {
    assert_eq!(call["status"], "unknown", "{call:#}\n{}", lb.logs());
    let reason = call["reason"].as_str().unwrap_or("");
    assert!(reasons.contains(&reason), "{call:#}");
}

/// Results, progress and cancel of calls made on the replica that does not hold the
/// agent's stream.
async fn across(lb: &LoadBalanced, caller: &Caller, holder: &str, other: &str) {
    // A result, waited for by the POST.
    let counted = caller.count(lb, other, "count-1").await;
    assert_eq!(counted["result"]["content"][0]["text"], "1", "{counted:#}");
    // A result read later with GET.
    let running = caller
        .post(
            lb,
            other,
            "sleep-1",
            "calls__sleep",
            json!({ "ms": 300 }),
            0,
        )
        .await;
    assert_eq!(running["status"], "running", "{running:#}");
    let slept = caller.get(lb, other, "sleep-1", 20_000).await;
    assert_eq!(slept["status"], "complete", "{slept:#}");
    assert_eq!(slept["result"]["content"][0]["text"], "slept 300 ms");

    // Progress: the fixture reports every PROGRESS_INTERVAL from its start, which comes
    // after the POST was sent; so each report's lag, read on the other replica (polled
    // every 10 ms) while the call runs, is at most what is measured from the POST.
    let arguments = json!({ "steps": 40, "interval_ms": PROGRESS_INTERVAL.as_millis() as u64 });
    let started = Instant::now();
    caller
        .post(lb, other, "progress-1", "calls__progress", arguments, 0)
        .await;
    caller.wait_for_event(lb, "progress", "started", 1).await;
    let mut lags = Vec::new();
    for step in 1..=3u32 {
        let seen = ctxsync_test_support::poll(format!("progress {step} read on {other}"))
            .within(WAIT)
            .every(Duration::from_millis(10))
            .explain(|| lb.logs())
            .until(|| async {
                let call = caller.get(lb, other, "progress-1", 0).await;
                assert_eq!(call["status"], "running", "{call:#}");
                match call["progress"]["progress"].as_f64() {
                    Some(p) if p >= f64::from(step) => Ok(Instant::now()),
                    _ => Err(call),
                }
            })
            .await;
        let reported = started + PROGRESS_INTERVAL * step;
        lags.push(seen.saturating_duration_since(reported));
    }
    eprintln!(
        "timing: progress made on {holder}'s stream, read on {other}, lagged at most {lags:?}"
    );
    for lag in &lags {
        assert!(
            *lag < PROGRESS_WITHIN * 10,
            "progress reached {other} {lag:?} after the fixture reported it: {lags:?}"
        );
    }

    // Cancel on the other replica: the MCP tool sees it, and the agent's `canceled`
    // answers the DELETE.
    let asked = Instant::now();
    let canceled = caller.delete(lb, other, "progress-1").await;
    let took = asked.elapsed();
    eprintln!("timing: a cancel made on {other} for {holder}'s stream answered in {took:?}");
    assert_eq!(canceled["status"], "canceled", "{canceled:#}");
    caller.wait_for_event(lb, "progress", "cancelled", 1).await;
    assert!(
        took < CANCEL_WAIT,
        "the cancel took {took:?}: the agent's own `canceled` never came back\n{}",
        lb.logs()
    );
    let read = caller.get(lb, holder, "progress-1", 0).await;
    assert_eq!(read["status"], "canceled", "both replicas read one end");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_progress_and_cancel_cross_replicas_both_ways() {
    // Heavy: one at a time in this binary (see ctxsync-test-support's `heavy`).
    let _heavy = ctxsync_test_support::heavy().await;
    let Some(lb) = balanced(REPLICA_FLAGS).await else {
        return;
    };
    for holder in REPLICAS {
        let log = format!("agent-on-{holder}");
        let caller = Caller::start(&lb, Via::Replica(holder), AGENT_FLAGS, &log).await;
        across(&lb, &caller, holder, LoadBalanced::other(holder)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_posts_on_both_replicas_run_once() {
    // Heavy: one at a time in this binary (see ctxsync-test-support's `heavy`).
    let _heavy = ctxsync_test_support::heavy().await;
    let Some(lb) = balanced(REPLICA_FLAGS).await else {
        return;
    };
    let caller = Caller::start(&lb, Via::Balancer, AGENT_FLAGS, "agent").await;
    // An instant tool (the POSTs race its admission) and a slow one (they race its run).
    for (call_id, tool, name, arguments) in [
        ("dup-count", "count", "calls__count", json!({})),
        ("dup-sleep", "sleep", "calls__sleep", json!({ "ms": 500 })),
    ] {
        let posts = (0..10).map(|i| {
            let on = REPLICAS[i % 2];
            let arguments = arguments.clone();
            let caller = &caller;
            let lb = &lb;
            async move { caller.post(lb, on, call_id, name, arguments, 20_000).await }
        });
        let answers = futures::future::join_all(posts).await;
        for answer in &answers {
            assert_eq!(answer["status"], "complete", "{answer:#}");
            for same in [
                "call_id",
                "started_at",
                "ended_at",
                "result",
                "agent_run_id",
            ] {
                assert_eq!(answer[same], answers[0][same], "{same} differs");
            }
        }
        assert_eq!(
            caller.events(tool, "started"),
            1,
            "ten POSTs of {call_id} over both replicas ran the tool once"
        );
        if tool == "count" {
            assert_eq!(answers[0]["result"]["content"][0]["text"], "1");
        }
    }
}

/// Makes a slow call through the chat API's balancer, kills the replica that delivered
/// it and reads it on the survivor: `unknown` `stream_lost` within [`LOST_WITHIN`]. The
/// MCP tool sees the cancel (the agent stops what a lost stream held), the agent's
/// stream opens again through the balancer and a call made on the survivor completes.
/// Answers the replica killed.
async fn kill_the_holder_mid_call(
    lb: &mut LoadBalanced,
    caller: &Caller,
    call_id: &str,
) -> &'static str {
    let before = caller.events("sleep", "started");
    let body = json!({
        "call_id": call_id, "name": "calls__sleep", "arguments": { "ms": 60_000 }, "wait_ms": 0,
    });
    let posted = lb.call(Method::POST, &caller.path(None), Some(body)).await;
    assert_eq!(posted.status, 202, "{posted:?}");
    caller
        .wait_for_event(lb, "sleep", "started", before + 1)
        .await;
    let victim = holder(lb).await;
    let survivor = LoadBalanced::other(victim);
    let opened = caller.opened(lb);
    let cancelled = caller.events("sleep", "cancelled");

    let killed = Instant::now();
    lb.kill(victim).await;
    let ended = caller.ended(lb, survivor, call_id).await;
    let lost_after = killed.elapsed();
    assert_unknown(&ended, &["stream_lost"], lb);
    caller
        .wait_for_event(lb, "sleep", "cancelled", cancelled + 1)
        .await;
    let reopened_after = caller
        .wait_until_opened(lb, opened + 1)
        .await
        .duration_since(killed);
    eprintln!(
        "timing: replica {victim} killed mid-call: `unknown` read on {survivor} after {lost_after:?}, the agent's stream reopened after {reopened_after:?}"
    );
    assert!(
        lost_after < LOST_WITHIN,
        "`unknown` only after {lost_after:?}"
    );
    let next = caller
        .count(lb, survivor, &format!("{call_id}-after"))
        .await;
    assert!(next["ended_at"].is_string());
    victim
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_replica_ends_the_calls_its_stream_carried_and_the_agent_moves() {
    // Heavy: one at a time in this binary (see ctxsync-test-support's `heavy`).
    let _heavy = ctxsync_test_support::heavy().await;
    let Some(mut lb) = balanced(REPLICA_FLAGS).await else {
        return;
    };
    let caller = Caller::start(&lb, Via::Balancer, AGENT_FLAGS, "agent").await;
    let victim = kill_the_holder_mid_call(&mut lb, &caller, "held").await;
    // The chat API's balancer takes the victim out and sends the next call to the
    // survivor too.
    lb.wait_for_stats("HAProxy to take the killed replica out", |stats| {
        stats.iter().any(|s| s.name == victim && s.status == "DOWN")
    })
    .await;
    let through = lb
        .call(
            Method::POST,
            &caller.path(None),
            Some(json!({ "call_id": "through", "name": "calls__count" })),
        )
        .await;
    assert_eq!(through.status, 200, "{through:?}");
    assert_eq!(through.body["status"], "complete", "{through:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_moves_between_replicas_as_each_is_killed_and_restarted() {
    // Heavy: one at a time in this binary (see ctxsync-test-support's `heavy`).
    let _heavy = ctxsync_test_support::heavy().await;
    let Some(mut lb) = balanced(REPLICA_FLAGS).await else {
        return;
    };
    let caller = Caller::start(&lb, Via::Balancer, AGENT_FLAGS, "agent").await;
    let first = kill_the_holder_mid_call(&mut lb, &caller, "held-1").await;
    lb.restart(first).await;
    // The restarted replica reaches the stream its peer now holds.
    caller.count(&lb, first, "on-restarted").await;
    let second = kill_the_holder_mid_call(&mut lb, &caller, "held-2").await;
    assert_ne!(second, first, "the stream had moved to the survivor");
    lb.restart(second).await;
    for name in REPLICAS {
        caller.count(&lb, name, &format!("last-on-{name}")).await;
    }
}

/// Sends `signal` to `caller`'s agent process.
fn signal_agent(caller: &Caller, signal: nix::sys::signal::Signal) {
    let pid = caller.agent.id().expect("the agent runs");
    let pid = nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap());
    nix::sys::signal::kill(pid, signal).expect("signalling the agent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_survivors_sweep_ends_a_dead_replicas_calls_when_the_agent_cannot_return() {
    // Heavy: one at a time in this binary (see ctxsync-test-support's `heavy`).
    let _heavy = ctxsync_test_support::heavy().await;
    let Some(mut lb) = balanced(REPLICA_FLAGS).await else {
        return;
    };
    let caller = Caller::start(&lb, Via::Balancer, AGENT_FLAGS, "agent").await;
    let body = json!({
        "call_id": "held", "name": "calls__sleep", "arguments": { "ms": 60_000 }, "wait_ms": 0,
    });
    let posted = lb.call(Method::POST, &caller.path(None), Some(body)).await;
    assert_eq!(posted.status, 202, "{posted:?}");
    caller.wait_for_event(&lb, "sleep", "started", 1).await;
    let victim = holder(&lb).await;
    let survivor = LoadBalanced::other(victim);
    let opened = caller.opened(&lb);

    // A frozen agent cannot open a new stream: only the dead replica's lapsed lease tells
    // the survivor that the call is lost. (A kill on drop ends a stopped process too.)
    signal_agent(&caller, nix::sys::signal::Signal::SIGSTOP);
    let killed = Instant::now();
    lb.kill(victim).await;
    let ended = caller.ended(&lb, survivor, "held").await;
    let lost_after = killed.elapsed();
    eprintln!(
        "timing: replica {victim} killed with its agent frozen: `unknown` read on {survivor} after {lost_after:?} (the survivor's sweep)"
    );
    assert_unknown(&ended, &["stream_lost"], &lb);
    assert_eq!(caller.opened(&lb), opened, "the frozen agent reconnected");
    assert!(
        lost_after < LOST_WITHIN,
        "`unknown` only after {lost_after:?}"
    );

    signal_agent(&caller, nix::sys::signal::Signal::SIGCONT);
    caller.wait_until_opened(&lb, opened + 1).await;
    caller.wait_for_event(&lb, "sleep", "cancelled", 1).await;
    caller.count(&lb, survivor, "after-thaw").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_agent_ends_its_call_unknown_on_both_replicas() {
    // Heavy: one at a time in this binary (see ctxsync-test-support's `heavy`).
    let _heavy = ctxsync_test_support::heavy().await;
    let Some(lb) = balanced(REPLICA_FLAGS).await else {
        return;
    };
    let mut caller = Caller::start(&lb, Via::Balancer, AGENT_FLAGS, "agent").await;
    caller
        .post(
            &lb,
            "a",
            "doomed",
            "calls__sleep",
            json!({ "ms": 60_000 }),
            0,
        )
        .await;
    caller.wait_for_event(&lb, "sleep", "started", 1).await;
    let killed = Instant::now();
    caller.agent.kill().await.expect("killing the agent");
    let ended = caller.ended(&lb, "b", "doomed").await;
    let lost_after = killed.elapsed();
    eprintln!("timing: agent killed mid-call: `unknown` read on b after {lost_after:?}");
    assert_unknown(&ended, &["stream_lost", "agent_restarted"], &lb);
    assert!(
        lost_after < LOST_WITHIN,
        "`unknown` only after {lost_after:?}"
    );
    let other = caller.get(&lb, "a", "doomed", 0).await;
    assert_eq!(other["status"], ended["status"]);
    assert_eq!(other["reason"], ended["reason"]);
}

/// Opens a `ToolCalls` stream through the balancer with an agent's token and sends
/// nothing, not even its hello: nothing moves either way (the replica waits 45 s for a
/// hello). Answers how long until the stream failed.
async fn silent_raw_stream(lb: &LoadBalanced, token: &str) -> Duration {
    let channel = tonic::transport::Endpoint::from_shared(lb.grpc_base.clone())
        .unwrap()
        .connect()
        .await
        .expect("the balancer's gRPC frontend accepts");
    let (_quiet, rx) = tokio::sync::mpsc::channel::<ctxsync_protocol::v1::AgentCallMessage>(1);
    let opened = Instant::now();
    let outcome = tokio::time::timeout(
        WAIT,
        AgentClient::new(channel).tool_calls(with_bearer(ReceiverStream::new(rx), token)),
    )
    .await
    .expect("the balancer cuts a silent stream");
    let lived = opened.elapsed();
    // HAProxy's error page (a 504 in HTML) may pass as a response whose body then fails.
    let failure = match outcome {
        Err(status) => status,
        Ok(response) => {
            let headers = format!("{:?}", response.metadata());
            let read = response.into_inner().message().await;
            read.expect_err(&format!("a stream without its hello opened: {headers}"))
        }
    };
    eprintln!("timing: a silent raw stream was cut after {lived:?} ({failure})");
    lived
}

/// Waits twice the balancer's idle timeout, with no call, from now.
async fn idle_for_twice_the_timeout() {
    tokio::time::sleep(GRPC_IDLE_TIMEOUT * 2 + Duration::from_millis(500)).await;
}

/// Asserts that `caller`'s stream opened once and never failed, and that a call made on
/// each replica reaches it at once.
async fn assert_stream_survived(lb: &LoadBalanced, caller: &Caller) {
    let log = lb.log(&caller.log);
    assert_eq!(
        caller.opened(lb),
        1,
        "{}'s stream reopened while idle:\n{log}",
        caller.log
    );
    assert!(!log.contains(STREAM_FAILED), "{log}");
    for on in REPLICAS {
        let asked = Instant::now();
        caller.count(lb, on, &format!("after-idle-{on}")).await;
        let took = asked.elapsed();
        eprintln!(
            "timing: after the idle time, a call on {on} to {} completed in {took:?}",
            caller.log
        );
        assert!(
            took < RECONNECT_GRACE,
            "{took:?}: the call waited for a stream"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_stream_outlives_the_balancers_idle_timeout() {
    // Heavy: one at a time in this binary (see ctxsync-test-support's `heavy`).
    let _heavy = ctxsync_test_support::heavy().await;
    let Some(lb) = balanced(REPLICA_FLAGS).await else {
        return;
    };
    // Both sides beat; and the replicas' beats alone (the agent's default is 15 s).
    let both = Caller::start(&lb, Via::Balancer, AGENT_FLAGS, "agent-beating").await;
    let server_only = Caller::start(&lb, Via::Balancer, &[], "agent-default").await;
    // The control: the timeout is real for a stream with no traffic either way.
    let (_, token, _) = agent_and_chat(&lb).await;
    let lived = silent_raw_stream(&lb, &token).await;
    assert!(
        lived >= GRPC_IDLE_TIMEOUT - Duration::from_millis(200) && lived < GRPC_IDLE_TIMEOUT * 3,
        "HAProxy cut the silent stream after {lived:?}, not its {GRPC_IDLE_TIMEOUT:?}"
    );
    idle_for_twice_the_timeout().await;
    assert_stream_survived(&lb, &both).await;
    assert_stream_survived(&lb, &server_only).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_heartbeats_the_balancer_cuts_the_stream_and_the_agents_own_keep_it() {
    // Heavy: one at a time in this binary (see ctxsync-test-support's `heavy`).
    let _heavy = ctxsync_test_support::heavy().await;
    // The replicas beat every 15 s: only the agent's own heartbeat can keep a stream.
    let Some(lb) = balanced(DEFAULT_HEARTBEAT_REPLICA_FLAGS).await else {
        return;
    };
    let beating = Caller::start(&lb, Via::Balancer, AGENT_FLAGS, "agent-beating").await;
    // The control: an agent with the default heartbeat, above the balancer's timeout.
    let silent = Caller::start(&lb, Via::Balancer, &[], "agent-silent").await;
    silent.wait_until_opened(&lb, 2).await;
    idle_for_twice_the_timeout().await;
    let lifetimes = stream_lifetimes(&lb.log(&silent.log));
    eprintln!("timing: streams without heartbeats lived {lifetimes:?}");
    assert!(
        !lifetimes.is_empty()
            && lifetimes.iter().all(|lived| {
                *lived >= GRPC_IDLE_TIMEOUT - Duration::from_millis(200)
                    && *lived < GRPC_IDLE_TIMEOUT * 3
            }),
        "not cut by the balancer's {GRPC_IDLE_TIMEOUT:?}: {lifetimes:?}\n{}",
        lb.log(&silent.log)
    );
    assert_stream_survived(&lb, &beating).await;
}

/// How long each of the agent's call streams lived before it failed, from its log's
/// timestamps (`2026-01-02T03:04:05.678901Z …`, UTC).
fn stream_lifetimes(log: &str) -> Vec<Duration> {
    let at = |line: &str| -> Option<f64> {
        let clock = line.get(11..26)?;
        let mut parts = clock.split(':');
        let hours: f64 = parts.next()?.parse().ok()?;
        let minutes: f64 = parts.next()?.parse().ok()?;
        let seconds: f64 = parts.next()?.parse().ok()?;
        Some(hours * 3600.0 + minutes * 60.0 + seconds)
    };
    let mut opened = None;
    let mut lifetimes = Vec::new();
    for line in log.lines() {
        if line.contains(STREAM_OPEN) {
            opened = at(line);
        } else if line.contains(STREAM_FAILED)
            && let (Some(start), Some(end)) = (opened.take(), at(line))
            && end >= start
        {
            lifetimes.push(Duration::from_secs_f64(end - start));
        }
    }
    lifetimes
}

/// Waits until the page's call list shows `call_id` with `status`.
async fn wait_for_call_row(browser: &Browser, call_id: &str, status: &str, what: &str) {
    let script = format!(
        "const row = [...document.querySelectorAll('#tool-call-list li.call')]\
           .find(li => li.innerText.includes({id}));\
         return !!row && row.dataset.status === {status};",
        id = serde_json::to_string(call_id).unwrap(),
        status = serde_json::to_string(status).unwrap(),
    );
    browser
        .wait_for(&script, WAIT)
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_a_call_live_from_either_replica() {
    // Heavy: one at a time in this binary (see ctxsync-test-support's `heavy`).
    let _heavy = ctxsync_test_support::heavy().await;
    if !browser_available() {
        return;
    }
    let Some(lb) = balanced(REPLICA_FLAGS).await else {
        return;
    };
    let holder = REPLICAS[0];
    let caller = Caller::start(&lb, Via::Replica(holder), AGENT_FLAGS, "agent-on-a").await;
    // The page and its event stream come through the balancer (on either replica); the
    // calls are made on each replica in turn, so one of them is another replica's.
    let browser = open_page(&lb, &caller.chat).await;
    for (n, on) in REPLICAS.into_iter().enumerate() {
        let call_id = format!("page-{on}");
        let arguments = json!({ "steps": 4, "interval_ms": 400 });
        caller
            .post(&lb, on, &call_id, "calls__progress", arguments, 0)
            .await;
        wait_for_call_row(&browser, &call_id, "running", "the running call appears").await;
        browser
            .wait_for(
                "return !!document.querySelector('#tool-call-list li.call progress.call-progress');",
                WAIT,
            )
            .await
            .expect("a running call has a progress bar");
        if n == 0 {
            browser
                .screenshot(&artifact_dir().join("load-balanced-call-running.png"))
                .await
                .unwrap();
        }
        let ended = caller.ended(&lb, LoadBalanced::other(on), &call_id).await;
        assert_eq!(ended["status"], "complete", "{ended:#}");
        wait_for_call_row(&browser, &call_id, "complete", "the call's end appears").await;
    }
    browser
        .screenshot(&artifact_dir().join("load-balanced-call-complete.png"))
        .await
        .unwrap();
}
