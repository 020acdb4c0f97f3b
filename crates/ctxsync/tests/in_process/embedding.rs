//! The two embedding examples, run against real parts: the minimal agent of
//! `ctxsync-agent-publication` (examples/publish_workspace.rs) publishes a workspace with
//! a real stdio MCP server to a real `ctxsync server` over gRPC, and the chat service of
//! `ctxsync-first-turn-gate` (examples/chat_service.rs), on that server's database,
//! prepares a chat's turn over HTTP from what was published.
//!
//! The examples are compiled here from their own files, so what the test runs is exactly
//! what an embedder reads and copies.

use crate::support;

#[allow(dead_code)] // its `main` is for `cargo run --example`
#[path = "../../../ctxsync-agent-publication/examples/publish_workspace.rs"]
mod publish_workspace;

#[allow(dead_code)]
#[path = "../../../ctxsync-first-turn-gate/examples/chat_service.rs"]
mod chat_service;

use std::time::Duration;

use ctxsync_first_turn_gate::GateConfig;
use ctxsync_protocol::DiscoveryPhase;
use serde_json::{Value, json};
use support::{Harness, TestBackend};

const CTXSYNC: &str = env!("CARGO_BIN_EXE_ctxsync");
/// Far above what publishing one small workspace takes.
const DEADLINE: Duration = Duration::from_secs(60);
const SERVICE_TOKEN: &str = "chat-service-token-0123456789";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedding_examples_publish_a_workspace_and_prepare_a_turn_from_it() {
    let h = Harness::start(TestBackend::Sqlite).await.expect("server");
    let agent = h
        .server
        .store
        .create_agent("embedded")
        .await
        .expect("agent");

    let workspace = tempfile::tempdir().expect("workspace");
    std::fs::write(workspace.path().join("AGENTS.md"), "Answer briefly.\n").unwrap();
    let mcp = json!({ "mcpServers": {
        "notes": { "command": CTXSYNC, "args": ["mcp-fixture", "--tools", "2"] }
    }});
    std::fs::write(workspace.path().join(".mcp.json"), mcp.to_string()).unwrap();

    let published = tokio::time::timeout(
        DEADLINE,
        publish_workspace::publish_until_complete(
            h.server.agent_url(),
            workspace.path().to_owned(),
            agent.token.expose().to_owned(),
        ),
    )
    .await
    .expect("published within the deadline")
    .expect("the minimal agent publishes");
    assert_eq!(published.phase, DiscoveryPhase::Complete);
    assert_eq!(
        published.last_push,
        Some((published.published_version, true))
    );

    // What the server stored is what the agent said it published.
    let stored = h
        .server
        .store
        .read_agent_context(agent.id)
        .await
        .unwrap()
        .expect("the agent exists");
    let snapshot = stored.snapshot.expect("a snapshot is stored");
    assert_eq!(snapshot.phase, DiscoveryPhase::Complete);
    assert_eq!(snapshot.aggregate_hash, published.aggregate_hash);
    let sources: Vec<&str> = stored.resources.iter().map(|r| r.source.as_str()).collect();
    assert!(sources.contains(&"AGENTS.md"), "{sources:?}");

    // The chat service, on the server's database, with its own routes and token.
    let service = chat_service::router(
        h.server.store.clone(),
        GateConfig {
            discovery_budget: Duration::from_secs(5),
            snapshot_grace: Duration::from_secs(2),
            ..GateConfig::default()
        },
        SERVICE_TOKEN.to_owned(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, service).await });
    let http = reqwest::Client::new();
    let call = |path: &str, token: Option<&str>, body: Value| {
        let mut request = http.post(format!("{base}{path}")).json(&body);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        async move {
            let response = request.send().await.expect("the service answers");
            let status = response.status().as_u16();
            let text = response.text().await.unwrap();
            (
                status,
                serde_json::from_str(&text).unwrap_or(Value::String(text)),
            )
        }
    };

    let body = json!({ "agent": agent.id.to_string() });
    assert_eq!(call("/chats", None, body.clone()).await.0, 401);
    assert_eq!(call("/chats", Some("wrong"), body.clone()).await.0, 401);
    let (status, chat) = call("/chats", Some(SERVICE_TOKEN), body).await;
    assert_eq!(status, 200, "{chat}");
    let chat = chat["chat"].as_str().expect("a chat id").to_owned();
    let (status, refused) = call("/chats", Some(SERVICE_TOKEN), json!({ "agent": "x" })).await;
    assert_eq!(status, 400, "{refused}");

    let (status, turn) = call(
        &format!("/chats/{chat}/turns"),
        Some(SERVICE_TOKEN),
        json!({}),
    )
    .await;
    assert_eq!(status, 200, "{turn}");
    assert_eq!(turn["discovery"]["reason"], "discovery_complete", "{turn}");
    assert_eq!(turn["discovery"]["stale"], false, "{turn}");
    assert_eq!(turn["note"], Value::Null, "{turn}");
    let mut names: Vec<&str> = turn["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|tool| tool["name"].as_str().expect("a tool name"))
        .collect();
    names.sort();
    assert_eq!(names, ["notes__tool_0", "notes__tool_1"], "{turn}");

    let unknown = format!("/chats/{}/turns", uuid::Uuid::new_v4());
    assert_eq!(call(&unknown, Some(SERVICE_TOKEN), json!({})).await.0, 404);
}
