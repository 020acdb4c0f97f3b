//! Fault injection: a first-turn waiter whose HTTP client disconnects does not break later
//! turns, and a PostgreSQL outage (a loopback proxy that resets every connection, or
//! black-holes them) fails pushes with `Unavailable` until the database is back, then
//! the agent's newest snapshot lands and change notifications flow again. (A server killed
//! mid-stream and restarted is `agent.rs`'s `a_server_restart_loses_nothing`.)

use crate::processes;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ctxsync::server::ServerConfig;
use ctxsync_mcp_fixture::FixtureConfig;
use ctxsync_persistence::test_support::{TestStore, postgres_url};
use ctxsync_persistence::{AgentContext, AgentId, NewAgent};
use ctxsync_protocol::{DiscoveryPhase, ResourceBody, RunId};
use processes::{AgentProcess, Logs, ServerProcess, TestBackend, Workspace, database};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

/// The first push of agent run `run`: discovery complete, no resources.
fn first_complete_snapshot(run: &str, aggregate_hash: &str) -> ctxsync_protocol::Snapshot {
    ctxsync_protocol::Snapshot {
        version: 1,
        aggregate_hash: aggregate_hash.into(),
        resources: vec![],
        initial: true,
        snapshot_error: None,
        agent_run_id: RunId::new(run),
        phase: DiscoveryPhase::Complete,
        ..Default::default()
    }
}

/// A first turn that waits for discovery, whose HTTP client goes away mid-wait, leaves
/// the server able to answer later turns (and their waits) normally.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_client_disconnects_does_not_break_later_turns() {
    // Heavy: one at a time in this binary (see ctxsync-test-support's `heavy`).
    let _heavy = ctxsync_test_support::heavy().await;
    let store = TestStore::sqlite().await;
    let dir = tempfile::tempdir().unwrap();
    let server = ctxsync::server::start(ServerConfig {
        database: store.config().clone(),
        api_token: Some("fault-api-token-0123456789".into()),
        discovery_budget: Duration::from_secs(3),
        snapshot_grace: Duration::from_secs(3),
        ..ServerConfig::ephemeral(dir.path())
    })
    .await
    .unwrap();
    let agent = store.create_agent("waiter").await.unwrap();
    let chat = store.create_chat(Some(agent.id)).await.unwrap();
    let turn_url = format!("{}/api/chats/{}/turns", server.http_url(), chat.id);
    let http = reqwest::Client::new();
    let turn = || {
        http.post(&turn_url)
            .bearer_auth(&server.api_token)
            .json(&serde_json::json!({ "mode": "default" }))
            .send()
    };

    // The agent process has started but not pushed yet: a first turn waits for it.
    let startup = ctxsync_protocol::Startup {
        version: "t".into(),
        expanded_directory: "/ws".into(),
        agent_run_id: RunId::new("run-1"),
        accepts_tool_calls: false,
    };
    store.update_startup(agent.id, startup).await.unwrap();
    // Three clients give up 200 ms into a wait of up to 3 s.
    for _ in 0..3 {
        let abandoned = tokio::time::timeout(Duration::from_millis(200), turn()).await;
        assert!(abandoned.is_err(), "the turn waits for a snapshot");
    }
    // The agent now publishes; a new turn is answered at once, without waiting.
    let snapshot = first_complete_snapshot("run-1", "agg");
    assert!(
        store
            .push_context_state(agent.id, snapshot)
            .await
            .unwrap()
            .accepted()
    );
    let started = Instant::now();
    let response = turn().await.unwrap();
    assert_eq!(response.status(), 200);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["mcp_discovery"]["phase"], "complete", "{body}");
    assert_eq!(body["mcp_discovery"]["wait_timed_out"], false, "{body}");
    assert!(started.elapsed() < Duration::from_secs(1), "{body}");
}

// ---- PostgreSQL outage ---------------------------------------------------------------

const API_TOKEN: &str = "pg-cut-api-token-0123456789";
/// Bound on every step of the outage test; generous, never reached when the code works.
const STEP: Duration = Duration::from_secs(30);
/// Bound on one HTTP request to the server, during the outage included.
const REQUEST: Duration = Duration::from_secs(10);
/// The server's small database budgets, so the outage test never waits for defaults.
const DB_CONNECTION_TIMEOUT_MS: &str = "500";
const DB_OPERATION_TIMEOUT_MS: &str = "5000";
/// What the agent's workspace gains while the database is cut.
const WRITTEN_WHILE_CUT: &str = "# Written while PostgreSQL was cut\n";

/// The state of the proxy's path to PostgreSQL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Path {
    /// Forwarding.
    Up,
    /// The database stopped: open connections are reset both ways, new ones on arrival.
    Cut,
    /// A silent network: open connections stop forwarding and new ones are accepted but
    /// never forwarded; all of them are reset when the path comes back, as a peer that
    /// lost its state would.
    BlackHole,
}

/// A loopback TCP proxy in front of PostgreSQL that the test can break and restore.
struct Proxy {
    addr: SocketAddr,
    path: watch::Sender<Path>,
    /// Connections that arrived while the path was down.
    refused: Arc<AtomicU64>,
    /// Open connections broken by a fault.
    severed: Arc<AtomicU64>,
    // Aborting it drops the listener and, with its `JoinSet`, every connection.
    accept: JoinHandle<()>,
}

impl Proxy {
    async fn start(upstream: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a proxy port");
        let addr = listener.local_addr().unwrap();
        let (path, path_rx) = watch::channel(Path::Up);
        let refused = Arc::new(AtomicU64::new(0));
        let severed = Arc::new(AtomicU64::new(0));
        let (refused_count, severed_count) = (refused.clone(), severed.clone());
        let accept = tokio::spawn(async move {
            let mut connections = JoinSet::new();
            loop {
                while connections.try_join_next().is_some() {}
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                let mut state = path_rx.clone();
                let fault = *state.borrow();
                if fault != Path::Up {
                    refused_count.fetch_add(1, Ordering::Relaxed);
                    if fault == Path::Cut {
                        reset(client);
                    } else {
                        // Held silently until the path comes back, then reset.
                        connections.spawn(async move {
                            let _ = state.wait_for(|p| *p == Path::Up).await;
                            reset(client);
                        });
                    }
                    continue;
                }
                let upstream = upstream.clone();
                let severed = severed_count.clone();
                connections.spawn(async move {
                    let Ok(mut server) = TcpStream::connect(&upstream).await else {
                        reset(client);
                        return;
                    };
                    let mut client = client;
                    let broken = tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => false,
                        _ = async { drop(state.wait_for(|p| *p != Path::Up).await) } => true,
                    };
                    if broken {
                        severed.fetch_add(1, Ordering::Relaxed);
                        // A black hole keeps both sockets open, silent, until it heals.
                        drop(state.wait_for(|p| *p != Path::BlackHole).await);
                        reset(client);
                        reset(server);
                    }
                });
            }
        });
        Self {
            addr,
            path,
            refused,
            severed,
            accept,
        }
    }

    fn set(&self, path: Path) {
        self.path.send_replace(path);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Closes with RST rather than FIN: the peer's next read or write fails at once.
fn reset(stream: TcpStream) {
    let _ = stream.set_zero_linger();
    drop(stream);
}

/// The `host:port` of a `postgres://` URL (port 5432 when absent).
fn authority(url: &str) -> (usize, usize, String) {
    let start = url.find("://").expect("a URL scheme") + 3;
    let end = url[start..]
        .find(['/', '?'])
        .map_or(url.len(), |i| start + i);
    let host_start = url[start..end]
        .rfind('@')
        .map_or(start, |at| start + at + 1);
    let host = &url[host_start..end];
    let host = if host.contains(':') {
        host.to_owned()
    } else {
        format!("{host}:5432")
    };
    (host_start, end, host)
}

/// `url` with its host and port replaced by `addr`.
fn through(url: &str, addr: SocketAddr) -> String {
    let (start, end, _) = authority(url);
    format!("{}{addr}{}", &url[..start], &url[end..])
}

/// The outage test's processes and logs, for bounded steps that show the logs on timeout.
struct Outage {
    logs: Logs,
    http: reqwest::Client,
    started: Instant,
}

impl Outage {
    /// Runs one step within `limit`, or panics naming the step, with both logs.
    async fn step<T>(&self, what: &str, limit: Duration, work: impl Future<Output = T>) -> T {
        match tokio::time::timeout(limit, work).await {
            Ok(value) => {
                eprintln!("[{:>8.3?}] done: {what}", self.started.elapsed());
                value
            }
            Err(_) => panic!(
                "step timed out after {limit:?} ({:?} into the test): {what}\nserver log:\n{}\nagent log:\n{}",
                self.started.elapsed(),
                self.logs.read("server"),
                self.logs.read("agent"),
            ),
        }
    }

    /// Polls `check` every 25 ms until it yields a value, within [`STEP`].
    async fn until<T, F: Future<Output = Option<T>>>(
        &self,
        what: &str,
        mut check: impl FnMut() -> F,
    ) -> T {
        self.step(what, STEP, async {
            loop {
                if let Some(value) = check().await {
                    return value;
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
        })
        .await
    }

    async fn log_contains(&self, name: &str, needle: &str) -> bool {
        self.logs.read(name).contains(needle)
    }

    /// One authenticated GET: status and body, bounded by [`REQUEST`].
    async fn get(&self, url: &str) -> (u16, String) {
        self.step(&format!("GET {url}"), REQUEST, async {
            let response = self
                .http
                .get(url)
                .bearer_auth(API_TOKEN)
                .send()
                .await
                .unwrap_or_else(|e| panic!("GET {url}: {e}"));
            let status = response.status().as_u16();
            (status, response.text().await.unwrap_or_default())
        })
        .await
    }

    /// A counter or gauge from the server's `/metrics`.
    async fn metric(&self, server: &ServerProcess, series: &str) -> u64 {
        let (status, text) = self.get(&format!("{}/metrics", server.http_url())).await;
        assert_eq!(status, 200, "/metrics: {text}");
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .map_or(0, |v| v.trim().parse::<f64>().unwrap_or(0.0) as u64)
    }

    /// How many agent API calls the agent saw fail with `Unavailable`.
    fn unavailable_attempts(&self) -> usize {
        self.logs
            .read("agent")
            .lines()
            .filter(|l| l.contains("failed: Unavailable"))
            .count()
    }
}

/// The versions the agent logged as accepted, in order.
fn accepted_versions(agent_log: &str) -> Vec<u64> {
    const ACCEPTED: &str = "the server accepted the snapshot version=";
    agent_log
        .lines()
        .filter_map(|l| l.split_once(ACCEPTED))
        .filter_map(|(_, rest)| rest.split_whitespace().next()?.parse().ok())
        .collect()
}

/// PostgreSQL goes away under a running server and agent (every connection reset, new
/// ones refused) and comes back. While it is gone pushes fail with `Unavailable`, the
/// server keeps running and answers HTTP with 503 instead of hanging; once it is back
/// the change made during the outage lands (same run, higher version, exact content,
/// each version accepted once) and the server's LISTEN connection wakes a waiting turn
/// again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_outage_fails_pushes_and_everything_recovers() {
    // Heavy: one at a time in this binary (see ctxsync-test-support's `heavy`).
    let _heavy = ctxsync_test_support::heavy().await;
    outage(Path::Cut).await;
}

/// The same with a silent network instead of a stopped database: nothing is reset until
/// the path heals, so only the server's own bounds (pool wait, operation deadline, libpq
/// connect timeout) keep requests from hanging.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_black_holed_postgres_fails_pushes_and_everything_recovers() {
    // Heavy: one at a time in this binary (see ctxsync-test-support's `heavy`).
    let _heavy = ctxsync_test_support::heavy().await;
    outage(Path::BlackHole).await;
}

async fn outage(fault: Path) {
    let Some(store) = database(TestBackend::Postgres).await else {
        return;
    };
    let outage = Outage {
        logs: Logs::new(),
        http: reqwest::Client::builder().timeout(REQUEST).build().unwrap(),
        started: Instant::now(),
    };
    // A reference, so the polling closures below can hand it to `async move` blocks.
    let test = &outage;
    let database_url = store.postgres_database().unwrap().url().to_owned();
    let (_, _, upstream) = authority(&postgres_url());
    let proxy = Proxy::start(upstream).await;
    let data_dir = tempfile::tempdir().unwrap();
    let mut server =
        start_server_through_proxy(test, &database_url, proxy.addr, data_dir.path()).await;

    // 1. An agent publishes a complete snapshot through the server.
    let agent = store.create_agent("outage").await.unwrap();
    let workspace = Workspace::new();
    let mut process = start_agent(test, &server, &workspace, &agent);
    let before = wait_for_complete_snapshot(test, &store, agent.id).await;
    let before_version = before.snapshot.as_ref().unwrap().version;
    let run_id = before.agent.agent_run_id.clone();
    assert!(run_id.is_some(), "{before:#?}");
    let grpc_url = server.url();
    let grpc = grpc_url.as_str();
    assert_eq!(grpc_health(grpc).await, Some(Serving::Serving));

    // 2. Cut: the server loses every connection, LISTEN included (a black hole leaves
    //    them open and silent).
    proxy.set(fault);
    let cut_at = Instant::now();
    if fault == Path::Cut {
        test.until(
            "the server noticing its LISTEN connection is gone",
            || async move {
                test.log_contains("server", "LISTEN connection lost")
                    .await
                    .then_some(())
            },
        )
        .await;
    }

    // 3. The HTTP API answers at once with a clear error rather than hanging.
    check_cut_is_answered_at_once(test, &server, agent.id, grpc).await;

    // 4. The workspace changes, so the agent must push; its pushes fail with Unavailable
    //    (and so does registering again on a new connection) until the database is back.
    let attempts_before = test.unavailable_attempts();
    workspace.write("CLAUDE.md", WRITTEN_WHILE_CUT);
    let first_failure_seen = check_pushes_fail_while_cut(
        test,
        &store,
        &mut server,
        &mut process,
        agent.id,
        attempts_before,
        before_version,
    )
    .await;

    // 5. Restore: the change made during the outage lands, from the same process.
    let attempts_while_cut = test.unavailable_attempts() - attempts_before;
    proxy.set(Path::Up);
    let restored_at = Instant::now();
    let (after, recovery) = check_change_lands(
        test,
        &store,
        agent.id,
        grpc,
        restored_at,
        &run_id,
        before_version,
    )
    .await;
    let snapshot_version = after.snapshot.as_ref().unwrap().version;
    let rejected_unavailable = check_nothing_duplicated(test, &server, snapshot_version).await;

    // 6. LISTEN is back: a turn waiting on this server for another process's commit (the
    //    test's own store, not through the proxy) is released by its notification.
    let listen_back = check_listen_releases_a_turn(test, &store, &server, restored_at).await;

    assert!(server.is_running(), "{}", test.logs.read("server"));
    assert!(process.is_running(), "{}", test.logs.read("agent"));
    eprintln!(
        "PostgreSQL outage ({fault:?}): cut for {:?}; pushes failed (Unavailable) from the first \
         observed failure for {:?}; {attempts_while_cut} agent API calls failed while cut \
         ({rejected_unavailable} refused as unavailable by the server in all); the change \
         landed {recovery:?} after restore, LISTEN was back {listen_back:?} after restore; \
         proxy broke {} open and {} new connections",
        restored_at - cut_at,
        restored_at - first_failure_seen,
        proxy.severed.load(Ordering::Relaxed),
        proxy.refused.load(Ordering::Relaxed),
    );
    let stopped = test
        .step("the agent stopping", STEP, process.terminate())
        .await;
    assert!(stopped.success());
}

/// Starts the server with its database behind the proxy at `proxy`, with bounds short
/// enough for the test's steps.
async fn start_server_through_proxy(
    test: &Outage,
    database_url: &str,
    proxy: SocketAddr,
    data_dir: &std::path::Path,
) -> ServerProcess {
    test.step(
        "starting the server through the proxy",
        STEP,
        ServerProcess::start_on(
            &through(database_url, proxy),
            &test.logs,
            &[
                "--data-dir",
                data_dir.to_str().unwrap(),
                "--api-token",
                API_TOKEN,
                "--db-connection-timeout-ms",
                DB_CONNECTION_TIMEOUT_MS,
                "--db-operation-timeout-ms",
                DB_OPERATION_TIMEOUT_MS,
                "--snapshot-grace-ms",
                "20000",
                "--discovery-budget-ms",
                "20000",
                // Only a notification can release a waiting turn within the test.
                "--gate-recheck-ms",
                "600000",
                "--health-interval-ms",
                "100",
            ],
        ),
    )
    .await
}

/// Starts an agent process on a workspace with one MCP server and an `AGENTS.md`.
fn start_agent(
    test: &Outage,
    server: &ServerProcess,
    workspace: &Workspace,
    agent: &NewAgent,
) -> AgentProcess {
    // The fixture MCP server is this test's own `ctxsync` binary: `Workspace::with_servers`
    // would first `cargo build` the fixture crate, which on a cold target directory takes
    // minutes on a busy 2-core machine, outside every step's bound.
    let mut fixture = vec!["mcp-fixture".to_owned()];
    fixture.extend(FixtureConfig::new().tools(1).to_args());
    let servers = serde_json::json!({
        "mcpServers": { "tools": { "command": env!("CARGO_BIN_EXE_ctxsync"), "args": fixture } }
    });
    workspace.write(".mcp.json", servers.to_string());
    workspace.write("AGENTS.md", "# Agents\nBe brief.\n");
    AgentProcess::start(
        &test.logs,
        "agent",
        &server.url(),
        &workspace.path(),
        agent.token.expose(),
        &[],
    )
}

/// Waits for the agent's complete snapshot in the database and returns its context.
async fn wait_for_complete_snapshot(test: &Outage, db: &TestStore, agent: AgentId) -> AgentContext {
    test.until("the agent's complete snapshot", || async move {
        let context = db.read_agent_context(agent).await.unwrap()?;
        let complete = context
            .snapshot
            .as_ref()
            .is_some_and(|s| s.phase == DiscoveryPhase::Complete);
        complete.then_some(context)
    })
    .await
}

/// While cut, the HTTP API answers 503 at once and gRPC health turns NOT_SERVING.
async fn check_cut_is_answered_at_once(
    test: &Outage,
    server: &ServerProcess,
    agent: AgentId,
    grpc: &str,
) {
    let (status, body) = test.get(&format!("{}/healthz", server.http_url())).await;
    assert_eq!(
        (status, body.contains("database unavailable")),
        (503, true),
        "{body}"
    );
    let (status, body) = test
        .get(&format!(
            "{}/api/agents/{}/context",
            server.http_url(),
            agent
        ))
        .await;
    assert_eq!(
        (status, body.contains("database unavailable")),
        (503, true),
        "{body}"
    );

    // gRPC health (no token) follows the database, for a balancer to route agents away.
    test.until("gRPC health answering NOT_SERVING", || async move {
        (grpc_health(grpc).await == Some(Serving::NotServing)).then_some(())
    })
    .await;
}

/// The agent's pushes fail with Unavailable, again and again, while both processes keep
/// running and nothing lands. Returns when the first failure was seen.
async fn check_pushes_fail_while_cut(
    test: &Outage,
    store: &TestStore,
    server: &mut ServerProcess,
    process: &mut AgentProcess,
    agent: AgentId,
    attempts_before: usize,
    before_version: u64,
) -> Instant {
    test.until(
        "the agent's first push failing with Unavailable",
        || async move { (test.unavailable_attempts() > attempts_before).then_some(()) },
    )
    .await;
    let first_failure_seen = Instant::now();
    test.until("the agent retrying and failing again", || async move {
        (test.unavailable_attempts() >= attempts_before + 3).then_some(())
    })
    .await;
    assert!(
        test.log_contains("server", "database unavailable").await,
        "the server logs why: {}",
        test.logs.read("server")
    );
    assert!(server.is_running(), "{}", test.logs.read("server"));
    assert!(process.is_running(), "{}", test.logs.read("agent"));
    let stored = store.read_agent_context(agent).await.unwrap().unwrap();
    assert_eq!(
        stored.snapshot.as_ref().map(|s| s.version),
        Some(before_version),
        "nothing lands while the database is cut"
    );
    first_failure_seen
}

/// After the restore, the change made during the outage lands from the same agent run,
/// with its exact content, and gRPC health is SERVING again. Returns the context it
/// landed in and how long after `restored_at` it did.
async fn check_change_lands(
    test: &Outage,
    db: &TestStore,
    agent: AgentId,
    grpc: &str,
    restored_at: Instant,
    run_id: &Option<RunId>,
    before_version: u64,
) -> (AgentContext, Duration) {
    let after = test
        .until("the change made during the outage landing", || async move {
            let context = db.read_agent_context(agent).await.unwrap()?;
            let landed = context.resources.iter().any(|r| r.source == "CLAUDE.md");
            landed.then_some(context)
        })
        .await;
    let recovery = restored_at.elapsed();
    test.until("gRPC health answering SERVING again", || async move {
        (grpc_health(grpc).await == Some(Serving::Serving)).then_some(())
    })
    .await;
    let snapshot = after.snapshot.as_ref().unwrap();
    assert_eq!(&after.agent.agent_run_id, run_id, "the same agent process");
    assert_eq!(&snapshot.agent_run_id, run_id);
    assert_eq!(snapshot.phase, DiscoveryPhase::Complete);
    assert!(snapshot.version > before_version, "{snapshot:#?}");
    let claude = after
        .resources
        .iter()
        .find(|r| r.source == "CLAUDE.md")
        .unwrap();
    match &claude.body {
        ResourceBody::InstructionFile(body) => assert_eq!(body.content, WRITTEN_WHILE_CUT),
        other => panic!("CLAUDE.md is not an instruction file: {other:?}"),
    }
    assert_eq!(
        after
            .resources
            .iter()
            .filter(|r| r.source == "CLAUDE.md" || r.source == "AGENTS.md")
            .count(),
        2,
        "{after:#?}"
    );
    (after, recovery)
}

/// Nothing duplicated: each version was accepted once, the stored one last; no push was
/// dropped as a replay. Returns the requests the server refused as unavailable.
async fn check_nothing_duplicated(
    test: &Outage,
    server: &ServerProcess,
    stored_version: u64,
) -> u64 {
    let accepted = test
        .until("the agent logging the accepted push", || async move {
            let versions = accepted_versions(&test.logs.read("agent"));
            versions.contains(&stored_version).then_some(versions)
        })
        .await;
    let mut distinct = accepted.clone();
    distinct.dedup();
    assert_eq!(distinct, accepted, "a version accepted twice: {accepted:?}");
    assert!(accepted.is_sorted(), "{accepted:?}");
    assert_eq!(accepted.last(), Some(&stored_version), "{accepted:?}");
    let series = |result: &str| format!("ctxsync_agent_pushes_total{{result=\"{result}\"}}");
    assert_eq!(
        test.metric(server, &series("dropped_stale_version")).await,
        0
    );
    assert_eq!(test.metric(server, &series("dropped_stale_run")).await, 0);
    let rejected_unavailable = test
        .metric(
            server,
            "ctxsync_agent_requests_rejected_total{reason=\"unavailable\"}",
        )
        .await;
    assert!(rejected_unavailable >= 3, "{rejected_unavailable}");
    rejected_unavailable
}

/// Once LISTEN is back, a turn waiting for another process's commit (the test's own
/// store, not through the proxy) is released by its notification, not by a re-check.
/// Returns how long after `restored_at` LISTEN was back.
async fn check_listen_releases_a_turn(
    test: &Outage,
    store: &TestStore,
    server: &ServerProcess,
    restored_at: Instant,
) -> Duration {
    test.until(
        "the server's LISTEN connection coming back",
        || async move {
            test.log_contains("server", "LISTEN connection restored")
                .await
                .then_some(())
        },
    )
    .await;
    let listen_back = restored_at.elapsed();
    let probe = store.create_agent("probe").await.unwrap();
    store
        .update_startup(
            probe.id,
            ctxsync_protocol::Startup {
                version: "t".into(),
                expanded_directory: "/probe".into(),
                agent_run_id: RunId::new("probe-run"),
                accepts_tool_calls: false,
            },
        )
        .await
        .unwrap();
    let chat = store.create_chat(Some(probe.id)).await.unwrap();
    let turn = {
        let http = test.http.clone();
        let url = format!("{}/api/chats/{}/turns", server.http_url(), chat.id);
        tokio::spawn(async move {
            let response = http
                .post(url)
                .bearer_auth(API_TOKEN)
                .json(&serde_json::json!({ "mode": "default" }))
                .send()
                .await?;
            response.json::<serde_json::Value>().await
        })
    };
    test.until("the turn waiting for the probe's snapshot", || async move {
        (test.metric(server, "ctxsync_gate_attempts_waiting").await >= 1).then_some(())
    })
    .await;
    let probe_snapshot = first_complete_snapshot("probe-run", "probe");
    assert!(
        store
            .push_context_state(probe.id, probe_snapshot)
            .await
            .unwrap()
            .accepted()
    );
    let released = test
        .step("the waiting turn being released", STEP, turn)
        .await
        .unwrap()
        .expect("the turn answers");
    assert_eq!(released["mcp_discovery"]["phase"], "complete", "{released}");
    assert_eq!(
        released["mcp_discovery"]["wait_timed_out"], false,
        "{released}"
    );
    assert!(
        test.metric(server, "ctxsync_gate_notification_wakeups_total")
            .await
            >= 1
    );
    assert_eq!(
        test.metric(server, "ctxsync_gate_recheck_reads_total")
            .await,
        0,
        "released by the notification, not by a re-check"
    );
    listen_back
}

use tonic_health::pb::health_check_response::ServingStatus as Serving;

/// The server's `grpc.health.v1` status, asked without a token; `None` when it does not
/// answer within [`REQUEST`].
async fn grpc_health(url: &str) -> Option<Serving> {
    let ask = async {
        let channel = tonic::transport::Endpoint::from_shared(url.to_owned())
            .ok()?
            .connect()
            .await
            .ok()?;
        let mut client = tonic_health::pb::health_client::HealthClient::new(channel);
        let request = tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        };
        let answer = client.check(request).await.ok()?.into_inner();
        Serving::try_from(answer.status).ok()
    };
    tokio::time::timeout(REQUEST, ask).await.ok().flatten()
}
