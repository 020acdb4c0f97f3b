//! MCP details through a real server on the embedded SQLite default (SPEC §11 "MCP
//! revisions"): a pending snapshot's servers still connecting are named by the chat API,
//! the panel and the model note; a turn's tools carry title, output schema and the
//! server's annotations as untrusted hints; the served page shows titles and hint badges
//! with hostile text escaped, under the page's Content-Security-Policy.

use crate::support;

use ctxsync_persistence::AgentId;
use ctxsync_protocol::*;
use reqwest::Method;
use serde_json::{Value, json};
use support::*;

fn rich_server(tool_title: &str) -> Resource {
    let mut row = server("jira", &[("create_issue", "Open a ticket")]);
    let ResourceBody::McpServer(body) = &mut row.body else {
        unreachable!("server() builds a server row")
    };
    ctxsync_test_support::jira_details(body);
    let tool = &mut body.tools[0];
    tool.title = tool_title.into();
    tool.annotations = Some(McpToolAnnotations {
        destructive_hint: Some(true),
        open_world_hint: Some(true),
        ..Default::default()
    });
    tool.output_schema = Some(json!({"type": "object", "properties": {"key": {"type": "string"}}}));
    row
}

/// UpdateStartup as `run`, then a push of `resources` with these pending servers.
async fn push(
    h: &Harness,
    agent: AgentId,
    version: u64,
    phase: DiscoveryPhase,
    pending: &[(&str, u64)],
    resources: Vec<Resource>,
) {
    let store = &h.server.store;
    if version == 1 {
        ctxsync_test_support::start_run(store, agent, "run-1", "test").await;
    }
    let snapshot = Snapshot {
        pending_servers: ctxsync_test_support::pending_servers(pending),
        ..ctxsync_test_support::snapshot(version, "run-1", phase, resources)
    };
    ctxsync_test_support::push_accepted(store, agent, snapshot).await;
}

const HOSTILE: &str = r#"<img src=x onerror="alert(1)">"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_servers_and_rich_tools_reach_the_chat_api_and_the_page() {
    let h = Harness::start(TestBackend::Sqlite)
        .await
        .expect("SQLite always starts");
    let agent = h.new_agent().await;
    push(
        &h,
        agent,
        1,
        DiscoveryPhase::Pending,
        &[("github", 4_000), (HOSTILE, 12_000)],
        vec![config_file(), rich_server("Create Issue")],
    )
    .await;
    let chat = h.new_chat(agent).await;

    check_pending_in_the_apis(&h, agent, &chat).await;
    check_pending_panel(&h, &chat).await;
    check_plan_turn_notes_pending(&h, &chat).await;
    check_complete_discovery_turns(&h, agent, &chat).await;
    check_find_tools_by_title(&h, &chat).await;
}

/// The chat API names the servers discovery waits for, dated to now; the panel in the
/// same answer and the agent-context API agree.
async fn check_pending_in_the_apis(h: &Harness, agent: AgentId, chat: &str) {
    let (status, read) = h
        .call(Method::GET, &format!("/api/chats/{chat}"), None)
        .await;
    assert_eq!(status, 200, "{read}");
    let discovery = &read["mcp_discovery"];
    assert_eq!(discovery["phase"], "pending", "{read}");
    let pending = discovery["pending_servers"].as_array().expect("named");
    let names: Vec<&str> = pending.iter().filter_map(|p| p["name"].as_str()).collect();
    assert_eq!(names, [HOSTILE, "github"], "sorted by name");
    let github = &pending[1];
    let elapsed_ms = github["elapsed_ms"].as_u64().expect("ms");
    assert!((4_000..64_000).contains(&elapsed_ms), "{github}");
    assert_eq!(github["elapsed_s"].as_u64(), Some(elapsed_ms / 1000));
    // The panel in the same answer says the same.
    let waiting = &read["context"]["discovery"]["waiting_for"];
    assert_eq!(waiting[1]["name"], "github", "{waiting}");
    // The agent-context API shows the rows as the agent reported them.
    let (_, context) = h
        .call(Method::GET, &format!("/api/agents/{agent}/context"), None)
        .await;
    assert_eq!(
        context["snapshot"]["pending_servers"][0],
        json!({"name": "github", "elapsed_ms": 4000}),
        "{context}"
    );
    assert_eq!(
        context["mcp_discovery"]["pending_servers"][1]["name"],
        "github"
    );
}

/// The panel as HTML and text: the waiting list, the tool's title and hint badges,
/// the server's revision and timings; the hostile name escaped.
async fn check_pending_panel(h: &Harness, chat: &str) {
    let html = h.panel_as(chat, "text/html").await;
    assert!(html.contains("<code>github</code> ("), "{html}");
    assert!(!html.contains("<img"), "{html}");
    assert!(html.contains("&lt;img src=x onerror=&quot;alert(1)&quot;&gt;"));
    assert!(html.contains(r#"<span class="tool-title wrap">Create Issue</span>"#));
    assert!(html.contains(">destructive</span>") && html.contains(">open world</span>"));
    assert!(html.contains("a hint from the MCP server, not verified"));
    assert!(
        html.contains(
            "MCP 2026-07-28 · jira-mcp 1.4.2 · start 120 ms · handshake 35 ms · tools 4 ms"
        )
    );
    let text = h.panel_as(chat, "text/plain").await;
    assert!(text.contains("Waiting for: "), "{text}");
    assert!(text.contains("github ("), "{text}");
    assert!(
        text.contains("create_issue “Create Issue” [server hints: destructive, open world]"),
        "{text}"
    );
}

/// A plan-mode turn does not wait: its note names the pending servers, its tools
/// carry the details.
async fn check_plan_turn_notes_pending(h: &Harness, chat: &str) {
    let (status, plan) = h
        .call(
            Method::POST,
            &format!("/api/chats/{chat}/turns"),
            Some(json!({"mode": "plan"})),
        )
        .await;
    assert_eq!(status, 200, "{plan}");
    let note = plan["note"].as_str().expect("pending is noted");
    assert!(note.contains("Waiting for: "), "{note}");
    assert!(note.contains("github ("), "{note}");
    check_rich_tool(&plan["tools"]);
}

/// Discovery completes: nobody is waited for any more, and a default turn's tools
/// carry the same details, also when read back as stored.
async fn check_complete_discovery_turns(h: &Harness, agent: AgentId, chat: &str) {
    push(
        h,
        agent,
        2,
        DiscoveryPhase::Complete,
        &[],
        vec![config_file(), rich_server("Create Issue")],
    )
    .await;
    let (_, read) = h
        .call(Method::GET, &format!("/api/chats/{chat}"), None)
        .await;
    assert_eq!(
        read["mcp_discovery"],
        json!({"phase": "complete", "stale": false}),
        "the earlier shape, exactly"
    );
    let (status, turn) = h
        .call(
            Method::POST,
            &format!("/api/chats/{chat}/turns"),
            Some(json!({})),
        )
        .await;
    assert_eq!(status, 200, "{turn}");
    check_rich_tool(&turn["tools"]);
    let id = turn["turn_id"].as_str().expect("stored");
    let (_, stored) = h
        .call(Method::GET, &format!("/api/chats/{chat}/turns/{id}"), None)
        .await;
    check_rich_tool(&stored["tools"]);
}

/// find_tools finds the tool by its title and says it.
async fn check_find_tools_by_title(h: &Harness, chat: &str) {
    let (status, found) = h
        .call(
            Method::POST,
            &format!("/api/chats/{chat}/find-tools"),
            Some(json!({"queries": ["create issue"]})),
        )
        .await;
    assert_eq!(status, 200, "{found}");
    assert_eq!(found["matches"][0]["name"], "jira__create_issue");
    assert_eq!(found["matches"][0]["title"], "Create Issue");
}

fn check_rich_tool(tools: &Value) {
    assert_eq!(
        tools,
        &json!([{
            "name": "jira__create_issue",
            "description": "Open a ticket",
            "input_schema": { "type": "object", "properties": { "query": { "type": "string" } } },
            "title": "Create Issue",
            "output_schema": {"type": "object", "properties": {"key": {"type": "string"}}},
            "annotations_untrusted": {"destructive_hint": true, "open_world_hint": true},
        }])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_served_page_shows_titles_and_badges_with_hostile_text_escaped() {
    let h = Harness::start(TestBackend::Sqlite)
        .await
        .expect("SQLite always starts");
    let agent = h.new_agent().await;
    push(
        &h,
        agent,
        1,
        DiscoveryPhase::Complete,
        &[],
        vec![config_file(), rich_server(HOSTILE)],
    )
    .await;
    let chat = h.new_chat(agent).await;
    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let (_, link) = h
        .call(Method::POST, &format!("/api/chats/{chat}/link"), None)
        .await;
    let link = link["url"].as_str().expect("a link").to_string();
    let token = link.split_once("?token=").unwrap().1.to_string();
    let exchange = no_redirects
        .post(h.url(&format!("/chats/{chat}/session")))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={token}"))
        .send()
        .await
        .unwrap();
    assert_eq!(exchange.status(), 303);
    let session = exchange.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_string();
    let page = no_redirects
        .get(h.url(&format!("/chats/{chat}")))
        .header("cookie", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let csp = page.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(csp.contains("default-src 'none'") && csp.contains("img-src 'self'"));
    let html = page.text().await.unwrap();
    assert!(
        html.contains(
            r#"<span class="tool-title wrap">&lt;img src=x onerror=&quot;alert(1)&quot;&gt;</span>"#
        ),
        "{html}"
    );
    assert!(
        !html.contains("<img"),
        "no image from a server's text or icons"
    );
    assert!(html.contains(r#"class="badge badge-hint hint-destructive""#));
    assert!(html.contains(r#"aria-label="Hints from the server, not verified""#));
    assert!(html.contains("MCP 2026-07-28"));
    // Still only the page's own script and stylesheet; nothing inline.
    assert_eq!(html.matches("<script").count(), 1);
    assert!(!html.contains("<style") && !html.contains(" style="));
}
