//! The cross-replica rows of `bench_tool_calls` (issue 37): two `ctxsync server`
//! processes (the release binary, so each one's CPU and memory can be read from `/proc`)
//! on one fresh PostgreSQL database.
//!
//! 1. *Latency*: a real `ctxsync agent` child connected to replica A only; the same
//!    `count` calls POSTed alternately to B (cross-replica: claimed and sent by A, the end
//!    reaching B's waiter by NOTIFY) and to A (the holder itself, for reference).
//! 2. *Memory*: 64 concurrent calls each answered with 256 KiB of text, every agent's
//!    stream on A and every call POSTed to B; each replica's `VmRSS` sampled during,
//!    against its own baseline after warm-up calls with small results.
//! 3. *Throughput*: 100 simulated agents (generated gRPC clients answering each call at
//!    once, streams alternating between A and B) and 400 callers in a closed loop, half
//!    POSTing to the replica holding their agent's stream and half to the other one.

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use ctxsync_agent_api::test_support::with_bearer;
use ctxsync_mcp_model::CallEnd;
use ctxsync_persistence::test_support::TestDatabase;
use ctxsync_protocol::tool_call::{AgentCall, ServerCall};
use ctxsync_protocol::{DiscoveryPhase, RunId, Snapshot, Startup, v1};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::API_TOKEN;
use crate::support::{
    ServerProcess, machine_cpu_ticks, percentile_ms, process_cpu_seconds, raise_open_files_limit,
    status_kib,
};
use ctxsync_test_support::{bench_row, bench_row_against};

const SIM_AGENTS: usize = 100;
const CALLERS: usize = 400;
const MEMORY_CALLS: usize = 64;
const RESULT_BYTES: usize = 256 * 1024;
/// Issue 37's targets.
const ADDED_P50_MS: f64 = 10.0;
const ADDED_P99_MS: f64 = 40.0;
const FLOOR_CALLS_PER_S: f64 = 300.0;
const MEMORY_BUDGET_MIB: f64 = 128.0;
/// Every call waits for its end in its request; a 202 counts as an error.
const WAIT_MS: u64 = 30_000;
/// Bound on one request, so a lost answer shows as an error rather than a hang.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(45);
/// A turn holds at most 256 calls: callers move to a new one well before.
const CALLS_PER_TURN: usize = 200;
/// Setup requests in flight at once (agents, chats, turns): not measured.
const SETUP_CONCURRENCY: usize = 16;
const READY_DEADLINE: Duration = Duration::from_secs(60);
const RSS_SAMPLE: Duration = Duration::from_millis(5);

/// What the rest of the run measured directly, for the added-latency rows.
pub(crate) struct Direct {
    pub p50: f64,
    pub p99: f64,
}

/// Runs the three parts on two fresh replicas; `calls` sequential calls per side in the
/// latency part, shorter windows with `quick`.
pub(crate) async fn run(ctxsync: &Path, quick: bool, calls: usize, direct: Direct) -> Result<()> {
    let Some(database) = tokio::task::spawn_blocking(TestDatabase::create).await? else {
        eprintln!("bench_tool_calls: PostgreSQL unavailable, the replica rows skipped");
        return Ok(());
    };
    // 400 callers, 100 agent connections and the replicas' own sockets.
    raise_open_files_limit();
    let data = tempfile::tempdir()?;
    let flags = ["--api-token", API_TOKEN];
    let a = ServerProcess::start(ctxsync, database.url(), &data.path().join("a"), &flags).await?;
    let b = ServerProcess::start(ctxsync, database.url(), &data.path().join("b"), &flags).await?;
    eprintln!(
        "bench_tool_calls: replica A (pid {}), replica B (pid {}) on one PostgreSQL database",
        a.pid, b.pid
    );
    let http = reqwest::Client::builder()
        .timeout(REQUEST_TIMEOUT)
        .build()?;
    let replicas = [Replica::new(&a, &http, "A"), Replica::new(&b, &http, "B")];

    latency(ctxsync, &replicas, calls, &direct).await?;

    let agents = start_sim_agents(&replicas).await?;
    let rounds = if quick { 2 } else { 5 };
    memory(&replicas, &agents, rounds).await?;
    let (warmup, window) = if quick {
        (Duration::from_secs(1), Duration::from_secs(3))
    } else {
        (Duration::from_secs(2), Duration::from_secs(10))
    };
    throughput(&replicas, &agents, &database, warmup, window).await?;

    drop(agents);
    a.stop().await?;
    b.stop().await?;
    Ok(())
}

/// One replica as the bench reaches it.
#[derive(Clone)]
struct Replica {
    name: &'static str,
    pid: u32,
    agent_url: String,
    http_url: String,
    http: reqwest::Client,
}

impl Replica {
    fn new(server: &ServerProcess, http: &reqwest::Client, name: &'static str) -> Self {
        Self {
            name,
            pid: server.pid,
            agent_url: server.agent_url.clone(),
            http_url: server.http_url.clone(),
            http: http.clone(),
        }
    }

    /// A chat-API request that must succeed, answered as JSON.
    async fn api(&self, path: &str, body: Value) -> Result<Value> {
        let response = self
            .http
            .post(format!("{}{path}", self.http_url))
            .bearer_auth(API_TOKEN)
            .json(&body)
            .send()
            .await
            .with_context(|| format!("POST {path} on {}", self.name))?;
        let status = response.status();
        let body: Value = response.json().await?;
        ensure!(status.is_success(), "POST {path}: {status}: {body}");
        Ok(body)
    }

    /// A new agent: (id, token).
    async fn create_agent(&self, name: &str) -> Result<(String, String)> {
        let agent = self.api("/api/agents", json!({ "name": name })).await?;
        let id = agent["id"].as_str().context("the agent's id")?;
        let token = agent["token"].as_str().context("the agent's token")?;
        Ok((id.to_owned(), token.to_owned()))
    }

    async fn create_chat(&self, agent: &str) -> Result<String> {
        let chat = self.api("/api/chats", json!({ "agent_id": agent })).await?;
        Ok(chat["id"].as_str().context("the chat's id")?.to_owned())
    }

    /// A new turn of `chat` and the model-facing name of the `count` tool it lists, if it
    /// lists one.
    async fn create_turn(&self, chat: &str) -> Result<(String, Option<String>)> {
        let turn = self
            .api(&format!("/api/chats/{chat}/turns"), json!({}))
            .await?;
        let id = turn["turn_id"].as_str().context("a stored turn")?;
        Ok((id.to_owned(), count_tool(&turn["tools"])))
    }
}

/// The first `name` in `tools` (whatever its nesting) that names a `count` tool.
fn count_tool(tools: &Value) -> Option<String> {
    match tools {
        Value::Array(items) => items.iter().find_map(count_tool),
        Value::Object(map) => map
            .get("name")
            .and_then(Value::as_str)
            .filter(|name| name.ends_with("__count"))
            .map(str::to_owned)
            .or_else(|| map.values().find_map(count_tool)),
        _ => None,
    }
}

/// One conversation calling tools: a chat bound to an agent, on the replica its requests
/// go to.
struct Caller {
    replica: Replica,
    chat: String,
    turn: String,
    tool: String,
    in_turn: usize,
    next_id: usize,
    /// Whether the agent's stream is on the other replica.
    cross: bool,
}

impl Caller {
    async fn new(replica: &Replica, agent: &str, cross: bool) -> Result<Self> {
        let chat = replica.create_chat(agent).await?;
        let (turn, tool) = replica.create_turn(&chat).await?;
        Ok(Self {
            replica: replica.clone(),
            chat,
            turn,
            tool: tool.context("the turn lists no count tool")?,
            in_turn: 0,
            next_id: 0,
            cross,
        })
    }

    /// One call waited for to its end: its answer when it is `200` and `complete`, else
    /// why not (an error of the run).
    async fn call(&mut self, arguments: Value) -> Result<Value, String> {
        if self.in_turn == CALLS_PER_TURN {
            let (turn, _) = self
                .replica
                .create_turn(&self.chat)
                .await
                .map_err(|e| format!("a new turn: {e:#}"))?;
            (self.turn, self.in_turn) = (turn, 0);
        }
        self.in_turn += 1;
        self.next_id += 1;
        let url = format!(
            "{}/api/chats/{}/turns/{}/tool-calls",
            self.replica.http_url, self.chat, self.turn
        );
        let request = json!({
            "call_id": format!("call-{}", self.next_id),
            "name": self.tool,
            "arguments": arguments,
            "wait_ms": WAIT_MS,
        });
        let response = self
            .replica
            .http
            .post(url)
            .bearer_auth(API_TOKEN)
            .json(&request)
            .send()
            .await
            .map_err(|e| format!("request: {e}"))?;
        let status = response.status();
        let body: Value = response
            .json()
            .await
            .map_err(|e| format!("{status}, body: {e}"))?;
        if status != reqwest::StatusCode::OK || body["status"] != "complete" {
            return Err(format!(
                "{status}: status {} reason {} error {} message {}",
                body["status"], body["reason"], body["error"], body["message"]
            ));
        }
        Ok(body)
    }
}

/// Part 1: a real agent on A; sequential calls alternately through B and A.
async fn latency(
    ctxsync: &Path,
    replicas: &[Replica; 2],
    calls: usize,
    direct: &Direct,
) -> Result<()> {
    let [a, b] = replicas;
    let (agent, token) = a.create_agent("bench-tool-calls-real").await?;
    let workspace = tempfile::tempdir()?;
    std::fs::write(
        workspace.path().join(".mcp.json"),
        json!({"mcpServers": {"calls": {"command": ctxsync, "args": ["mcp-fixture", "--call-tools"]}}})
            .to_string(),
    )?;
    let mut child = tokio::process::Command::new(ctxsync)
        .args(["agent", "--server", &a.agent_url, "--workspace"])
        .arg(workspace.path())
        .env("CTXSYNC_AGENT_TOKEN", &token)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .context("starting ctxsync agent")?;
    // Turns are built on B; it lists `count` once the agent's discovery (through A) is in.
    let chat = b.create_chat(&agent).await?;
    let deadline = Instant::now() + READY_DEADLINE;
    let (turn, tool) = loop {
        if let (turn, Some(tool)) = b.create_turn(&chat).await? {
            break (turn, tool);
        }
        ensure!(
            Instant::now() < deadline,
            "the agent's tools never reached B"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut sides = [
        Caller {
            replica: b.clone(),
            chat: chat.clone(),
            turn: turn.clone(),
            tool: tool.clone(),
            in_turn: 0,
            next_id: 0,
            cross: true,
        },
        Caller {
            replica: a.clone(),
            chat,
            turn,
            tool,
            in_turn: 0,
            next_id: 1_000_000,
            cross: false,
        },
    ];
    // Both sides share the turn: each counts half of it.
    for side in &mut sides {
        side.in_turn = CALLS_PER_TURN / 2;
    }
    let mut samples = [Vec::with_capacity(calls), Vec::with_capacity(calls)];
    for i in 0..super::WARMUP + calls {
        if i % (CALLS_PER_TURN / 2) == 0 {
            let (turn, _) = b.create_turn(&sides[0].chat).await?;
            for side in &mut sides {
                (side.turn, side.in_turn) = (turn.clone(), 0);
            }
        }
        for (side, samples) in sides.iter_mut().zip(&mut samples) {
            let started = Instant::now();
            let answer = side.call(json!({})).await;
            let elapsed = started.elapsed();
            if let Err(error) = answer {
                bail!("call {i} through {}: {error}", side.replica.name);
            }
            if i >= super::WARMUP {
                samples.push(elapsed);
            }
        }
    }
    child.kill().await.ok();
    report_latency(&samples[0], &samples[1], direct, calls);
    Ok(())
}

fn report_latency(cross: &[Duration], same: &[Duration], direct: &Direct, calls: usize) {
    let stem = "tool_call.replicas";
    let reference = "reference: the direct rmcp client's figure";
    let (same_p50, same_p99) = (percentile_ms(same, 50.0), percentile_ms(same, 99.0));
    let (cross_p50, cross_p99) = (percentile_ms(cross, 50.0), percentile_ms(cross, 99.0));
    eprintln!(
        "bench_tool_calls: two replicas, agent on A: through B p50 {cross_p50:.3} ms, p99 \
         {cross_p99:.3} ms; through A p50 {same_p50:.3} ms, p99 {same_p99:.3} ms"
    );
    for (label, value, direct) in [("p50", same_p50, direct.p50), ("p99", same_p99, direct.p99)] {
        bench_row_against(
            &format!("{stem}.holder_replica.{label} ({calls} calls POSTed to A, the agent's)"),
            value,
            "ms",
            Some(direct),
            Some(reference),
            None,
        );
    }
    for (label, value, direct, target) in [
        ("p50", cross_p50, direct.p50, ADDED_P50_MS),
        ("p99", cross_p99, direct.p99, ADDED_P99_MS),
    ] {
        bench_row_against(
            &format!("{stem}.other_replica.{label} ({calls} calls POSTed to B, agent on A)"),
            value,
            "ms",
            Some(direct),
            Some(reference),
            None,
        );
        let added = value - direct;
        bench_row(
            &format!("{stem}.other_replica.added_{label}"),
            added,
            "ms",
            None,
            None,
            Some(&format!("added {label} <= {target} ms")),
            Some(added <= target),
        );
    }
}

/// A simulated agent: its call stream is open on `replica` and answered by a task.
struct SimAgent {
    id: String,
    replica: usize,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for SimAgent {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `SIM_AGENTS` simulated agents, agent `i`'s stream on replica `i % 2`.
async fn start_sim_agents(replicas: &[Replica; 2]) -> Result<Vec<SimAgent>> {
    let started = Instant::now();
    let agents: Vec<Result<SimAgent>> = futures::stream::iter(0..SIM_AGENTS)
        .map(|i| sim_agent(&replicas[i % 2], i))
        .buffered(SETUP_CONCURRENCY)
        .collect()
        .await;
    let agents = agents.into_iter().collect::<Result<Vec<_>>>()?;
    eprintln!(
        "bench_tool_calls: {SIM_AGENTS} simulated agents connected in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(agents)
}

/// The snapshot a simulated agent publishes: one server `sim` with a `count` tool.
fn sim_snapshot(run: &str) -> Snapshot {
    let schema = json!({"type": "object", "properties": {"bytes": {"type": "integer"}}});
    let tool = ctxsync_test_support::mcp_tool("count", "Counts; answers `bytes` of text", schema);
    let server = ctxsync_test_support::mcp_server("sim", format!("{:064x}", 1), vec![tool]);
    Snapshot {
        aggregate_hash: "0".repeat(64),
        ..ctxsync_test_support::snapshot(1, run, DiscoveryPhase::Complete, vec![server])
    }
}

/// Registers agent `index` on `replica` as a real agent does (startup, a complete
/// snapshot, the call stream with its hello), then answers every call at once:
/// `Accepted`, then `Ended` complete with the text the call's `bytes` asks for.
async fn sim_agent(replica: &Replica, index: usize) -> Result<SimAgent> {
    let (id, token) = replica.create_agent(&format!("sim-{index}")).await?;
    let run = uuid::Uuid::new_v4().to_string();
    let mut client = v1::agent_client::AgentClient::connect(replica.agent_url.clone()).await?;
    let startup = v1::UpdateStartupRequest::from(Startup {
        version: "bench".into(),
        expanded_directory: "/ws".into(),
        agent_run_id: RunId::new(run.clone()),
        accepts_tool_calls: true,
    });
    client.update_startup(with_bearer(startup, &token)).await?;
    let push = v1::PushContextStateRequest::from(sim_snapshot(&run));
    let pushed = client.push_context_state(with_bearer(push, &token)).await?;
    ensure!(pushed.get_ref().accepted, "the snapshot was not accepted");
    let (tx, rx) = mpsc::channel::<v1::AgentCallMessage>(256);
    let hello = AgentCall::Hello {
        agent_run_id: RunId::new(run).context("a run id")?,
    };
    tx.send(hello.into()).await?;
    let mut inbound = client
        .tool_calls(with_bearer(ReceiverStream::new(rx), &token))
        .await?
        .into_inner();
    // Incompressible text, so PostgreSQL stores the full size (TOAST would shrink
    // repeated bytes to nothing).
    let text: Arc<str> = noise(RESULT_BYTES, index as u64 + 1).into();
    let task = tokio::spawn(async move {
        while let Ok(Some(message)) = inbound.message().await {
            let answers = match ServerCall::try_from(message) {
                Ok(ServerCall::Call(call)) => {
                    let arguments = call.arguments.parse().unwrap_or_default();
                    let bytes = arguments.get("bytes").and_then(Value::as_u64);
                    let text = match bytes {
                        Some(n) => text[..(n as usize).min(text.len())].to_owned(),
                        None => "1".to_owned(),
                    };
                    let result =
                        json!({"content": [{"type": "text", "text": text}], "isError": false});
                    vec![
                        AgentCall::Accepted { id: call.id },
                        AgentCall::Ended {
                            id: call.id,
                            end: CallEnd::complete(result, false),
                            duration: Duration::ZERO,
                        },
                    ]
                }
                // Proof of life: the server drops a stream silent for its limit.
                Ok(ServerCall::Heartbeat) => vec![AgentCall::Heartbeat],
                // This simulated agent has no HTTP servers to sign in to.
                Ok(
                    ServerCall::Cancel { .. }
                    | ServerCall::BeginSignIn(_)
                    | ServerCall::ExchangeSignIn(_)
                    | ServerCall::Credential(_),
                )
                | Err(_) => Vec::new(),
            };
            for answer in answers {
                if tx.send(answer.into()).await.is_err() {
                    return;
                }
            }
        }
    });
    Ok(SimAgent {
        id,
        replica: replica_index(replica),
        task,
    })
}

fn replica_index(replica: &Replica) -> usize {
    usize::from(replica.name == "B")
}

/// `len` pseudo-random alphanumeric bytes (xorshift from `seed`).
fn noise(len: usize, seed: u64) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            char::from(ALPHABET[(state % ALPHABET.len() as u64) as usize])
        })
        .collect()
}

/// Callers for `(agent, replica its requests go to)` pairs, set up concurrently.
async fn callers(
    replicas: &[Replica; 2],
    agents: &[SimAgent],
    pairs: Vec<(usize, usize)>,
) -> Result<Vec<Caller>> {
    let made: Vec<Result<Caller>> = futures::stream::iter(pairs)
        .map(|(agent, to)| {
            let agent = &agents[agent];
            Caller::new(&replicas[to], &agent.id, agent.replica != to)
        })
        .buffered(SETUP_CONCURRENCY)
        .collect()
        .await;
    made.into_iter().collect()
}

/// Part 2: the RSS each replica adds while 64 calls carry 256 KiB results at once.
async fn memory(replicas: &[Replica; 2], agents: &[SimAgent], rounds: usize) -> Result<()> {
    // Agents on A only (the even ones, some twice), every call POSTed to B: A receives
    // and stores all 64 results, B reads and answers all 64.
    let on_a: Vec<usize> = (0..agents.len())
        .filter(|&i| agents[i].replica == 0)
        .collect();
    let pairs = (0..MEMORY_CALLS)
        .map(|k| (on_a[k % on_a.len()], 1))
        .collect();
    let mut callers = callers(replicas, agents, pairs).await?;
    // Warm-up with small results: connections, pools and tasks exist before the baseline.
    for _ in 0..3 {
        concurrent_round(&mut callers, None).await?;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pids = [replicas[0].pid, replicas[1].pid];
    let baseline = [status_kib(pids[0], "VmRSS")?, status_kib(pids[1], "VmRSS")?];
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let stop = Arc::clone(&stop);
        tokio::spawn(async move {
            let mut peak = [0.0f64; 2];
            while !stop.load(Ordering::Relaxed) {
                for (peak, pid) in peak.iter_mut().zip(pids) {
                    *peak = peak.max(status_kib(pid, "VmRSS").unwrap_or(0.0));
                }
                tokio::time::sleep(RSS_SAMPLE).await;
            }
            peak
        })
    };
    let started = Instant::now();
    for _ in 0..rounds {
        concurrent_round(&mut callers, Some(RESULT_BYTES)).await?;
    }
    let elapsed = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let peak = sampler.await?;
    let after = [status_kib(pids[0], "VmRSS")?, status_kib(pids[1], "VmRSS")?];
    eprintln!(
        "bench_tool_calls: {rounds} rounds of {MEMORY_CALLS} concurrent 256 KiB calls in {:.2} s; \
         VmRSS KiB baseline {baseline:?}, peak {peak:?}, after {after:?}",
        elapsed.as_secs_f64()
    );
    let mib = |kib: f64| kib / 1024.0;
    for (i, (role, replica)) in [
        ("receives and stores the results", &replicas[0]),
        ("reads and answers them", &replicas[1]),
    ]
    .into_iter()
    .enumerate()
    {
        let stem = format!(
            "tool_call.replicas.memory_{MEMORY_CALLS}x256KiB.replica_{}",
            replica.name.to_lowercase()
        );
        bench_row_against(
            &format!("{stem}.rss_baseline ({role})"),
            mib(baseline[i]),
            "MiB",
            None,
            Some("after warm-up calls with small results"),
            None,
        );
        let added = mib(peak[i] - baseline[i]);
        bench_row(
            &format!("{stem}.rss_added"),
            added,
            "MiB",
            Some(mib(baseline[i])),
            None,
            Some(&format!(
                "peak VmRSS during {rounds} rounds minus baseline <= {MEMORY_BUDGET_MIB} MiB"
            )),
            Some(added <= MEMORY_BUDGET_MIB),
        );
    }
    Ok(())
}

/// Every caller makes one call at the same time; all must complete (with `bytes` of
/// text when asked).
async fn concurrent_round(callers: &mut [Caller], bytes: Option<usize>) -> Result<()> {
    let arguments = match bytes {
        Some(n) => json!({ "bytes": n }),
        None => json!({}),
    };
    let answers =
        futures::future::join_all(callers.iter_mut().map(|c| c.call(arguments.clone()))).await;
    for answer in answers {
        let answer = answer.map_err(|e| anyhow::anyhow!("a memory-test call failed: {e}"))?;
        if let Some(n) = bytes {
            let text = answer["result"]["content"][0]["text"]
                .as_str()
                .unwrap_or("");
            ensure!(text.len() == n, "a result of {} bytes, not {n}", text.len());
        }
    }
    Ok(())
}

/// One finished call of the throughput run.
struct Outcome {
    done: Instant,
    took: Duration,
    ok: bool,
    cross: bool,
}

/// CPU readings at one instant.
struct Reading {
    at: Instant,
    replicas: [f64; 2],
    driver: f64,
    /// PostgreSQL processes serving the bench database, and the server's own.
    postgres: Vec<(u32, f64)>,
    machine: (u64, u64),
    /// Transactions of the bench database (`pg_stat_database`), when `psql` could say.
    transactions: Option<f64>,
}

impl Reading {
    async fn take(replicas: &[Replica; 2], database: &TestDatabase) -> Result<Self> {
        let transactions = transactions(database).await;
        Ok(Self {
            at: Instant::now(),
            replicas: [
                process_cpu_seconds(replicas[0].pid)?,
                process_cpu_seconds(replicas[1].pid)?,
            ],
            driver: process_cpu_seconds(std::process::id())?,
            postgres: postgres_processes(database.name())
                .into_iter()
                .filter_map(|pid| Some((pid, process_cpu_seconds(pid).ok()?)))
                .collect(),
            machine: machine_cpu_ticks()?,
            transactions,
        })
    }
}

/// PostgreSQL's processes that work for the bench database: its backends (their process
/// title names the database) and the server's own (postmaster, WAL writer,
/// checkpointer, …), whose work for other databases on the same server is counted too.
fn postgres_processes(database: &str) -> Vec<u32> {
    let needle = format!(" {database} ");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let Ok(comm) = std::fs::read_to_string(format!("/proc/{pid}/comm")) else {
                return false;
            };
            if comm.trim() != "postgres" {
                return false;
            }
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let title = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            // A backend's title ends in its client's `host(port) state`.
            let backend = title.contains('(');
            !backend || title.contains(&needle)
        })
        .collect()
}

/// `xact_commit + xact_rollback` of the bench database, through `psql`; `None` without.
/// Backends report their counts about once a second, so a window's figure is ± that.
async fn transactions(database: &TestDatabase) -> Option<f64> {
    let url = database.url().to_owned();
    let name = database.name().to_owned();
    tokio::task::spawn_blocking(move || {
        let sql = format!(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = '{name}'"
        );
        let output = std::process::Command::new("psql")
            .args([url.as_str(), "-AtXq", "-c", &sql])
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .ok()?;
        String::from_utf8(output.stdout).ok()?.trim().parse().ok()
    })
    .await
    .ok()
    .flatten()
}

/// Part 3: callers in a closed loop for `warmup` then the measured `window`.
async fn throughput(
    replicas: &[Replica; 2],
    agents: &[SimAgent],
    database: &TestDatabase,
    warmup: Duration,
    window: Duration,
) -> Result<()> {
    // Caller j calls agent j % 100 (stream on replica j % 2) through replica
    // (j / 100 + j) % 2: half of them through the holder, half through the other.
    let pairs = (0..CALLERS)
        .map(|j| (j % SIM_AGENTS, (j / SIM_AGENTS + j) % 2))
        .collect();
    let callers = callers(replicas, agents, pairs).await?;
    let cross = callers.iter().filter(|c| c.cross).count();
    eprintln!(
        "bench_tool_calls: {CALLERS} callers ({cross} through the replica not holding their \
         agent's stream); {:.0} s warm-up, {:.0} s window",
        warmup.as_secs_f64(),
        window.as_secs_f64()
    );
    let start = Instant::now();
    let (from, until) = (start + warmup, start + warmup + window);
    let tasks: Vec<_> = callers
        .into_iter()
        .map(|caller| tokio::spawn(closed_loop(caller, until)))
        .collect();
    tokio::time::sleep_until(from.into()).await;
    let before = Reading::take(replicas, database).await?;
    tokio::time::sleep_until(until.into()).await;
    let after = Reading::take(replicas, database).await?;
    let mut outcomes = Vec::new();
    let mut errors = Vec::new();
    for task in tasks {
        let (done, failed) = task.await?;
        outcomes.extend(done);
        errors.extend(failed);
    }
    for error in errors.iter().take(5) {
        eprintln!("bench_tool_calls: throughput error: {error}");
    }
    report_throughput(&outcomes, errors.len(), (before, after), (cross, CALLERS));
    Ok(())
}

/// One caller's calls until `until`: its outcomes and its errors' messages.
async fn closed_loop(mut caller: Caller, until: Instant) -> (Vec<Outcome>, Vec<String>) {
    let (mut outcomes, mut errors) = (Vec::new(), Vec::new());
    while Instant::now() < until {
        let started = Instant::now();
        let answer = caller.call(json!({})).await;
        outcomes.push(Outcome {
            done: Instant::now(),
            took: started.elapsed(),
            ok: answer.is_ok(),
            cross: caller.cross,
        });
        if let Err(error) = answer {
            errors.push(error);
        }
    }
    (outcomes, errors)
}

fn report_throughput(
    outcomes: &[Outcome],
    errors: usize,
    (before, after): (Reading, Reading),
    (cross, callers): (usize, usize),
) {
    let stem = "tool_call.replicas.throughput";
    let seconds = after.at.duration_since(before.at).as_secs_f64();
    let in_window: Vec<&Outcome> = outcomes
        .iter()
        .filter(|o| o.ok && o.done >= before.at && o.done <= after.at)
        .collect();
    let rate = in_window.len() as f64 / seconds;
    let took = |cross: Option<bool>| -> Vec<Duration> {
        in_window
            .iter()
            .filter(|o| cross.is_none_or(|c| o.cross == c))
            .map(|o| o.took)
            .collect()
    };
    let (all, other, holder) = (took(None), took(Some(true)), took(Some(false)));
    let setup = format!(
        "{SIM_AGENTS} simulated agents (gRPC clients answering at once), {callers} callers \
         ({cross} through the replica not holding the stream)"
    );
    bench_row(
        &format!("{stem}.calls_per_s ({setup}, {seconds:.0} s window)"),
        rate,
        "calls/s",
        None,
        None,
        Some(&format!(">= {FLOOR_CALLS_PER_S} calls/s")),
        Some(rate >= FLOOR_CALLS_PER_S),
    );
    bench_row(
        &format!("{stem}.errors"),
        errors as f64,
        "calls",
        None,
        None,
        Some("= 0 (any HTTP error or end other than complete, warm-up included)"),
        Some(errors == 0),
    );
    for (label, samples) in [
        ("", &all),
        (".other_replica", &other),
        (".holder_replica", &holder),
    ] {
        for p in [50.0, 99.0] {
            bench_row_against(
                &format!("{stem}{label}.latency_p{p:.0}"),
                percentile_ms(samples, p),
                "ms",
                None,
                None,
                None,
            );
        }
    }
    report_cpu(stem, &before, &after, in_window.len());
}

fn report_cpu(stem: &str, before: &Reading, after: &Reading, calls: usize) {
    let seconds = after.at.duration_since(before.at).as_secs_f64();
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get()) as f64;
    let share = |cpu: f64| cpu / (seconds * cores);
    let replica = |i: usize| after.replicas[i] - before.replicas[i];
    let postgres: f64 = after
        .postgres
        .iter()
        .map(|(pid, cpu)| {
            let earlier = before.postgres.iter().find(|(p, _)| p == pid);
            cpu - earlier.map_or(0.0, |(_, c)| *c)
        })
        .sum();
    let (busy, total) = (
        after.machine.0 - before.machine.0,
        after.machine.1 - before.machine.1,
    );
    let of_machine = format!("CPU s / (window s x {cores} cores)");
    for (name, cpu, what) in [
        ("replica_a", replica(0), "replica A (server process)"),
        ("replica_b", replica(1), "replica B (server process)"),
        (
            "postgres",
            postgres,
            "PostgreSQL: the bench database's backends and the server's own processes",
        ),
        (
            "driver",
            after.driver - before.driver,
            "this bench process: callers and simulated agents",
        ),
    ] {
        bench_row_against(
            &format!("{stem}.cpu_share.{name}"),
            share(cpu),
            "of machine",
            None,
            Some(&format!("{what}: {of_machine}")),
            None,
        );
    }
    bench_row_against(
        &format!("{stem}.cpu_share.machine_busy"),
        busy as f64 / total.max(1) as f64,
        "of machine",
        None,
        Some("every process on the machine, other users' included (/proc/stat)"),
        None,
    );
    let calls = calls.max(1) as f64;
    bench_row_against(
        &format!("{stem}.replica_cpu_per_call"),
        (replica(0) + replica(1)) * 1000.0 / calls,
        "ms",
        None,
        Some("both replicas' CPU time over the window / calls completed in it"),
        None,
    );
    bench_row_against(
        &format!("{stem}.postgres_cpu_per_call"),
        postgres * 1000.0 / calls,
        "ms",
        None,
        None,
        None,
    );
    if let (Some(from), Some(to)) = (before.transactions, after.transactions) {
        bench_row_against(
            &format!("{stem}.db_transactions_per_call"),
            (to - from) / calls,
            "transactions",
            None,
            Some(
                "pg_stat_database xact_commit + xact_rollback of the bench database (± 1 s of reporting lag)",
            ),
            None,
        );
    }
}
