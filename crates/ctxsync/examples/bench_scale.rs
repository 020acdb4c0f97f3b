//! Benchmark: many simulated agents pushing to one `ctxsync server` process on PostgreSQL.
//!
//! 1000 agents (`--quick`: 100), each an in-process gRPC client over loopback with its own
//! connection, agent row, token and run id, push a 50-resource snapshot every 2 s for
//! 60 s (`--quick`: 10 s). Each push changes one resource (an edited file), as a working
//! agent does; the first push of every agent (all 50 rows inserted) happens before the
//! measured window. Prints accepted pushes per second (the median of 10 s slices, `--quick`:
//! 2 s slices) against the offered rate, push latency p50/p99, errors, and the server's
//! resident memory idle and under load from `/proc/<pid>/status`.
//!
//! Then the same load again against a second server with TLS on its listeners (a CA and
//! certificate made at start; every agent its own TLS 1.3 connection), with the same rows
//! under `scale.tls.*` and TLS's accepted rate over plain text's.
//!
//! `cargo run --release -p ctxsync --example bench_scale -- [--quick]` prints one JSON row
//! per line on stdout; progress goes to stderr. The load generator shares the machine with
//! the server and PostgreSQL.

mod support;

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use ctxsync_persistence::test_support::{TestStore, with_bearer};
use ctxsync_protocol::{
    DiscoveryPhase, InstructionFileBody, Resource, ResourceBody, ResourceStatus, Snapshot, Startup,
    v1,
};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::sync::Mutex;
use tonic::codegen::http::Uri;
use tonic::transport::{Channel, Endpoint};

use support::{ServerProcess, ctxsync_binary, percentile_ms, row, status_kib};

const RESOURCES: usize = 50;
const INTERVAL: Duration = Duration::from_secs(2);
/// Bound on one push; a push slower than this counts as an error.
const PUSH_TIMEOUT: Duration = Duration::from_secs(30);

struct Load {
    agents: usize,
    duration: Duration,
    slice: Duration,
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
        agent_run_id: Some(run_id.to_owned()),
        phase: DiscoveryPhase::Complete,
        ..Default::default()
    }
    .into()
}

/// What the agents observed in the measured window.
#[derive(Default)]
struct Tally {
    /// (when, since the window opened; latency) of every accepted push.
    accepted: Vec<(Duration, Duration)>,
    errors: usize,
    first_error: Option<String>,
}

struct SimulatedAgent {
    index: usize,
    token: String,
    run_id: String,
    client: v1::agent_client::AgentClient<Channel>,
}

impl SimulatedAgent {
    async fn push(&mut self, generation: usize) -> Result<Duration, String> {
        let started = Instant::now();
        let request = with_bearer(request(self.index, &self.run_id, generation), &self.token);
        let response =
            tokio::time::timeout(PUSH_TIMEOUT, self.client.push_context_state(request)).await;
        match response {
            Err(_) => Err(format!("push timed out after {PUSH_TIMEOUT:?}")),
            Ok(Err(status)) => Err(format!("push failed: {status}")),
            Ok(Ok(response)) if !response.get_ref().accepted => Err("push not accepted".to_owned()),
            Ok(Ok(_)) => Ok(started.elapsed()),
        }
    }
}

async fn run_agent(
    mut agent: SimulatedAgent,
    agents: usize,
    window_start: Instant,
    window_end: Instant,
    tally: Arc<Mutex<Tally>>,
) {
    // Spread the agents evenly over one interval, as independent processes would be.
    let phase = INTERVAL.mul_f64(agent.index as f64 / agents as f64);
    let mut ticks = tokio::time::interval_at((window_start + phase).into(), INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut generation = 1;
    loop {
        let tick = ticks.tick().await.into_std();
        if tick >= window_end {
            return;
        }
        let result = agent.push(generation).await;
        generation += 1;
        let mut tally = tally.lock().await;
        match result {
            Ok(latency) => tally.accepted.push((tick - window_start, latency)),
            Err(error) => {
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

/// How the simulated agents reach the server.
#[derive(Clone)]
enum Transport {
    Plain,
    /// TLS to a certificate for `localhost` from this CA (PEM files in the data dir).
    Tls(tokio_rustls::TlsConnector),
}

/// One TCP connection with TLS over it, per channel (as the real agent's connector).
#[derive(Clone)]
struct TlsConnect {
    addr: SocketAddr,
    tls: tokio_rustls::TlsConnector,
}

impl tower_service::Service<Uri> for TlsConnect {
    type Response = TokioIo<tokio_rustls::client::TlsStream<TcpStream>>;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Uri) -> Self::Future {
        let (addr, tls) = (self.addr, self.tls.clone());
        Box::pin(async move {
            let tcp = TcpStream::connect(addr).await?;
            tcp.set_nodelay(true)?;
            let name = rustls_pki_types::ServerName::try_from("localhost").expect("a DNS name");
            Ok(TokioIo::new(tls.connect(name, tcp).await?))
        })
    }
}

/// Writes a CA-signed certificate for `localhost` into `dir`; returns the server's flags
/// and a connector trusting the CA.
fn make_tls(dir: &std::path::Path) -> Result<(Vec<String>, tokio_rustls::TlsConnector)> {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate()?;
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate()?;
    let cert = CertificateParams::new(vec!["localhost".to_owned()])?.signed_by(&key, &issuer)?;
    let (cert_file, key_file) = (dir.join("server.pem"), dir.join("server.key"));
    std::fs::write(&cert_file, cert.pem())?;
    std::fs::write(&key_file, key.serialize_pem())?;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca_cert.der().clone())?;
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
    let load = if quick {
        Load {
            agents: 100,
            duration: Duration::from_secs(10),
            slice: Duration::from_secs(2),
        }
    } else {
        Load {
            agents: 1000,
            duration: Duration::from_secs(60),
            slice: Duration::from_secs(10),
        }
    };
    let ctxsync = ctxsync_binary("bench_scale")?;
    let Some(db) = TestStore::postgres().await else {
        eprintln!("bench_scale: PostgreSQL unavailable, skipped");
        return Ok(());
    };
    let plain = run(&ctxsync, &db, &load, "scale", Transport::Plain, &[]).await?;
    let data = tempfile::tempdir()?;
    let (flags, connector) = make_tls(data.path())?;
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let tls = run(
        &ctxsync,
        &db,
        &load,
        "scale.tls",
        Transport::Tls(connector),
        &flags,
    )
    .await?;
    row(
        &format!("scale.{}_agents.tls_vs_plain_accepted_rate", load.agents),
        tls,
        "pushes/s",
        Some(plain),
        Some("TLS keeps up with the offered load as plain text does: ratio >= 0.95"),
        Some(tls / plain >= 0.95),
    );
    Ok(())
}

/// One pass: a server, `load.agents` agents, the measured window; prints the rows under
/// `prefix` and returns the accepted rate.
async fn run(
    ctxsync: &std::path::Path,
    db: &TestStore,
    load: &Load,
    prefix: &str,
    transport: Transport,
    server_flags: &[&str],
) -> Result<f64> {
    let url = db
        .postgres_database()
        .context("a PostgreSQL store")?
        .url()
        .to_owned();

    let data = tempfile::tempdir()?;
    let server = ServerProcess::start(ctxsync, &url, data.path(), server_flags).await?;
    let (pid, agent_url) = (server.pid, server.agent_url.clone());
    eprintln!("bench_scale: server pid {pid} at {agent_url}");

    eprintln!("bench_scale: creating {} agents", load.agents);
    let addr: SocketAddr = agent_url
        .trim_start_matches("http://")
        .trim_start_matches("https://")
        .parse()
        .context("the server prints a socket address")?;
    // tonic only sees http://; TLS (when on) runs inside the connector.
    let endpoint = Endpoint::from_shared(format!("http://{addr}"))?;
    let mut agents = Vec::with_capacity(load.agents);
    for index in 0..load.agents {
        let created = db
            .store()
            .create_agent(&format!("{prefix}-{index}"))
            .await?;
        let channel = match &transport {
            Transport::Plain => endpoint.connect().await,
            Transport::Tls(tls) => {
                endpoint
                    .connect_with_connector(TlsConnect {
                        addr,
                        tls: tls.clone(),
                    })
                    .await
            }
        }
        .context("connecting an agent")?;
        agents.push(SimulatedAgent {
            index,
            token: created.token.into_string(),
            run_id: uuid::Uuid::new_v4().to_string(),
            client: v1::agent_client::AgentClient::new(channel),
        });
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss_idle = status_kib(pid, "VmRSS")? / 1024.0;

    // Startup and the first (initial) push of every agent, before the measured window.
    eprintln!("bench_scale: startup and first push of every agent");
    let warmups = agents.into_iter().map(|mut agent| async move {
        let startup = v1::UpdateStartupRequest::from(Startup {
            agent_run_id: Some(agent.run_id.clone()),
            ..Startup::default()
        });
        agent
            .client
            .update_startup(with_bearer(startup, &agent.token))
            .await
            .context("startup")?;
        agent.push(0).await.map_err(anyhow::Error::msg)?;
        anyhow::Ok(agent)
    });
    let mut agents = Vec::with_capacity(load.agents);
    for result in futures::future::join_all(warmups).await {
        agents.push(result?);
    }

    eprintln!(
        "bench_scale: {} agents pushing every {INTERVAL:?} for {:?}",
        load.agents, load.duration
    );
    let n = load.agents;
    let tally = Arc::new(Mutex::new(Tally::default()));
    let window_start = Instant::now() + Duration::from_millis(200);
    let window_end = window_start + load.duration;
    let tasks: Vec<_> = agents
        .into_iter()
        .map(|agent| tokio::spawn(run_agent(agent, n, window_start, window_end, tally.clone())))
        .collect();
    // Sample the server's memory through the window.
    let mut rss_samples = Vec::new();
    while Instant::now() < window_end {
        tokio::time::sleep(Duration::from_secs(1)).await;
        rss_samples.push(status_kib(pid, "VmRSS")? / 1024.0);
    }
    for task in tasks {
        task.await?;
    }
    let rss_load = rss_samples.iter().copied().fold(f64::NAN, f64::max);

    let tally = Arc::try_unwrap(tally)
        .map_err(|_| anyhow::anyhow!("agents still running"))?
        .into_inner();
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
    let mut latencies: Vec<Duration> = tally.accepted.iter().map(|(_, l)| *l).collect();
    latencies.sort();
    if let Some(error) = &tally.first_error {
        eprintln!("bench_scale: {} errors, the first: {error}", tally.errors);
    }

    let offered = n as f64 / INTERVAL.as_secs_f64();
    row(
        &format!("{prefix}.{n}_agents.accepted_pushes_per_s"),
        rate,
        "pushes/s",
        Some(offered),
        Some("reference: offered load (agents / 2 s); ratio >= 0.95"),
        Some(rate / offered >= 0.95),
    );
    row(
        &format!("{prefix}.{n}_agents.push_latency_p50"),
        percentile_ms(&latencies, 50.0),
        "ms",
        None,
        None,
        None,
    );
    row(
        &format!("{prefix}.{n}_agents.push_latency_p99"),
        percentile_ms(&latencies, 99.0),
        "ms",
        None,
        None,
        None,
    );
    row(
        &format!("{prefix}.{n}_agents.errors"),
        tally.errors as f64,
        "pushes",
        None,
        Some("= 0"),
        Some(tally.errors == 0),
    );
    row(
        &format!("{prefix}.server_rss_idle"),
        rss_idle,
        "MiB",
        None,
        None,
        None,
    );
    row(
        &format!("{prefix}.{n}_agents.server_rss_under_load"),
        rss_load,
        "MiB",
        None,
        None,
        None,
    );

    server.stop().await?;
    Ok(rate)
}
