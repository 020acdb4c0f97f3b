//! `ctxsync agent` end to end with real processes: a `ctxsync server` child on SQLite or
//! PostgreSQL, a `ctxsync agent` child running fixture MCP servers as its children, and
//! assertions on what the database holds.

use crate::processes;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use ctxsync_persistence::AgentContext;
use ctxsync_protocol::v1::agent_server::{Agent, AgentServer};
use ctxsync_protocol::{DiscoveryPhase, Resource, ResourceBody, ResourceStatus, RunId, v1};
use processes::{
    AgentProcess, FixtureWorkspace, Logs, MISSING_COMMAND, ServerProcess, TestBackend, Workspace,
    database, wait_for_context, wait_for_log, wait_until_gone,
};
use tonic::{Request, Response, Status};

/// Servers every scenario declares (besides `missing` and `bad`): three tools, zero tools,
/// and one that answers `initialize` only after a delay, so `pending` lasts a while.
const SERVERS: &[(&str, &[&str])] = &[
    ("tools", &["--tools", "3"]),
    ("empty", &["--tools", "0"]),
    ("slow", &["--tools", "1", "--init-delay-ms", "2000"]),
];

fn row<'a>(context: &'a AgentContext, source: &str) -> &'a Resource {
    context
        .resources
        .iter()
        .find(|r| r.source == source)
        .unwrap_or_else(|| panic!("no row {source}: {context:#?}"))
}

fn tools(resource: &Resource) -> usize {
    match &resource.body {
        ResourceBody::McpServer(body) => body.tools.len(),
        other => panic!("{} is not a server row: {other:?}", resource.source),
    }
}

fn phase(context: &AgentContext) -> Option<DiscoveryPhase> {
    context.snapshot.as_ref().map(|s| s.phase)
}

fn snapshot_run_id(context: &AgentContext) -> &str {
    context
        .snapshot
        .as_ref()
        .map_or("", |s| RunId::edge(s.agent_run_id.as_ref()))
}

/// The agent row's run id as the API's JSON says it (`""` for none).
fn row_run_id(context: &AgentContext) -> &str {
    RunId::edge(context.agent.agent_run_id.as_ref())
}

/// The complete state every scenario's workspace reaches.
fn assert_complete_rows(context: &AgentContext) {
    let ok = |source: &str, count: usize| {
        let r = row(context, source);
        assert_eq!((r.status, tools(r)), (ResourceStatus::Ok, count), "{r:#?}");
    };
    ok("mcp:tools", 3);
    ok("mcp:empty", 0);
    ok("mcp:slow", 1);
    let missing = row(context, "mcp:missing");
    assert_eq!(missing.status, ResourceStatus::Unreadable);
    let error = missing.error.as_deref().unwrap_or_default();
    assert!(
        error.contains("command not found") && error.contains(MISSING_COMMAND),
        "{error}"
    );
    let config = row(context, ".mcp.json");
    assert_eq!(config.status, ResourceStatus::Invalid, "{config:#?}");
    assert!(
        config
            .error
            .as_deref()
            .unwrap_or_default()
            .contains("\"bad\""),
        "{config:#?}"
    );
    assert_eq!(
        config.body,
        ResourceBody::McpConfig,
        "no config content is sent"
    );
    assert_eq!(row(context, "AGENTS.md").status, ResourceStatus::Ok);
}

async fn pending_then_complete(backend: TestBackend) {
    let Some(store) = database(backend).await else {
        return;
    };
    let agent = store.create_agent("e2e").await.unwrap();
    let token = agent.token.expose().to_owned();
    let logs = Logs::new();
    let server = ServerProcess::start_with(&store, &logs, &["--api-token", API_TOKEN]).await;
    let workspace = Workspace::with_servers(SERVERS);
    let mut process = AgentProcess::start(
        &logs,
        "agent",
        &server.url(),
        &workspace.path(),
        &token,
        &[],
    );

    let pending = wait_for_context(&store, agent.id, &logs, "a pending snapshot", |c| {
        phase(c) == Some(DiscoveryPhase::Pending)
    })
    .await;
    assert_eq!(snapshot_run_id(&pending), row_run_id(&pending));
    let complete = wait_for_context(&store, agent.id, &logs, "a complete snapshot", |c| {
        phase(c) == Some(DiscoveryPhase::Complete)
    })
    .await;
    let run_id = row_run_id(&complete);
    assert!(uuid::Uuid::parse_str(run_id).is_ok(), "{run_id:?}");
    assert_eq!(snapshot_run_id(&complete), run_id);
    assert_eq!(run_id, row_run_id(&pending), "one process, one run id");
    assert_complete_rows(&complete);
    assert_eq!(
        complete.agent.expanded_directory,
        workspace.path().to_string_lossy()
    );
    // The server offers deltas: the pushes after the first left out the bodies it held
    // (at least the switch to complete), and none was refused for its base.
    let metrics = metrics(&server).await;
    let deltas = counter(&metrics, "ctxsync_agent_delta_pushes_total");
    assert!(deltas >= 1.0, "no delta push:\n{metrics}");
    let refused = counter(
        &metrics,
        "ctxsync_agent_pushes_total{result=\"delta_base_missing\"}",
    );
    assert_eq!(refused, 0.0, "{metrics}");

    // SIGTERM: a clean exit that takes every MCP server with it.
    let pids = workspace.fixture_pids();
    assert_eq!(pids.len(), SERVERS.len(), "every fixture started");
    let status = process.terminate().await;
    assert!(status.success(), "{status:?}\n{}", logs.read("agent"));
    wait_until_gone(&pids).await;
    let log = logs.read("agent");
    assert!(!log.contains(&token), "the token must never be logged");
    assert!(log.contains("published context snapshot"), "{log}");
    assert!(log.contains("phase=\"complete\""), "{log}");
}

/// The server's HTTP API token where a test reads `/metrics`.
const API_TOKEN: &str = "agent-e2e-api-token-0123456789";

async fn metrics(server: &ServerProcess) -> String {
    let response = reqwest::Client::new()
        .get(format!("{}/metrics", server.http_url()))
        .bearer_auth(API_TOKEN)
        .send()
        .await
        .expect("GET /metrics");
    assert!(response.status().is_success(), "{response:?}");
    response.text().await.expect("metrics text")
}

/// The value of the sample named exactly `name` (labels included).
fn counter(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("no sample {name} in:\n{metrics}"))
}

#[tokio::test]
async fn pending_then_complete_on_sqlite() {
    pending_then_complete(TestBackend::Sqlite).await;
}

#[tokio::test]
async fn pending_then_complete_on_postgres() {
    pending_then_complete(TestBackend::Postgres).await;
}

async fn a_restarted_agent_replaces_the_snapshot(backend: TestBackend) {
    let Some(store) = database(backend).await else {
        return;
    };
    let agent = store.create_agent("e2e").await.unwrap();
    let token = agent.token.expose().to_owned();
    let logs = Logs::new();
    let server = ServerProcess::start(&store, &logs).await;
    let workspace = Workspace::with_servers(SERVERS);
    let mut first = AgentProcess::start(
        &logs,
        "agent",
        &server.url(),
        &workspace.path(),
        &token,
        &[],
    );
    let before = wait_for_context(
        &store,
        agent.id,
        &logs,
        "the first complete snapshot",
        |c| phase(c) == Some(DiscoveryPhase::Complete),
    )
    .await;
    let old_run = row_run_id(&before).to_owned();
    first.kill().await;

    let mut second = AgentProcess::start(
        &logs,
        "agent2",
        &server.url(),
        &workspace.path(),
        &token,
        &[],
    );
    // Every state on the way: the snapshot is the old process's until the new process
    // pushes, and once it is the new one's it stays so.
    let mut replaced = false;
    let after = wait_for_context(&store, agent.id, &logs, "the new process's snapshot", |c| {
        let snapshot_run = snapshot_run_id(c);
        let row_run = row_run_id(c);
        if snapshot_run == old_run {
            assert!(!replaced, "the old process's snapshot came back: {c:#?}");
            assert_eq!(
                c.snapshot.as_ref().unwrap().version,
                before.snapshot.as_ref().unwrap().version
            );
        } else {
            assert_eq!(
                snapshot_run, row_run,
                "a snapshot of neither process: {c:#?}"
            );
            replaced = true;
        }
        replaced && phase(c) == Some(DiscoveryPhase::Complete)
    })
    .await;
    let new_run = row_run_id(&after);
    assert_ne!(new_run, old_run);
    assert!(uuid::Uuid::parse_str(new_run).is_ok());
    assert!(
        after
            .agent
            .retired_agent_run_ids
            .iter()
            .any(|r| r.as_str() == old_run),
        "{:?}",
        after.agent.retired_agent_run_ids
    );
    assert_complete_rows(&after);
    assert!(second.is_running());
    assert!(second.terminate().await.success());
}

#[tokio::test]
async fn a_restarted_agent_replaces_the_snapshot_on_sqlite() {
    a_restarted_agent_replaces_the_snapshot(TestBackend::Sqlite).await;
}

#[tokio::test]
async fn a_restarted_agent_replaces_the_snapshot_on_postgres() {
    a_restarted_agent_replaces_the_snapshot(TestBackend::Postgres).await;
}

#[tokio::test]
async fn a_server_restart_loses_nothing() {
    let store = database(TestBackend::Sqlite).await.unwrap();
    let agent = store.create_agent("e2e").await.unwrap();
    let token = agent.token.expose().to_owned();
    let logs = Logs::new();
    let server = ServerProcess::start(&store, &logs).await;
    let workspace = Workspace::with_servers(&[("tools", &["--tools", "3"])]);
    let mut process = AgentProcess::start(
        &logs,
        "agent",
        &server.url(),
        &workspace.path(),
        &token,
        &[],
    );
    let before = wait_for_context(&store, agent.id, &logs, "a complete snapshot", |c| {
        phase(c) == Some(DiscoveryPhase::Complete)
    })
    .await;

    // The server dies; the context changes while it is down; a new server comes up on the
    // same address. The agent must deliver the change to it.
    let addr: SocketAddr = server.kill().await;
    workspace.write("CLAUDE.md", "# Written while the server was down\n");
    let _server = ServerProcess::start_at(&store, &logs, addr).await;
    let after = wait_for_context(
        &store,
        agent.id,
        &logs,
        "the change after the restart",
        |c| c.resources.iter().any(|r| r.source == "CLAUDE.md"),
    )
    .await;
    assert_eq!(
        after.agent.agent_run_id, before.agent.agent_run_id,
        "the same process"
    );
    assert_eq!(snapshot_run_id(&after), row_run_id(&before));
    assert_eq!(phase(&after), Some(DiscoveryPhase::Complete));
    assert!(after.snapshot.unwrap().version > before.snapshot.unwrap().version);
    assert!(process.is_running(), "{}", logs.read("agent"));
    assert!(process.terminate().await.success());
}

/// Rows change behind the agent's back (a database restored from an older copy, written
/// here straight into the store): the agent's next delta names bodies the server no longer
/// holds, is refused, and the full snapshot that follows puts the rows right.
async fn a_delta_on_changed_rows_is_refused_then_sent_whole(backend: TestBackend) {
    let Some(store) = database(backend).await else {
        return;
    };
    let agent = store.create_agent("e2e").await.unwrap();
    let token = agent.token.expose().to_owned();
    let logs = Logs::new();
    let server = ServerProcess::start_with(&store, &logs, &["--api-token", API_TOKEN]).await;
    let workspace = Workspace::with_servers(&[("tools", &["--tools", "3"])]);
    workspace.write("AGENTS.md", "# The real instructions\n");
    let mut process = AgentProcess::start(
        &logs,
        "agent",
        &server.url(),
        &workspace.path(),
        &token,
        &[],
    );
    let complete = wait_for_context(&store, agent.id, &logs, "a complete snapshot", |c| {
        phase(c) == Some(DiscoveryPhase::Complete)
    })
    .await;
    let stored = complete.snapshot.clone().unwrap();

    // Same run and version, sent as a reconnect's repeat, so the version gate lets it in.
    let mut resources = complete.resources.clone();
    let file = resources
        .iter_mut()
        .find(|r| r.source == "AGENTS.md")
        .unwrap();
    file.body = ResourceBody::InstructionFile(ctxsync_protocol::InstructionFileBody {
        content: "# An older copy\n".into(),
    });
    let tampered = ctxsync_protocol::Snapshot {
        version: stored.version,
        aggregate_hash: stored.aggregate_hash.clone(),
        resources,
        initial: true,
        snapshot_error: stored.snapshot_error.clone(),
        agent_run_id: stored.agent_run_id.clone(),
        phase: stored.phase,
        pending_servers: Vec::new(),
    };
    let outcome = store.push_context_state(agent.id, tampered).await.unwrap();
    assert!(outcome.accepted(), "{outcome:?}");

    // Another file changes: the delta leaves AGENTS.md out, with the digest of the body
    // the agent last had accepted, which the server no longer holds.
    workspace.write("CLAUDE.md", "# Added\n");
    let healed = wait_for_context(&store, agent.id, &logs, "the rows put right", |c| {
        c.resources.iter().any(|r| r.source == "CLAUDE.md")
            && row(c, "AGENTS.md").body
                == ResourceBody::InstructionFile(ctxsync_protocol::InstructionFileBody {
                    content: "# The real instructions\n".into(),
                })
    })
    .await;
    assert_eq!(
        snapshot_run_id(&healed),
        RunId::edge(stored.agent_run_id.as_ref())
    );
    let metrics = metrics(&server).await;
    let refused = counter(
        &metrics,
        "ctxsync_agent_pushes_total{result=\"delta_base_missing\"}",
    );
    assert_eq!(refused, 1.0, "{metrics}");
    let log = logs.read("agent");
    assert!(log.contains("sending the full snapshot"), "{log}");
    assert!(process.terminate().await.success());
}

#[tokio::test]
async fn a_delta_on_changed_rows_is_refused_then_sent_whole_on_sqlite() {
    a_delta_on_changed_rows_is_refused_then_sent_whole(TestBackend::Sqlite).await;
}

#[tokio::test]
async fn a_delta_on_changed_rows_is_refused_then_sent_whole_on_postgres() {
    a_delta_on_changed_rows_is_refused_then_sent_whole(TestBackend::Postgres).await;
}

/// A server that does not offer deltas (`--no-delta-pushes`, answering as one that
/// predates them) gets full pushes only, and the agent reaches the same rows.
#[tokio::test]
async fn a_server_without_deltas_gets_full_pushes_only() {
    let store = database(TestBackend::Sqlite).await.unwrap();
    let agent = store.create_agent("e2e").await.unwrap();
    let token = agent.token.expose().to_owned();
    let logs = Logs::new();
    let server = ServerProcess::start_with(
        &store,
        &logs,
        &["--api-token", API_TOKEN, "--no-delta-pushes"],
    )
    .await;
    let workspace = Workspace::with_servers(SERVERS);
    let mut process = AgentProcess::start(
        &logs,
        "agent",
        &server.url(),
        &workspace.path(),
        &token,
        &[],
    );
    let complete = wait_for_context(&store, agent.id, &logs, "a complete snapshot", |c| {
        phase(c) == Some(DiscoveryPhase::Complete)
    })
    .await;
    assert_complete_rows(&complete);
    let metrics = metrics(&server).await;
    let accepted = counter(&metrics, "ctxsync_agent_pushes_total{result=\"accepted\"}");
    assert!(accepted >= 2.0, "pending, then complete:\n{metrics}");
    assert_eq!(
        counter(&metrics, "ctxsync_agent_delta_pushes_total"),
        0.0,
        "{metrics}"
    );
    assert!(process.terminate().await.success());
}

/// An old server: `UpdateStartup` only; `PushContextState` is unimplemented.
#[derive(Debug, Default)]
struct OldServer {
    startups: Mutex<u32>,
    pushes: Mutex<u32>,
}

#[derive(Debug, Clone)]
struct OldService(Arc<OldServer>);

#[tonic::async_trait]
impl Agent for OldService {
    async fn update_startup(
        &self,
        request: Request<v1::UpdateStartupRequest>,
    ) -> Result<Response<v1::Startup>, Status> {
        *self.0.startups.lock().unwrap() += 1;
        Ok(Response::new(
            request.into_inner().startup.unwrap_or_default(),
        ))
    }

    async fn push_context_state(
        &self,
        _request: Request<v1::PushContextStateRequest>,
    ) -> Result<Response<v1::PushContextStateResponse>, Status> {
        *self.0.pushes.lock().unwrap() += 1;
        Err(Status::unimplemented("PushContextState is not implemented"))
    }

    type ToolCallsStream = std::pin::Pin<
        Box<dyn tokio_stream::Stream<Item = Result<v1::ServerCallMessage, Status>> + Send>,
    >;

    async fn tool_calls(
        &self,
        _request: Request<tonic::Streaming<v1::AgentCallMessage>>,
    ) -> Result<Response<Self::ToolCallsStream>, Status> {
        Err(Status::unimplemented("ToolCalls is not implemented"))
    }
}

#[tokio::test]
async fn an_old_server_stops_the_pushes_without_crashing_the_agent() {
    let old = Arc::new(OldServer::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let service = AgentServer::new(OldService(old.clone()));
    let serving = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    let logs = Logs::new();
    let workspace =
        Workspace::with_servers(&[("slow", &["--tools", "1", "--init-delay-ms", "1000"])]);
    let mut process = AgentProcess::start(
        &logs,
        "agent",
        &format!("http://{addr}"),
        &workspace.path(),
        "any-token",
        &[],
    );
    wait_for_log(&logs, "agent", "does not implement PushContextState").await;
    // Discovery completes after the refusal: a new version is published, not pushed.
    let log = wait_for_log(&logs, "agent", "phase=\"complete\"").await;
    assert!(process.is_running(), "{log}");
    assert_eq!(*old.startups.lock().unwrap(), 1, "{log}");
    assert_eq!(*old.pushes.lock().unwrap(), 1, "{log}");
    assert!(process.terminate().await.success());
    serving.abort();
}

#[tokio::test]
async fn a_superseded_agent_exits_with_a_clear_message() {
    let store = database(TestBackend::Sqlite).await.unwrap();
    let agent = store.create_agent("e2e").await.unwrap();
    let token = agent.token.expose().to_owned();
    let logs = Logs::new();
    let server = ServerProcess::start(&store, &logs).await;
    let workspace = Workspace::with_servers(&[("tools", &["--tools", "1"])]);
    let path = workspace.path();
    let mut old = AgentProcess::start(&logs, "agent", &server.url(), &path, &token, &[]);
    let first = wait_for_context(
        &store,
        agent.id,
        &logs,
        "the first process's snapshot",
        |c| phase(c) == Some(DiscoveryPhase::Complete),
    )
    .await;
    let old_run = first.agent.agent_run_id.clone();
    let mut new = AgentProcess::start(&logs, "agent2", &server.url(), &path, &token, &[]);
    wait_for_context(
        &store,
        agent.id,
        &logs,
        "the second process's snapshot",
        |c| {
            c.agent.agent_run_id.is_some()
                && c.agent.agent_run_id != old_run
                && snapshot_run_id(c) == row_run_id(c)
        },
    )
    .await;

    // Both reconnect to a restarted server; the old process's run id is retired.
    let addr = server.kill().await;
    let _server = ServerProcess::start_at(&store, &logs, addr).await;
    let status = tokio::time::timeout(processes::WAIT, old.child.wait())
        .await
        .expect("the superseded process exits")
        .unwrap();
    assert!(!status.success());
    let log = logs.read("agent");
    let last = log.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("error: this agent process") && last.contains("superseded"),
        "{log}"
    );
    assert!(new.is_running(), "{}", logs.read("agent2"));
    assert!(new.terminate().await.success());
}
