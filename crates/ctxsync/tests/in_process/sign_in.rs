//! A server that asks for a person's sign-in (issue 50) on every surface of a real server:
//! `GET /api/agents/{id}/mcp-servers`, the chat API's panel, the page, the turn's model
//! note; it offers no tool, and the first turn does not wait for it.

use crate::support;

use ctxsync_protocol::*;
use reqwest::Method;
use serde_json::json;
use support::*;

const REFUSAL: &str =
    "the server at https://mcp.example/mcp answered 401 Unauthorized: it needs a sign-in";

fn needs_sign_in(name: &str) -> Resource {
    Resource {
        status: ResourceStatus::NeedsAuthorization,
        error: Some(REFUSAL.into()),
        ..server(name, &[])
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_needs_a_sign_in_says_so_everywhere() {
    let h = Harness::start(TestBackend::Sqlite)
        .await
        .expect("SQLite always starts");
    let agent = h.new_agent().await;
    ctxsync_test_support::start_run(&h.server.store, agent, "run-1", "test").await;
    let snapshot = ctxsync_test_support::snapshot(
        1,
        "run-1",
        DiscoveryPhase::Complete,
        vec![
            config_file(),
            server("fs", &[("read", "Read a file")]),
            needs_sign_in("github"),
        ],
    );
    ctxsync_test_support::push_accepted(&h.server.store, agent, snapshot).await;
    let chat = h.new_chat(agent).await;

    let (status, servers) = h
        .call(
            Method::GET,
            &format!("/api/agents/{agent}/mcp-servers"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{servers}");
    assert_eq!(
        servers,
        json!({
            "agent_id": agent.to_string(),
            "servers": [
                {"name": "fs", "sign_in": "none"},
                {"name": "github", "sign_in": "needs_authorization", "reason": REFUSAL},
            ],
        })
    );
    let unknown = uuid::Uuid::new_v4();
    let (status, missing) = h
        .call(
            Method::GET,
            &format!("/api/agents/{unknown}/mcp-servers"),
            None,
        )
        .await;
    assert_eq!(status, 404, "{missing}");

    let (status, read) = h
        .call(Method::GET, &format!("/api/chats/{chat}"), None)
        .await;
    assert_eq!(status, 200, "{read}");
    let items = read["context"]["mcp"]["servers"]
        .as_array()
        .expect("listed");
    let github = items
        .iter()
        .find(|s| s["name"] == "github")
        .expect("github");
    assert_eq!(github["state"], "needs_authorization", "{github}");
    assert_eq!(github["tool_count"], 0, "{github}");

    // The first turn does not wait for a person; the model is told, and gets no tool of it.
    let (status, turn) = h
        .call(
            Method::POST,
            &format!("/api/chats/{chat}/turns"),
            Some(json!({})),
        )
        .await;
    assert_eq!(status, 200, "{turn}");
    let note = turn["note"].as_str().expect("the model is told");
    assert!(
        note.contains("Not signed in: github (needs a person to sign in; no tools until then)"),
        "{note}"
    );
    let tools = turn["tools"].as_array().expect("tools");
    assert!(
        tools
            .iter()
            .all(|t| t["name"].as_str() != Some("github__read")),
        "{turn}"
    );
    assert_eq!(tools.len(), 1, "{turn}");

    let html = h.panel_as(&chat, "text/html").await;
    assert!(
        html.contains(r#"<span class="badge badge-needs-authorization">needs sign-in</span>"#),
        "{html}"
    );
}
