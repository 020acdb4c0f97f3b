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

/// The sign-in routes' answers before any agent is asked: who may call them, what body
/// they take, which server they name, and a callback that names no sign-in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_in_routes_refuse_in_words_before_asking_the_agent() {
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
            needs_sign_in("kit/db"),
        ],
    );
    ctxsync_test_support::push_accepted(&h.server.store, agent, snapshot).await;
    let route = |server: &str| format!("/api/agents/{agent}/mcp-servers/{server}/authorization");
    let post = |path: String, body: Option<&'static str>, json: bool, token: bool| {
        let mut request = h.http.post(h.url(&path));
        if token {
            request = request.bearer_auth(&h.server.api_token);
        }
        if json {
            request = request.header("content-type", "application/json");
        }
        if let Some(body) = body {
            request = request.body(body);
        }
        async move {
            let response = request.send().await.expect("sent");
            let status = response.status().as_u16();
            let body: serde_json::Value = response.json().await.unwrap_or_default();
            (
                status,
                body["error"].as_str().unwrap_or_default().to_owned(),
            )
        }
    };

    let (status, error) = post(route("github"), None, false, false).await;
    assert_eq!(
        (status, error.as_str()),
        (401, "missing or invalid bearer token")
    );
    let (status, error) = post(route("github"), Some("[1]"), true, true).await;
    assert_eq!(status, 400, "{error}");
    assert!(error.contains("empty or a JSON object"), "{error}");
    // No body, an empty one with a JSON content type, and `{}` are the same request: for a
    // server that needs no sign-in, a conflict that says why.
    for (body, json) in [(None, false), (Some(""), true), (Some("{}"), true)] {
        let (status, error) = post(route("fs"), body, json, true).await;
        assert_eq!(status, 409, "{body:?}: {error}");
        assert!(error.contains("does not need a sign-in"), "{error}");
    }
    let (status, error) = post(route("nope"), None, false, true).await;
    assert_eq!(status, 404, "{error}");
    assert!(error.contains("no MCP server \"nope\""), "{error}");
    let unknown = uuid::Uuid::new_v4();
    let (status, _) = post(
        format!("/api/agents/{unknown}/mcp-servers/github/authorization"),
        None,
        false,
        true,
    )
    .await;
    assert_eq!(status, 404);
    // A plugin's server is named with its slash percent-encoded; the agent is not
    // connected (only a pushed snapshot here), which is said at once.
    for name in ["github", "kit%2Fdb"] {
        let (status, error) = post(route(name), None, false, true).await;
        assert_eq!(status, 503, "{name}: {error}");
        assert!(error.contains("the agent is not connected"), "{error}");
    }
    // Forgetting what was never signed in is no error.
    let forgot = h
        .http
        .delete(h.url(&route("github")))
        .bearer_auth(&h.server.api_token)
        .send()
        .await
        .unwrap();
    assert_eq!(forgot.status(), 204);

    // The callback: no state, or a state no sign-in has, stores nothing and says why.
    for (query, words) in [
        ("?code=abc", "has no state"),
        ("?code=abc&state=unknown-state", "unknown"),
    ] {
        let page = h
            .http
            .get(h.url(&format!("/oauth/callback{query}")))
            .send()
            .await
            .unwrap();
        assert_eq!(page.status(), 400);
        let text = page.text().await.unwrap();
        assert!(text.contains(words), "{text}");
        assert!(!text.contains("abc"), "the code is never shown: {text}");
    }
    // A loopback http public URL has no client id metadata document (CIMD needs https).
    let document = h
        .http
        .get(h.url("/oauth/client-metadata.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(document.status(), 404);
}

/// With a shared database and no `--secrets-key-file`, sign-in is off and says how to
/// turn it on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_secrets_key_sign_in_answers_503_saying_why() {
    let h = Harness::start_configured(TestBackend::Sqlite, |config| {
        config.secrets_key = ctxsync::server::SecretsKeySource::Off;
    })
    .await
    .expect("SQLite always starts");
    let agent = h.new_agent().await;
    let (status, body) = h
        .call(
            Method::POST,
            &format!("/api/agents/{agent}/mcp-servers/github/authorization"),
            None,
        )
        .await;
    assert_eq!(status, 503, "{body}");
    assert!(
        body["error"]
            .as_str()
            .is_some_and(|e| e.contains("--secrets-key-file")),
        "{body}"
    );
}
