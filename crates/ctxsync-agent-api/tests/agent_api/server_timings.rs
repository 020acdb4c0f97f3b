//! The connect timings an accepted push reports for `/metrics`: each MCP server's once
//! per connect, not once per push. A new row or a new run counts at once; a row rewritten
//! within the run counts only when its stored timings differ (a reconnect, not a tool
//! list change).

use crate::common;

use common::*;
use ctxsync_persistence::{AgentId, PushOutcome};
use ctxsync_protocol::DiscoveryPhase::Complete;
use ctxsync_protocol::{McpConnectTimings, Resource, ResourceBody};

ctxsync_test_support::on_both_backends! {
    #[tokio::test]
    open = Harness::open;
    each_connect_is_reported_once,
}

fn timed(mut server: Resource, handshake_ms: u64) -> Resource {
    let ResourceBody::McpServer(body) = &mut server.body else {
        unreachable!("a server row")
    };
    body.timings = Some(timings(handshake_ms));
    server
}

fn timings(handshake_ms: u64) -> McpConnectTimings {
    McpConnectTimings {
        start_ms: Some(5),
        handshake_ms,
        tools_ms: 7,
    }
}

async fn reported(
    h: &Harness,
    agent: AgentId,
    version: u64,
    run: &str,
    resources: Vec<Resource>,
) -> Vec<McpConnectTimings> {
    let mut snapshot = snapshot(version, Some(run), Complete, resources);
    snapshot.initial = version == 1;
    match h.store().push_context_state(agent, snapshot).await {
        Ok(PushOutcome::Accepted(changes)) => changes.server_timings,
        other => panic!("push {version} of {run}: {other:?}"),
    }
}

async fn each_connect_is_reported_once(h: Harness) {
    let (agent, token) = h.agent("timed").await;
    h.startup(&token, "run-1").await.expect("startup");
    let fs = || timed(mcp_server("fs", &["read"]), 30);
    let untimed = mcp_server("git", &["log"]);
    let first = reported(&h, agent, 1, "run-1", vec![fs(), untimed.clone()]).await;
    assert_eq!(first, [timings(30)], "a new row with timings; none without");
    let again = reported(&h, agent, 2, "run-1", vec![fs(), untimed.clone()]).await;
    assert_eq!(again, [], "the same row again");
    let more_tools = timed(mcp_server("fs", &["read", "write"]), 30);
    let listed = reported(&h, agent, 3, "run-1", vec![more_tools, untimed.clone()]).await;
    assert_eq!(listed, [], "a tool list change with the connect's timings");
    let reconnected = vec![timed(mcp_server("fs", &["read"]), 40), timed(untimed, 9)];
    assert_eq!(
        reported(&h, agent, 4, "run-1", reconnected).await,
        [timings(40), timings(9)],
        "other timings on a rewritten row, and a row that gained timings"
    );

    h.startup(&token, "run-2").await.expect("restart");
    let fs = || timed(mcp_server("fs", &["read"]), 40);
    let restarted = reported(&h, agent, 1, "run-2", vec![fs()]).await;
    assert_eq!(restarted, [timings(40)], "the same row in a new run");
    assert_eq!(reported(&h, agent, 2, "run-2", vec![]).await, []);
    let back = reported(&h, agent, 3, "run-2", vec![fs()]).await;
    assert_eq!(back, [timings(40)], "a server that went away and came back");
}
