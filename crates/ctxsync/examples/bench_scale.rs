//! Benchmark: many simulated agents pushing to one `ctxsync server` process on PostgreSQL.
//!
//! Every simulated agent is an in-process gRPC client over loopback with its own
//! connection, agent row, token and run id, and pushes a 50-resource snapshot in which one
//! resource (an edited file) changed since its last push, as a working agent does. The
//! first push of every agent (all 50 bodies, all rows inserted) happens before the
//! measured window; when the server's `UpdateStartup` answer offers delta pushes
//! (`delta_digest_scheme`), every later push is a delta that leaves out the bodies the
//! server holds (`DeltaBase`), and a `delta_base_missing` answer is followed by a full push
//! (counted; it should not happen).
//!
//! As real agents do, every agent declares `accepts_tool_calls` in its `UpdateStartup`,
//! then opens the `ToolCalls` stream on its own connection (its `Hello` first, naming its
//! run) and holds it open beside its pushes through the measured window, in every pass.
//! No call is made on it: the agent sends a heartbeat every 15 s (`CALL_HEARTBEAT`, the
//! real agent's beat when nothing else moved), so the server's 45 s silence limit never
//! closes it, and reads the server's heartbeats. A stream that does not open, or that
//! ends before the window's end (the server ended it, it failed, or the server was
//! silent for 45 s), is counted, stderr names the first such problem, and the
//! `call_streams_open` row says how many were open at the window's end against the
//! agents (target: all).
//!
//! Three passes, each on its own server process:
//!
//! - `scale.1000_agents.*`: 1000 agents (`--quick`: 100) pushing every 2 s for 60 s
//!   (`--quick`: 4 s), plain text;
//! - `scale.tls.1000_agents.*`: the same with TLS on the server's listeners (a CA and
//!   certificate made at start; every agent its own TLS 1.3 connection), and TLS's
//!   accepted rate over plain text's;
//! - `scale.agents_10000.*` (issue 19): 10,000 agents pushing every 20 s for 60 s on a
//!   fresh database, 500 pushes/s offered, with targets: accepted ≥ 0.95 × offered,
//!   0 errors, push p99 ≤ 50 ms, server resident memory under load ≤ 512 MiB. `--quick`
//!   runs it scaled down (1000 agents, every 20 s, for 4 s: `scale.agents_1000.*`) so CI
//!   sees the code path, not the figure.
//!
//! Each pass prints accepted pushes per second (answers in the window, the median of 10 s
//! slices, `--quick`: 2 s slices) against the offered rate, push latency p50/p99, errors,
//! full pushes after a missing delta base, client→server bytes per push on the TCP
//! connections (the call streams' few heartbeat bytes included) against a full push's,
//! the server's resident memory idle and under load (`/proc/<pid>/status`), the call
//! streams open at the window's end, and CPU over the window from `/proc`: the server's
//! and PostgreSQL's CPU time per accepted push (target in every pass: ≤ 0.5 ms each), and
//! the shares of the machine (CPU seconds ÷ (window seconds × cores)) taken by the
//! server, this load generator, PostgreSQL, and everything on the machine, so a reader
//! can tell whether the server, the generator or the machine limits a figure.
//!
//! PostgreSQL's CPU is every process of the cluster, not only the benchmark database's
//! backends: the postmaster, its background processes (WAL writer, checkpointer,
//! background writer, autovacuum, …) and every backend, found as the processes whose
//! command line starts with `postgres` or `/usr/lib/postgresql/` and their children. Each
//! is read before and after the window; one that appears in the window counts from 0, and
//! one that ends in it counts through its parent's time of reaped children. Other
//! databases' backends count too, so other work on the same cluster inflates the figure:
//! the `postgres_cpu_per_push` row's text (and stderr) splits it into the benchmark
//! database's backends, the postmaster and background processes, and other databases'
//! backends.
//!
//! `cargo run --release -p ctxsync --example bench_scale -- [--quick] [--large-only]` (the
//! latter runs only the 10,000-agent pass) prints one JSON row
//! per line on stdout; progress goes to stderr. The load generator shares the machine with
//! the server and PostgreSQL. The soft limit on open files is raised to the hard limit
//! (the server inherits it); a pass whose agents would not fit under it is skipped with a
//! row saying so.

mod support;

use std::io::IoSlice;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use ctxsync_agent_api::test_support::with_bearer;
use ctxsync_persistence::test_support::TestStore;
use ctxsync_protocol::tool_call::{AgentCall, CALL_HEARTBEAT, CALL_SILENCE_LIMIT, ServerCall};
use ctxsync_protocol::{
    DELTA_DIGEST_SCHEME, DeltaBase, DiscoveryPhase, InstructionFileBody, Resource, ResourceBody,
    ResourceStatus, RunId, Snapshot, Startup, v1,
};
use futures::StreamExt;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::codegen::http::Uri;
use tonic::transport::{Channel, Endpoint};

use ctxsync_test_support::bench_row_against;
use support::{
    ServerProcess, ctxsync_binary, machine_cpu_ticks, percentile_ms, process_cpu_seconds,
    process_stat, raise_open_files_limit, status_kib,
};

const RESOURCES: usize = 50;
/// Bound on one push; a push slower than this counts as an error.
const PUSH_TIMEOUT: Duration = Duration::from_secs(30);
/// Setup calls in flight at once (agent rows, connections, startups, first pushes):
/// enough to keep the server and the database busy, few enough that none of them waits
/// anywhere near a timeout for a pooled database connection.
const SETUP_CONCURRENCY: usize = 64;
/// Open files a generator needs beyond one per agent connection.
const SPARE_FILES: u64 = 256;

struct Load {
    agents: usize,
    /// Each agent pushes once per interval.
    interval: Duration,
    duration: Duration,
    slice: Duration,
}

impl Load {
    fn offered(&self) -> f64 {
        self.agents as f64 / self.interval.as_secs_f64()
    }
}

fn resources(agent: usize, generation: usize) -> Vec<Resource> {
    let filler = "Notes for the agent about this part of the workspace. ".repeat(10);
    (0..RESOURCES)
        .map(|i| {
            // Push `g` edits resource `g % RESOURCES`: count the edits of `i` up to now.
            let edits = if i == 0 {
                generation / RESOURCES
            } else {
                (generation + RESOURCES - i) / RESOURCES
            };
            Resource {
                source_path: Some(format!("/workspace-{agent}/docs/{i}/AGENTS.md")),
                source: format!("docs/{i}/AGENTS.md"),
                content_hash: format!("{edits:016x}{i:048x}"),
                size_bytes: 600,
                status: ResourceStatus::Ok,
                error: None,
                body: ResourceBody::InstructionFile(InstructionFileBody {
                    content: format!("# Part {i}, edit {edits}\n{filler}"),
                }),
            }
        })
        .collect()
}

fn request(agent: usize, run_id: &str, generation: usize) -> v1::PushContextStateRequest {
    Snapshot {
        version: generation as u64 + 1,
        aggregate_hash: format!("{agent:032x}{generation:032x}"),
        resources: resources(agent, generation),
        initial: generation == 0,
        snapshot_error: None,
        agent_run_id: RunId::new(run_id),
        phase: DiscoveryPhase::Complete,
        ..Default::default()
    }
    .into()
}

/// What the agents observed in the measured window.
#[derive(Default)]
struct Tally {
    /// (when answered, since the window opened; latency) of every accepted push whose
    /// turn came in the window (some are answered after it).
    accepted: Vec<(Duration, Duration)>,
    /// Push requests sent (a delta refused for its base and the full push after it: two).
    requests: usize,
    /// Deltas refused with `delta_base_missing` (each followed by a full push).
    base_missing: usize,
    errors: usize,
    first_error: Option<String>,
}

struct SimulatedAgent {
    index: usize,
    token: String,
    run_id: String,
    client: v1::agent_client::AgentClient<Channel>,
    /// The server's `UpdateStartup` answer offered delta pushes in our scheme.
    delta: bool,
    /// With `delta`: the bodies the server holds for this run, as of the last accepted push.
    base: Option<DeltaBase>,
}

/// One accepted push (a delta, or a full push after a delta refused for its base).
struct Pushed {
    latency: Duration,
    requests: usize,
    base_missing: bool,
}

impl SimulatedAgent {
    async fn send(
        &mut self,
        request: v1::PushContextStateRequest,
    ) -> Result<v1::PushContextStateResponse, String> {
        let request = with_bearer(request, &self.token);
        let response =
            tokio::time::timeout(PUSH_TIMEOUT, self.client.push_context_state(request)).await;
        match response {
            Err(_) => Err(format!("push timed out after {PUSH_TIMEOUT:?}")),
            Ok(Err(status)) => Err(format!("push failed: {status}")),
            Ok(Ok(response)) => Ok(response.into_inner()),
        }
    }

    /// Push `generation`: a delta on the base the server holds when deltas are offered and
    /// a base is known, else (or after `delta_base_missing`) a full push.
    async fn push(&mut self, generation: usize) -> Result<Pushed, String> {
        let started = Instant::now();
        let mut pushed = Pushed {
            latency: Duration::ZERO,
            requests: 1,
            base_missing: false,
        };
        if let (true, Some(base)) = (self.delta, &self.base) {
            let mut delta = request(self.index, &self.run_id, generation);
            let next = base.into_delta(&mut delta);
            let answer = self.send(delta).await?;
            if answer.accepted {
                self.base = Some(next);
                pushed.latency = started.elapsed();
                return Ok(pushed);
            }
            if !answer.delta_base_missing {
                return Err("delta push not accepted".to_owned());
            }
            pushed.base_missing = true;
            pushed.requests += 1;
        }
        let full = request(self.index, &self.run_id, generation);
        let base = self.delta.then(|| DeltaBase::of_full(&full));
        let answer = self.send(full).await?;
        if !answer.accepted {
            return Err("push not accepted".to_owned());
        }
        self.base = base;
        pushed.latency = started.elapsed();
        Ok(pushed)
    }
}

/// The agents' `ToolCalls` streams of one pass: how many opened, which failed to open or
/// ended, and what the server sent on them.
#[derive(Default)]
struct CallStreams {
    opened: AtomicUsize,
    /// Streams that did not open (startup answer without tool calls, refused, failed or
    /// timed out).
    failed: AtomicUsize,
    /// When each opened stream ended (the server ended it, it failed, or the server was
    /// silent past the limit).
    ended: Mutex<Vec<Instant>>,
    /// Heartbeats the server sent.
    heartbeats: AtomicU64,
    /// Anything else the server sent (a call, a cancel, a malformed message): none is
    /// expected, since no call is made.
    unexpected: AtomicU64,
    /// The first stream problem, for stderr.
    first_problem: Mutex<Option<String>>,
    /// The streams' tasks, aborted (closing the streams) when the pass ends.
    tasks: Mutex<Vec<tokio::task::AbortHandle>>,
}

impl CallStreams {
    fn problem(&self, problem: String) {
        self.first_problem
            .lock()
            .expect("streams lock")
            .get_or_insert(problem);
    }

    fn failed(&self, problem: String) {
        self.failed.fetch_add(1, Ordering::Relaxed);
        self.problem(problem);
    }

    fn ended(&self, problem: String) {
        self.ended
            .lock()
            .expect("streams lock")
            .push(Instant::now());
        self.problem(problem);
    }

    /// Streams opened and not ended by `at`.
    fn open_at(&self, at: Instant) -> usize {
        let ended = self.ended.lock().expect("streams lock");
        self.opened.load(Ordering::Relaxed) - ended.iter().filter(|&&t| t <= at).count()
    }

    /// Streams that ended in `from..=to`.
    fn ended_in(&self, from: Instant, to: Instant) -> usize {
        let ended = self.ended.lock().expect("streams lock");
        ended.iter().filter(|&&t| from <= t && t <= to).count()
    }

    /// Closes every stream still open.
    fn close(&self) {
        for task in self.tasks.lock().expect("streams lock").drain(..) {
            task.abort();
        }
    }
}

/// Opens `agent`'s `ToolCalls` stream on its connection (its `Hello` first) and holds it
/// open in a task of its own, as the real agent does: a heartbeat every
/// [`CALL_HEARTBEAT`] (it sends nothing else), and the stream counts as ended when the
/// server ends it, it fails, or the server is silent past [`CALL_SILENCE_LIMIT`]. A
/// stream that does not open is counted in `streams`, not an error of the pass.
async fn open_call_stream(agent: &SimulatedAgent, streams: &Arc<CallStreams>) {
    let index = agent.index;
    let Some(agent_run_id) = RunId::new(agent.run_id.clone()) else {
        streams.failed(format!("agent {index}: no run id for the call stream"));
        return;
    };
    let (tx, rx) = mpsc::channel::<v1::AgentCallMessage>(4);
    if tx
        .try_send(AgentCall::Hello { agent_run_id }.into())
        .is_err()
    {
        unreachable!("a new channel has room");
    }
    let request = with_bearer(ReceiverStream::new(rx), &agent.token);
    let mut client = agent.client.clone();
    // The server answers once it has read the hello and registered the stream.
    let mut inbound = match tokio::time::timeout(PUSH_TIMEOUT, client.tool_calls(request)).await {
        Ok(Ok(response)) => response.into_inner(),
        Ok(Err(status)) => {
            streams.failed(format!(
                "agent {index}: the call stream did not open: {status}"
            ));
            return;
        }
        Err(_) => {
            streams.failed(format!(
                "agent {index}: the call stream did not open within {PUSH_TIMEOUT:?}"
            ));
            return;
        }
    };
    streams.opened.fetch_add(1, Ordering::Relaxed);
    let held = Arc::clone(streams);
    let task = tokio::spawn(async move {
        let streams = held;
        let mut heartbeat =
            tokio::time::interval_at(tokio::time::Instant::now() + CALL_HEARTBEAT, CALL_HEARTBEAT);
        heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let silence = tokio::time::sleep(CALL_SILENCE_LIMIT);
        tokio::pin!(silence);
        let why = loop {
            tokio::select! {
                message = inbound.message() => match message {
                    Ok(Some(message)) => {
                        silence.as_mut().reset(tokio::time::Instant::now() + CALL_SILENCE_LIMIT);
                        match ServerCall::try_from(message) {
                            Ok(ServerCall::Heartbeat) => {
                                streams.heartbeats.fetch_add(1, Ordering::Relaxed);
                            }
                            other => {
                                streams.unexpected.fetch_add(1, Ordering::Relaxed);
                                let what = match other {
                                    Ok(ServerCall::Call(_)) => "a call".to_owned(),
                                    Ok(_) => "a cancel".to_owned(),
                                    Err(error) => format!("a malformed message ({error})"),
                                };
                                streams.problem(format!(
                                    "agent {index}: the server sent {what} on the call stream"
                                ));
                            }
                        }
                    }
                    Ok(None) => break "the server ended the call stream".to_owned(),
                    Err(status) => break format!("the call stream failed: {status}"),
                },
                _ = heartbeat.tick() => {
                    // Full: earlier heartbeats wait for the connection, and one more
                    // would not help; the server's own silence limit decides.
                    let _ = tx.try_send(AgentCall::Heartbeat.into());
                }
                () = &mut silence => {
                    break format!("the server was silent for {CALL_SILENCE_LIMIT:?}");
                }
            }
        };
        streams.ended(format!("agent {index}: {why}"));
    });
    streams
        .tasks
        .lock()
        .expect("streams lock")
        .push(task.abort_handle());
}

async fn run_agent(
    mut agent: SimulatedAgent,
    agents: usize,
    interval: Duration,
    window_start: Instant,
    window_end: Instant,
    tally: Arc<Mutex<Tally>>,
) {
    // Spread the agents evenly over one interval, as independent processes would be.
    let phase = interval.mul_f64(agent.index as f64 / agents as f64);
    let mut ticks = tokio::time::interval_at((window_start + phase).into(), interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut generation = 1;
    loop {
        // No waiting past the window for a tick that would not count.
        let Ok(tick) = tokio::time::timeout_at(window_end.into(), ticks.tick()).await else {
            return;
        };
        let tick = tick.into_std();
        if tick >= window_end {
            return;
        }
        let result = agent.push(generation).await;
        generation += 1;
        let mut tally = tally.lock().expect("tally lock");
        match result {
            Ok(pushed) => {
                // Counted when answered: a server falling behind answers fewer per second.
                tally
                    .accepted
                    .push((tick + pushed.latency - window_start, pushed.latency));
                tally.requests += pushed.requests;
                tally.base_missing += usize::from(pushed.base_missing);
            }
            Err(error) => {
                tally.requests += 1;
                tally.errors += 1;
                tally.first_error.get_or_insert(error);
            }
        }
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

/// [`bench_row_against`], with a figure that could not be measured (NaN) printed as 0: the
/// row format has no empty figure. `pass` is decided on the measured value by the caller.
fn row(
    name: &str,
    value: f64,
    unit: &str,
    reference: Option<f64>,
    target: Option<&str>,
    pass: Option<bool>,
) {
    let value = if value.is_finite() { value } else { 0.0 };
    let reference = reference.filter(|r| r.is_finite());
    bench_row_against(name, value, unit, reference, target, pass);
}

/// How the simulated agents reach the server.
#[derive(Clone)]
enum Transport {
    Plain,
    /// TLS to a certificate for `localhost` from this CA (PEM files in the data dir).
    Tls(tokio_rustls::TlsConnector),
}

/// A TCP stream that counts the bytes written to it (the client→server bytes on the wire).
struct Counted {
    tcp: TcpStream,
    written: Arc<AtomicU64>,
}

impl Counted {
    fn count(&self, result: &Poll<std::io::Result<usize>>) {
        if let Poll::Ready(Ok(n)) = result {
            self.written.fetch_add(*n as u64, Ordering::Relaxed);
        }
    }
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let result = Pin::new(&mut self.tcp).poll_write(cx, buf);
        self.count(&result);
        result
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let result = Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs);
        self.count(&result);
        result
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}

async fn counted_tcp(addr: SocketAddr, written: &Arc<AtomicU64>) -> std::io::Result<Counted> {
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    Ok(Counted {
        tcp,
        written: written.clone(),
    })
}

/// One plain TCP connection per channel, counted.
#[derive(Clone)]
struct PlainConnect {
    addr: SocketAddr,
    written: Arc<AtomicU64>,
}

impl tower_service::Service<Uri> for PlainConnect {
    type Response = TokioIo<Counted>;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Uri) -> Self::Future {
        let (addr, written) = (self.addr, self.written.clone());
        Box::pin(async move { Ok(TokioIo::new(counted_tcp(addr, &written).await?)) })
    }
}

/// One TCP connection (counted) with TLS over it, per channel (as the real agent's
/// connector).
#[derive(Clone)]
struct TlsConnect {
    addr: SocketAddr,
    tls: tokio_rustls::TlsConnector,
    written: Arc<AtomicU64>,
}

impl tower_service::Service<Uri> for TlsConnect {
    type Response = TokioIo<tokio_rustls::client::TlsStream<Counted>>;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Uri) -> Self::Future {
        let (addr, tls, written) = (self.addr, self.tls.clone(), self.written.clone());
        Box::pin(async move {
            let tcp = counted_tcp(addr, &written).await?;
            let name = rustls_pki_types::ServerName::try_from("localhost").expect("a DNS name");
            Ok(TokioIo::new(tls.connect(name, tcp).await?))
        })
    }
}

async fn connect(
    endpoint: &Endpoint,
    addr: SocketAddr,
    transport: &Transport,
    written: &Arc<AtomicU64>,
) -> Result<Channel> {
    let written = written.clone();
    match transport {
        Transport::Plain => {
            endpoint
                .connect_with_connector(PlainConnect { addr, written })
                .await
        }
        Transport::Tls(tls) => {
            endpoint
                .connect_with_connector(TlsConnect {
                    addr,
                    tls: tls.clone(),
                    written,
                })
                .await
        }
    }
    .context("connecting an agent")
}

/// Writes a CA-signed certificate for `localhost` into `dir`; returns the server's flags
/// and a connector trusting the CA.
fn make_tls(dir: &std::path::Path) -> Result<(Vec<String>, tokio_rustls::TlsConnector)> {
    use rustls::pki_types::{CertificateDer, pem::PemObject};
    let ca = ctxsync_test_support::TestCa::new("bench_scale CA");
    let (cert, key) = ca.server_cert(&["localhost"]);
    let (cert_file, key_file) = (dir.join("server.pem"), dir.join("server.key"));
    std::fs::write(&cert_file, cert)?;
    std::fs::write(&key_file, key)?;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(ca.pem().as_bytes())?)?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let flags = vec![
        "--tls-cert".to_owned(),
        cert_file.display().to_string(),
        "--tls-key".to_owned(),
        key_file.display().to_string(),
    ];
    Ok((flags, tokio_rustls::TlsConnector::from(Arc::new(config))))
}

#[tokio::main]
async fn main() -> Result<()> {
    let quick = std::env::args().any(|a| a == "--quick");
    // Only the 10,000-agent pass (for looking into it; `cargo xtask bench` runs all).
    let large_only = std::env::args().any(|a| a == "--large-only");
    let (load, large) = if quick {
        (
            Load {
                agents: 100,
                interval: Duration::from_secs(2),
                duration: Duration::from_secs(4),
                slice: Duration::from_secs(2),
            },
            Load {
                agents: 1000,
                interval: Duration::from_secs(20),
                duration: Duration::from_secs(4),
                slice: Duration::from_secs(2),
            },
        )
    } else {
        (
            Load {
                agents: 1000,
                interval: Duration::from_secs(2),
                duration: Duration::from_secs(60),
                slice: Duration::from_secs(10),
            },
            Load {
                agents: 10_000,
                interval: Duration::from_secs(20),
                duration: Duration::from_secs(60),
                slice: Duration::from_secs(10),
            },
        )
    };
    let started = Instant::now();
    let ctxsync = ctxsync_binary("bench_scale")?;
    let Some(db) = TestStore::postgres().await else {
        eprintln!("bench_scale: PostgreSQL unavailable, skipped");
        return Ok(());
    };
    let files = raise_open_files_limit();
    eprintln!(
        "bench_scale: open files limit {}",
        files.map_or("unknown".to_owned(), |n| n.to_string())
    );
    if !large_only {
        let n = load.agents;
        let plain = run(
            &ctxsync,
            &db,
            &load,
            &Pass {
                stem: format!("scale.{n}_agents"),
                idle_row: "scale.server_rss_idle".to_owned(),
                agent_names: "scale",
                transport: Transport::Plain,
                server_flags: &[],
                targets: false,
            },
            files,
        )
        .await?;
        let data = tempfile::tempdir()?;
        let (flags, connector) = make_tls(data.path())?;
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let tls = run(
            &ctxsync,
            &db,
            &load,
            &Pass {
                stem: format!("scale.tls.{n}_agents"),
                idle_row: "scale.tls.server_rss_idle".to_owned(),
                agent_names: "scale.tls",
                transport: Transport::Tls(connector),
                server_flags: &flags,
                targets: false,
            },
            files,
        )
        .await?;
        if let (Some(plain), Some(tls)) = (plain, tls) {
            row(
                &format!("scale.{n}_agents.tls_vs_plain_accepted_rate"),
                tls,
                "pushes/s",
                Some(plain),
                Some("TLS keeps up with the offered load as plain text does: ratio >= 0.95"),
                Some(tls / plain >= 0.95),
            );
        }
    }

    // Issue 19's case on a database of its own, so its agents' rows are all there is.
    drop(db);
    let Some(db) = TestStore::postgres().await else {
        anyhow::bail!("PostgreSQL went away between passes");
    };
    let stem = format!("scale.agents_{}", large.agents);
    run(
        &ctxsync,
        &db,
        &large,
        &Pass {
            idle_row: format!("{stem}.server_rss_idle"),
            stem,
            agent_names: "scale.large",
            transport: Transport::Plain,
            server_flags: &[],
            targets: true,
        },
        files,
    )
    .await?;
    eprintln!("bench_scale: done in {:.0?}", started.elapsed());
    Ok(())
}

/// One pass's names and setting.
struct Pass<'a> {
    /// Every row's name starts with it, e.g. `scale.1000_agents`.
    stem: String,
    /// The idle memory row's name (the 1000-agent passes keep their first name).
    idle_row: String,
    /// Agent rows are named `{agent_names}-{index}`.
    agent_names: &'a str,
    transport: Transport,
    server_flags: &'a [&'a str],
    /// Whether the rows carry issue 19's targets for the 10,000-agent case.
    targets: bool,
}

/// CPU and bytes at one instant, for differences over the window.
struct Reading {
    at: Instant,
    server: f64,
    generator: f64,
    /// Every process of the PostgreSQL cluster.
    postgres: Vec<PgProcess>,
    /// (busy, total) ticks of the whole machine.
    machine: (u64, u64),
    written: u64,
}

impl Reading {
    fn take(server: u32, database: &str, written: &AtomicU64) -> Result<Self> {
        Ok(Self {
            at: Instant::now(),
            server: process_cpu_seconds(server)?,
            generator: process_cpu_seconds(std::process::id())?,
            postgres: postgres_cluster(database),
            machine: machine_cpu_ticks()?,
            written: written.load(Ordering::Relaxed),
        })
    }
}

/// One process of the PostgreSQL cluster at one reading.
struct PgProcess {
    pid: u32,
    /// When it started (clock ticks since boot): with `pid`, which process this is.
    started: u64,
    parent: u32,
    /// Its own CPU seconds (user + system, all threads).
    own: f64,
    /// CPU seconds of its children that ended and were waited for (`cutime + cstime`):
    /// the postmaster's count every backend and worker that exited.
    reaped: f64,
    role: PgRole,
}

/// What a process of the PostgreSQL cluster does, from its process title.
#[derive(Clone, Copy, PartialEq)]
enum PgRole {
    /// A backend of the benchmark database (`postgres: … user database host(port) state`).
    BenchmarkBackend,
    /// A client's backend on another database: other work on the same cluster.
    OtherBackend,
    /// The postmaster, a background process or worker (WAL writer, checkpointer,
    /// autovacuum, …), or a process without a title.
    Background,
}

impl PgProcess {
    fn same(&self, other: &Self) -> bool {
        (self.pid, self.started) == (other.pid, other.started)
    }
}

/// Every process of the PostgreSQL cluster this process can see: those whose command line
/// starts with `postgres` (the server binary, or a process title `postgres: …` as every
/// backend and background process sets) or `/usr/lib/postgresql/` (the postmaster as
/// Debian starts it), and their children (an exited child keeps no command line until it
/// is reaped). Empty when PostgreSQL runs where this process cannot see it.
fn postgres_cluster(database: &str) -> Vec<PgProcess> {
    let needle = format!(" {database} ");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut all: Vec<(PgProcess, bool)> = entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let title = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            let (parent, started, own, reaped) = process_stat(pid)?;
            let postgres =
                title.starts_with("postgres") || title.starts_with("/usr/lib/postgresql/");
            // A client's backend ends its title in `host(port) state` or `[local] state`.
            let backend = title.starts_with("postgres: ")
                && (title.contains('(') || title.contains("[local]"));
            let role = match (backend, title.contains(&needle)) {
                (true, true) => PgRole::BenchmarkBackend,
                (true, false) => PgRole::OtherBackend,
                (false, _) => PgRole::Background,
            };
            let process = PgProcess {
                pid,
                started,
                parent,
                own,
                reaped,
                role,
            };
            Some((process, postgres))
        })
        .collect();
    // Children of the cluster's processes are the cluster's, to any depth.
    loop {
        let members: std::collections::HashSet<u32> = all
            .iter()
            .filter(|(_, member)| *member)
            .map(|(p, _)| p.pid)
            .collect();
        let mut grew = false;
        for (process, member) in &mut all {
            if !*member && members.contains(&process.parent) {
                *member = true;
                grew = true;
            }
        }
        if !grew {
            break;
        }
    }
    all.into_iter()
        .filter_map(|(process, member)| member.then_some(process))
        .collect()
}

/// PostgreSQL's CPU seconds between two readings.
#[derive(Clone, Copy)]
struct PgCpu {
    /// Every process of the cluster.
    cluster: f64,
    /// The benchmark database's backends.
    benchmark: f64,
    /// Other databases' backends (other work on the same cluster).
    other: f64,
}

impl PgCpu {
    /// The postmaster, background processes and workers, and the processes that ended.
    fn background(&self) -> f64 {
        self.cluster - self.benchmark - self.other
    }
}

/// PostgreSQL's CPU seconds between two readings. A process that appeared in between
/// counts from 0; one that ended counts through its parent's reaped time (as background
/// time), less what it had used by the first reading.
fn postgres_cpu(before: &[PgProcess], after: &[PgProcess]) -> PgCpu {
    let earlier = |p: &PgProcess| before.iter().find(|b| b.same(p));
    let mut cpu = PgCpu {
        cluster: 0.0,
        benchmark: 0.0,
        other: 0.0,
    };
    for process in after {
        let (own, reaped) = earlier(process).map_or((process.own, process.reaped), |was| {
            (process.own - was.own, process.reaped - was.reaped)
        });
        cpu.cluster += own + reaped;
        match process.role {
            PgRole::BenchmarkBackend => cpu.benchmark += own,
            PgRole::OtherBackend => cpu.other += own,
            PgRole::Background => {}
        }
    }
    for gone in before.iter().filter(|b| !after.iter().any(|a| a.same(b))) {
        // Its parent's reaped time took in all of it; take off what came before.
        let reaped_by_known_parent = after
            .iter()
            .any(|a| a.pid == gone.parent && earlier(a).is_some());
        if reaped_by_known_parent {
            cpu.cluster -= gone.own + gone.reaped;
        }
    }
    cpu
}

/// Brings the database to the state a long-running one is in before the window: the
/// first pushes just inserted every row (500,000 for 10,000 agents), and without this the
/// window's first seconds would measure the statistics and checkpoint that bulk load
/// sets off rather than the steady load. Without `psql` the window starts unsettled, and
/// stderr says so.
fn settle(stem: &str, url: &str) {
    let started = Instant::now();
    let output = std::process::Command::new("psql")
        .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", url, "-c"])
        .arg("VACUUM (ANALYZE) workspace_agent_context_resources")
        .args(["-c", "CHECKPOINT"])
        .stdin(std::process::Stdio::null())
        .output();
    match output {
        Ok(out) if out.status.success() => eprintln!(
            "bench_scale: {stem}: VACUUM (ANALYZE) and CHECKPOINT after the first pushes in {:.1?}",
            started.elapsed()
        ),
        Ok(out) => eprintln!(
            "bench_scale: {stem}: the database was not settled before the window: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        Err(e) => eprintln!(
            "bench_scale: {stem}: the database was not settled before the window (psql: {e})"
        ),
    }
}

/// One pass: a server, `load.agents` agents, the measured window; prints the rows under
/// `pass.stem` and returns the accepted rate (`None` when the pass was skipped).
async fn run(
    ctxsync: &std::path::Path,
    db: &TestStore,
    load: &Load,
    pass: &Pass<'_>,
    files: Option<u64>,
) -> Result<Option<f64>> {
    let (n, stem) = (load.agents, pass.stem.as_str());
    let needed = n as u64 + SPARE_FILES;
    if let Some(files) = files.filter(|&files| files < needed) {
        eprintln!("bench_scale: {stem} skipped: open files limit {files} < {needed}");
        row(
            &format!("{stem}.skipped"),
            files as f64,
            "open files",
            Some(needed as f64),
            Some("skipped: the open files limit (ulimit -n) is below one per agent plus spare"),
            None,
        );
        return Ok(None);
    }
    let database = db.postgres_database().context("a PostgreSQL store")?;
    let url = database.url().to_owned();

    let data = tempfile::tempdir()?;
    let server = ServerProcess::start(ctxsync, &url, data.path(), pass.server_flags).await?;
    let (pid, agent_url) = (server.pid, server.agent_url.clone());
    eprintln!("bench_scale: {stem}: server pid {pid} at {agent_url}");

    let mut prepared = prepare_agents(db, load, pass, &agent_url, pid).await?;
    let agents = std::mem::take(&mut prepared.agents);
    let measured =
        measure_window(load, stem, &url, database.name(), pid, agents, &prepared).await?;
    emit_pass_rows(load, pass, &prepared, &measured);
    prepared.streams.close();
    server.stop().await?;
    Ok(Some(measured.rate))
}

/// The agents of one pass, registered and past their first push, and what was measured
/// on the way.
struct Prepared {
    agents: Vec<SimulatedAgent>,
    /// Client-to-server bytes on every agent's connection so far.
    written: Arc<AtomicU64>,
    /// The server's resident memory with every agent connected and idle, in MiB.
    rss_idle: f64,
    /// How many agents the server offered delta pushes.
    deltas: usize,
    /// Bytes on the wire of one full (first) push.
    full_push_bytes: f64,
    /// Every agent's `ToolCalls` stream, held open from its startup to the pass's end.
    streams: Arc<CallStreams>,
}

/// Creates `load.agents` agents, connects each, registers it and makes its first, full push.
async fn prepare_agents(
    db: &TestStore,
    load: &Load,
    pass: &Pass<'_>,
    agent_url: &str,
    pid: u32,
) -> Result<Prepared> {
    let (n, stem) = (load.agents, pass.stem.as_str());
    let setup = Instant::now();
    let store = db.store();
    let names = pass.agent_names;
    let tokens: Vec<String> = futures::stream::iter(0..n)
        .map(|index| async move {
            let created = store.create_agent(&format!("{names}-{index}")).await?;
            anyhow::Ok(created.token.into_string())
        })
        .buffered(SETUP_CONCURRENCY)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_>>()?;
    eprintln!(
        "bench_scale: {stem}: {n} agents created in {:.1?}",
        setup.elapsed()
    );

    let addr: SocketAddr = agent_url
        .trim_start_matches("http://")
        .trim_start_matches("https://")
        .parse()
        .context("the server prints a socket address")?;
    // tonic only sees http://; TLS (when on) runs inside the connector.
    let endpoint = Endpoint::from_shared(format!("http://{addr}"))?;
    let written = Arc::new(AtomicU64::new(0));
    let connecting = Instant::now();
    let channels: Vec<Channel> = futures::stream::iter(0..n)
        .map(|_| connect(&endpoint, addr, &pass.transport, &written))
        .buffered(SETUP_CONCURRENCY)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_>>()?;
    eprintln!(
        "bench_scale: {stem}: {n} connections in {:.1?}",
        connecting.elapsed()
    );
    let agents: Vec<SimulatedAgent> = tokens
        .into_iter()
        .zip(channels)
        .enumerate()
        .map(|(index, (token, channel))| SimulatedAgent {
            index,
            token,
            run_id: uuid::Uuid::new_v4().to_string(),
            client: v1::agent_client::AgentClient::new(channel),
            delta: false,
            base: None,
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss_idle = status_kib(pid, "VmRSS")? / 1024.0;

    // Startup, the call stream and the first (initial, full) push of every agent, before
    // the window.
    let warming = Instant::now();
    let streams = Arc::new(CallStreams::default());
    let agents: Vec<SimulatedAgent> = futures::stream::iter(agents)
        .map(|mut agent| {
            let streams = &streams;
            async move {
                let startup = v1::UpdateStartupRequest::from(Startup {
                    agent_run_id: RunId::new(agent.run_id.clone()),
                    accepts_tool_calls: true,
                    ..Startup::default()
                });
                let answer = agent
                    .client
                    .update_startup(with_bearer(startup, &agent.token))
                    .await
                    .context("startup")?;
                let answer = answer.into_inner();
                agent.delta = answer.delta_digest_scheme == DELTA_DIGEST_SCHEME;
                if answer.accepts_tool_calls {
                    open_call_stream(&agent, streams).await;
                } else {
                    streams.failed(format!(
                        "agent {}: the server's startup answer does not accept tool calls",
                        agent.index
                    ));
                }
                anyhow::Ok(agent)
            }
        })
        .buffer_unordered(SETUP_CONCURRENCY)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_>>()?;
    let deltas = agents.iter().filter(|a| a.delta).count();
    let opened = streams.opened.load(Ordering::Relaxed);
    eprintln!(
        "bench_scale: {stem}: {opened} of {n} call streams opened in {:.1?}",
        warming.elapsed()
    );
    let before_full = written.load(Ordering::Relaxed);
    let agents: Vec<SimulatedAgent> = futures::stream::iter(agents)
        .map(|mut agent| async move {
            agent.push(0).await.map_err(anyhow::Error::msg)?;
            anyhow::Ok(agent)
        })
        .buffer_unordered(SETUP_CONCURRENCY)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_>>()?;
    let full_push_bytes = (written.load(Ordering::Relaxed) - before_full) as f64 / n as f64;
    eprintln!(
        "bench_scale: {stem}: startups and first pushes in {:.1?}; {deltas} of {n} agents offered delta pushes; a full push is {full_push_bytes:.0} bytes on the wire",
        warming.elapsed()
    );

    Ok(Prepared {
        agents,
        written,
        rss_idle,
        deltas,
        full_push_bytes,
        streams,
    })
}

/// What one measured window saw.
struct Measured {
    /// The median accepted pushes per second over the window's slices.
    rate: f64,
    tally: Tally,
    before: Reading,
    after: Reading,
    rss_load: f64,
    /// Call streams open at the window's end.
    streams_open: usize,
    /// Call streams that ended within the window.
    streams_ended_in_window: usize,
}

/// Lets every agent push through the window and reads CPU, memory and bytes around it.
async fn measure_window(
    load: &Load,
    stem: &str,
    url: &str,
    database: &str,
    pid: u32,
    agents: Vec<SimulatedAgent>,
    prepared: &Prepared,
) -> Result<Measured> {
    let (n, written, streams) = (load.agents, &prepared.written, &prepared.streams);
    settle(stem, url);
    eprintln!(
        "bench_scale: {stem}: {n} agents pushing every {:?} for {:?}",
        load.interval, load.duration
    );
    let tally = Arc::new(Mutex::new(Tally::default()));
    let window_start = Instant::now() + Duration::from_millis(500);
    let window_end = window_start + load.duration;
    let tasks: Vec<_> = agents
        .into_iter()
        .map(|agent| {
            tokio::spawn(run_agent(
                agent,
                n,
                load.interval,
                window_start,
                window_end,
                tally.clone(),
            ))
        })
        .collect();
    tokio::time::sleep_until(window_start.into()).await;
    let before = Reading::take(pid, database, written)?;
    // Sample the server's memory through the window.
    let mut rss_samples = Vec::new();
    while Instant::now() < window_end {
        tokio::time::sleep(Duration::from_secs(1)).await;
        rss_samples.push(status_kib(pid, "VmRSS")? / 1024.0);
    }
    let streams_open = streams.open_at(window_end);
    let streams_ended_in_window = streams.ended_in(window_start, window_end);
    for task in tasks {
        task.await?;
    }
    let after = Reading::take(pid, database, written)?;
    let rss_load = rss_samples.iter().copied().fold(f64::NAN, f64::max);

    let tally = Arc::try_unwrap(tally)
        .map_err(|_| anyhow::anyhow!("agents still running"))?
        .into_inner()
        .expect("tally lock");
    let slices = (load.duration.as_secs_f64() / load.slice.as_secs_f64()).round() as usize;
    let rates: Vec<f64> = (0..slices)
        .map(|s| {
            let from = load.slice * s as u32;
            let to = from + load.slice;
            let count = tally
                .accepted
                .iter()
                .filter(|(at, _)| *at >= from && *at < to)
                .count();
            count as f64 / load.slice.as_secs_f64()
        })
        .collect();
    let rate = median(rates);
    // Latency through the window, to tell a steady figure from a stall.
    for s in 0..slices {
        let from = load.slice * s as u32;
        let to = from + load.slice;
        let slice: Vec<Duration> = tally
            .accepted
            .iter()
            .filter(|(at, _)| *at >= from && *at < to)
            .map(|(_, latency)| *latency)
            .collect();
        eprintln!(
            "bench_scale: {stem}: {from:?}..{to:?}: {} accepted, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            slice.len(),
            percentile_ms(&slice, 50.0),
            percentile_ms(&slice, 99.0),
            percentile_ms(&slice, 100.0),
        );
    }
    Ok(Measured {
        rate,
        tally,
        before,
        after,
        rss_load,
        streams_open,
        streams_ended_in_window,
    })
}

/// Prints one pass's rows: throughput, latency, errors, bytes, memory and CPU.
fn emit_pass_rows(load: &Load, pass: &Pass<'_>, prepared: &Prepared, measured: &Measured) {
    let (n, stem) = (load.agents, pass.stem.as_str());
    let Measured {
        rate,
        tally,
        before,
        after,
        rss_load,
        streams_open,
        streams_ended_in_window,
    } = measured;
    let (rate, rss_load) = (*rate, *rss_load);
    let Prepared {
        rss_idle,
        deltas,
        full_push_bytes,
        streams,
        ..
    } = prepared;
    let (rss_idle, deltas, full_push_bytes) = (*rss_idle, *deltas, *full_push_bytes);
    let latencies: Vec<Duration> = tally.accepted.iter().map(|(_, l)| *l).collect();
    if let Some(error) = &tally.first_error {
        eprintln!(
            "bench_scale: {stem}: {} errors, the first: {error}",
            tally.errors
        );
    }

    let accepted = tally.accepted.len();
    let bytes_per_push = (after.written - before.written) as f64 / tally.requests.max(1) as f64;

    let offered = load.offered();
    let secs = load.interval.as_secs();
    let targets = pass.targets;
    row(
        &format!("{stem}.accepted_pushes_per_s"),
        rate,
        "pushes/s",
        Some(offered),
        Some(&format!(
            "reference: offered load (agents / {secs} s); ratio >= 0.95"
        )),
        Some(rate / offered >= 0.95),
    );
    row(
        &format!("{stem}.push_latency_p50"),
        percentile_ms(&latencies, 50.0),
        "ms",
        None,
        None,
        None,
    );
    let p99 = percentile_ms(&latencies, 99.0);
    row(
        &format!("{stem}.push_latency_p99"),
        p99,
        "ms",
        None,
        targets.then_some("<= 50 ms"),
        targets.then_some(p99 <= 50.0),
    );
    row(
        &format!("{stem}.errors"),
        tally.errors as f64,
        "pushes",
        None,
        Some("= 0"),
        Some(tally.errors == 0),
    );
    row(
        &format!("{stem}.delta_base_missing"),
        tally.base_missing as f64,
        "pushes",
        None,
        Some("= 0 (each is followed by a full push)"),
        Some(tally.base_missing == 0),
    );
    let bytes_target = if deltas == n {
        "delta pushes; reference: a full push of the same 50 resources; client->server bytes on the TCP connection (gRPC message, HTTP/2 frames and headers, TLS records if on)"
    } else {
        "full pushes (the server offered no delta pushes to some agents); reference: the first full push"
    };
    row(
        &format!("{stem}.bytes_per_push"),
        bytes_per_push,
        "bytes",
        Some(full_push_bytes),
        Some(bytes_target),
        None,
    );
    row(&pass.idle_row, rss_idle, "MiB", None, None, None);
    row(
        &format!("{stem}.server_rss_under_load"),
        rss_load,
        "MiB",
        None,
        targets.then_some("<= 512 MiB"),
        targets.then_some(rss_load <= 512.0),
    );
    emit_stream_row(stem, n, streams, *streams_open, *streams_ended_in_window);
    emit_cpu_rows(stem, before, after, accepted);
}

/// Prints how many call streams were open at the window's end, and says on stderr what
/// became of the others.
fn emit_stream_row(stem: &str, n: usize, streams: &CallStreams, open: usize, ended_in: usize) {
    let opened = streams.opened.load(Ordering::Relaxed);
    let failed = streams.failed.load(Ordering::Relaxed);
    let ended_before = opened - open - ended_in;
    let heartbeats = streams.heartbeats.load(Ordering::Relaxed);
    let unexpected = streams.unexpected.load(Ordering::Relaxed);
    eprintln!(
        "bench_scale: {stem}: call streams: {open} of {n} open at the window's end; {failed} did not open, {ended_before} ended before the window, {ended_in} in it; {heartbeats} server heartbeats, {unexpected} other messages"
    );
    if let Some(problem) = streams.first_problem.lock().expect("streams lock").as_ref() {
        eprintln!("bench_scale: {stem}: the first call stream problem: {problem}");
    }
    row(
        &format!("{stem}.call_streams_open"),
        open as f64,
        "streams",
        Some(n as f64),
        Some(&format!(
            "= agents: every agent's ToolCalls stream open at the window's end ({failed} did not open, {ended_before} ended before the window, {ended_in} in it)"
        )),
        Some(open == n),
    );
}

/// Prints CPU rows over the window: seconds of CPU per push, and shares of the machine.
fn emit_cpu_rows(stem: &str, before: &Reading, after: &Reading, accepted: usize) {
    // CPU over the window: seconds of CPU, and shares of the machine's capacity.
    let window = (after.at - before.at).as_secs_f64();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let share = |seconds: f64| seconds / (window * cores);
    let per_push = |seconds: f64| seconds * 1000.0 / accepted.max(1) as f64;
    let server_cpu = after.server - before.server;
    let generator_cpu = after.generator - before.generator;
    // Nothing seen is nothing measured, not a cluster that used no CPU.
    let seen = after.postgres.len();
    let postgres = if seen == 0 {
        PgCpu {
            cluster: f64::NAN,
            benchmark: f64::NAN,
            other: f64::NAN,
        }
    } else {
        postgres_cpu(&before.postgres, &after.postgres)
    };
    let count = |role| after.postgres.iter().filter(|p| p.role == role).count();
    let (backends, others) = (count(PgRole::BenchmarkBackend), count(PgRole::OtherBackend));
    let (busy, total) = (
        after.machine.0 - before.machine.0,
        after.machine.1 - before.machine.1,
    );
    let machine_busy = busy as f64 / total.max(1) as f64;
    let server_per_push = per_push(server_cpu);
    row(
        &format!("{stem}.server_cpu_per_push"),
        server_per_push,
        "ms",
        None,
        Some(
            "<= 0.5 ms: server CPU time (user + system) from the window's start to its last answer / pushes accepted",
        ),
        Some(server_per_push <= 0.5),
    );
    let postgres_per_push = per_push(postgres.cluster);
    let postgres_target = if seen == 0 {
        "<= 0.5 ms: not measured, no PostgreSQL process visible from here".to_owned()
    } else {
        format!(
            "<= 0.5 ms: CPU time (user + system) of every process of the PostgreSQL cluster ({seen} at the end; ended ones through their parent) from the window's start to its last answer / pushes accepted; of it, benchmark database backends {:.3} ms, postmaster and background processes {:.3} ms, other databases' backends (other work on the cluster) {:.3} ms",
            per_push(postgres.benchmark),
            per_push(postgres.background()),
            per_push(postgres.other),
        )
    };
    row(
        &format!("{stem}.postgres_cpu_per_push"),
        postgres_per_push,
        "ms",
        None,
        Some(&postgres_target),
        postgres_per_push
            .is_finite()
            .then_some(postgres_per_push <= 0.5),
    );
    let machine = format!("{cores} cores");
    row(
        &format!("{stem}.server_cpu_share"),
        share(server_cpu),
        "of machine",
        None,
        Some(&format!("server CPU s / (window s x {machine})")),
        None,
    );
    row(
        &format!("{stem}.generator_cpu_share"),
        share(generator_cpu),
        "of machine",
        None,
        Some("load generator (this process) CPU s / (window s x cores)"),
        None,
    );
    row(
        &format!("{stem}.postgres_cpu_share"),
        share(postgres.cluster),
        "of machine",
        None,
        Some(&format!(
            "every process of the PostgreSQL cluster ({seen} at the end: {backends} backends of the benchmark database, {others} of other databases) CPU s / (window s x cores)"
        )),
        None,
    );
    row(
        &format!("{stem}.machine_cpu_busy_share"),
        machine_busy,
        "of machine",
        None,
        Some("every process on the machine, other users' included (/proc/stat)"),
        None,
    );
    eprintln!(
        "bench_scale: {stem}: {accepted} accepted in {window:.1} s; CPU s: server {server_cpu:.1}, generator {generator_cpu:.1}, postgres cluster {:.1} (benchmark database backends {:.1}, postmaster and background {:.1}, other databases' backends {:.1}); machine busy {:.0}%",
        postgres.cluster,
        postgres.benchmark,
        postgres.background(),
        postgres.other,
        machine_busy * 100.0
    );
}
