//! Fault injection: PostgreSQL cut off in the middle of a push stream (a loopback TCP proxy
//! between the server and the shared PostgreSQL, which the test cuts and restores; the
//! database server itself is never touched). Pushes fail with `Unavailable`, the server
//! keeps serving, and after the restore a real `ctxsync agent` delivers its newest
//! snapshot: nothing lost, versions never going backwards. Also: a first-turn waiter
//! whose HTTP client disconnects does not break later turns. (A server killed mid-stream
//! and restarted is `agent.rs`'s `a_server_restart_loses_nothing`.)

mod processes;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ctxsync::server::ServerConfig;
use ctxsync_persistence::DatabaseConfig;
use ctxsync_persistence::test_support::{TestStore, with_bearer};
use ctxsync_protocol::v1::agent_client::AgentClient;
use ctxsync_protocol::{DiscoveryPhase, ResourceBody};
use processes::{AgentProcess, Logs, Workspace, wait_for_context};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tonic::Code;

/// A loopback TCP proxy to PostgreSQL that can be cut (every open connection dropped,
/// new ones closed at once) and restored.
struct Proxy {
    addr: SocketAddr,
    cut: Arc<AtomicBool>,
    generation: watch::Sender<u64>,
}

impl Proxy {
    async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let cut = Arc::new(AtomicBool::new(false));
        let (generation, _) = watch::channel(0u64);
        let (flag, generations) = (cut.clone(), generation.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if flag.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let mut cut_signal = generations.subscribe();
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let mut client = client;
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = cut_signal.changed() => {}
                    }
                });
            }
        });
        Self {
            addr,
            cut,
            generation,
        }
    }

    fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        self.generation.send_modify(|g| *g += 1);
    }

    fn restore(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

/// `url` with its `host:port` replaced by `addr`.
fn through(url: &str, addr: SocketAddr) -> (String, SocketAddr) {
    let (scheme, rest) = url.split_once("://").unwrap();
    let (authority, path) = rest.split_once('/').unwrap();
    let (user, host) = authority
        .rsplit_once('@')
        .map_or(("", authority), |(u, h)| (u, h));
    let upstream: SocketAddr = host.parse().expect("the test URL names an IP and port");
    let user = if user.is_empty() {
        String::new()
    } else {
        format!("{user}@")
    };
    (format!("{scheme}://{user}{addr}/{path}"), upstream)
}

/// True when the server answers `url` over HTTP at all (any status).
async fn answers(http: &reqwest::Client, url: &str) -> bool {
    http.get(url).send().await.is_ok()
}

fn content(context: &ctxsync_persistence::AgentContext, source: &str) -> Option<String> {
    context
        .resources
        .iter()
        .find(|r| r.source == source)
        .and_then(|r| match &r.body {
            ResourceBody::InstructionFile(body) => Some(body.content.clone()),
            _ => None,
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_outage_mid_stream_is_unavailable_then_recovered() {
    let Some(store) = TestStore::postgres().await else {
        return;
    };
    let DatabaseConfig::Postgres { url } = store.config().clone() else {
        unreachable!("a PostgreSQL test store")
    };
    let proxy = Proxy::start(through(&url, "127.0.0.1:1".parse().unwrap()).1).await;
    let (proxied, _) = through(&url, proxy.addr);
    let dir = tempfile::tempdir().unwrap();
    let server = ctxsync::server::start(ServerConfig {
        database: DatabaseConfig::Postgres { url: proxied },
        api_token: Some("fault-api-token-0123456789".into()),
        ..ServerConfig::ephemeral(dir.path())
    })
    .await
    .expect("server starts through the proxy");
    let http = reqwest::Client::new();
    let health_url = format!("{}/healthz", server.http_url());

    // 1. A stream of pushes over gRPC, cut in the middle.
    let created = store.create_agent("stream").await.unwrap();
    let token = created.token.expose().to_owned();
    let mut client = AgentClient::connect(server.agent_url()).await.unwrap();
    let startup = ctxsync_protocol::Startup {
        version: "t".into(),
        expanded_directory: "/ws".into(),
        agent_run_id: Some("stream-run".into()),
    };
    client
        .update_startup(with_bearer(
            ctxsync_protocol::v1::UpdateStartupRequest::from(startup),
            &token,
        ))
        .await
        .unwrap();
    let push = |version: u64| -> ctxsync_protocol::v1::PushContextStateRequest {
        ctxsync_protocol::Snapshot {
            version,
            aggregate_hash: format!("agg-{version}"),
            resources: vec![],
            initial: version == 1,
            snapshot_error: None,
            agent_run_id: Some("stream-run".into()),
            phase: DiscoveryPhase::Complete,
        }
        .into()
    };
    let (mut accepted, mut unavailable) = (0u32, 0u32);
    for version in 1..=5 {
        let response = client
            .push_context_state(with_bearer(push(version), &token))
            .await
            .unwrap();
        assert!(response.into_inner().accepted);
        accepted += 1;
    }
    proxy.cut();
    let started = Instant::now();
    for version in 6..=8 {
        let status = client
            .push_context_state(with_bearer(push(version), &token))
            .await
            .expect_err("a push while the database is cut off");
        assert_eq!(status.code(), Code::Unavailable, "{status:?}");
        unavailable += 1;
    }
    let outage_answer = started.elapsed() / 3;
    assert!(
        answers(&http, &health_url).await,
        "the server answers HTTP during the outage"
    );
    proxy.restore();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut version = 9;
    loop {
        match client
            .push_context_state(with_bearer(push(version), &token))
            .await
        {
            Ok(response) => {
                assert!(response.into_inner().accepted);
                break;
            }
            Err(status) => {
                assert_eq!(status.code(), Code::Unavailable, "{status:?}");
                assert!(Instant::now() < deadline, "never recovered");
                version += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    let stored = store.read_agent_context(created.id).await.unwrap().unwrap();
    assert_eq!(
        stored.snapshot.unwrap().version,
        version,
        "the newest push landed"
    );

    // 2. A real agent: the context changes during an outage; after the restore its newest
    // snapshot lands and versions never went backwards.
    let agent = store.create_agent("agent").await.unwrap();
    let logs = Logs::new();
    let workspace = Workspace::with_servers(&[("tools", &["--tools", "2"])]);
    workspace.write("AGENTS.md", "before the outage\n");
    let mut process = AgentProcess::start(
        &logs,
        "agent",
        &server.agent_url(),
        &workspace.path(),
        agent.token.expose(),
        &[],
    );
    let before = wait_for_context(&store, agent.id, &logs, "a complete snapshot", |c| {
        c.snapshot
            .as_ref()
            .is_some_and(|s| s.phase == DiscoveryPhase::Complete)
            && content(c, "AGENTS.md").as_deref() == Some("before the outage\n")
    })
    .await;
    let before_version = before.snapshot.as_ref().unwrap().version;
    proxy.cut();
    for i in 0..3 {
        workspace.write("AGENTS.md", &format!("during the outage {i}\n"));
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    let during = store.read_agent_context(agent.id).await.unwrap().unwrap();
    assert_eq!(
        during.snapshot.as_ref().unwrap().version,
        before_version,
        "nothing could be stored during the outage"
    );
    assert!(answers(&http, &health_url).await, "the server is still up");
    proxy.restore();
    let after = wait_for_context(&store, agent.id, &logs, "the newest snapshot", |c| {
        content(c, "AGENTS.md").as_deref() == Some("during the outage 2\n")
    })
    .await;
    let after_snapshot = after.snapshot.as_ref().unwrap();
    assert!(
        after_snapshot.version > before_version,
        "versions went back"
    );
    assert_eq!(after_snapshot.agent_run_id, before.agent.agent_run_id);
    assert_eq!(
        after.agent.agent_run_id, before.agent.agent_run_id,
        "same process"
    );
    assert!(process.is_running(), "{}", logs.read("agent"));
    assert!(process.terminate().await.success());
    println!(
        "faults: {accepted} pushes before the cut, {unavailable} Unavailable during it (each answered in {outage_answer:?}), recovered at v{version}; agent v{before_version} -> v{} after a {}-write outage",
        after_snapshot.version, 3
    );
}

/// A first turn that waits for discovery, whose HTTP client goes away mid-wait, leaves
/// the server able to answer later turns (and their waits) normally.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_client_disconnects_does_not_break_later_turns() {
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
        agent_run_id: Some("run-1".into()),
    };
    store.update_startup(agent.id, startup).await.unwrap();
    // Three clients give up 200 ms into a wait of up to 3 s.
    for _ in 0..3 {
        let abandoned = tokio::time::timeout(Duration::from_millis(200), turn()).await;
        assert!(abandoned.is_err(), "the turn waits for a snapshot");
    }
    // The agent now publishes; a new turn is answered at once, without waiting.
    let snapshot = ctxsync_protocol::Snapshot {
        version: 1,
        aggregate_hash: "agg".into(),
        resources: vec![],
        initial: true,
        snapshot_error: None,
        agent_run_id: Some("run-1".into()),
        phase: DiscoveryPhase::Complete,
    };
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
