//! The publisher against a real in-process tonic server: registration, run id, versions,
//! phase settlement, sampling, coalescing, reconnects, backoff and the server's refusals.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use ctxsync_agent_publication::{
    ChangedFuture, ConnectionState, PublishError, Publisher, PublisherStatus, ReportSource,
};
use ctxsync_mcp_model::{Report, ReportPhase, ServerReport};
use ctxsync_protocol::McpTool;
use ctxsync_protocol::v1::context_resource::Status;
use ctxsync_protocol::v1::push_context_state_request::McpDiscovery;
use ctxsync_protocol::v1::push_context_state_request::mcp_discovery::Phase;
use prost::Message;
use support::{Call, FakeServer, Recorder, Reply, TOKEN, WAIT, Workspace, config};
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tonic::Code;

type Running = JoinHandle<Result<std::convert::Infallible, PublishError>>;

fn report(phase: ReportPhase, servers: &[&str]) -> Arc<Report> {
    Arc::new(Report {
        phase,
        servers: servers
            .iter()
            .map(|name| ServerReport {
                name: (*name).into(),
                connected: true,
                tools: vec![McpTool {
                    name: format!("{name}-tool"),
                    description: String::new(),
                    input_schema: serde_json::json!({"type": "object"}),
                    ..Default::default()
                }]
                .into(),
                ..ServerReport::default()
            })
            .collect(),
        config_outcomes: Vec::new(),
        ..Default::default()
    })
}

/// Starts a publisher fed by a `watch` channel of reports.
fn start_with_reports(
    url: &str,
    ws: &Workspace,
    first: Arc<Report>,
) -> (
    watch::Sender<Arc<Report>>,
    watch::Receiver<PublisherStatus>,
    Running,
) {
    let (tx, rx) = watch::channel(first);
    let publisher = Publisher::new(config(url, &ws.path()), Some(Box::new(rx))).unwrap();
    let status = publisher.status();
    (tx, status, tokio::spawn(publisher.run()))
}

async fn wait_status(
    status: &mut watch::Receiver<PublisherStatus>,
    what: &str,
    done: impl Fn(&PublisherStatus) -> bool,
) -> PublisherStatus {
    let found = tokio::time::timeout(WAIT, status.wait_for(|s| done(s)))
        .await
        .ok()
        .and_then(Result::ok)
        .map(|s| s.clone());
    found.unwrap_or_else(|| {
        panic!(
            "timed out waiting for {what}; status {:?}",
            *status.borrow()
        )
    })
}

fn phase(request: &ctxsync_protocol::v1::PushContextStateRequest) -> Option<Phase> {
    request
        .mcp_discovery
        .as_ref()
        .map(|McpDiscovery { phase, .. }| Phase::try_from(*phase).unwrap())
}

#[tokio::test]
async fn registers_before_pushing_with_run_id_and_token() {
    let server = FakeServer::start(Recorder::new()).await;
    let ws = Workspace::new();
    ws.write("AGENTS.md", "hello");
    let (_tx, _status, running) =
        start_with_reports(&server.url(), &ws, report(ReportPhase::Pending, &["fs"]));

    let calls = server
        .recorder
        .wait_for("startup and a push", |c| c.len() >= 2)
        .await;
    let Call::Startup {
        startup,
        authorization,
    } = &calls[0]
    else {
        panic!("the first call must be UpdateStartup: {calls:#?}");
    };
    let run_id = startup.agent_run_id.clone().expect("a run id");
    let parsed = uuid::Uuid::parse_str(&run_id).unwrap();
    assert_eq!(parsed.get_version_num(), 4);
    assert_eq!(startup.version, "9.9.9-test");
    assert_eq!(startup.expanded_directory, ws.path().to_str().unwrap());
    assert_eq!(
        authorization.as_deref(),
        Some(format!("Bearer {TOKEN}").as_str())
    );

    let Call::Push {
        request,
        authorization,
    } = &calls[1]
    else {
        panic!("then a push: {calls:#?}");
    };
    assert_eq!(
        authorization.as_deref(),
        Some(format!("Bearer {TOKEN}").as_str())
    );
    assert_eq!(request.version, 1);
    assert!(request.initial);
    assert_eq!(request.agent_run_id, run_id.as_str());
    assert_eq!(phase(request), Some(Phase::Pending));
    assert_eq!(request.aggregate_hash.len(), 64);
    let sources: Vec<&str> = request
        .resources
        .iter()
        .map(|r| r.source.as_str())
        .collect();
    assert_eq!(sources, ["AGENTS.md", "mcp:fs"]);
    running.abort();
}

#[tokio::test]
async fn phase_only_settlement_publishes_a_new_version_with_the_same_hash() {
    let server = FakeServer::start(Recorder::new()).await;
    let ws = Workspace::new();
    ws.write("AGENTS.md", "hello");
    let (tx, _status, running) =
        start_with_reports(&server.url(), &ws, report(ReportPhase::Pending, &["fs"]));
    server.recorder.wait_for_pushes(1).await;

    tx.send_replace(report(ReportPhase::Complete, &["fs"]));
    let pushes = server.recorder.wait_for_pushes(2).await;
    let (first, second) = (&pushes[0], &pushes[1]);
    assert_eq!(second.version, 2);
    assert!(!second.initial);
    assert_eq!(phase(second), Some(Phase::Complete));
    assert_eq!(second.aggregate_hash, first.aggregate_hash);
    assert_eq!(second.resources, first.resources);
    assert_eq!(second.agent_run_id, first.agent_run_id);
    running.abort();
}

/// A source that counts samples and moves to a new engine state at every sample, so a
/// resolver that read it twice in one resolve would mix two states in one snapshot.
struct CountingSource {
    samples: Arc<AtomicUsize>,
}

impl ReportSource for CountingSource {
    fn sample(&mut self) -> Arc<Report> {
        let n = self.samples.fetch_add(1, Ordering::SeqCst) + 1;
        let phase = if n.is_multiple_of(2) {
            ReportPhase::Complete
        } else {
            ReportPhase::Pending
        };
        report(phase, &[&format!("state{n}")])
    }

    fn changed(&mut self) -> ChangedFuture<'_> {
        Box::pin(std::future::pending())
    }
}

#[tokio::test]
async fn the_report_is_sampled_once_per_resolve() {
    let server = FakeServer::start(Recorder::new()).await;
    let ws = Workspace::new();
    ws.write("AGENTS.md", "v0");
    let samples = Arc::new(AtomicUsize::new(0));
    let source = CountingSource {
        samples: samples.clone(),
    };
    let publisher =
        Publisher::new(config(&server.url(), &ws.path()), Some(Box::new(source))).unwrap();
    let mut status = publisher.status();
    let running = tokio::spawn(publisher.run());
    server.recorder.wait_for_pushes(1).await;
    for i in 1..=3 {
        ws.replace("AGENTS.md", format!("v{i}"));
        let s = wait_status(&mut status, "a resolve after the change", |s| {
            s.resolves > 0 && s.published_version > i
        })
        .await;
        assert!(s.published_version > i);
    }
    // Every resolve sampled exactly once: once resolves settle, the counts agree (a
    // resolver sampling twice would leave twice as many samples as resolves).
    wait_status(&mut status, "samples equal to resolves", |s| {
        s.resolves == samples.load(Ordering::SeqCst) as u64
    })
    .await;

    // Each snapshot describes one engine state: phase and server from the same sample.
    let pushes = server.recorder.pushes();
    for push in &pushes {
        let server_row = push
            .resources
            .iter()
            .find(|r| r.source.starts_with("mcp:"))
            .unwrap();
        let n: usize = server_row.source["mcp:state".len()..].parse().unwrap();
        let expected = if n.is_multiple_of(2) {
            Phase::Complete
        } else {
            Phase::Pending
        };
        assert_eq!(phase(push), Some(expected), "version {}", push.version);
    }
    running.abort();
}

#[tokio::test]
async fn file_changes_publish_and_unchanged_resolves_do_not() {
    let server = FakeServer::start(Recorder::new()).await;
    let ws = Workspace::new();
    ws.write("AGENTS.md", "one");
    let (_tx, mut status, running) =
        start_with_reports(&server.url(), &ws, report(ReportPhase::Complete, &[]));
    let first = server.recorder.wait_for_pushes(1).await.remove(0);
    // Startup resolves twice: the second covers what changed while the watches began.
    wait_status(&mut status, "the startup resolves", |s| s.resolves >= 2).await;

    // Resolving reads the files; those reads must not count as changes (a resolve loop).
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        status.borrow().resolves,
        2,
        "a quiet workspace is not resolved again"
    );

    // Rewriting the same bytes resolves again but publishes nothing.
    ws.replace("AGENTS.md", "one");
    let after = wait_status(&mut status, "a resolve", |s| s.resolves >= 3).await;
    assert_eq!(after.published_version, 1);

    // A new skill directory (its container did not exist) is noticed.
    ws.skill("skills", "new-skill");
    let with_skill = server
        .recorder
        .wait_for_push("a push with the new skill", |p| {
            p.resources
                .iter()
                .any(|r| r.source == "skills/new-skill/SKILL.md" && r.status == Status::Ok as i32)
        })
        .await;
    assert!(with_skill.version >= 2);
    assert!(!with_skill.initial);
    assert_ne!(with_skill.aggregate_hash, first.aggregate_hash);
    running.abort();
}

#[tokio::test]
async fn editing_a_symlink_target_inside_the_root_publishes() {
    let server = FakeServer::start(Recorder::new()).await;
    let ws = Workspace::new();
    let target = ws.write("docs/agents.md", "first");
    ws.symlink(&target, "AGENTS.md");
    let (_tx, _status, running) =
        start_with_reports(&server.url(), &ws, report(ReportPhase::Complete, &[]));
    server.recorder.wait_for_pushes(1).await;

    ws.write("docs/agents.md", "second");
    let content = |push: &ctxsync_protocol::v1::PushContextStateRequest| match &push.resources[0]
        .body
    {
        Some(ctxsync_protocol::v1::context_resource::Body::InstructionFile(f)) => f.content.clone(),
        other => panic!("unexpected body {other:?}"),
    };
    let second = server
        .recorder
        .wait_for_push("the edited content", |p| content(p) == "second")
        .await;
    assert!(second.version > 1 && !second.initial);
    assert_eq!(content(&server.recorder.pushes()[0]), "first");
    running.abort();
}

#[tokio::test]
async fn the_mcp_json_content_is_never_sent() {
    let server = FakeServer::start(Recorder::new()).await;
    let ws = Workspace::new();
    let config_text = r#"{"mcpServers": {"gh": {"url": "https://x", "headers": {"Authorization": "Bearer GH-SECRET-TOKEN"}}}}"#;
    ws.write(".mcp.json", config_text);
    let (_tx, _status, running) =
        start_with_reports(&server.url(), &ws, report(ReportPhase::Complete, &[]));
    let push = server.recorder.wait_for_pushes(1).await.remove(0);

    let row = push
        .resources
        .iter()
        .find(|r| r.source == ".mcp.json")
        .unwrap();
    assert_eq!(
        row.body,
        Some(ctxsync_protocol::v1::context_resource::Body::McpConfig(
            Default::default()
        ))
    );
    assert_eq!(row.size_bytes, config_text.len() as u64);
    let bytes = push.encode_to_vec();
    let needle = b"GH-SECRET-TOKEN";
    assert!(
        !bytes.windows(needle.len()).any(|w| w == needle),
        "the secret reached the wire"
    );
    running.abort();
}

#[tokio::test]
async fn reconnect_registers_again_with_the_same_run_id_before_pushing() {
    let server = FakeServer::start(Recorder::new()).await;
    let ws = Workspace::new();
    ws.write("AGENTS.md", "hello");
    let (_tx, _status, running) =
        start_with_reports(&server.url(), &ws, report(ReportPhase::Complete, &["fs"]));
    server.recorder.wait_for_pushes(1).await;

    let server = server.restart().await;
    let calls = server
        .recorder
        .wait_for("a second registration and push", |c| {
            c.iter().filter(|c| c.push().is_some()).count() >= 2
        })
        .await;
    let kinds: Vec<&str> = calls
        .iter()
        .map(|c| {
            if c.startup().is_some() {
                "startup"
            } else {
                "push"
            }
        })
        .collect();
    assert_eq!(kinds, ["startup", "push", "startup", "push"]);
    let run_ids: Vec<String> = calls
        .iter()
        .map(|c| match c {
            Call::Startup { startup, .. } => startup.agent_run_id.clone().unwrap().into_string(),
            Call::Push { request, .. } => request.agent_run_id.clone(),
        })
        .collect();
    assert!(run_ids.iter().all(|id| *id == run_ids[0]), "{run_ids:?}");
    let again = calls[3].push().unwrap();
    assert!(again.initial, "the first push of a connection is initial");
    assert_eq!(
        again.version, 1,
        "nothing changed: the same snapshot is re-delivered"
    );
    running.abort();
}

#[tokio::test]
async fn unimplemented_stops_pushes_on_that_connection_only() {
    let recorder = Recorder::new();
    recorder.script_push([Reply::Fail(Code::Unimplemented)]);
    let server = FakeServer::start(recorder).await;
    let ws = Workspace::new();
    let (tx, mut status, running) =
        start_with_reports(&server.url(), &ws, report(ReportPhase::Pending, &[]));
    server.recorder.wait_for_pushes(1).await;
    wait_status(&mut status, "pushes unsupported", |s| {
        s.connection == ConnectionState::PushesUnsupported
    })
    .await;

    tx.send_replace(report(ReportPhase::Complete, &[]));
    wait_status(&mut status, "version 2", |s| s.published_version == 2).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        server.recorder.pushes().len(),
        1,
        "no push after Unimplemented"
    );
    assert!(!running.is_finished(), "the publisher keeps running");

    // An upgraded server (a new connection) gets the newest snapshot.
    let server = server.restart().await;
    let pushes = server.recorder.wait_for_pushes(2).await;
    assert_eq!(pushes[1].version, 2);
    assert!(pushes[1].initial);
    running.abort();
}

#[tokio::test]
async fn unavailable_is_retried_with_backoff_then_recovers() {
    let recorder = Recorder::new();
    recorder.script_startup([
        Reply::Fail(Code::Unavailable),
        Reply::Fail(Code::Unavailable),
        Reply::Fail(Code::Unavailable),
    ]);
    recorder.script_push([Reply::Fail(Code::Unavailable)]);
    let server = FakeServer::start(recorder).await;
    let ws = Workspace::new();
    let (_tx, _status, running) =
        start_with_reports(&server.url(), &ws, report(ReportPhase::Complete, &[]));

    let started = Instant::now();
    let calls = server
        .recorder
        .wait_for("recovery after the failed push", |c| {
            c.iter().filter(|c| c.push().is_some()).count() >= 2
        })
        .await;
    let kinds: Vec<&str> = calls
        .iter()
        .map(|c| {
            if c.startup().is_some() {
                "startup"
            } else {
                "push"
            }
        })
        .collect();
    // Three refused registrations, one accepted, a failed push, then a new registration
    // (a new connection) before the push is delivered again.
    assert_eq!(
        kinds,
        [
            "startup", "startup", "startup", "startup", "push", "startup", "push"
        ]
    );
    // Backoff 10, 20, 40 ms before the 4th registration, then reset; 10 ms after the push.
    assert!(
        started.elapsed() >= Duration::from_millis(70),
        "{:?}",
        started.elapsed()
    );
    let pushes = server.recorder.pushes();
    assert_eq!(pushes[1].version, 1);
    assert!(pushes[1].initial);
    running.abort();
}

#[tokio::test]
async fn backoff_applies_while_the_server_is_down() {
    // Reserve a port, then close it: connections are refused until a server binds there.
    let probe = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = probe.local_addr().unwrap();
    drop(probe);
    let ws = Workspace::new();
    let (_tx, mut status, running) = start_with_reports(
        &format!("http://{addr}"),
        &ws,
        report(ReportPhase::Complete, &[]),
    );
    wait_status(&mut status, "a retry", |s| {
        s.connection == ConnectionState::WaitingToRetry
    })
    .await;
    let server = FakeServer::bind(Recorder::new(), addr).await;
    let push = server.recorder.wait_for_pushes(1).await.remove(0);
    assert!(push.initial);
    assert_eq!(
        server.recorder.calls()[0]
            .startup()
            .map(|s| s.agent_run_id.is_some()),
        Some(true)
    );
    running.abort();
}

#[tokio::test]
async fn accepted_false_waits_for_the_next_change() {
    let recorder = Recorder::new();
    recorder.script_push([Reply::Reject]);
    let server = FakeServer::start(recorder).await;
    let ws = Workspace::new();
    let (tx, mut status, running) =
        start_with_reports(&server.url(), &ws, report(ReportPhase::Pending, &[]));
    server.recorder.wait_for_pushes(1).await;
    wait_status(&mut status, "the rejection", |s| {
        s.last_push == Some((1, false))
    })
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        server.recorder.pushes().len(),
        1,
        "a rejected snapshot is not retried"
    );

    tx.send_replace(report(ReportPhase::Complete, &[]));
    let pushes = server.recorder.wait_for_pushes(2).await;
    assert_eq!(pushes[1].version, 2);
    assert!(
        !pushes[1].initial,
        "the rejected push was delivered on this connection"
    );
    running.abort();
}

#[tokio::test]
async fn only_the_newest_snapshot_is_sent() {
    let recorder = Recorder::new();
    let gate = Arc::new(Notify::new());
    recorder.script_push([Reply::HoldThenAccept(gate.clone())]);
    let server = FakeServer::start(recorder).await;
    let ws = Workspace::new();
    let (tx, mut status, running) =
        start_with_reports(&server.url(), &ws, report(ReportPhase::Pending, &[]));
    server.recorder.wait_for_pushes(1).await;

    // While version 1 is in flight, three more versions are published.
    for (i, servers) in [&["a"][..], &["a", "b"], &["a", "b", "c"]]
        .into_iter()
        .enumerate()
    {
        tx.send_replace(report(ReportPhase::Pending, servers));
        wait_status(&mut status, "a new version", |s| {
            s.published_version == i as u64 + 2
        })
        .await;
    }
    gate.notify_one();
    let pushes = server.recorder.wait_for_pushes(2).await;
    assert_eq!(pushes[1].version, 4, "versions 2 and 3 are skipped");
    assert_eq!(pushes[1].resources.len(), 3);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(server.recorder.pushes().len(), 2);
    running.abort();
}

#[tokio::test]
async fn superseded_stops_with_an_error() {
    let recorder = Recorder::new();
    recorder.script_startup([Reply::Fail(Code::FailedPrecondition)]);
    let server = FakeServer::start(recorder).await;
    let ws = Workspace::new();
    let (_tx, _status, running) =
        start_with_reports(&server.url(), &ws, report(ReportPhase::Complete, &[]));

    let result = tokio::time::timeout(WAIT, running).await.unwrap().unwrap();
    let error = result.unwrap_err();
    assert!(
        matches!(error, PublishError::Superseded { .. }),
        "{error:?}"
    );
    assert!(
        error
            .to_string()
            .contains("superseded by a newer agent process"),
        "{error}"
    );
    assert!(server.recorder.pushes().is_empty());
}

#[tokio::test]
async fn a_refused_token_is_retried_only_at_the_longest_backoff_until_accepted() {
    let recorder = Recorder::new();
    recorder.script_startup([
        Reply::Fail(Code::Unauthenticated),
        Reply::Fail(Code::PermissionDenied),
    ]);
    let server = FakeServer::start(recorder).await;
    let ws = Workspace::new();
    let started = Instant::now();
    let (_tx, mut status, running) =
        start_with_reports(&server.url(), &ws, report(ReportPhase::Complete, &[]));

    wait_status(&mut status, "the token refused", |s| {
        s.connection == ConnectionState::TokenRefused
    })
    .await;
    // Both refusals wait the cap (80 ms), never the initial 10 ms; then the token is
    // accepted again and the snapshot lands.
    server.recorder.wait_for_pushes(1).await;
    let elapsed = started.elapsed();
    assert!(
        elapsed >= 2 * support::fast_timing().backoff.max,
        "retried after {elapsed:?}, sooner than twice the longest backoff"
    );
    let startups = server
        .recorder
        .calls()
        .iter()
        .filter(|c| c.startup().is_some())
        .count();
    assert_eq!(startups, 3, "two refusals, then one accepted registration");
    wait_status(&mut status, "ready again", |s| {
        s.connection == ConnectionState::Ready
    })
    .await;
    assert!(
        !running.is_finished(),
        "a refused token never stops the publisher"
    );
    running.abort();
}

#[tokio::test]
async fn without_mcp_discovery_snapshots_are_unspecified_without_run_id() {
    let server = FakeServer::start(Recorder::new()).await;
    let ws = Workspace::new();
    ws.write("AGENTS.md", "hello");
    let publisher = Publisher::new(config(&server.url(), &ws.path()), None).unwrap();
    assert_eq!(publisher.run_id(), None);
    let running = tokio::spawn(publisher.run());

    let calls = server
        .recorder
        .wait_for("startup and a push", |c| c.len() >= 2)
        .await;
    assert_eq!(calls[0].startup().unwrap().agent_run_id, None);
    let push = calls[1].push().unwrap();
    assert_eq!(push.agent_run_id, "");
    assert_eq!(push.mcp_discovery, None);
    assert_eq!(push.version, 1);
    assert!(!push.resources.iter().any(|r| r.source.starts_with("mcp:")));
    running.abort();
}

#[test]
fn run_ids_differ_between_publishers() {
    let ws = Workspace::new();
    let make = || {
        let (_tx, rx) = watch::channel(report(ReportPhase::Pending, &[]));
        Publisher::new(config("http://127.0.0.1:1", &ws.path()), Some(Box::new(rx))).unwrap()
    };
    let (a, b) = (make(), make());
    assert_ne!(a.run_id().unwrap(), b.run_id().unwrap());
    assert_eq!(a.startup().agent_run_id.as_ref(), a.run_id());
}

#[test]
fn bad_configuration_is_refused_at_start() {
    let ws = Workspace::new();
    let check = |mutate: &dyn Fn(&mut ctxsync_agent_publication::PublisherConfig), expect: &str| {
        let mut cfg = config("http://127.0.0.1:1", &ws.path());
        mutate(&mut cfg);
        let error = Publisher::new(cfg, None).unwrap_err().to_string();
        assert!(
            error.contains(expect),
            "`{error}` should contain `{expect}`"
        );
    };
    check(&|c| c.server_url = "not a url".into(), "invalid server URL");
    check(
        &|c| c.ca_cert_files = vec![c.scan.workspace_dir.join("no-such-ca.pem")],
        "CA certificate file",
    );
    check(
        &|c| {
            let empty = c.scan.workspace_dir.join("empty.pem");
            std::fs::write(&empty, "not a certificate").unwrap();
            c.ca_cert_files = vec![empty];
        },
        "holds no certificate",
    );
    check(&|c| c.server_url = "ftp://x".into(), "expected http://");
    check(&|c| c.token = "bad token\n".into(), "visible ASCII");
    check(&|c| c.token = String::new(), "visible ASCII");
    check(
        &|c| c.scan.workspace_dir = c.scan.workspace_dir.join("missing"),
        "missing",
    );
    let debug = format!("{:?}", config("http://127.0.0.1:1", &ws.path()));
    assert!(
        !debug.contains(TOKEN),
        "the token never appears in Debug output"
    );
}

/// The body a push carries for `source`, or `None` when a delta left it out.
fn body_of<'a>(
    request: &'a ctxsync_protocol::v1::PushContextStateRequest,
    source: &str,
) -> Option<&'a ctxsync_protocol::v1::context_resource::Body> {
    let resource = request.resources.iter().find(|r| r.source == source);
    resource
        .unwrap_or_else(|| panic!("no resource {source} in {request:#?}"))
        .body
        .as_ref()
}

#[tokio::test]
async fn a_server_that_does_not_offer_deltas_gets_only_full_pushes() {
    let server = FakeServer::start(Recorder::new()).await;
    let ws = Workspace::new();
    ws.write("AGENTS.md", "one");
    ws.skill("skills", "pdf");
    let (tx, _status, running) =
        start_with_reports(&server.url(), &ws, report(ReportPhase::Pending, &["fs"]));
    server.recorder.wait_for_pushes(1).await;
    tx.send_replace(report(ReportPhase::Complete, &["fs"]));
    ws.replace("AGENTS.md", "one, edited");
    server
        .recorder
        .wait_for_push("the edit", |p| {
            p.resources.iter().any(|r| {
                r.source == "AGENTS.md"
                    && matches!(&r.body, Some(ctxsync_protocol::v1::context_resource::Body::InstructionFile(f)) if f.content == "one, edited")
            })
        })
        .await;
    let pushes = server.recorder.pushes();
    assert!(pushes.len() >= 2, "{pushes:#?}");
    for push in &pushes {
        assert!(
            !push.delta,
            "a delta went to a server that did not offer them"
        );
        assert!(
            push.resources
                .iter()
                .all(|r| r.body.is_some() && r.body_digest.is_empty()),
            "{push:#?}"
        );
    }
    running.abort();
}

#[tokio::test]
async fn a_server_offering_deltas_gets_only_the_bodies_it_lacks() {
    let recorder = Recorder::new();
    recorder.offer_deltas();
    let server = FakeServer::start(recorder).await;
    let ws = Workspace::new();
    ws.write("AGENTS.md", "one");
    ws.skill("skills", "pdf");
    let (tx, mut status, running) =
        start_with_reports(&server.url(), &ws, report(ReportPhase::Pending, &["fs"]));
    let first = server.recorder.wait_for_pushes(1).await.remove(0);
    assert!(!first.delta, "the first push of a run is full: {first:#?}");
    wait_status(&mut status, "the first answer", |s| {
        s.last_push == Some((1, true))
    })
    .await;

    // Phase only: every body is left out, every other field still sent.
    tx.send_replace(report(ReportPhase::Complete, &["fs"]));
    let settled = server
        .recorder
        .wait_for_push("the complete phase", |p| phase(p) == Some(Phase::Complete))
        .await;
    assert!(settled.delta, "{settled:#?}");
    assert_eq!(settled.resources.len(), first.resources.len());
    for (sent, before) in settled.resources.iter().zip(&first.resources) {
        assert_eq!(sent.source, before.source);
        assert!(sent.body.is_none(), "{} kept its body", sent.source);
        let digest = ctxsync_protocol::BodyDigest::of_wire(before.body.as_ref().unwrap());
        assert_eq!(
            sent.body_digest,
            digest.as_bytes().to_vec(),
            "{}",
            sent.source
        );
        assert_eq!(
            (
                &sent.source_path,
                &sent.content_hash,
                sent.size_bytes,
                sent.status,
                &sent.error
            ),
            (
                &before.source_path,
                &before.content_hash,
                before.size_bytes,
                before.status,
                &before.error
            )
        );
    }
    let settled_version = settled.version;
    wait_status(&mut status, "the delta's answer", |s| {
        s.last_push == Some((settled_version, true))
    })
    .await;

    // One edit: only that body travels.
    ws.replace("AGENTS.md", "one, edited");
    let edited = server
        .recorder
        .wait_for_push("the edit", |p| body_of(p, "AGENTS.md").is_some() && p.delta)
        .await;
    assert!(
        body_of(&edited, "skills/pdf/SKILL.md").is_none(),
        "{edited:#?}"
    );
    assert!(body_of(&edited, "mcp:fs").is_none(), "{edited:#?}");
    running.abort();
}

#[tokio::test]
async fn a_refused_delta_is_followed_by_the_full_snapshot() {
    let recorder = Recorder::new();
    recorder.offer_deltas();
    recorder.script_push([Reply::Accept, Reply::DeltaBaseMissing]);
    let server = FakeServer::start(recorder).await;
    let ws = Workspace::new();
    ws.write("AGENTS.md", "one");
    let (tx, mut status, running) =
        start_with_reports(&server.url(), &ws, report(ReportPhase::Pending, &["fs"]));
    server.recorder.wait_for_pushes(1).await;
    wait_status(&mut status, "the first answer", |s| {
        s.last_push == Some((1, true))
    })
    .await;
    tx.send_replace(report(ReportPhase::Complete, &["fs"]));
    let pushes = server.recorder.wait_for_pushes(3).await;
    let (refused, full) = (&pushes[1], &pushes[2]);
    assert!(refused.delta && refused.resources.iter().all(|r| r.body.is_none()));
    assert_eq!(
        full.version, refused.version,
        "the same snapshot is sent again"
    );
    assert!(!full.delta, "{full:#?}");
    assert!(full.resources.iter().all(|r| r.body.is_some()));
    let version = full.version;
    wait_status(&mut status, "the full push's answer", |s| {
        s.last_push == Some((version, true))
    })
    .await;

    // Accepted, the full push is the new base: the next change goes as a delta again.
    ws.replace("AGENTS.md", "edited");
    let next = server
        .recorder
        .wait_for_push("the edit", |p| p.version > version)
        .await;
    assert!(
        next.delta && body_of(&next, "mcp:fs").is_none(),
        "{next:#?}"
    );
    running.abort();
}
